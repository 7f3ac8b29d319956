"""Variance accumulates as eager's CPU kernels do, in double (Note [Variance accumulates as eager's] in
engine/lowering/reductions.py): over few values of nearly equal size float32 sums lose the answer, eager's
does not, and neither do ours. Both backends (Triton under the interpreter, a CPU device)."""
import pytest
import torch

import engine

BACKENDS = ["cpp", "triton"]


def _compiled(fn, backend):
    torch._dynamo.reset()
    return engine.compile(fn, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_variance_of_nearly_equal_values_matches_eager(backend):
    torch.manual_seed(0)
    x = torch.randn(64, 2) * 1e-2 + 300.0  # float32 sums: 2% off in the worst row
    for fn in (lambda t: t.var(1), lambda t: t.std(1, correction=0), lambda t: torch.var_mean(t, 1)[0]):
        ours, eager = _compiled(fn, backend)(x), fn(x)
        torch.testing.assert_close(ours, eager, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_statistics_over_two_values_match_eager(backend):
    """A squeeze-excitation batch norm in training: 2 values per channel; its running variance is the
    unbiased variance of those 2 (momentum 1: nothing of the initial value is left)."""
    torch.manual_seed(0)
    x = torch.randn(2, 32, 1, 1) * 1e-2 + 50.0
    eager_bn, our_bn = (torch.nn.BatchNorm2d(32, momentum=1.0).train(),
                             torch.nn.BatchNorm2d(32, momentum=1.0).train())
    eager_out = eager_bn(x)
    torch._dynamo.reset()
    ours = engine.compile(our_bn, backend=backend)(x)
    torch.testing.assert_close(our_bn.running_var, eager_bn.running_var, rtol=2e-5, atol=0)
    torch.testing.assert_close(ours, eager_out, rtol=1e-3, atol=1e-3)
