"""GEMM templates (Note [GEMM templates]): matmuls and 1x1 convolutions become generated kernels of kind
"template" with their elementwise consumers fused as the epilogue, through the Triton interpreter and the
C++ backend, matching eager; the record says which template, tile config, fused ops (with FX origins) and,
in max-autotune, the measured candidates. Sizes are small and ragged (the interpreter is slow)."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.tools import assembly
from engine.schedule import gemm_tiles, templates

TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=2e-2, rtol=2e-2),
             torch.bfloat16: dict(atol=1e-1, rtol=5e-2)}


class LinearReLU(torch.nn.Module):
    def __init__(self, k=63, n=255):
        super().__init__()
        self.linear = torch.nn.Linear(k, n)

    def forward(self, x):
        return torch.relu(self.linear(x))


class LinearGeluResidual(torch.nn.Module):
    def __init__(self, k=63):
        super().__init__()
        self.linear = torch.nn.Linear(k, k)

    def forward(self, x):
        return F.gelu(self.linear(x)) + x


class SwiGLU(torch.nn.Module):
    def __init__(self, d=63, hidden=96):
        super().__init__()
        self.gate = torch.nn.Linear(d, hidden, bias=False)
        self.up = torch.nn.Linear(d, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def bmm_scale_tanh(a, b):
    return torch.tanh(torch.bmm(a, b) * 0.5)


class Conv1x1BiasReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(24, 40, 1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def _case(name, dtype):
    torch.manual_seed(0)
    if name == "linear_relu":
        return LinearReLU().to(dtype), (torch.randn(127, 63, dtype=dtype),)
    if name == "linear_gelu_residual":
        return LinearGeluResidual().to(dtype), (torch.randn(2, 40, 63, dtype=dtype),)
    if name == "swiglu":
        return SwiGLU().to(dtype), (torch.randn(37, 63, dtype=dtype),)
    if name == "bmm":
        return bmm_scale_tanh, (torch.randn(3, 33, 63, dtype=dtype), torch.randn(3, 63, 47, dtype=dtype))
    if name == "conv1x1":
        return Conv1x1BiasReLU().to(dtype), (torch.randn(2, 24, 5, 7, dtype=dtype),)
    raise ValueError(name)


MODELS = ["linear_relu", "linear_gelu_residual", "swiglu", "bmm", "conv1x1"]
# one or two dtypes per model under the interpreter: every dtype is covered, each model twice
TRITON_CASES = [(m, torch.float32) for m in MODELS] + list(zip(MODELS, [torch.float16, torch.bfloat16] * 3))


def _explore(name, dtype, backend, **options):
    model, inputs = _case(name, dtype)
    return engine.explore(model, inputs, backend=backend, name=name, tolerance=TOLERANCE[dtype], **options)


def _templates(exploration):
    return [k for k in exploration.kernels if k.kind == "template"]


def _assert_fused(exploration, name):
    assert exploration.verify.ok, exploration.verify
    templates = _templates(exploration)
    assert templates, [(k.name, k.kind) for k in exploration.kernels]
    fused = [op for t in templates for op in t.template.fused_ops]
    assert fused, templates[0].template
    assert all(op.fx_origins for op in fused), fused
    expected = {"linear_relu": "relu", "linear_gelu_residual": "gelu", "swiglu": "mul", "bmm": "tanh",
                "conv1x1": "relu"}[name]
    assert any(expected in o for op in fused for o in op.ops), fused


@pytest.mark.parametrize("name,dtype", TRITON_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_triton_template_fuses_epilogue_and_matches_eager(name, dtype):
    exploration = _explore(name, dtype, "triton", templates="on")
    _assert_fused(exploration, name)
    assert "tl.dot(" in exploration.graphs[0].code.source


@pytest.mark.parametrize("name", MODELS)
def test_cpp_template_forced_on_matches_eager(name):
    exploration = _explore(name, torch.float32, "cpp", templates="on")
    _assert_fused(exploration, name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpp_template_half_types(dtype):
    _assert_fused(_explore("linear_gelu_residual", dtype, "cpp", templates="on"), "linear_gelu_residual")


def test_record_carries_template_config_fused_ops_and_autotune(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))
    exploration = _explore("linear_relu", torch.float32, "cpp", templates="on", mode="max-autotune")
    assert exploration.verify.ok, exploration.verify
    record = exploration.to_json()
    kernel = next(k for g in record["graphs"] for k in g["kernels"] if k["kind"] == "template")
    template = kernel["template"]
    assert template["name"] == "cpp_gemm" and template["spec"]["op"] == "addmm"
    assert {"tile_m", "tile_n"} <= set(template["config"])
    assert template["fused_ops"][0]["fx_origins"] == ["relu"]
    tuning = template["autotune"]
    timed = [c for c in tuning["candidates"] if c["ms"] is not None]
    assert any(c["candidate"].startswith("template") for c in timed)
    assert any(c["candidate"] == "library + epilogue" for c in timed)
    assert tuning["winner"] in [c["candidate"] for c in timed] and tuning["cached"] is False
    from visualizers import tables  # what the app's code view shows with the kernel
    (row,) = tables.template_rows(exploration.graphs[0])
    assert row["epilogue"] == "relu" and row["GEMM (MxNxK)"] == "127x255x63" and row["winner"]
    rows = tables.autotune_rows(exploration.graphs[0])
    assert sum(r["winner"] for r in rows) == 1 and sum(r["default's pick"] for r in rows) == 1
    assert next(r for r in rows if r["winner"])["why"]
    choices = record["graphs"][0]["fusion"]["templates"]
    assert choices and choices[0]["template"] and choices[0]["reason"]
    again = _explore("linear_relu", torch.float32, "cpp", templates="on", mode="max-autotune")
    assert _templates(again)[0].template.autotune.cached is True  # on disk by shape/dtype/device


def test_default_mode_heuristic_says_why():
    wide = _explore("linear_relu", torch.float32, "cpp")  # 127 rows: the CPU BLAS keeps it
    assert not _templates(wide)
    choice = wide.graphs[0].fusion.templates[0]
    assert not choice.template and "rows" in choice.reason
    torch.manual_seed(0)
    skinny = engine.explore(LinearReLU(), (torch.randn(4, 63),), backend="cpp")
    assert _templates(skinny) and skinny.verify.ok, skinny.kernels
    off = _explore("linear_relu", torch.float32, "cpp", templates="off")
    assert not _templates(off) and "off" in off.graphs[0].fusion.templates[0].reason


def _mm_node(m, n, k, dtype):
    """The Extern node of one aten.mm on [m, k] @ [k, n] (meta tensors: the choice reads shapes only)."""
    from engine.ir.nodes import Extern
    from engine.lowering.graph import lower

    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"] = torch.empty(m, k, dtype=dtype, device="meta")
    b.meta["val"] = torch.empty(k, n, dtype=dtype, device="meta")
    out = graph.call_function(torch.ops.aten.mm.default, (a, b))
    out.meta["val"] = torch.empty(m, n, dtype=dtype, device="meta")
    graph.output((out,))
    lowered = lower(torch.fx.GraphModule(torch.nn.Module(), graph), "cpu")
    (node,) = [n for n in lowered.nodes if isinstance(n, Extern)]
    return node


CUDA_DEFAULT = templates.TemplateOptions("auto", "triton", "default", "cuda")


@pytest.fixture
def no_tf32():
    """torch's default (a module property: monkeypatch cannot undo it)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_cuda_default_refuses_fp32_without_tf32_with_a_reason(mode, no_tf32):
    """The H200 regression: `bench gpu`'s mlp (32x256x128 fp32 Linear+ReLU) took an ieee-fp32 template (344 us)
    instead of cuBLAS's sgemm (10 us). Without timing, fp32 stays the library call at any size."""
    options = templates.TemplateOptions("auto", "triton", mode, "cuda")
    for m, n, k in [(32, 256, 128), (4096, 4096, 1024)]:
        template, reason = templates.choose(_mm_node(m, n, k, torch.float32), options)
        assert template is None and "float32 without tf32" in reason and "cuBLAS" in reason, reason
    tuned = templates.TemplateOptions("auto", "triton", "max-autotune", "cuda")
    template, reason = templates.choose(_mm_node(32, 256, 128, torch.float32), tuned)
    assert template is not None and "timed against the library call" in reason
    forced, _ = templates.choose(_mm_node(32, 256, 128, torch.float32), templates.TemplateOptions("on", "triton",
                                                                                                 mode, "cuda"))
    assert forced is not None
    for config in gemm_tiles.gpu_configs(32, 256, 128, torch.float32):  # what max-autotune / "on" would run
        assert config.BLOCK_M * config.BLOCK_N <= 64 * 64 and config.BLOCK_K <= 32 and config.num_stages <= 3


def test_cuda_default_refuses_small_and_compute_bound_half_gemms():
    for (m, n, k), words in [((64, 256, 64), "launch-bound"), ((512, 512, 512), "launch-bound"),
                             ((4096, 4096, 16384), "compute-bound"), ((4096, 4096, 1000), "compute-bound")]:
        template, reason = templates.choose(_mm_node(m, n, k, torch.bfloat16), CUDA_DEFAULT)
        assert template is None and words in reason, reason


def test_cuda_default_keeps_cublas_for_the_training_blocks_gemms():
    """The H200 regression: the transformer block's 8192x4096x1024 + GELU template took 196 us where cuBLAS
    takes ~81 us (and its other three templates lost too): every GEMM of that block, K = 1024 or more, stays
    cuBLAS + the epilogue kernel in default mode, with the predicted times in the reason."""
    for m, n, k in [(8192, 4096, 1024), (8192, 1024, 3072), (8192, 1024, 1024), (8192, 1024, 4096)]:
        template, reason = templates.choose(_mm_node(m, n, k, torch.bfloat16), CUDA_DEFAULT)
        assert template is None and "compute-bound" in reason and "predicted" in reason, reason


def test_cuda_default_takes_a_large_short_k_bf16_gemm_with_an_epilogue_and_a_sane_tile():
    """A short K (little compute per output element) is where the saved pass outweighs the slower main loop."""
    m, n, k = 8192, 4096, 128
    template, reason = templates.choose(_mm_node(m, n, k, torch.bfloat16), CUDA_DEFAULT)
    assert template is not None and "predicted" in reason and "tile 128x128x64" in reason, reason
    assert templates.keep_template(template, [], CUDA_DEFAULT)[0] is False  # no epilogue: cuBLAS alone
    configs = gemm_tiles.gpu_configs(m, n, k, torch.bfloat16)
    assert configs and configs[0] == gemm_tiles.GemmConfig(128, 128, 64, 8, 3)
    for shape in [(m, n, k), (32, 256, 128), (16, 4096, 4096), (100, 100, 100), (33, 47, 20)]:
        for config in gemm_tiles.gpu_configs(*shape, torch.bfloat16):
            sm, sn, sk = shape
            assert config.BLOCK_K <= -(-sk // 16) * 16 and config.BLOCK_M <= max(16, 2 * sm - 1), (shape, config)
            assert config.BLOCK_N <= max(16, 2 * sn - 1), (shape, config)
            assert config.stage_bytes(2) * config.num_stages <= gemm_tiles.SHARED_MEMORY_BUDGET
            assert config.num_stages >= 2


def test_template_without_epilogue_goes_back_to_the_library_call():
    torch.manual_seed(0)
    exploration = engine.explore(lambda a, b: a @ b, (torch.randn(4, 63), torch.randn(63, 20)), backend="cpp")
    assert [k.kind for k in exploration.kernels] == ["extern"]
    assert "no elementwise consumer" in exploration.graphs[0].fusion.templates[0].reason


EDGE_CASES = {
    "transposed_operands": (lambda a, b: torch.relu(a.t() @ b.t()), (torch.randn(63, 17), torch.randn(29, 63))),
    "k_of_one": (lambda a, b: torch.sigmoid(a @ b), (torch.randn(19, 1), torch.randn(1, 21))),
    "empty_k": (lambda a, b: torch.relu(a @ b) + 1, (torch.randn(9, 0), torch.randn(0, 11))),
    "broadcast_batch": (lambda a, b: torch.relu(torch.matmul(a, b)), (torch.randn(2, 3, 17, 31), torch.randn(31, 18))),
    "expanded_batch": (lambda a, b: torch.relu(torch.bmm(a.expand(3, 17, 31), b)),
                       (torch.randn(1, 17, 31), torch.randn(3, 31, 18))),
    "mixed_dtypes": (lambda a, b, r: (a @ b).float() * 2 + r,
                     (torch.randn(33, 40).half(), torch.randn(40, 24).half(), torch.randn(33, 24))),
    "tiny": (lambda a, b: torch.relu(a @ b), (torch.randn(2, 3), torch.randn(3, 4))),
    "strided_view_input": (lambda a, b: torch.relu(a[:, ::2] @ b), (torch.randn(20, 62), torch.randn(31, 24))),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_edge_cases_match_eager(case, backend):
    fn, inputs = EDGE_CASES[case]
    exploration = engine.explore(fn, inputs, backend=backend, templates="on", tolerance=TOLERANCE[torch.float16])
    assert exploration.verify.ok, exploration.verify
    if case == "empty_k":
        assert not _templates(exploration)
        assert "empty" in exploration.graphs[0].fusion.templates[0].reason


def test_tiny_gemm_stays_library_on_triton_by_default_with_reason():
    fn, inputs = EDGE_CASES["tiny"]
    exploration = engine.explore(fn, inputs, backend="triton")
    assert exploration.verify.ok and not _templates(exploration)
    assert "too small" in exploration.graphs[0].fusion.templates[0].reason


def test_triton_template_compiles_for_sm90_without_a_gpu():
    exploration = _explore("linear_gelu_residual", torch.bfloat16, "triton", templates="on")
    assert assembly.add_assembly(exploration) >= 1
    for kernel in _templates(exploration):
        asm = kernel.asm
        assert not asm.error, asm.error
        assert ".target sm_90" in asm.ptx and "mma" in asm.ptx


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("mode", ["default", "max-autotune"])
@pytest.mark.parametrize("name,dtype,layout", [
    ("linear_relu", torch.bfloat16, "auto"), ("swiglu", torch.float16, "auto"), ("bmm", torch.float32, "auto"),
    ("conv1x1", torch.bfloat16, "contiguous"), ("conv1x1", torch.bfloat16, "auto")])
def test_gpu_template_matches_eager(name, dtype, layout, mode):
    """conv1x1 in both frames (Note [1x1 convolutions as GEMMs]): NCHW per image, and the channels-last graph
    a bf16 convolution gets on CUDA (Note [Channels-last convolutions])."""
    model, inputs = _case(name, dtype)
    model = model.cuda() if isinstance(model, torch.nn.Module) else model
    inputs = tuple(x.cuda() for x in inputs)
    exploration = engine.explore(model, inputs, backend="triton", device="cuda", templates="on", mode=mode,
                                 tolerance=TOLERANCE[dtype], layout=layout)
    _assert_fused(exploration, name)
    if mode == "max-autotune":
        tuning = _templates(exploration)[0].template.autotune
        assert tuning.winner and any(c.ms for c in tuning.candidates), tuning


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", ["linear_gelu_residual", "swiglu", "bmm", "conv1x1"])
def test_library_then_epilogue_path_matches_eager(name, backend, monkeypatch):
    """The other mode of the same kernel (Note [Template or library at run time]): the library call writes
    the tile, the kernel runs only the epilogue; max-autotune picks it when it is faster."""
    from engine.runtime import gemm_launch

    monkeypatch.setattr(gemm_launch.TemplateLaunch, "_template_run", lambda self, config: self._library_run(config))
    dtype = torch.float32 if backend == "cpp" else torch.bfloat16
    _assert_fused(_explore(name, dtype, backend, templates="on"), name)


def _cuda_default_schedule(fn, *shapes):
    """`fn` traced on fake bf16 tensors, lowered for CUDA and scheduled in default mode (no GPU needed)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from engine.lowering.graph import lower
    from engine.schedule.fusion import schedule
    from engine.schedule.policy import FusionKnobs

    gm = make_fx(fn, tracing_mode="fake")(*(torch.empty(s, dtype=torch.bfloat16) for s in shapes))
    return schedule(lower(gm, "cuda"), FusionKnobs(True, None), CUDA_DEFAULT)


def test_cuda_default_counts_only_the_read_when_the_gemm_output_is_stored_too():
    """A short-K GEMM + GELU takes the template; when the pre-activation is an output too (a training forward
    saves it), the library plan writes it anyway, the template saves only the read, and at this K that is
    less than its slower main loop loses: cuBLAS + the epilogue kernel, with the reason."""
    m, n, k = 8192, 4096, 200
    alone = _cuda_default_schedule(lambda x, w: F.gelu(x @ w), (m, k), (k, n))
    assert [kernel.kind for kernel in alone.kernels] == ["template"], alone.templates

    def gelu_and_preactivation(x, w):
        y = x @ w
        return F.gelu(y), y

    stored = _cuda_default_schedule(gelu_and_preactivation, (m, k), (k, n))
    assert "template" not in [kernel.kind for kernel in stored.kernels]
    (choice,) = stored.templates
    assert choice["template"] is False and "stored too" in choice["reason"], choice
