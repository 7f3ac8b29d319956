"""Average pooling's gradient as our kernel (Note [Average pooling backward as a gather] in
engine/lowering/pooling.py): a training step through avg_pool2d/3d and adaptive average pooling gives eager's
input gradient over kernel/stride/padding, count_include_pad, divisor_override, ceil mode, stride > kernel,
unbatched inputs and contiguous or channels-last layouts, with no Fallback node in the record. Through the
Triton interpreter and the C++ backend."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import engine
from gradient_checks import backward_ops, train_checked, weighted_sum

AVG_POOL_2D = {  # name: (input, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    "densenet_transition": ((2, 4, 8, 8), 2, 2, 0, False, True, None),
    "overlapping_padded": ((2, 3, 9, 9), 3, 2, 1, False, True, None),
    "padding_not_counted": ((2, 3, 9, 9), 3, 2, 1, False, False, None),
    "ceil_mode": ((1, 3, 7, 10), 3, 2, 1, True, True, None),
    "ceil_mode_padding_not_counted": ((1, 3, 8, 7), 3, 2, 1, True, False, None),
    "divisor_override": ((2, 2, 6, 6), 3, 1, 1, False, True, 4),
    "stride_beyond_kernel": ((1, 2, 10, 9), 2, 3, 0, True, True, None),
    "rectangular": ((2, 2, 9, 8), (3, 2), (2, 1), (1, 0), False, False, None),
    "unbatched": ((3, 7, 7), 3, 2, 1, False, True, None),
    "wide_stride_one": ((1, 2, 9, 9), 7, 1, 3, False, False, None),  # 49 windows per element: a Reduction
}


def _backward_kinds(exploration) -> list[str]:
    return [k.kind for g in exploration.graphs if g.phase == "backward" for k in g.kernels]


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("case", sorted(AVG_POOL_2D))
def test_avg_pool2d_gradient_equals_eager(backend, case):
    shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override = AVG_POOL_2D[case]
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)

    def pool(t):
        return F.avg_pool2d(t, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)

    exploration = train_checked(pool, x, backend)
    assert "avg_pool2d_backward" in backward_ops(exploration), "the case lost its point"
    if case == "wide_stride_one":
        assert "reduction" in _backward_kinds(exploration)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("params", [(2, 2, 0, False, True, None), (3, (2, 1, 2), 1, True, False, None),
                                    ((3, 2, 3), 2, (1, 0, 1), False, True, 5)],
                         ids=["cube", "ceil_mode_padding_not_counted", "divisor_override"])
def test_avg_pool3d_gradient_equals_eager(backend, params):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 6, 5, requires_grad=True)
    exploration = train_checked(lambda t: F.avg_pool3d(t, *params), x, backend)
    assert "avg_pool3d_backward" in backward_ops(exploration)


ADAPTIVE = {  # name: (input, output size); a 1x1 output is a mean, not this op
    "downsampling": ((2, 3, 7, 7), (3, 2)),
    "uneven_windows": ((1, 2, 10, 7), (4, 3)),
    "upsampling": ((2, 2, 2, 3), (7, 5)),
    "upsampling_many_windows": ((1, 2, 2, 2), (11, 11)),  # 6 x 6 windows per element: a Reduction
}


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("case", sorted(ADAPTIVE))
def test_adaptive_avg_pool2d_gradient_equals_eager(backend, case):
    shape, output_size = ADAPTIVE[case]
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)
    exploration = train_checked(lambda t: F.adaptive_avg_pool2d(t, output_size), x, backend)
    assert "_adaptive_avg_pool2d_backward" in backward_ops(exploration)
    if case == "upsampling_many_windows":
        assert "reduction" in _backward_kinds(exploration)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_adaptive_avg_pool3d_gradient_is_our_kernel(backend):
    """The forward pool runs eagerly (no lowering); its gradient is the same gather."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 4, 6, requires_grad=True)
    exploration = engine.explore(lambda t: F.adaptive_avg_pool3d(t, (2, 3, 4)), (x,), backend=backend,
                                 train=True, loss_fn=weighted_sum)
    assert exploration.verify.ok, exploration.verify.gradients
    backward = [k for g in exploration.graphs if g.phase == "backward" for k in g.kernels]
    assert "_adaptive_avg_pool3d_backward" in backward_ops(exploration)
    assert not [k for k in backward if k.kind == "fallback"], backward


class Transition(nn.Module):
    """DenseNet's transition in miniature: batch norm, ReLU, a 1x1 convolution, a 2x2 average pool, then the
    next block's convolution."""

    def __init__(self):
        super().__init__()
        self.norm, self.conv = nn.BatchNorm2d(6), nn.Conv2d(6, 4, 1, bias=False)
        self.after = nn.Conv2d(4, 4, 3, padding=1, bias=False)

    def forward(self, x):
        return self.after(F.avg_pool2d(self.conv(torch.relu(self.norm(x))), 2, 2))


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("memory_format", [torch.channels_last, torch.contiguous_format],
                         ids=["nhwc_input", "nchw_input"])
def test_transition_trains_like_eager_in_either_layout(backend, layout, memory_format):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8, 8).to(memory_format=memory_format).requires_grad_()
    exploration = train_checked(Transition().train(), x, backend, layout=layout)
    assert "avg_pool2d_backward" in backward_ops(exploration)
    formats = {g.memory.layout["format"] for g in exploration.graphs}
    assert ("channels_last" in formats) == (layout == "channels_last"), formats


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_channels_last_pool_gradient_equals_eager(backend):
    """A channels-last input alone (no convolution deciding a layout): the gradient is eager's, stored with
    the input's strides when eager returns them so."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 9).to(memory_format=torch.channels_last).requires_grad_()
    train_checked(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x, backend)


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_gradient_over_symbolic_sizes_equals_eager(backend):
    """Under dynamic shapes the runs and divisors are index expressions over the size symbols."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 11, requires_grad=True)
    exploration = train_checked(lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), x, backend,
                         dynamic=True)
    (backward,) = [g for g in exploration.graphs if g.phase == "backward"]
    sizes = [s for node in backward.ir.nodes for s in node.size]
    assert sizes and not all(s.isdigit() for s in sizes), sizes
