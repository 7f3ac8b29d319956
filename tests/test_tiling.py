"""Tiling chosen from strides (Note [Tiling from strides]) and recorded with its reason; every tiled shape
matches eager through both backends (Triton under the interpreter, so sizes stay small). The CLI's summary and the
offline report show each kernel's tiling with its reason."""
import itertools
import re
from html.parser import HTMLParser

import pytest
import torch

import engine
from engine.schedule.policy import SPLIT_MAX_OUTPUTS
from engine.tools.cli_format import explore_summary
from engine.tools.model_file import load_model_file
from explored_kernels import explored_kernels
from samples import sample_path
from visualizers.html_report import kernels_table
from visualizers.teaching import plain_words

BACKENDS = ["cpp", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["transpose_add", "nchw_to_nhwc_add", "nhwc_to_nchw", "odd_transpose",
                                  "wide_transpose"])
def test_transposed_and_permuted_pointwise_are_2d_tiles(backend, case):
    fn, inputs = {
        "transpose_add": (lambda a, b: a.t() + b, (torch.randn(64, 48), torch.randn(48, 64))),
        "nchw_to_nhwc_add": (lambda a, b: a.permute(0, 2, 3, 1) + b, (torch.randn(2, 32, 8, 8), torch.randn(2, 8, 8, 32))),
        "nhwc_to_nchw": (lambda a: a.permute(0, 3, 1, 2).contiguous() * 2, (torch.randn(2, 8, 8, 33),)),
        "odd_transpose": (lambda a: (a.t() + 1).sin().contiguous(), (torch.randn(37, 53),)),
        "wide_transpose": (lambda a: (a.t() * 3).contiguous(), (torch.randn(1100, 20),)),  # several X blocks a Y block
    }[case]
    (kernel,) = explored_kernels(fn, inputs, backend)
    assert kernel.tiling.choice == "2d" and "contiguous along dim" in kernel.tiling.reason
    if backend == "triton":
        assert kernel.triton.form == "tiled" and "YBLOCK" in kernel.source


@pytest.mark.parametrize("backend", BACKENDS)
def test_contiguous_pointwise_stays_1d(backend):
    (kernel,) = explored_kernels(lambda a: a * 2 + 1, (torch.randn(32, 64),), backend)
    assert kernel.tiling.choice == "1d" and kernel.tiling.reason


SHAPES = [(24, 40), (6, 10, 18), (3, 8, 6, 10)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_reductions_over_every_axis(backend, shape):
    x = torch.randn(shape)
    dims = list(range(len(shape)))
    combos = [(d,) for d in dims] + [c for c in itertools.combinations(dims, 2) if len(shape) > 2]

    def fn(t):
        return [t.sum(c) for c in combos] + [t.amax(dims[0]), t.mean(dims[-1], keepdim=True)]

    kernels = explored_kernels(fn, (x,), backend)
    choices = {k.tiling.choice for k in kernels}
    assert "column" in choices and "row" in choices, choices


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_reduction_with_an_epilogue(backend):
    kernels = explored_kernels(lambda t: t - t.mean(0), (torch.randn(40, 33),), backend)
    assert kernels[0].tiling.choice == "column"


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_reduction_is_recorded(backend):
    kernels = explored_kernels(lambda t: t.sum(), (torch.randn(1 << 16),), backend)
    assert len(kernels) == (2 if backend == "triton" else 1)  # Triton: two stages (tests/test_split_reductions.py)
    assert all(k.tiling.choice == "split" for k in kernels)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", [8193, 50257])
def test_long_rows_softmax_and_log_softmax(backend, row):
    """Rows beyond the persistent limit (8192): looped multi-pass reductions (more rows than Triton splits:
    Note [Few long rows])."""
    x = torch.randn(SPLIT_MAX_OUTPUTS + 1, row)
    kernels = explored_kernels(lambda t: (t.softmax(-1), t.log_softmax(-1)), (x,), backend)
    assert all(k.tiling.choice == "row" for k in kernels)
    if backend == "triton":
        assert {k.triton.form for k in kernels} == {"looped"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_over_long_rows(backend):
    logits, target = torch.randn(4, 8193), torch.randint(0, 8193, (4,))
    explored_kernels(lambda a, b: torch.nn.functional.cross_entropy(a, b), (logits, target), backend)


class _Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (header row first)."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None and self.tables and self.tables[-1]:
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def test_each_kernels_tiling_and_its_reason_show_in_the_cli_and_the_report():
    spec = load_model_file(str(sample_path("transformer_block")))  # row reductions (layer norms) and pointwise
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name,
                            source={"filename": spec.filename, "text": spec.source})
    tiled = [k for k in record.graphs[0].kernels if k.kind in ("pointwise", "reduction")]
    assert {k.kind for k in tiled} == {"pointwise", "reduction"}
    assert all(k.tiling is not None and k.tiling.choice and plain_words(k.tiling.reason) for k in tiled)

    # the CLI: under each kernel's line, "tiling: <choice> ... - <its reason>"
    lines = explore_summary(record).splitlines()
    for kernel in tiled:
        at = next(i for i, line in enumerate(lines) if line.split()[:1] == [kernel.name])
        choice, _, why = lines[at + 1].strip().removeprefix("tiling: ").partition(" - ")
        assert lines[at + 1].strip().startswith("tiling: ") and choice.split(" (")[0] == kernel.tiling.choice
        assert why and why == plain_words(kernel.tiling.reason), (kernel.name, lines[at + 1])

    # the report: its kernels table (each graph's section has one) has a tiling cell per kernel, the choice and
    # the reason
    parser = _Tables()
    parser.feed(kernels_table(record.graphs[0]))
    table = next(t for t in parser.tables if t and "tiling" in t[0] and "kernel" in t[0])
    column, name = table[0].index("tiling"), table[0].index("kernel")
    cells = {row[name]: row[column] for row in table[1:]}
    for kernel in tiled:
        choice, _, why = cells[kernel.name].partition(" - ")
        assert choice.split(" (")[0] == kernel.tiling.choice and why == plain_words(kernel.tiling.reason)
        assert "Note [" not in why and not re.search(r"\bbuf\d+\b", why)


@pytest.mark.slow
def test_tiled_column_and_looped_forms_compile_for_sm90_without_a_gpu():
    """The GPU configs of the new forms (2D tiles, column tiles, long looped rows, online softmax, half types)
    compile for an H200's target here, so `bench gpu`'s tiling cases will not fail on the generated source."""
    from engine.tools import assembly
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel nor on PATH")
    cases = [
        (lambda a, b: a.t() + b, (torch.randn(64, 64), torch.randn(64, 64))),
        (lambda a: a.sum(0), (torch.randn(64, 96),)),
        (lambda a: a.sum(1), (torch.randn(2, 16, 8, 8),)),
        (lambda a: torch.log_softmax(a, -1), (torch.randn(2, 50257),)),
        (lambda a, b: a.permute(0, 2, 3, 1) + b, (torch.randn(2, 16, 8, 8).half(), torch.randn(2, 8, 8, 16).half())),
        (torch.nn.LayerNorm(320).to(torch.bfloat16), (torch.randn(4, 320, dtype=torch.bfloat16),)),
        # online softmax (tests/test_online_softmax.py): its helpers, eviction hints and GPU config
        (lambda a: torch.softmax(a, -1), (torch.randn(2, 32000),)),
        (lambda a, b: torch.nn.functional.cross_entropy(a, b), (torch.randn(2, 32000), torch.randint(0, 32000, (2,)))),
        (lambda a: torch.softmax(a, -1), (torch.randn(2, 8193, dtype=torch.bfloat16),)),
    ]
    for fn, inputs in cases:
        torch._dynamo.reset()
        exploration = engine.explore(fn, inputs, backend="triton", name="sm90")
        assert assembly.add_assembly(exploration) >= 1
        for kernel in exploration.kernels:
            asm = kernel.asm
            if asm is not None:
                assert not asm.error and ".target sm_90" in asm.ptx, asm.error


def test_channels_last_pool_of_few_channels_reads_rows_without_gathers(monkeypatch):
    # Note [Inner loops without gathers]: 16 channels-last channels, stride 2 along w; values equal eager's
    from engine.codegen.cpp import module as cpp_module
    x = torch.randn(2, 16, 20, 20).to(memory_format=torch.channels_last)
    seen = []
    real = cpp_module._whole_loops

    def spy(*args, **kwargs):
        body, printer = real(*args, **kwargs)
        seen.append(printer.inner_gathers)
        return body, printer

    monkeypatch.setattr(cpp_module, "_whole_loops", spy)
    got = engine.compile(lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1), backend="cpp")(x)
    assert torch.equal(got, torch.nn.functional.max_pool2d(x, 3, 2, 1))
    assert seen and seen[0] and not seen[-1]  # the merged row gathered; the kernel kept reads without
