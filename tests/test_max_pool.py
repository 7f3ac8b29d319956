"""Max pooling as our kernel (Note [Max pooling as our kernel]): values and indices equal eager's over strides,
padding, dilation, ceil mode, unbatched inputs and the windows where ties, -inf and NaN decide; in a
channels-last graph the pool is stored NHWC, so the convolutions after it get NHWC inputs and no library
output is copied into another layout. Through the Triton interpreter and the C++ backend."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import engine
from engine.runtime.wrapper import LibraryCall
from engine.pipeline import Options, compile_graph

aten = torch.ops.aten

CASES = {  # name: (input, kernel, stride, padding, dilation, ceil_mode)
    "resnet_stem": ((2, 4, 9, 9), 3, 2, 1, 1, False),
    "no_padding": ((2, 3, 8, 8), 2, 2, 0, 1, False),
    "ceil_mode": ((1, 3, 7, 10), 3, 2, 1, 1, True),
    "rectangular_dilated": ((2, 2, 11, 9), (3, 2), (2, 1), (1, 0), (2, 3), False),
    "unbatched": ((3, 6, 7), 3, 1, 1, 1, False),
}


def _pool(x, kernel, stride, padding, dilation, ceil_mode):
    values, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    return values * 2, indices  # the indices are read: a node of their own computes them


def _explore(fn, inputs, backend, **kwargs):
    exploration = engine.explore(fn, inputs, backend=backend, **kwargs)
    assert not exploration.errors, exploration.errors[0].message
    assert exploration.verify.ok, exploration.verify
    return exploration


def _kinds(exploration) -> list[str]:
    return [k.kind for g in exploration.graphs for k in g.kernels]


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_indices_equal_eager(backend, case):
    shape, *params = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(shape)
    exploration = _explore(lambda t: _pool(t, *params), (x,), backend)
    assert "fallback" not in _kinds(exploration) and "extern" not in _kinds(exploration)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_ties_infinities_and_nan_pick_eagers_index(backend):
    """Ties keep the first position, an all -inf window names its first in-bounds position (not the
    padding), a NaN wins and propagates."""
    x = torch.zeros(1, 2, 5, 5)
    x[0, 0, :2, :2] = float("-inf")
    x[0, 1, 2, 2] = float("nan")
    exploration = _explore(lambda t: _pool(t, 3, 2, 1, 1, False), (x,), backend)
    assert "fallback" not in _kinds(exploration)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_pool_without_indices_computes_no_indices(backend):
    """torchvision's max pool: the indices nobody reads get no kernel; the pool and the ReLU before it are
    one kernel."""
    torch.manual_seed(0)
    exploration = _explore(lambda t: F.max_pool2d(torch.relu(t), 3, 2, 1), (torch.randn(2, 4, 9, 9),), backend)
    (graph,) = exploration.graphs
    assert [k.kind for k in graph.kernels] == ["pointwise"], graph.kernels
    assert "int64" not in str(graph.code.wrapper), "an int64 buffer for the unread indices"


def _stacked_pools(t):
    x = torch.relu(t * 2)
    for _ in range(3):  # GoogLeNet's and YOLO's stride-1 pools over pools
        x = F.max_pool2d(x, 3, 1, 1)
    return x


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_stacked_windows_store_each_pool_once(backend):
    """Note [Window reads]: a pool over a pool stores the inner one instead of recomputing it at 9 positions per
    element, which multiplied to 9^3 and minutes of code generation; the ReLU before the first pool is still
    recomputed in its window, and a BN + ReLU before a pool (the ResNet stem) still fuses into it."""
    torch.manual_seed(0)
    exploration = _explore(_stacked_pools, (torch.randn(1, 4, 12, 12),), backend)
    (graph,) = exploration.graphs
    assert [k.kind for k in graph.kernels] == ["pointwise"] * 3, graph.kernels
    refused = [d for d in graph.fusion.decisions if d.rule == "window_read"]
    assert len(refused) == 2 and not any(d.fused for d in refused), graph.fusion.decisions
    assert all("positions per element" in d.reason for d in refused)
    bn = torch.nn.BatchNorm2d(4).eval()
    bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
    stem = _explore(lambda t: F.max_pool2d(torch.relu(bn(t)), 3, 2, 1), (torch.randn(2, 4, 9, 9),), backend)
    assert [k.kind for g in stem.graphs for k in g.kernels] == ["pointwise"]


def test_large_windows_run_eagerly_with_a_reason():
    exploration = engine.explore(lambda t: F.max_pool2d(t, 7), (torch.randn(1, 2, 14, 14),), backend="cpp")
    assert exploration.verify.ok, exploration.verify
    fallbacks = [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]
    assert fallbacks and any("window" in str(k) for k in fallbacks), fallbacks


def _stem(x, stem, block):
    y = F.max_pool2d(torch.relu(F.conv2d(x, stem, stride=2, padding=3)), 3, 2, 1)
    return F.conv2d(y, block) + F.conv2d(y, block * 2)


def _run_recording(compiled, inputs) -> tuple:
    """(outputs, whether each library convolution's input was NHWC, the shapes with_layout copied)."""
    namespace, seen, copies = compiled.call.__globals__, [], []
    for name, op in list(namespace.items()):
        if isinstance(op, LibraryCall) and op.target is aten.convolution.default:
            def record(*args, _op=op, **kwargs):
                seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
                return _op(*args, **kwargs)
            namespace[name] = record
    with_layout = namespace["with_layout"]

    def counting(tensor, size, stride):
        result = with_layout(tensor, size, stride)
        copies.extend([tensor.shape] if result is not tensor else [])
        return result
    namespace["with_layout"] = counting
    return compiled.call(list(inputs)), seen, copies


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_channels_last_pool_feeds_convolutions_without_copies(backend):
    """A ResNet stem channels-last: the NCHW image is converted by our kernel (Note [Converting a convolution's
    input ourselves]), the pool is stored NHWC, so every convolution reads an NHWC input, and no library output
    is copied into another layout (with_layout copies nothing)."""
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 16, 16), torch.randn(8, 3, 7, 7), torch.randn(8, 8, 1, 1)]
    gm = make_fx(_stem, tracing_mode="fake", decomposition_table={})(*inputs)
    assert any(n.target is aten.max_pool2d_with_indices.default for n in gm.graph.nodes)
    compiled = compile_graph(gm, inputs, Options(backend=backend, layout="channels_last", templates="off"))
    (out,), seen, copies = _run_recording(compiled, inputs)
    torch.testing.assert_close(out, _stem(*inputs), atol=1e-4, rtol=1e-4)
    assert len(seen) == 3 and all(seen), seen
    assert not copies, copies


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_resnet_stem_in_half_makes_no_copies():
    """On CUDA (the layout heuristic picks channels-last; fp16, real cuDNN): outputs equal eager's, cuDNN returns
    the promised NHWC outputs (with_layout copies nothing) and every convolution reads an NHWC input."""
    torch.manual_seed(0)
    half = dict(dtype=torch.float16, device="cuda")
    inputs = [torch.randn(4, 3, 64, 64, **half), torch.randn(32, 3, 7, 7, **half), torch.randn(32, 32, 1, 1, **half)]
    gm = make_fx(_stem, tracing_mode="fake", decomposition_table={})(*inputs)
    compiled = compile_graph(gm, inputs, Options(backend="triton", device="cuda"))
    (out,), seen, copies = _run_recording(compiled, inputs)
    torch.testing.assert_close(out, _stem(*inputs), atol=2e-2, rtol=2e-2)
    assert len(seen) == 3 and all(seen), seen
    assert not copies, copies
