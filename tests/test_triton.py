"""The Triton backend: every sample matches eager under the Triton interpreter (CPU), fusion gives one kernel
where it should, torch semantics hold (NaN, ties, integer division, half types), long rows loop, and the
PTX/SASS view is produced for an sm_90 target without a GPU. GPU tests run natively and skip without CUDA."""
import json

import pytest
import torch

import engine
from engine.tools import assembly
from engine.tools.model_file import load_model_file
from samples import sample_names

ONE_KERNEL = ["scale_bias_relu", "softmax", "layernorm", "rmsnorm", "gelu_chain"]
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _explore(name, device="cpu"):
    spec = load_model_file(name)
    inputs = spec.example_inputs
    model = spec.model
    dynamic_inputs = spec.dynamic_inputs
    if device != "cpu":
        model = model.to(device) if isinstance(model, torch.nn.Module) else model
        inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
        dynamic_inputs = [tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in extra)
                          for extra in dynamic_inputs]
    return engine.explore(model, inputs, backend="triton", device=device, name=name,
                          dynamic_inputs=dynamic_inputs, tolerance=spec.tolerance)


def _check(fn, *inputs, atol=1e-4, rtol=1e-4, **options):
    compiled = engine.compile(fn, backend="triton", **options)
    with torch.no_grad():
        expected, actual = fn(*inputs), compiled(*inputs)
    torch.testing.assert_close(actual, expected, equal_nan=True, atol=atol, rtol=rtol)


def _triton_kernels(exploration):
    return [k for g in exploration.graphs for k in g.kernels if k.kind in ("pointwise", "reduction")]


# --- samples -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sample_names())
def test_sample_matches_eager_through_triton_interpreter(name):
    exploration = _explore(name)
    assert exploration.verify.ok, exploration.verify
    for run in exploration.runs:
        assert run.verify.ok, run
    assert all(g.code.language == "triton" for g in exploration.graphs if g.code)


@pytest.mark.parametrize("name", ONE_KERNEL)
def test_fused_to_one_triton_kernel(name):
    exploration = _explore(name)
    kernels = exploration.kernels
    assert len(kernels) == 1 and kernels[0].kind in ("pointwise", "reduction"), kernels
    assert "@triton.jit" in exploration.graphs[0].code.source


def test_softmax_reads_its_row_once():
    """Persistent: one load of the input row serves the max pass, the sum pass and the epilogue."""
    kernel = _explore("softmax").kernels[0]
    assert kernel.triton.form == "persistent"
    assert kernel.source.count("tl.load(") == 1, kernel.source


def test_record_has_launch_config_and_is_plain_json():
    exploration = _explore("layernorm")
    data = json.loads(exploration.dumps())
    kernel = data["graphs"][0]["kernels"][0]
    assert kernel["triton"]["config"]["XBLOCK"] >= 1 and kernel["triton"]["signature"]
    assert data["graphs"][0]["code"]["provenance"]
    assert "kernel_0(" in data["graphs"][0]["code"]["wrapper"]  # the bound launch (Note [Bound Triton launches])


# --- semantics -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["amax", "amin", "sum", "argmax", "argmin", "prod"])
def test_reduction_with_nan_and_ties(kind):
    x = torch.randn(16, 300)
    x[3, 17] = float("nan")
    x[4, 5] = x[4, 200] = float("nan")  # argmax/argmin: the first NaN
    x[5, :] = 1.0  # ties: the first index
    if kind == "prod":
        x = x.clamp(-1.2, 1.2)
    _check(lambda t: getattr(torch, kind)(t, dim=-1), x)


@pytest.mark.parametrize("kind", ["any", "all"])
def test_flag_reductions(kind):
    x = torch.randn(8, 64) > 1.5
    x[0] = True
    x[1] = False
    _check(lambda t: getattr(torch, kind)(t, dim=-1), x)


def test_looped_reduction_beyond_the_persistent_limit():
    from engine.codegen.triton.kernel import PERSISTENT_LIMIT
    from engine.schedule.policy import SPLIT_MAX_OUTPUTS

    x = torch.randn(SPLIT_MAX_OUTPUTS + 1, PERSISTENT_LIMIT * 2 + 123)  # more rows than split: Note [Few long rows]
    x[2, 9000] = float("nan")
    x[4, 16000] = 50.0
    fn = lambda t: (torch.softmax(t, -1), t.sum(-1), t.amax(-1), t.argmax(-1), t.var(-1))  # noqa: E731
    _check(fn, x)
    exploration = engine.explore(fn, (x,), backend="triton")
    forms = {k.triton.form for k in _triton_kernels(exploration)}
    assert forms == {"looped"} and exploration.verify.ok, (forms, exploration.verify)
    assert any("for roffset in range(" in k.source for k in _triton_kernels(exploration))


def test_transposed_and_broadcast_inputs():
    x, bias = torch.randn(48, 80), torch.randn(48)
    _check(lambda t: torch.softmax(t.t(), dim=-1), x)
    _check(lambda t, b: (t.t() * 2 + b).sum(-1), x, bias)
    _check(lambda t, b: torch.relu(t + b[:, None]) * t[:1], x, bias)
    _check(lambda t: t.sum(0), x)  # reduce over the leading dim: strided loads
    _check(lambda t: t.sum(), x)  # one output element: rows == 1


def test_half_types_compute_in_float32():
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(32, 96).to(dtype)
        w = torch.randn(96).to(dtype)
        tolerance = dict(atol=2e-2, rtol=2e-2)
        _check(lambda t: torch.softmax(t, -1), x, **tolerance)
        _check(lambda t, g: torch.nn.functional.layer_norm(t, (96,), g), x, w, **tolerance)
        _check(lambda t: torch.nn.functional.gelu(t) * 3 + t.amax(), x, **tolerance)
        _check(lambda t: t.sum(-1, dtype=torch.float32), x, **tolerance)


def test_integers_and_bools():
    a = torch.tensor([[7, -7, 7, -7, 0, 5, -1, 100], [3, -3, 9, -9, 1, 2, 4, -8]])
    b = torch.tensor([2, 2, -2, -2, 3, 5, 4, 7])
    _check(lambda p, q: (p // q, p % q, torch.fmod(p, q), p * q - q, torch.div(p, q, rounding_mode="trunc")), a, b)
    _check(lambda p, q: (p.sum(-1), p.amax(-1), p.argmin(-1), (p > q).any(-1), (p > q).sum(-1)), a, b)
    _check(lambda p, q: ((p > 0) & (q > 0), (p > 0) | ~(q > 0), (p > 0) ^ (q < 0), p.abs() + q.sign()), a, b)
    _check(lambda p: (p.to(torch.int32) * 3, p.float() / 3, (p != 0).to(torch.uint8), p << 2, p >> 1), a)


def test_math_functions_with_special_values():
    special = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e-6, 30.0, -30.0]
    x = torch.cat([torch.tensor(special), torch.randn(52) * 3])
    y = torch.cat([torch.tensor([1.0, 2.0, -2.0, 0.0, 3.0, float("nan"), float("inf"), -0.0, 0.5, -0.5, 2.0, 3.0]),
                   torch.randn(52)])
    unit = torch.rand(64) * 1.98 - 0.99
    for name in ("exp expm1 log log1p log10 sqrt rsqrt sin tan sinh cosh tanh asinh atan erf erfc sigmoid "
                 "floor ceil trunc round sign reciprocal lgamma").split():
        _check(getattr(torch, name), x, atol=1e-5)
    for name in ("asin", "acos", "atanh", "erfinv"):
        _check(getattr(torch, name), unit, atol=1e-5)
    for name in ("maximum", "minimum", "atan2", "hypot", "copysign", "pow", "fmod", "remainder"):
        _check(getattr(torch, name), x, y, atol=1e-5)


def test_gather_and_dynamic_shapes():
    table = torch.randn(50, 16)
    index = torch.tensor([[0, 49, 3], [7, -1, 2]])
    _check(lambda t, i: torch.nn.functional.embedding(i.clamp(min=0), t) * 2, table, index)
    compiled = engine.compile(lambda t: torch.softmax(t, -1) * t.shape[0], backend="triton", dynamic=True)
    for rows, cols in ((5, 40), (9, 300), (3, 70)):
        x = torch.randn(rows, cols)
        torch.testing.assert_close(compiled(x), torch.softmax(x, -1) * rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool])
def test_triton_printer_writes_every_op(dtype):
    import sympy

    from engine.codegen.triton.printer import TritonPrinter, TVar
    from engine.ir.ops import ALL_OPS, BINARY, UNARY
    from engine.schedule.kernel_plan import KernelPlan

    assert all(hasattr(TritonPrinter, op) for op in ALL_OPS)
    printer = TritonPrinter(KernelPlan([], sympy.Integer(8), sympy.Integer(1)), {}, "x", {"x": "xmask"})
    a, b = TVar("a", dtype, True, frozenset("x")), TVar("b", dtype, True, frozenset("x"))
    for op in UNARY:
        assert getattr(printer, op)(a).name
    for op in BINARY:
        if dtype == torch.bool and op in ("left_shift", "right_shift", "floordiv", "remainder", "pow"):
            continue  # torch rejects these for bool tensors; lowering never emits them
        assert getattr(printer, op)(a, b).name
    assert printer.to_dtype(a, torch.bfloat16).name and printer.where(a, a, b).name


# --- crash classes the OpInfo sweep found ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_a_node_nobody_reads_gets_no_kernel(backend):
    """Note [Unused nodes]: copy() overwrites all of full_like's buffer, so full_like is read by nobody; a kernel
    of it alone would store nothing (its launch had no arguments: a SyntaxError in the wrapper)."""
    x = torch.randn(6)
    for fn in (lambda t: torch.diff(t, 0, 0), lambda t: torch.full_like(t, 3.0).copy_(t) * 2):
        exploration = engine.explore(fn, (x,), backend=backend)
        assert exploration.verify.ok, exploration.verify
        graph = exploration.graphs[0]
        assert graph.fusion.unused, graph.fusion
        assert all(k.writes for k in graph.kernels), graph.kernels


def test_int64_index_values_stay_int64():
    """index_expr(0, int64) was a Python literal, an int32 in Triton, which then met the int64 identity of
    a max reduction (index_put's search, Note [Scatter as a search]); so did where() between two literals."""
    x, values = torch.randn(5, 5), torch.randn(1, 5)
    _check(lambda t, i, v: torch.index_put(t, (i,), v), x, torch.tensor([2]), values)
    _check(lambda t, i, v: torch.index_put(t, (i,), v, accumulate=True), x, torch.tensor([-1, 2, -1]), values)
    _check(lambda t: torch.where(t > 0, 0, -1) + t.long().amax(), torch.randn(7) * 4)
    _check(lambda t: torch.where(t > 0, 0, -1).amax() - t.long(), torch.randn(7) * 4)
    import sympy

    from engine.codegen.triton.printer import TritonPrinter, TVar
    from engine.schedule.kernel_plan import KernelPlan

    printer = TritonPrinter(KernelPlan([], sympy.Integer(8), sympy.Integer(1)), {}, "x", {"x": "xmask"})
    zero = printer.index_expr(sympy.Integer(0), torch.int64)
    assert not zero.literal and zero.dtype == torch.int64
    cond = TVar("c", torch.bool, True, frozenset("x"))
    printer.where(cond, printer.constant(0, torch.int64), printer.constant(-1, torch.int64))
    assert "tl.full([], 0, tl.int64)" in printer.lines[-1] + "".join(printer.hoisted), printer.lines


def test_reads_of_empty_tensors():
    """Note [Reads of empty tensors]: cat and pad read inputs with no elements at a clamped index; the
    interpreter (and a GPU) fault on such an address."""
    _check(lambda a, b, c: torch.block_diag(a, b, c), torch.randn(1, 5), torch.randn(3, 0), torch.randn(2, 2))
    _check(lambda a, b: torch.cat([a, b, a], 1) * 2, torch.randn(3, 2), torch.randn(3, 0))
    _check(lambda a: torch.nn.functional.pad(a, (1, 1, 2, 1), value=2.0), torch.randn(0, 3))


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
def test_reductions_over_an_empty_axis():
    """A zero-length reduction needs its mask although every RBLOCK divides 0: unmasked, the block's lane read
    memory that is not there (var of an empty tensor, vecdot of empty vectors faulted) and counted (prod 0)."""
    x = torch.randn(3, 0)
    _check(lambda t: (t.sum(1), t.prod(1), t.mean(1), (t > 0).any(1), (t > 0).all(1)), x)
    _check(lambda t: (torch.var(t), torch.std_mean(t)), torch.randn(0))
    _check(lambda a, b: torch.linalg.vecdot(a, b), torch.randn(0), torch.randn(0))
    _check(lambda t: t.prod(1), torch.randn(3, 0, dtype=torch.float64))


# --- display extras ------------------------------------------------------------------------------------------


def test_ptx_and_sass_for_sm90_without_a_gpu():
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel (triton/backends/nvidia/bin) nor on PATH")
    exploration = _explore("softmax")
    assert assembly.add_assembly(exploration) == 1
    asm = exploration.kernels[0].asm
    assert not asm.error, asm.error
    assert "tt.func" in asm.ttir and "ttg." in asm.ttgir and "define" in asm.llir
    assert ".entry kernel_0" in asm.ptx and ".target sm_90" in asm.ptx
    assert asm.sass.strip(), asm.sass_note
    again = assembly.kernel_assembly(exploration.graphs[0].code.source, "kernel_0",
                                     exploration.kernels[0].triton.signature,
                                     {"XBLOCK": exploration.kernels[0].triton.gpu_config["XBLOCK"],
                                      "RBLOCK": exploration.kernels[0].triton.gpu_config["RBLOCK"]},
                                     exploration.kernels[0].triton.gpu_config["num_warps"])
    assert again["ptx"] == asm.ptx  # served from the cache


def test_reduce_overhead_needs_cuda():
    with pytest.raises(ValueError, match="reduce-overhead"):
        engine.compile(lambda t: t + 1, backend="triton", device="cpu", mode="reduce-overhead")


# --- GPU -----------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("name", sample_names())
def test_sample_matches_eager_on_gpu(name):
    exploration = _explore(name, device="cuda")
    assert exploration.verify.ok, exploration.verify
    for run in exploration.runs:
        assert run.verify.ok, run


@pytest.mark.gpu
@GPU
def test_semantics_on_gpu():
    x = torch.randn(16, 3000, device="cuda")
    x[3, 17] = float("nan")
    x[5, :] = 1.0
    for kind in ("amax", "amin", "argmax", "argmin", "sum"):
        torch._dynamo.reset()
        _check(lambda t: getattr(torch, kind)(t, dim=-1), x, device="cuda")
    torch._dynamo.reset()
    y = torch.randn(4, 20000, device="cuda", dtype=torch.bfloat16)
    _check(lambda t: torch.softmax(t, -1), y, atol=2e-2, rtol=2e-2, device="cuda")
    torch._dynamo.reset()
    z = torch.randn(64, device="cuda") * 3
    for name in ("tanh", "expm1", "log1p", "erfinv", "lgamma", "atan"):
        torch._dynamo.reset()
        _check(getattr(torch, name), z.clamp(-0.99, 0.99) if name == "erfinv" else z, device="cuda", atol=1e-5)


@pytest.mark.gpu
@GPU
def test_reduce_overhead_replays_a_cuda_graph():
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    compiled = engine.compile(model, backend="triton", device="cuda", mode="reduce-overhead")
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(32, 128, device="cuda")
            torch.testing.assert_close(compiled(x).clone(), model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@GPU
def test_max_autotune_records_its_timings():
    x = torch.randn(512, 1024, device="cuda")
    fn = lambda t: torch.softmax(t, -1)  # noqa: E731
    compiled = engine.compile(fn, backend="triton", device="cuda", mode="max-autotune")
    torch.testing.assert_close(compiled(x), fn(x))
    torch._dynamo.reset()
    from engine.pipeline import Options, make_backend
    from engine.record import Exploration
    from engine import capture

    record = Exploration(model="softmax", backend="triton", device="cuda")
    capture.dynamo_compile(fn, make_backend(Options("triton", "cuda", None, "max-autotune"), record), None, None)(x)
    tuning = record.kernels[0].triton.autotune
    assert tuning.best and any(r.ms is not None for r in tuning.results), tuning
    assert "# autotuned" in record.graphs[0].code.wrapper


def test_every_helper_the_prelude_names_is_defined():
    # a generated module copies its helpers with the helpers they call (engine/codegen/triton/module.py): a name
    # that no longer exists would make every kernel that uses it fall back to eager, which outputs would not show
    from engine.codegen.triton import module
    from engine.codegen.triton.kernel import ROW_REDUCE

    undefined = {(helper, name) for helper, names in module.HELPER_CALLS.items() for name in names
                 if name not in module.HELPERS}
    assert not undefined, undefined
    spelled = {word.split("(")[0] for text in ROW_REDUCE.values() for word in text.split() if word.startswith("gb_")}
    assert spelled <= set(module.HELPERS), spelled - set(module.HELPERS)
