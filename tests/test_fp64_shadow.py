"""The float64 reference is eager's own run shadowed in float64 (issue 33; Note [Float64 shadow] in
engine/shadow64.py): a model that looks at its inputs' dtype, with a compiled program wrong by construction,
cannot steer it; the shadow is as exact as a float64 run, follows in-place ops, leaves the RNG as eager leaves
it and gives `.item()` outputs their float64 values."""
import torch

import engine
from engine import run, shadow64


class SteersItsFloat64Run(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling() or x.dtype == torch.float64:
            return x * 2 + 1  # the compiled program is 1.0 off everywhere, and so would a float64 run be
        return x * 2


def test_a_model_that_steers_its_float64_run_gets_a_mismatch():
    record = engine.explore(SteersItsFloat64Run(), (torch.randn(64, 64),))
    verify = record.verify
    assert verify.ok is False and verify.verdict == "mismatch", verify
    output = verify.outputs[0]
    assert output.judged_by == "eager and fp64" and not output.fp64["ok"]
    assert output.fp64["ours_max_abs"] >= 0.99 and output.fp64["eager_max_abs"] < 1e-5


class HalfMixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        x.add_(0.5)  # in place on the input: the shadow follows it
        y = self.norm(torch.nn.functional.gelu(self.linear(x)))
        return y.softmax(-1, dtype=torch.float32).half(), (y.float().sum() / 7).item()


def test_the_shadow_is_as_exact_as_a_float64_run():
    torch.manual_seed(0)
    model, x = HalfMixed().half(), torch.randn(16, 32).half()
    eager, fp64, why_not = run.eager_with_fp64(model, (x,))
    assert not why_not and fp64[0][1].dtype == torch.float64
    weights = {k: v.double() for k, v in model.state_dict().items()}  # float64 throughout, by hand
    y = torch.nn.functional.gelu(torch.nn.functional.linear(x.double() + 0.5, weights["linear.weight"],
                                                            weights["linear.bias"]))
    y = torch.nn.functional.layer_norm(y, (32,), weights["norm.weight"], weights["norm.bias"])
    softmax, total = y.softmax(-1), (y.sum() / 7).item()
    assert (fp64[0][1] - softmax).abs().max() < 1e-12
    assert (eager[0][1].double() - softmax).abs().max() > 1e-6  # eager's own half-precision error
    assert abs(fp64[1][1] - total) < 1e-9 and fp64[1][1] != eager[1][1]  # .item(): the float64 value


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x), torch.nn.functional.dropout(x, 0.5, training=True)


def test_random_draws_are_eagers_and_the_rng_advances_once():
    x = torch.randn(8, 8)
    torch.manual_seed(1)
    with torch.no_grad():
        plain = Noisy()(x)
    after_plain = torch.rand(3)
    torch.manual_seed(1)
    with torch.no_grad():
        shadowed, mode = shadow64.under_shadow(Noisy(), x)
    assert all(torch.equal(a, b) for a, b in zip(plain, shadowed))
    assert torch.equal(torch.rand(3), after_plain)
    assert torch.equal(mode.shadow_of(shadowed[1]), shadowed[1].double())  # the draw is eager's
    assert (mode.shadow_of(shadowed[0]) - shadowed[0].double()).abs().max() < 1e-6
