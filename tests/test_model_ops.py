"""Ops real models run (issue 29 item 6) through both backends (Triton under the interpreter), against eager:
negative padding (RWKV's time shift; a positive pad's gradient), as_strided of a view (Longformer's overlapping
chunks, Note [as_strided as a gather of its input]), boolean-mask index_put (Note [Boolean-mask index_put as a
select]); and the ones that still run eagerly say precisely why (sort/topk: Note [Sorting runs eagerly];
complex tensors)."""
import pytest
import torch
import torch.nn.functional as F

import engine

BACKENDS = ["cpp", "triton"]


def _explore(fn, inputs, backend):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="ops")
    assert not exploration.errors, exploration.errors[0].traceback[-3000:]
    assert exploration.verify.ok, exploration.verify
    return exploration


def _fallbacks(exploration):
    return [k.reason or "" for k in exploration.kernels if k.kind == "fallback"]


def _generated(fn, inputs, backend):
    exploration = _explore(fn, inputs, backend)
    assert not _fallbacks(exploration), _fallbacks(exploration)
    torch._dynamo.reset()
    got, expected = engine.compile(fn, backend=backend)(*inputs), fn(*inputs)
    torch.testing.assert_close(got, expected)
    return exploration


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pad", [(-1, 2, -2, -1), (0, -3), (2, -1, 1, 0), (-2, -2, -1, -1)])
def test_negative_padding_crops(backend, pad):
    _generated(lambda x: F.pad(x, pad, value=0.5) * 2, (torch.randn(2, 5, 6),), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rwkv_time_shift_trains_like_eager(backend):
    """RWKV's time shift: ZeroPad2d((0, 0, 1, -1)); its gradient is a pad with the signs turned."""
    torch._dynamo.reset()
    x = torch.randn(2, 7, 4, requires_grad=True)

    def fn(t):
        return (F.pad(t, (0, 0, 1, -1)) * t).sum()

    engine.compile(fn, backend=backend)(x).backward()
    ours, x.grad = x.grad.clone(), None
    fn(x).backward()
    torch.testing.assert_close(ours, x.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_as_strided_of_a_view_longformer_chunks(backend):
    """Longformer's _chunk: a (B, S, H) projection viewed as windows of 2w rows, then as_strided into
    overlapping chunks that step w rows."""
    def chunk(x, w=2):
        b, s, h = x.shape
        x = (x * 2).view(b, s // (2 * w), 2 * w, h)
        size, stride = list(x.size()), list(x.stride())
        size[1] = size[1] * 2 - 1
        stride[1] = stride[1] // 2
        return x.as_strided(size=size, stride=stride) + 1

    _generated(chunk, (torch.randn(2, 8, 3),), backend)
    _generated(lambda x: x[1:].as_strided((3, 4), (1, 3), 8) + 1, (torch.randn(5, 6),), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_as_strided_outside_its_input_says_why(backend):
    exploration = _explore(lambda x: x[1:].as_strided((3, 4), (1, 3), 2) + 1, (torch.randn(5, 6),), backend)
    assert any("outside its input's elements" in r for r in _fallbacks(exploration)), _fallbacks(exploration)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["scalar", "full_mask_tensor_value", "row_mask_trailing_values",
                                  "row_mask_leading_one", "accumulate"])
def test_boolean_mask_index_put(backend, case):
    x, full, rows = torch.randn(6, 4), torch.rand(6, 4) > 0.5, torch.rand(6) > 0.5
    fns = {
        "scalar": (lambda x, m: x.index_put((m,), torch.tensor(-1.0)), (x, full)),
        "full_mask_tensor_value": (lambda x, m: x.index_put((m,), torch.tensor([3.0])), (x, full)),
        "row_mask_trailing_values": (lambda x, m, v: x.index_put((m,), v), (x, rows, torch.randn(4))),
        "row_mask_leading_one": (lambda x, m, v: x.index_put((m,), v), (x, rows, torch.randn(1, 4))),
        "accumulate": (lambda x, m, v: x.index_put((m,), v, accumulate=True), (x, rows, torch.randn(4))),
    }
    fn, inputs = fns[case]
    _generated(fn, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_boolean_mask_with_a_row_per_true_element_says_why(backend):
    m = torch.tensor([True, False, True, True, False, False])
    exploration = _explore(lambda x, m, v: x.index_put((m,), v), (torch.randn(6, 4), m, torch.randn(3, 4)),
                           backend)
    assert any("rank among the true ones" in r for r in _fallbacks(exploration)), _fallbacks(exploration)


@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_routing_and_complex_fall_back_with_their_reasons(backend):
    def route(logits):
        weights, experts = torch.topk(logits.softmax(-1), 2, -1)
        order = torch.argsort(experts.flatten(), stable=True)
        counts = torch.histc(experts.flatten().float(), bins=8, min=0, max=7)
        return weights, order, counts

    exploration = _explore(route, (torch.randn(16, 8),), backend)
    reasons = _fallbacks(exploration)
    # topk runs eagerly; the stable argsort and histc are generated
    assert sum("sorting" in r for r in reasons) == 1 and len(reasons) == 1, reasons
    exploration = _explore(lambda x: torch.fft.fft(x).real * 2, (torch.randn(4, 8),), backend)
    assert all("complex" in r and "FFT" in r for r in _fallbacks(exploration)), _fallbacks(exploration)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_numbers_run_eagerly_and_say_why(backend):
    """ViT-MAE's random masking (Note [Random numbers run eagerly]): the draws are eager's, each with its reason,
    and everything around them is generated."""
    def mask(x):
        noise = torch.rand(x.shape[0], x.shape[1])
        keep = torch.argsort(noise, dim=1, stable=True)[:, :3]
        return torch.gather(x, 1, keep.unsqueeze(-1).expand(-1, -1, x.shape[2])) * 2, torch.randn_like(x) * 0

    torch._dynamo.reset()
    exploration = engine.explore(mask, (torch.randn(2, 6, 4),), backend=backend, name="ops")
    assert not exploration.errors
    reasons = _fallbacks(exploration)
    assert len(reasons) == 2 and all("eager's generator" in r for r in reasons), reasons
    assert len(exploration.kernels) > len(reasons)
