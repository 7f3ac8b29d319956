"""The C++ template's stream form for skinny GEMMs (Note [Streaming skinny GEMM] in engine/codegen/cpp/gemm.py)
and default mode's choice of it (Note [When a C++ template pays] in engine/schedule/templates.py): forced on, it
matches eager on skinny and ragged shapes (1, 3, 17 rows; K not a multiple of the vector, the bf16 pair or the
K chunk; N not a multiple of the column block; strided and batched operands; float32 and bf16); in default mode
a weight stream without an epilogue runs as the template exactly when the heuristic says so, and the output is
eager's either way."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.schedule import templates

TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def _templates(exploration):
    return [k for k in exploration.kernels if k.kind == "template"]


def _linear(n, k, dtype, epilogue=False):
    torch.manual_seed(0)
    linear = torch.nn.Linear(k, n, bias=False).to(dtype)
    return (lambda x: F.silu(linear(x))) if epilogue else (lambda x: linear(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("m,k,n", [(1, 1100, 37), (3, 70, 9), (17, 1100, 64), (17, 33, 5)])
def test_forced_stream_form_matches_eager(m, k, n, dtype):
    """K = 1100: two 512-chunks, a short one and a 12-element scalar tail (bf16: 1088 in pairs of 32);
    N = 37, 9, 5: column blocks of 4 (8 at one row) and single columns."""
    fn = _linear(n, k, dtype, epilogue=m != 3)
    x = torch.randn(m, k, dtype=dtype)
    exploration = engine.explore(fn, (x,), backend="cpp", templates="on", tolerance=TOLERANCE[dtype])
    assert exploration.verify.ok, exploration.verify
    (template,) = _templates(exploration)
    assert template.template.inner_loop == "stream", template.template


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_stream_form_reads_strided_and_batched_operands(dtype):
    """A sliced along K (not contiguous: converted to float32 rows first) and a batched x @ w.transpose(1, 2)
    (a weight per batch, contiguous along K)."""
    torch.manual_seed(0)
    tolerance = TOLERANCE[dtype]
    sliced = engine.explore(lambda x, w: torch.relu(x[:, ::2] @ w.t()),
                            (torch.randn(5, 2 * 97, dtype=dtype), torch.randn(21, 97, dtype=dtype)),
                            backend="cpp", templates="on", tolerance=tolerance)
    batched = engine.explore(lambda x, w: torch.tanh(x @ w.transpose(1, 2)),
                             (torch.randn(3, 2, 81, dtype=dtype), torch.randn(3, 13, 81, dtype=dtype)),
                             backend="cpp", templates="on", tolerance=tolerance)
    for exploration in (sliced, batched):
        assert exploration.verify.ok, exploration.verify
        (template,) = _templates(exploration)
        assert template.template.inner_loop == "stream", template.template


def _choice(exploration):
    (choice,) = exploration.graphs[0].fusion.templates
    return choice


def _spec(m, n, k, dtype):
    x, w = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    return templates.GemmSpec("mm", 1, m, n, k, templates.Operand("x", 0, (0, k if m > 1 else 0, 1)),
                              templates.Operand("w", 0, (0, 1, k)), None, 1.0, 1.0, dtype)


@pytest.mark.parametrize("m,n,k,dtype", [(8, 1024, 1024, torch.float32), (1, 1024, 1024, torch.float32),
                                         (1, 2048, 4096, torch.float32),
                                         (1, 1024, 1024, torch.bfloat16),
                                         (8, 1024, 1024, torch.bfloat16), (33, 1024, 1024, torch.float32),
                                         (8, 64, 256, torch.float32)])
def test_default_mode_streams_a_gemm_without_epilogue_as_the_rule_says(m, n, k, dtype):
    """The recorded choice (template or library) is the rule's, the kernel is the stream form when it is
    taken, and the output equals eager's either way."""
    fn = _linear(n, k, dtype)
    exploration = engine.explore(fn, (torch.randn(m, k, dtype=dtype),), backend="cpp", tolerance=TOLERANCE[dtype])
    assert exploration.verify.ok, exploration.verify
    expected = templates.cpu_alone_reason(_spec(m, n, k, dtype), templates.TemplateOptions()) is not None
    gemv_in_cache = dtype == torch.float32 and m == 1 and n * k * 4 < templates.CPU_F32_GEMV_MIN_BYTES
    assert expected == (m <= templates.CPU_SKINNY_ROWS and n * k >= templates.CPU_STREAM_MIN_WEIGHT and (
        dtype == torch.float32 or m <= templates.CPU_BF16_LANES_ROWS or templates.cpu_multiplies_bf16_pairs())
        and not gemv_in_cache)
    assert _choice(exploration).template is expected, _choice(exploration)
    kernels = _templates(exploration)
    assert [k.template.inner_loop for k in kernels] == (["stream"] if expected else []), kernels


def test_linear_with_bias_streams_with_its_bias_in_the_template():
    """addmm: the bias is part of the GEMM (no epilogue node), and the weight stream still takes the template."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 1024)
    exploration = engine.explore(lambda x: linear(x), (torch.randn(8, 1024),), backend="cpp",
                                 tolerance=TOLERANCE[torch.float32])
    assert exploration.verify.ok, exploration.verify
    (template,) = _templates(exploration)
    assert template.template.spec.bias and template.template.inner_loop == "stream"
    assert _choice(exploration).template is True


def test_bf16_without_pair_products_keeps_the_library_beyond_one_row(monkeypatch):
    """A CPU without vdpbf16ps: bf16 at 8 rows stays with the library (with or without an epilogue), 1 row
    still streams."""
    monkeypatch.setattr(templates, "cpu_multiplies_bf16_pairs", lambda: False)
    options = templates.TemplateOptions()
    assert templates.heuristic_refusal(_spec(8, 1024, 1024, torch.bfloat16), options) is not None
    assert templates.cpu_alone_reason(_spec(8, 1024, 1024, torch.bfloat16), options) is None
    assert templates.cpu_alone_reason(_spec(1, 1024, 1024, torch.bfloat16), options) is not None
    exploration = engine.explore(_linear(1024, 1024, torch.bfloat16, epilogue=True),
                                 (torch.randn(8, 1024, dtype=torch.bfloat16),), backend="cpp",
                                 tolerance=TOLERANCE[torch.bfloat16])
    assert exploration.verify.ok, exploration.verify
    assert _choice(exploration).template is False and not _templates(exploration)


def test_swiglu_gemms_all_stream_in_default_mode():
    """The SwiGLU MLP at batch 4: gate (no epilogue), up (silu(gate) * up in its epilogue) and down (no
    epilogue) are all templates, and the MLP equals eager."""
    torch.manual_seed(0)
    d, hidden = 512, 2048
    gate, up = torch.nn.Linear(d, hidden, bias=False), torch.nn.Linear(d, hidden, bias=False)
    down = torch.nn.Linear(hidden, d, bias=False)
    exploration = engine.explore(lambda x: down(F.silu(gate(x)) * up(x)), (torch.randn(4, d),), backend="cpp",
                                 tolerance=TOLERANCE[torch.float32])
    assert exploration.verify.ok, exploration.verify
    assert all(c.template for c in exploration.graphs[0].fusion.templates)
    assert [k.kind for k in exploration.kernels] == ["template"] * 3, [k.kind for k in exploration.kernels]


@pytest.mark.slow
@pytest.mark.parametrize("march", ["haswell", "x86-64"], ids=["avx2", "no_simd_isa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_stream_form_without_avx512(march, dtype, monkeypatch, tmp_path):
    """The stream form's other paths, compiled for CPUs this one stands in for: AVX2 + FMA (2x4 blocks of 8
    lanes; bf16 converted to float32) and no vector ISA beyond SSE2 (one lane, plain arithmetic)."""
    from engine.runtime import build

    native = build.native_flags()
    kept = tuple(f for f in native if not f.startswith(("-march", "-mprefer-vector-width")))
    monkeypatch.setattr(build, "native_flags", lambda: kept + (f"-march={march}",))
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    for m, k, n in [(1, 1100, 37), (17, 100, 21)]:
        x = torch.randn(m, k, dtype=dtype)
        exploration = engine.explore(_linear(n, k, dtype, epilogue=True), (x,), backend="cpp", templates="on",
                                     tolerance=TOLERANCE[dtype])
        assert exploration.verify.ok, (m, k, n, exploration.verify)
        (template,) = _templates(exploration)
        assert template.template.inner_loop == "stream"
