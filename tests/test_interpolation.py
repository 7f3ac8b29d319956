"""Interpolation as one generated gather (Note [Interpolation as one gather] in engine/lowering/interpolation.py,
Note [Interpolation kept whole] in engine/decompose.py): nearest, nearest-exact, linear, bilinear, trilinear
and bicubic, up and down, align_corners both ways, NCHW and channels-last, through both backends (Triton under
the interpreter), against eager, with size-1 dims, non-contiguous inputs and dynamic sizes, fused with what
follows."""
import pytest
import torch
import torch.nn.functional as F

import engine
from explored_kernels import without_fallbacks

BACKENDS = ["cpp", "triton"]


def _check(fn, inputs, backend, dynamic=False, kernels=None):
    exploration, generated = without_fallbacks(fn, inputs, backend, "interpolate", dynamic)
    if kernels is not None:
        assert len(generated) == kernels, [k.name for k in generated]
    torch._dynamo.reset()
    compiled = engine.compile(fn, backend=backend, dynamic=dynamic)
    got, expected = compiled(*inputs), fn(*inputs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.stride() == expected.stride()
    half = expected.dtype in (torch.float16, torch.bfloat16)
    torch.testing.assert_close(got, expected, atol=2e-2 if half else 1e-5, rtol=1.6e-2 if half else 1e-5)
    return exploration


CASES = [  # (mode, align_corners, input spatial size, output size or scale)
    ("nearest", None, (5, 7), {"scale_factor": 2}),
    ("nearest", None, (9, 6), {"size": (4, 5)}),
    ("nearest-exact", None, (5, 7), {"size": (11, 3)}),
    ("bilinear", False, (5, 7), {"scale_factor": 2}),
    ("bilinear", True, (5, 7), {"scale_factor": 2}),
    ("bilinear", False, (9, 8), {"size": (4, 3)}),
    ("bilinear", True, (9, 8), {"size": (4, 3)}),
    ("bilinear", False, (6, 6), {"scale_factor": 1.7}),
    ("bicubic", False, (5, 7), {"scale_factor": 2}),
    ("bicubic", True, (5, 7), {"size": (9, 4)}),
    ("bicubic", False, (9, 8), {"size": (4, 3)}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{list(c[3].values())[0]}")
def test_two_d_modes_against_eager_with_the_add_after(backend, case):
    mode, align, size, how = case
    kw = {} if align is None else {"align_corners": align}
    x = torch.randn(2, 3, *size)
    out_shape = F.interpolate(x, mode=mode, **how, **kw).shape
    y = torch.randn(out_shape)
    exploration = _check(lambda a, b: F.interpolate(a, mode=mode, **how, **kw) + b, (x, y), backend, kernels=1)
    targets = [n["target"] for g in exploration.to_json()["graphs"] for n in g["aten"]]
    assert any("upsample" in t for t in targets), targets  # kept whole, not decomposed
    assert not any("_unsafe_index" in t or "arange" in t for t in targets), targets


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_channels_last_keeps_its_layout(backend, mode):
    kw = {} if mode == "nearest" else {"align_corners": False}
    x = torch.randn(2, 5, 6, 7).to(memory_format=torch.channels_last)
    _check(lambda a: F.interpolate(a, scale_factor=2, mode=mode, **kw) * 2, (x,), backend, kernels=1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode,kw", [("linear", {"align_corners": False}), ("linear", {"align_corners": True}),
                                     ("nearest", {}), ("trilinear", {"align_corners": False}),
                                     ("trilinear", {"align_corners": True}), ("nearest-exact", {})])
def test_one_and_three_d(backend, mode, kw):
    if mode == "linear":
        x = torch.randn(2, 3, 5)
    elif mode == "trilinear":
        x = torch.randn(1, 2, 3, 4, 5)
    else:
        x = torch.randn(2, 3, 4, 5, 3)
    _check(lambda a: F.interpolate(a, scale_factor=2, mode=mode, **kw) - 1, (x,), backend, kernels=1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode,align", [("nearest", None), ("bilinear", False), ("bilinear", True),
                                        ("bicubic", False), ("bicubic", True)])
def test_size_one_input_and_output(backend, mode, align):
    kw = {} if align is None else {"align_corners": align}
    x = torch.randn(2, 3, 1, 6)
    _check(lambda a: F.interpolate(a, size=(4, 1), mode=mode, **kw), (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_input_and_half(backend):
    x = torch.randn(3, 2, 9, 10).transpose(0, 1)[:, :, 1:, ::2]
    _check(lambda a: F.interpolate(a, scale_factor=2, mode="bilinear") + 1, (x,), backend)
    h = torch.randn(2, 3, 6, 5, dtype=torch.float16)
    _check(lambda a: F.interpolate(a, size=(13, 7), mode="bicubic", align_corners=True), (h,), backend)
    b = torch.randn(2, 3, 6, 5, dtype=torch.bfloat16)
    _check(lambda a: F.interpolate(a, scale_factor=3, mode="nearest"), (b,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_nearest(backend):
    x = torch.randint(0, 255, (2, 3, 5, 4), dtype=torch.uint8)
    _check(lambda a: F.interpolate(a, size=(7, 9), mode="nearest"), (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_dynamic_sizes(backend, mode):
    kw = {} if mode == "nearest" else {"align_corners": False}

    def fn(a):
        return F.interpolate(a, scale_factor=2, mode=mode, **kw) + 1

    for size in ((5, 6), (7, 3)):
        _check(fn, (torch.randn(2, 3, *size),), backend, dynamic=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_matches_eager_gradients(backend):
    """Training keeps bilinear whole too, its gradient our gather (tests/test_interpolation_backward.py)."""
    torch._dynamo.reset()
    x = torch.randn(2, 3, 5, 6, requires_grad=True)
    compiled = engine.compile(lambda a: (F.interpolate(a, scale_factor=2, mode="bilinear") ** 2).sum(),
                              backend=backend)
    compiled(x).backward()
    ours = x.grad.clone()
    x.grad = None
    (F.interpolate(x, scale_factor=2, mode="bilinear") ** 2).sum().backward()
    torch.testing.assert_close(ours, x.grad, atol=1e-5, rtol=1e-5)
