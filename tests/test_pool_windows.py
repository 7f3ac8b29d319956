"""Pooling windows at real sizes (Note [Average pooling unrolled], Note [Window bounds the sizes decide] in
engine/lowering/pooling.py): 3x3 average pools are one elementwise node stored in the graph's layout and fused
with what follows (an Inception block's pool + cat is one kernel), windows past MAX_UNROLLED_WINDOW stay a
Reduction, bounds are tested only where padding or ceil mode can put a position outside, and every variant
(stride 1 and 2, padding, ceil mode, count_include_pad, divisor_override, channels-last, half, dynamic
sizes) equals eager through both backends (Triton under the interpreter)."""
import pytest
import torch
import torch.nn.functional as F

import engine

BACKENDS = ["cpp", "triton"]


def _explore(fn, inputs, backend, dynamic=False):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="pool", dynamic=dynamic)
    assert not exploration.errors, exploration.errors[0].traceback[-3000:]
    assert exploration.verify.ok, exploration.verify
    assert not [k for k in exploration.kernels if k.kind == "fallback"]
    torch._dynamo.reset()
    compiled = engine.compile(fn, backend=backend, dynamic=dynamic)
    got, expected = compiled(*inputs), fn(*inputs)
    got, expected = (got if isinstance(got, tuple) else (got,)), (expected if isinstance(expected, tuple) else (expected,))
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype and g.stride() == e.stride()
        half = e.dtype in (torch.float16, torch.bfloat16)
        torch.testing.assert_close(g, e, atol=2e-2 if half else 1e-5, rtol=1.6e-2 if half else 1e-5)
    return exploration


def _ir_nodes(exploration):
    return [n for g in exploration.to_json()["graphs"] for n in g["ir"]["nodes"]]


AVG = {  # name: (input, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    "inception_s1": ((2, 5, 9, 9), 3, 1, 1, False, True, None),
    "inception_s1_not_counted": ((2, 5, 9, 9), 3, 1, 1, False, False, None),
    "s2_ceil": ((1, 3, 10, 7), 3, 2, 1, True, True, None),
    "s2_ceil_not_counted": ((1, 3, 10, 7), 3, 2, 1, True, False, None),
    "s2_no_padding": ((2, 3, 9, 9), 3, 2, 0, False, True, None),
    "rect_override": ((2, 2, 8, 11), (2, 3), (1, 2), (1, 1), False, True, 5),
    "unbatched": ((3, 7, 6), 3, 1, 1, False, True, None),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(AVG))
def test_average_pool_variants_equal_eager_as_one_elementwise_node(backend, case):
    shape, *params = AVG[case]
    exploration = _explore(lambda t: F.avg_pool2d(t, *params) + 1, (torch.randn(shape),), backend)
    assert [n["kind"] for n in _ir_nodes(exploration) if "avg_pool2d" in n["aten_origins"]] == ["pointwise"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_global_window_stays_a_reduction(backend):
    exploration = _explore(lambda t: F.avg_pool2d(t, 7), (torch.randn(2, 3, 7, 7),), backend)
    kinds = [n["kind"] for n in _ir_nodes(exploration) if "avg_pool2d" in n["aten_origins"]]
    assert "reduction" in kinds, kinds


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_inception_block_pool_and_cat_in_channels_last(backend, dtype):
    """An InceptionA-like tail: a 3x3 stride-1 average pool of the block's input and a ReLU'd branch, cat over
    channels, and the block's 3x3 stride-2 max pool: the average pool is computed inside the cat's kernel
    (no buffer of its own), every output keeps eager's channels-last strides."""
    x = torch.randn(2, 8, 11, 11, dtype=dtype).to(memory_format=torch.channels_last)
    a = torch.randn(2, 4, 11, 11, dtype=dtype).to(memory_format=torch.channels_last)

    def block(x, a):
        return torch.cat([torch.relu(a), F.avg_pool2d(x, 3, 1, 1) * 2], 1), F.max_pool2d(x, 3, 2)

    exploration = _explore(block, (x, a), backend)
    generated = [k for k in exploration.kernels if k.kind in ("pointwise", "reduction")]
    assert len(generated) == 2, [k.name for k in generated]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bounds_tested_only_where_sizes_do_not_decide(backend):
    """Inception's 3x3 stride-2 max pool (no padding) reads every position unmasked; a padded stride-1 average
    pool masks only the offsets padding can push outside: 5 of its 9 reads (the centre and the other 3
    interior offsets of the 3x3 need no test)."""
    exploration = _explore(lambda t: F.max_pool2d(t, 3, 2), (torch.randn(1, 2, 9, 9),), backend)
    text = "\n".join(line for n in _ir_nodes(exploration) for line in n["text"])
    assert "load" in text and "masked" not in text
    exploration = _explore(lambda t: F.avg_pool2d(t, 3, 1, 1), (torch.randn(1, 2, 9, 9),), backend)
    text = "\n".join(line for n in _ir_nodes(exploration) for line in n["text"])
    assert text.count("masked") == 8, text  # every offset but the centre tests a bound


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_sizes_keep_the_tests_sympy_cannot_decide(backend):
    def fn(t):
        return F.avg_pool2d(t, 3, 2, 1, ceil_mode=True) + F.max_pool2d(t, 3, 2, 1, ceil_mode=True)
    for shape in ((2, 3, 9, 10), (1, 2, 12, 7)):
        _explore(fn, (torch.randn(shape),), backend, dynamic=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unrolled_average_pool_trains_like_eager(backend):
    torch._dynamo.reset()
    x = torch.randn(2, 3, 9, 9, requires_grad=True)

    def fn(t):
        return (F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False) ** 2).sum()

    engine.compile(fn, backend=backend)(x).backward()
    ours, x.grad = x.grad.clone(), None
    fn(x).backward()
    torch.testing.assert_close(ours, x.grad, atol=1e-5, rtol=1e-5)
