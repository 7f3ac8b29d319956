"""The launch path (issue 11): bound Triton launches, library calls that refuse a layout, tensors on another
device than the kernel, the wrapper's measured overhead, and ops with dtypes no kernel has (fft, ComplexHalf,
sparse inputs), which must explore with a visible fallback."""
import pytest
import torch

import engine
from engine.runtime import triton_build
from engine.ir.artifacts import KernelLaunch
from engine.codegen.wrapper import generate_wrapper
from engine.runtime.wrapper import LibraryCall
from engine.lowering.graph import lower
from engine.schedule.fusion import schedule
from engine.schedule.memory import plan_memory


# --- bound Triton launches (Note [Bound Triton launches]) ----------------------------------------------------

class FakeCompiled:
    """Stands in for Triton's CompiledKernel: its launcher records the calls it gets."""

    def __init__(self):
        self.calls = []
        self.function, self.packed_metadata = "function-handle", "metadata"

    def launch_metadata(self, *args):
        return None

    @property
    def run(self):
        return lambda *args: self.calls.append(args)


class FakeJit:
    """Stands in for a JITFunction: run() compiles (once) and returns the compiled kernel."""

    def __init__(self):
        self.compiled, self.runs = FakeCompiled(), []

    def run(self, *args, grid, warmup, **kwargs):
        self.runs.append((args, grid, kwargs))
        return self.compiled


def test_a_bound_launch_calls_the_compiled_launcher_directly_after_the_first():
    jit = FakeJit()
    launch = triton_build.TritonLaunch(jit, {"XBLOCK": 128}, {"num_warps": 4}, checked=(0, 2), interpret=False)
    x, out = torch.empty(64), torch.empty(64)
    launch(1, "stream", x, out, 64)
    assert len(jit.runs) == 1 and jit.runs[0][1] == (1, 1, 1) and jit.runs[0][2] == {"XBLOCK": 128, "num_warps": 4}
    launch(1, "stream", x, out, 64)
    launch(2, "stream", x, out, 64)
    assert len(jit.runs) == 1, "later launches must not go through JITFunction.run"
    grid_x, one, one_, stream, function, metadata, launch_meta, enter, exit_, *args = jit.compiled.calls[-1]
    assert (grid_x, one, one_, stream, function, metadata) == (2, 1, 1, "stream", "function-handle", "metadata")
    assert launch_meta is None and not triton_build._hook_active(enter) and not triton_build._hook_active(exit_)
    assert args[:3] == [x, out, 64] and args[3:] == [128]  # every parameter in order, constexprs included


def test_once_bound_the_wrappers_name_holds_a_generated_launcher():
    jit, namespace = FakeJit(), {}

    kernel = KernelLaunch("kernel_0", {"XBLOCK": 64, "num_warps": 2}, checked=(0, 2))
    triton_build.bind_launch(kernel, jit, False, None, namespace)
    first = namespace["kernel_0"]
    x, out = torch.empty(64), torch.empty(64)
    first(1, "stream", x, out, 64)
    launcher = namespace["kernel_0"]
    assert launcher is not first and callable(launcher)
    launcher(3, "stream", x, out, 64)
    assert len(jit.runs) == 1 and jit.compiled.calls[-1][:4] == (3, 1, 1, "stream")
    assert jit.compiled.calls[-1][-1] == 64 and jit.compiled.calls[-1][-2] == 64  # the size, then XBLOCK
    launcher(1, "stream", x, out, 63)  # another specialization: back to JITFunction.run, bound again
    assert len(jit.runs) == 2 and namespace["kernel_0"] is not launcher


def test_a_change_of_specialization_takes_the_ordinary_path_again():
    jit = FakeJit()
    launch = triton_build.TritonLaunch(jit, {"XBLOCK": 128}, {"num_warps": 4}, checked=(0, 2), interpret=False)
    base = torch.empty(80)
    launch(1, None, base, torch.empty(64), 64)
    launch(1, None, base[1:], torch.empty(64), 64)  # an input 4 bytes off alignment
    launch(1, None, base, torch.empty(64), 63)  # a size that is no longer a multiple of 16
    assert len(jit.runs) == 3 and len(jit.compiled.calls) == 0


def test_a_triton_without_the_direct_launcher_keeps_jit_run():
    jit = FakeJit()
    del FakeCompiled.launch_metadata  # as an older Triton's CompiledKernel
    try:
        launch = triton_build.TritonLaunch(jit, {"XBLOCK": 16}, {"num_warps": 1}, checked=(), interpret=False)
        for _ in range(3):
            launch(1, None, torch.empty(4))
    finally:
        FakeCompiled.launch_metadata = lambda self, *args: None
    assert len(jit.runs) == 3 and not jit.compiled.calls


def test_the_wrapper_reads_no_stream_and_passes_grids_under_the_interpreter():
    fn = lambda x: torch.softmax(x, -1) * 2  # noqa: E731
    record = engine.explore(fn, (torch.randn(8, 32),), backend="triton")
    wrapper = record.graphs[0].code.wrapper
    assert ".run(" not in wrapper and "kernel_0(" in wrapper and "raw_stream" not in wrapper, wrapper
    assert record.verify.ok


# --- the wrapper's measured overhead (Note [Wrapper overhead]) ------------------------------------------------

@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_the_record_shows_the_wrappers_overhead(backend):
    def chain(x):  # dependent kernels fusion cannot merge: each reduction feeds a smaller elementwise op
        for _ in range(4):
            x = x[1:] + x.sum() * 1e-3
        return x

    record = engine.explore(chain, (torch.randn(256),), backend=backend)
    overhead = record.graphs[0].code.overhead
    assert overhead["kernels"] == len([k for k in record.kernels if k.kind in ("pointwise", "reduction")]) >= 4
    assert 0 < overhead["wrapper_overhead_us"] and 0 < overhead["call_us"], overhead
    assert record.verify.ok


# --- library calls that refuse a layout (Note [Views for libraries]) ------------------------------------------

def test_a_library_call_that_refuses_a_layout_gets_contiguous_copies():
    seen = []

    def strict(bias, x):
        seen.append(bias.is_contiguous())
        if not bias.is_contiguous():
            raise RuntimeError("(*bias): last dimension must be contiguous")
        return bias + x

    call = LibraryCall(strict)
    bias = torch.randn(4, 2).t()
    torch.testing.assert_close(call(bias, torch.ones(2, 4)), bias + 1)
    torch.testing.assert_close(call(bias, torch.ones(2, 4)), bias + 1)
    assert seen == [False, True, True]  # refused once, then copies from the start


def test_other_library_errors_are_not_swallowed():
    def broken(x):
        raise RuntimeError("size mismatch")

    with pytest.raises(RuntimeError, match="size mismatch"):
        LibraryCall(broken)(torch.ones(2))


def test_size_one_dims_reach_libraries_with_contiguous_strides():
    """A decode step (batch 1, sequence 1): the fake tensors' stride 0 on size-1 dims never reaches a matmul."""
    linear = torch.nn.Linear(16, 8).eval()
    x = torch.randn(1, 1, 16)
    record = engine.explore(lambda t: torch.relu(linear(t)), (x,))
    assert record.verify.ok
    for line in record.graphs[0].code.wrapper.splitlines():
        if "op_" in line and "strided_view" in line:
            assert "(0," not in line.split("strided_view", 1)[1], line


# --- tensors on another device (Note [Tensors on another device]) ----------------------------------------------

def test_a_constant_a_kernel_reads_is_moved_to_the_kernels_device_once():
    x = torch.randn(2, 3)
    graph = torch.fx.Graph()
    placeholder = graph.placeholder("x")
    placeholder.meta["val"] = x
    table = graph.get_attr("table")
    table.meta["val"] = torch.empty(2, 3)
    mul = graph.call_function(torch.ops.aten.mul.Tensor, (placeholder, table))
    mul.meta["val"] = torch.empty(2, 3)
    graph.output((mul,))
    module = torch.nn.Module()
    module.register_buffer("table", torch.arange(6, dtype=torch.float32).reshape(2, 3))
    gm = torch.fx.GraphModule(module, graph)
    lowered = lower(gm, "meta")  # "meta" plays the GPU: a device the constant is not on
    scheduled = schedule(lowered)
    memory = plan_memory(scheduled.kernels, lowered, {})
    source = generate_wrapper(lowered, scheduled.kernels, memory, {k.name: f"{k.name}()" for k in scheduled.kernels
                                                                     if k.kind in ("pointwise", "reduction")})
    moved = [v for v in source.constants.values() if isinstance(v, torch.Tensor)]
    assert moved and all(v.device.type == "meta" for v in moved), source.constants


def test_a_graph_with_a_cpu_created_constant_runs_under_the_triton_interpreter():
    def fn(x):
        scale = torch.tensor([1.0, 2.0, 3.0])  # created in forward, on the CPU: a constant of the graph
        return torch.relu(x * scale + 0.5)

    x = torch.randn(4, 3)
    for backend in ("triton", "cpp"):
        record = engine.explore(fn, (x,), backend=backend)
        assert record.verify.ok, (backend, record.verify)
        assert not record.errors


def test_a_cpu_input_read_by_a_kernel_on_another_device_is_copied_each_call():
    graph = torch.fx.Graph()
    x = torch.randn(3)
    placeholder = graph.placeholder("x")
    placeholder.meta["val"] = x
    neg = graph.call_function(torch.ops.aten.neg.default, (placeholder,))
    neg.meta["val"] = torch.empty(3)
    graph.output((neg,))
    lowered = lower(torch.fx.GraphModule({}, graph), "meta")
    scheduled = schedule(lowered)
    source = generate_wrapper(lowered, scheduled.kernels, plan_memory(scheduled.kernels, lowered, {}),
                              {k.name: f"{k.name}()" for k in scheduled.kernels})
    assert "arg0 = arg0.to(torch.device('meta'))" in source.source, source.source


class _MoveCounter:
    """A stand-in input that counts the wrapper's `.to()` moves of it."""

    def __init__(self):
        self.moves = 0

    def to(self, device):
        self.moves += 1
        return self


def _moves_per_call(input_value: torch.Tensor, device: str) -> int:
    """How many times one call of the wrapper, generated for `device`, moves an input captured as `input_value`."""
    from engine.runtime.wrapper import wrapper_namespace

    graph = torch.fx.Graph()
    placeholder = graph.placeholder("x")
    placeholder.meta["val"] = input_value
    neg = graph.call_function(torch.ops.aten.neg.default, (placeholder,))
    neg.meta["val"] = torch.empty(3, device="meta")
    graph.output((neg,))
    lowered = lower(torch.fx.GraphModule({}, graph), device)
    scheduled = schedule(lowered)
    source = generate_wrapper(lowered, scheduled.kernels, plan_memory(scheduled.kernels, lowered, {}),
                              {k.name: f"{k.name}()" for k in scheduled.kernels})
    namespace = wrapper_namespace(source)
    namespace.update({k.name: lambda *args: None for k in scheduled.kernels})
    namespace.update(raw_stream=lambda index: 0, empty_strided_cuda=lambda *args: torch.empty(3, device="meta"))
    exec(compile(source.source, "<wrapper>", "exec"), namespace)
    probe = _MoveCounter()
    namespace["call"]([probe])
    return probe.moves


def test_an_input_on_the_kernels_device_by_another_name_is_not_moved():
    # a model compiled for "cuda" gets inputs that report "cuda:0": one device, no per-call move
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        on_cuda0 = torch.empty(3, device="cuda:0")
    assert _moves_per_call(on_cuda0, "cuda") == 0
    assert _moves_per_call(torch.empty(3), "cuda") == 1  # a CPU input read by a CUDA kernel still is


# --- dtypes and layouts without kernels: a visible fallback, never a crash -------------------------------------

@pytest.mark.parametrize("name, fn, make", [
    ("fft2", lambda x: torch.fft.fft2(x) * 2, lambda: torch.randn(4, 8)),
    ("fftn", lambda x: torch.fft.fftn(x).abs() + 1, lambda: torch.randn(4, 8)),
    ("ifft2", lambda x: torch.fft.ifft2(x) + x, lambda: torch.randn(4, 8, dtype=torch.complex64)),
    ("ifftn", lambda x: torch.fft.ifftn(x).real, lambda: torch.randn(4, 8, dtype=torch.complex64)),
    ("complex_half", lambda x: x + x, lambda: torch.randn(4, 4, dtype=torch.complex32)),
])
def test_complex_ops_explore_with_a_fallback(name, fn, make):
    record = engine.explore(fn, (make(),))
    assert record.verify.ok, record.verify
    reasons = [k.reason or "" for k in record.kernels if k.kind == "fallback"]
    assert any("complex" in r for r in reasons), reasons


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_inputs_explore(layout):
    dense = torch.randn(4, 4)
    sparse = dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()
    record = engine.explore(lambda x: x * 2, (sparse,))
    assert record.verify.ok, record.verify
    assert record.graphs or record.errors or record.graph_breaks, "the eager run must be visible in the record"


def test_a_forced_internal_failure_is_not_an_exception_of_the_launch_path(monkeypatch):
    """A kernel whose direct launcher raises keeps working through JITFunction.run."""
    jit = FakeJit()
    launch = triton_build.TritonLaunch(jit, {"XBLOCK": 16}, {"num_warps": 1}, checked=(), interpret=False)
    monkeypatch.setattr(triton_build, "_launch_hooks", lambda: (lambda *a: None, None))  # a profiler's hook
    launch(1, None, torch.empty(4))
    launch(1, None, torch.empty(4))
    assert len(jit.runs) == 2 and not jit.compiled.calls


# --- --mode on the command line ---------------------------------------------------------------------------------

def test_mode_is_a_cli_option_of_explore_and_bench():
    from engine.__main__ import build_parser

    parser = build_parser()
    assert parser.parse_args(["explore", "softmax", "--mode", "max-autotune"]).mode == ("max-autotune",)
    assert parser.parse_args(["bench", "zoo", "--mode", "default,reduce-overhead"]).mode == \
        ("default", "reduce-overhead")
    with pytest.raises(SystemExit):
        parser.parse_args(["explore", "softmax", "--mode", "fastest"])


@pytest.mark.slow
def test_bench_runs_each_mode_beside_inductors_same_mode():
    from engine.tools.bench import bench, load_cases

    [spec] = load_cases("softmax")
    report = bench(spec, with_inductor=False, min_run_time=0.01, mode="max-autotune")
    assert report["mode"] == "max-autotune" and report["verify"]["glassbox"]["ok"]
