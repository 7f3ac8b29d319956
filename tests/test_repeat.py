"""repeat returns eager's contiguous strides whatever its input's layout (Note [repeat in eager's strides] in
engine/decompose.py): WavLM's position bias is repeated from a permuted view and then .view()-ed."""
import pytest
import torch

import engine


def _position_bias(x):
    bias = (x * 2).permute(2, 0, 1)  # (heads, t, t) over a (t, t, heads) buffer
    return bias.unsqueeze(0).repeat(2, 1, 1, 1).view(2 * bias.shape[0], bias.shape[1], bias.shape[2])


def _tiles(x):
    return x.repeat(3, 2), x.t().repeat(1, 2, 2), x.repeat(0, 2)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn,shape", [(_position_bias, (5, 5, 2)), (_tiles, (3, 4))], ids=["position_bias", "tiles"])
def test_repeat_of_any_layout_compiles_to_our_kernels_and_matches_eager(backend, fn, shape):
    x = torch.randn(*shape)
    record = engine.explore(fn, (x,), backend=backend)
    assert record.verify.verdict == "ok", record.verify.problem
    assert not record.errors and all(g.fallback is None for g in record.graphs), record.errors
    assert not [k for g in record.graphs for k in g.kernels if k.kind == "fallback"]
    expected = fn(x)
    got = engine.compile(fn, backend=backend)(x)
    for ours, theirs in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple)
                            else (expected,), strict=True):
        torch.testing.assert_close(ours, theirs)
        assert ours.is_contiguous()


def test_repeat_trains_and_takes_dynamic_sizes():
    x = torch.randn(5, 5, 2, requires_grad=True)
    record = engine.explore(_position_bias, (x,), train=True)
    assert record.verify.ok, record.verify.problem
    record = engine.explore(_tiles, (torch.randn(3, 4),), dynamic=True, dynamic_inputs=[(torch.randn(5, 6),)])
    assert record.verify.verdict == "ok" and not record.errors, record.errors
