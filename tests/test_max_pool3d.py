"""3d max pooling as our kernel (Note [Max pooling as our kernel], Note [Max pooling reads clamped positions] and
Note [Max pooling backward as a gather] in engine/lowering/pooling.py): max_pool3d_with_indices gives eager's
values and indices to the bit (the flat position in each D*H*W plane; ties keep the first position, NaN wins,
padding is no -inf) over kernel, stride, padding, dilation and ceil mode, unbatched, size-1, empty,
non-contiguous and channels-last-3d inputs, in eager's strides, and a training step through it gives eager's
input gradient, in either of its forms (Note [Max pooling backward on the CPU]), with no Fallback node in
either graph. Through the Triton interpreter and the C++ backend."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.lowering import pooling
from gradient_checks import backward_ops, train_checked

aten = torch.ops.aten
EXACT = {"atol": 0.0, "rtol": 0.0}

CASES = {  # name: (input, kernel, stride, padding, dilation, ceil_mode)
    "k3_s2_p1": ((2, 3, 7, 8, 9), 3, 2, 1, 1, False),
    "k3_s1_p1": ((1, 2, 6, 7, 5), 3, 1, 1, 1, False),
    "k2_s2": ((2, 2, 6, 6, 7), 2, 2, 0, 1, False),
    "ceil_mode": ((1, 2, 7, 8, 6), 3, 2, 1, 1, True),
    "ceil_mode_drops_a_window_in_the_padding": ((1, 2, 5, 7, 5), 2, 2, 1, 1, True),  # ceil's last: dropped
    "rectangular_dilated": ((1, 2, 9, 7, 10), (3, 2, 2), (2, 1, 2), (1, 0, 1), (2, 1, 3), False),
    "video_stem": ((2, 3, 1, 9, 9), (1, 3, 3), (1, 2, 2), (0, 1, 1), 1, False),  # a size-1 depth
    "size_one": ((2, 2, 1, 1, 1), 3, 1, 1, 1, False),
    "unbatched": ((3, 5, 6, 7), 3, 1, 1, 1, False),
}


def _pool(x, kernel, stride, padding, dilation, ceil_mode):
    values, indices = aten.max_pool3d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    return values * 2, indices  # the indices are read: a node of their own computes them


def _equals_eager(fn, x, backend):
    """Explored (no Fallback, no extern, outputs exactly eager's), then compiled: values, indices and their
    strides are eager's, NaNs where eager has them."""
    torch._dynamo.reset()
    exploration = engine.explore(fn, (x,), backend=backend, tolerance=EXACT)
    assert not exploration.errors, exploration.errors[0].message
    assert exploration.verify.ok, exploration.verify
    kinds = [k.kind for g in exploration.graphs for k in g.kernels]
    assert "fallback" not in kinds and "extern" not in kinds, kinds
    assert "max_pool3d_with_indices" in " ".join(str(n.target) for g in exploration.graphs for n in g.aten)
    torch._dynamo.reset()
    got, expected = engine.compile(fn, backend=backend)(x), fn(x)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype and g.stride() == e.stride(), (g.stride(), e.stride())
        torch.testing.assert_close(g, e, atol=0, rtol=0, equal_nan=True)
    return exploration


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_indices_equal_eager(backend, case):
    shape, *params = CASES[case]
    torch.manual_seed(0)
    _equals_eager(lambda t: _pool(t, *params), torch.randn(shape), backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_ties_infinities_and_nan_pick_eagers_index(backend):
    """Ties keep the first position (a plane of zeros), an all -inf window names its first in-bounds position
    (not the padding), a NaN wins and propagates, and of two NaNs in a window the later one is named, also at
    the corners, where the windows read the padding's positions clamped onto them (Note [Max pooling reads
    clamped positions]; ceil mode's last window reaches 2 past the end)."""
    x = torch.zeros(1, 4, 6, 6, 6)
    x[0, 0, :2, :2, :2] = float("-inf")
    x[0, 1, 2, 2, 2] = float("nan")
    x[0, 2, 1, 1, 1] = x[0, 2, 1, 2, 2] = float("nan")
    x[0, 3, 0, 0, 0] = x[0, 3, 0, 0, 1] = x[0, 3, 5, 5, 5] = x[0, 3, 5, 4, 5] = float("nan")
    _equals_eager(lambda t: _pool(t, 3, 2, 1, 1, True), x, backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("layout", ["transposed", "channels_last_3d"])
def test_non_contiguous_inputs(backend, layout):
    """The pool of a channels-last-3d input is stored channels-last-3d, as eager's is."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6, 7, 5)
    x = x.transpose(2, 4) if layout == "transposed" else x.to(memory_format=torch.channels_last_3d)
    _equals_eager(lambda t: _pool(t, 3, 2, 1, 1, True), x, backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_empty_batch(backend):
    torch._dynamo.reset()
    fn = lambda t: _pool(t, 3, 2, 1, 1, False)  # noqa: E731
    got, expected = engine.compile(fn, backend=backend)(torch.randn(0, 2, 5, 5, 5)), fn(torch.randn(0, 2, 5, 5, 5))
    assert [g.shape for g in got] == [e.shape for e in expected]


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_pool_without_indices_is_one_kernel_with_the_relu(backend):
    """F.max_pool3d in inference: the unread indices get no kernel, the ReLU before the pool is recomputed in
    its 27-position window."""
    torch.manual_seed(0)
    exploration = _equals_eager(lambda t: (F.max_pool3d(torch.relu(t), 3, 2, 1),), torch.randn(1, 3, 6, 6, 6),
                                backend)
    (graph,) = exploration.graphs
    assert [k.kind for k in graph.kernels] == ["pointwise"], graph.kernels
    assert "int64" not in str(graph.code.wrapper), "an int64 buffer for the unread indices"


def test_large_windows_run_eagerly_with_a_reason():
    exploration = engine.explore(lambda t: F.max_pool3d(t, (3, 3, 4)), (torch.randn(1, 2, 6, 6, 8),), backend="cpp")
    assert exploration.verify.ok, exploration.verify
    fallbacks = [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]
    assert fallbacks and any("3x3x4 positions" in str(k) for k in fallbacks), fallbacks


# The gradient's two forms (Note [Max pooling backward on the CPU]): the C++ backend's, on the CPU, is the
# Scatter of each output gradient at its argmax; the Triton backend's, for a GPU, is the gather over the
# covering windows, switched on here to run under the interpreter. The other two pairs run in a few tests.
NATURAL = [("cpp", "scatter"), ("triton", "gather")]
FORMS = NATURAL + [("cpp", "gather"), ("triton", "scatter")]


def _backward_nodes(exploration) -> list[str]:
    return [n.kind for g in exploration.graphs if g.phase == "backward" for n in g.ir.nodes]


def _train(fn, x, backend, form, monkeypatch, **kwargs):
    monkeypatch.setattr(pooling, "gathers_on", lambda device: form == "gather")
    exploration = train_checked(fn, x, backend, tolerance=EXACT, **kwargs)
    backward = backward_ops(exploration)
    assert "max_pool3d_with_indices_backward" in backward and "scatter" not in backward, backward
    assert ("scatter" in _backward_nodes(exploration)) == (form == "scatter"), _backward_nodes(exploration)
    return exploration


GRADIENT_CASES = ["k3_s2_p1", "k3_s1_p1", "ceil_mode", "ceil_mode_drops_a_window_in_the_padding",
                  "rectangular_dilated", "size_one", "unbatched"]


@pytest.mark.parametrize("backend,form", NATURAL)
@pytest.mark.parametrize("case", GRADIENT_CASES)
def test_gradient_equals_eager(backend, form, case, monkeypatch):
    """float32 gradients to the bit: each element adds its windows' gradients in eager's order."""
    shape, kernel, stride, padding, dilation, ceil_mode = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)
    _train(lambda t: F.max_pool3d(t, kernel, stride, padding, dilation, ceil_mode), x, backend, form, monkeypatch)


@pytest.mark.parametrize("backend,form", FORMS)
def test_ties_send_many_windows_to_one_element(backend, form, monkeypatch):
    """A volume of equal values: every window picks its first in-bounds position, so one element gathers the
    gradients of up to 27 overlapping windows (and an all -inf volume does the same)."""
    x = torch.zeros(1, 2, 4, 5, 4)
    x[0, 1] = float("-inf")
    _train(lambda t: F.max_pool3d(t, 3, 1, 1), x.requires_grad_(), backend, form, monkeypatch)


@pytest.mark.parametrize("backend,form", NATURAL)
@pytest.mark.parametrize("layout", ["transposed", "channels_last_3d"])
def test_gradient_of_non_contiguous_inputs(backend, form, layout, monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 7, 5)
    x = x.transpose(2, 4) if layout == "transposed" else x.to(memory_format=torch.channels_last_3d)
    _train(lambda t: F.max_pool3d(torch.relu(t), 3, 2, 1), x.requires_grad_(), backend, form, monkeypatch)


@pytest.mark.parametrize("backend,form", NATURAL)
def test_gradient_over_symbolic_sizes_equals_eager(backend, form, monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 7, 6, requires_grad=True)
    exploration = _train(lambda t: F.max_pool3d(t, 3, 2, 1, ceil_mode=True), x, backend, form, monkeypatch,
                         dynamic=True)
    (backward,) = [g for g in exploration.graphs if g.phase == "backward"]
    sizes = [s for node in backward.ir.nodes for s in node.size]
    assert sizes and not all(s.isdigit() for s in sizes), sizes


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_half_gradient_is_rounded_once(backend):
    """A bfloat16 gradient on the CPU: the Scatter adds in float32 and one elementwise node rounds, within
    bfloat16's tolerance of eager."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 6, 6, 6, dtype=torch.bfloat16, requires_grad=True)
    exploration = train_checked(lambda t: F.max_pool3d(t, 3, 1, 1), x, backend)
    assert _backward_nodes(exploration) == ["scatter", "pointwise"], _backward_nodes(exploration)


def _ir_text(exploration) -> str:
    return "\n".join(line for g in exploration.to_json()["graphs"] for n in g["ir"]["nodes"] for line in n["text"])


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_padding_is_read_clamped_not_masked(backend):
    """Note [Max pooling reads clamped positions]: a padded pool reads every window position as a plain load
    (clamped into the input), where a dilated dim still masks the positions the padding can push outside."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 6, 7, 6)
    padded = _equals_eager(lambda t: _pool(t, 3, 2, 1, 1, True), x, backend)
    assert "load" in _ir_text(padded) and "masked" not in _ir_text(padded)
    dilated = _equals_eager(lambda t: _pool(t, 3, 1, 1, (1, 2, 1), False), x, backend)
    assert "masked" in _ir_text(dilated)


@pytest.mark.parametrize("backend,form", NATURAL)
def test_channels_last_gradient_keeps_eagers_layout(backend, form, monkeypatch):
    """The gradient of a channels-last-3d input comes back channels-last-3d, as eager's does, in either form
    (so autograd copies nothing into the input's layout)."""
    monkeypatch.setattr(pooling, "gathers_on", lambda device: form == "gather")
    params = ([3] * 3, [2] * 3, [1] * 3, [1] * 3, False)
    x = torch.randn(2, 4, 6, 7, 5).to(memory_format=torch.channels_last_3d)
    values, indices = aten.max_pool3d_with_indices(x, *params)
    grad = torch.randn(values.shape).to(memory_format=torch.channels_last_3d)

    def fn(g, t, i):
        return aten.max_pool3d_with_indices_backward(g, t, *params, i)

    got, expected = engine.compile(fn, backend=backend)(grad, x, indices), fn(grad, x, indices)
    assert got.stride() == expected.stride() == x.stride(), (got.stride(), expected.stride())
    assert torch.equal(got, expected)
