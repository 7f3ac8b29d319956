"""Interpolation's gradient as our kernel (Note [Interpolation backward as a gather] in
engine/lowering/interpolation_backward.py): a training step through nearest, nearest-exact, linear, bilinear
and trilinear upsampling, up and down, align_corners both ways, gives eager's input gradient with the backward
op kept whole (no index_put that accumulates) and nothing run eagerly; size-1, non-contiguous and
channels-last inputs; every output that names an input position lies in that position's run, checked
against eager's own gradient pattern over many sizes; a graph with symbolic sizes keeps torch's
decomposition; and a small conv + max pool + avg pool + upsample net trains like eager. Through the Triton
interpreter and the C++ backend."""
import pytest
import sympy
import torch
import torch.nn.functional as F
from torch import nn

import engine
from gradient_checks import backward_ops, train_checked, weighted_sum
from engine.lowering.interpolation_backward import _run

BACKENDS = ["triton", "cpp"]


CASES = {  # name: (input, interpolate's keywords)
    "nearest_x2": ((2, 3, 5, 7), {"mode": "nearest", "scale_factor": 2}),
    "nearest_down": ((1, 2, 9, 6), {"mode": "nearest", "size": (4, 5)}),
    "nearest_uneven_up": ((1, 2, 5, 7), {"mode": "nearest", "size": (11, 13)}),
    "nearest_exact": ((1, 2, 5, 7), {"mode": "nearest-exact", "size": (11, 3)}),
    "bilinear_x2": ((2, 3, 5, 7), {"mode": "bilinear", "scale_factor": 2, "align_corners": False}),
    "bilinear_x2_aligned": ((2, 3, 5, 7), {"mode": "bilinear", "scale_factor": 2, "align_corners": True}),
    "bilinear_down": ((1, 2, 9, 8), {"mode": "bilinear", "size": (4, 3), "align_corners": False}),
    "bilinear_down_aligned": ((1, 2, 9, 8), {"mode": "bilinear", "size": (4, 3), "align_corners": True}),
    "bilinear_scale_1_7": ((1, 2, 6, 6), {"mode": "bilinear", "scale_factor": 1.7, "align_corners": False}),
    "bilinear_uneven_aligned": ((1, 2, 5, 7), {"mode": "bilinear", "size": (13, 10), "align_corners": True}),
    "bilinear_one_dim_equal": ((1, 2, 5, 7), {"mode": "bilinear", "size": (5, 12), "align_corners": False}),
    "size_one_input": ((1, 2, 1, 1), {"mode": "bilinear", "size": (3, 4), "align_corners": False}),
    "size_one_input_aligned": ((1, 2, 1, 1), {"mode": "bilinear", "size": (3, 4), "align_corners": True}),
    "size_one_output": ((1, 2, 5, 7), {"mode": "bilinear", "size": (1, 1), "align_corners": True}),
    "nearest_size_one_output": ((1, 2, 5, 7), {"mode": "nearest", "size": (1, 1)}),
    "linear_1d": ((2, 3, 7), {"mode": "linear", "scale_factor": 3, "align_corners": False}),
    "nearest_1d": ((2, 3, 7), {"mode": "nearest", "size": 10}),
    "trilinear": ((1, 2, 3, 4, 5), {"mode": "trilinear", "scale_factor": 2, "align_corners": False}),
    "nearest_3d": ((1, 2, 3, 4, 5), {"mode": "nearest", "size": (5, 4, 7)}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_equals_eager(backend, case):
    shape, kwargs = CASES[case]
    torch.manual_seed(0)
    exploration = train_checked(lambda t: F.interpolate(t, **kwargs), torch.randn(shape, requires_grad=True), backend)
    ops = backward_ops(exploration)
    assert "upsample" in ops and "_backward" in ops and "index_put" not in ops, ops


@pytest.mark.parametrize("backend", BACKENDS)
def test_x2_gradients_are_short_unrolled_runs(backend):
    """A bilinear x2's gradient visits 5 outputs a dim (4 weighted, and at the edge the clamped first output,
    whose zero weight eager adds too): 25 in all, unrolled into an elementwise kernel; a nearest x2's 2."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 5, requires_grad=True)
    exploration = train_checked(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), x, backend)
    backward = [k.kind for g in exploration.graphs if g.phase == "backward" for k in g.kernels]
    assert "reduction" not in backward, backward
    assert _run(6, 12, "linear", False, 2.0)[0] == 5 and _run(6, 12, "nearest", False, 2.0)[0] == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_non_contiguous_inputs(backend, layout):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 5)
    x = x.transpose(2, 3) if layout == "transposed" else x.to(memory_format=torch.channels_last)
    train_checked(lambda t: F.interpolate(t * 2, scale_factor=2, mode="bilinear") + 1, x.requires_grad_(), backend)


def _eager_naming(i_n: int, o_n: int, mode: str, align_corners, scale):
    """For each input position, the outputs whose gradient eager sends to it (a 1-d interpolation's
    Jacobian pattern, one output at a time)."""
    x = torch.zeros(1, 1, i_n, requires_grad=True)
    kwargs = {"scale_factor": scale} if scale else {"size": o_n}
    out = F.interpolate(x, mode=mode, **kwargs, **({} if align_corners is None else {"align_corners": align_corners}))
    assert out.shape[-1] == o_n
    naming = [[] for _ in range(i_n)]
    for o in range(o_n):
        (grad,) = torch.autograd.grad(out[0, 0, o], x, retain_graph=True)
        for h in grad[0, 0].nonzero().flatten().tolist():
            naming[h].append(o)
    return naming


@pytest.mark.parametrize("mode,align_corners", [("nearest", None), ("nearest-exact", None), ("linear", False),
                                                ("linear", True)])
def test_every_naming_output_lies_in_its_run(mode, align_corners):
    """The lowering-time runs (Note [Interpolation backward as a gather]) hold every output eager's kernel
    sends to each input position, over sizes up and down and fractional scale factors."""
    ours = {"nearest": "nearest", "nearest-exact": "exact", "linear": "linear"}[mode]
    cases = [(i_n, o_n, None) for i_n in (1, 2, 3, 5, 7, 12) for o_n in (1, 2, 4, 5, 9, 13, 24, 31)]
    cases += [(i_n, int(i_n * s), s) for i_n in (3, 6, 7, 10) for s in (1.5, 1.7, 2.0, 3.0, 0.5, 0.3)
              if int(i_n * s) > 0]
    h = sympy.Symbol("h", integer=True, nonnegative=True)
    for i_n, o_n, scale in cases:
        if align_corners and scale:
            continue  # align_corners ignores the scale factor
        count, cover = _run(i_n, o_n, ours, bool(align_corners), scale)
        first = cover(h)[0]
        for position, outputs in enumerate(_eager_naming(i_n, o_n, mode, align_corners, scale)):
            start = int(first.subs(h, position))
            assert all(start <= o < start + count for o in outputs), (i_n, o_n, scale, position, outputs, start,
                                                                      count)


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_sizes_keep_the_decomposition(backend):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, requires_grad=True)
    exploration = train_checked(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), x, backend, dynamic=True)
    assert "upsample_bilinear2d_backward" not in backward_ops(exploration)


class Net(nn.Module):
    """Convolution, max pool, average pool, upsample and a convolution: every pool and upsample gradient of
    this file and tests/test_max_pool_backward.py in one training step."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode
        self.first, self.last = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.first(x)), 3, 2, 1, ceil_mode=True)
        y = F.avg_pool2d(y, 3, 1, 1)
        kwargs = {} if self.mode == "nearest" else {"align_corners": False}
        return self.last(F.interpolate(y, scale_factor=2, mode=self.mode, **kwargs))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_conv_pool_upsample_net_trains_like_eager(backend, mode):
    torch.manual_seed(0)
    exploration = train_checked(Net(mode), torch.randn(2, 3, 10, 9, requires_grad=True), backend)
    ops = backward_ops(exploration)
    for op in ("max_pool2d_with_indices_backward", "avg_pool2d_backward", f"upsample_{mode}2d_backward"):
        assert op in ops, ops
    assert "scatter" not in ops and "index_put" not in ops, ops
    checked = {e.name for e in exploration.verify.gradients}
    assert len(checked) >= 5, checked  # the input and the two convolutions' weights and biases
