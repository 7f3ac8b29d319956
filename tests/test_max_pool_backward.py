"""Max pooling's gradient as our kernel (Note [Max pooling backward as a gather] and Note [Max pooling backward
on the CPU] in engine/lowering/pooling.py): a training step through max_pool2d gives eager's input gradient over
3x3 pools of stride 1 and 2, padding, ceil mode, dilation, unbatched, size-1, non-contiguous and channels-last
inputs, ties that send many windows' gradients to one element, and symbolic sizes; the backward graph keeps
max_pool2d_with_indices_backward whole (no scatter_add) and runs nothing eagerly. Through the C++ backend in
the CPU's form (a Scatter at each window's argmax) and the Triton interpreter in a GPU's (the gather)."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.lowering import pooling
from gradient_checks import backward_ops, train_checked, weighted_sum

CASES = {  # name: (input, kernel, stride, padding, dilation, ceil_mode)
    "resnet_stem": ((2, 3, 9, 9), 3, 2, 1, 1, False),
    "stride_one_overlapping": ((2, 2, 7, 8), 3, 1, 1, 1, False),
    "ceil_mode": ((1, 3, 8, 7), 3, 2, 1, 1, True),
    "ceil_mode_no_padding": ((1, 2, 10, 9), 3, 2, 0, 1, True),
    "rectangular_dilated": ((2, 2, 11, 9), (3, 2), (2, 1), (1, 0), (2, 3), False),
    "stride_beyond_kernel": ((1, 2, 9, 10), 2, 3, 0, 1, True),
    "unbatched": ((3, 6, 7), 3, 1, 1, 1, False),
    "size_one": ((2, 3, 1, 1), 3, 1, 1, 1, False),
}


@pytest.fixture(autouse=True)
def _gpu_form_under_triton(request, monkeypatch):
    """The Triton backend's gradient is a GPU's gather, run here under the interpreter; the C++ backend's the
    CPU's Scatter."""
    if getattr(request.node, "callspec", None) and request.node.callspec.params.get("backend") == "triton":
        monkeypatch.setattr(pooling, "gathers_on", lambda device: True)


def _train(fn, x, backend, **kwargs):
    exploration = train_checked(fn, x, backend, **kwargs)
    backward = backward_ops(exploration)
    assert "max_pool2d_with_indices_backward" in backward and "scatter" not in backward, backward
    nodes = [n.kind for g in exploration.graphs if g.phase == "backward" for n in g.ir.nodes]
    assert ("scatter" in nodes) == (backend == "cpp"), nodes
    return exploration


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool2d_gradient_equals_eager(backend, case):
    shape, kernel, stride, padding, dilation, ceil_mode = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)
    _train(lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode), x, backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_ties_send_many_windows_to_one_element(backend):
    """A plane of equal values: every window picks its first in-bounds position, so one element gathers the
    gradients of up to 9 overlapping windows (and an all -inf plane does the same)."""
    x = torch.zeros(1, 2, 6, 6)
    x[0, 1] = float("-inf")
    _train(lambda t: F.max_pool2d(t, 3, 1, 1), x.requires_grad_(), backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_non_contiguous_inputs(backend, layout):
    torch.manual_seed(0)
    if layout == "transposed":
        x = torch.randn(2, 3, 9, 8).transpose(2, 3).requires_grad_()
    else:
        x = torch.randn(2, 3, 9, 8).to(memory_format=torch.channels_last).requires_grad_()
    _train(lambda t: F.max_pool2d(torch.relu(t), 3, 2, 1), x, backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_gradient_over_symbolic_sizes_equals_eager(backend):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11, requires_grad=True)
    exploration = _train(lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True), x, backend, dynamic=True)
    (backward,) = [g for g in exploration.graphs if g.phase == "backward"]
    sizes = [s for node in backward.ir.nodes for s in node.size]
    assert sizes and not all(s.isdigit() for s in sizes), sizes
