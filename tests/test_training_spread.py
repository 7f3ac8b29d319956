"""A training step's verify within eager's own spread (Note [Eager's own spread] in engine/eager_spread.py): where
a step decides near-ties by rounding, a gradient eager's own step moves as far under one-ulp changes passes, and
says so; a wrong gradient, a random step or a step without repeats still fails. The judge works from values alone
(engine/train_verdict.py), and the repeats travel with the evidence to a judge outside the job."""
import copy

import torch

from engine import train_verdict, train_verify
from engine.eager_spread import MAX_SPREAD

TRUTH = torch.linspace(-1, 1, 64, dtype=torch.float64)
EAGER = TRUTH + torch.where((torch.arange(64) >= 32) & (torch.arange(64) < 40), 0.2, 0.0).double()  # a flip
CHANNEL = torch.where(torch.arange(64) < 8, 1.0, 0.0).double()
FLIPPED = EAGER + 0.2 * CHANNEL  # another flip, which eager's own repeat also takes


def _evidence(ours: torch.Tensor, rerun_moves: bool = False, repeats: bool = True) -> train_verdict.TrainingEvidence:
    loss = torch.tensor(2.0)
    eager = EAGER.bfloat16()
    repeat = [("loss", loss), ("param:w", FLIPPED.bfloat16())]
    rerun = repeat if rerun_moves else [("loss", loss), ("param:w", eager)]
    return train_verdict.TrainingEvidence(
        [("loss", loss, loss), ("param:w", eager, ours.bfloat16())],
        {"loss": loss.double(), "param:w": TRUTH}, again_loss=loss, rerun=rerun if repeats else [],
        repeats=[repeat] if repeats else [])


def test_a_gradient_within_eagers_own_spread_passes_and_says_so():
    result = train_verdict.judge(_evidence(FLIPPED))
    assert result["ok"] and result["verdict"] == "ok", result
    (gradient,) = result["gradients"]
    assert gradient["judged_by"] == "spread" and "spread" in gradient["note"]
    assert 0.1 < result["eager_spread"] < 0.25 and "within eager's own spread" in result["reference"]


def test_wrong_gradients_still_fail_within_a_spread():
    for wrong in (torch.zeros(64), -FLIPPED, 2 * FLIPPED, FLIPPED + 0.5 * CHANNEL):
        result = train_verdict.judge(_evidence(wrong))
        assert not result["ok"] and result["verdict"] == "mismatch", wrong
        assert result["gradients"][0]["judged_by"] != "spread"
    assert MAX_SPREAD <= 0.5


def test_without_repeats_or_with_a_random_rerun_no_spread_is_used():
    assert not train_verdict.judge(_evidence(FLIPPED, repeats=False))["ok"]
    result = train_verdict.judge(_evidence(FLIPPED, rerun_moves=True))
    assert not result["ok"] and result["eager_spread"] == 0.0


def test_the_repeats_travel_with_the_evidence():
    again = train_verdict.from_payload(train_verdict.payload(_evidence(FLIPPED)))
    assert [n for n, _ in again.rerun] == ["loss", "param:w"] and len(again.repeats) == 1
    assert train_verdict.judge(again)["ok"]


class _Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.relu(self.linear(x))


def _verified(ours_scale: float, monkeypatch) -> tuple[dict, list]:
    """verify() of a step whose compiled gradients are eager's times `ours_scale`; and whether it took repeats."""
    torch.manual_seed(0)
    model, inputs = _Small(), (torch.randn(4, 16),)
    step = train_verify.TrainingStep(model, inputs)
    step.rng_state = torch.get_rng_state()
    eager = step.eager(copy.deepcopy(model), inputs)  # the reference's own step is verify's to take
    step.compiled_result = train_verify.StepResult(eager.outputs, eager.loss, {
        name: g * ours_scale for name, g in eager.gradients.items()}, eager.buffers)
    taken, original = [], step._repeats
    monkeypatch.setattr(step, "_repeats", lambda: taken.append(1) or original())
    return step.verify(), taken


def test_verify_takes_eagers_repeats_only_when_the_step_fails(monkeypatch):
    result, taken = _verified(1.0, monkeypatch)
    assert result["ok"] and taken == []
    result, taken = _verified(1.5, monkeypatch)
    assert not result["ok"] and taken == [1] and result["eager_spread"] < 1e-3


def _noise(seed: int, scale: float = 1.0) -> torch.Tensor:
    """Rounding noise as a flipped ReLU leaves it: small everywhere, and `scale` at four channels of its own."""
    generator = torch.Generator().manual_seed(seed)
    noise = 1e-3 * torch.randn(64, generator=generator, dtype=torch.float64)
    noise[torch.randperm(64, generator=generator)[:4]] = scale
    return noise


SMALL_TRUTH = 0.01 * TRUTH  # a gradient far smaller than the step's rounding noise


def _unfixed_evidence(ours: torch.Tensor, fp64: bool = True) -> train_verdict.TrainingEvidence:
    """A tensor eager's own runs move by more than its largest value: each run is the truth plus a noise draw."""
    loss = torch.tensor(2.0)
    eager = (SMALL_TRUTH + _noise(1)).bfloat16()
    rerun = [("loss", loss), ("param:w", eager)]
    repeats = [[("loss", loss), ("param:w", (SMALL_TRUTH + _noise(seed)).bfloat16())] for seed in (2, 3)]
    return train_verdict.TrainingEvidence(
        [("loss", loss, loss), ("param:w", eager, ours.bfloat16())],
        {"loss": loss.double(), **({"param:w": SMALL_TRUTH} if fp64 else {})}, again_loss=loss,
        rerun=rerun, repeats=repeats)


def test_a_tensor_eager_cannot_fix_is_judged_by_float64():
    """Note [Tensors eager cannot fix]: another noise draw passes and says why; a gradient farther from float64
    than twice eager's farthest run fails, and so does any without a float64 value."""
    result = train_verdict.judge(_unfixed_evidence(SMALL_TRUTH + _noise(4, scale=1.8)))
    assert result["ok"], result
    (gradient,) = result["gradients"]
    assert gradient["judged_by"] == "spread" and "cannot fix" in gradient["note"]
    for wrong in (SMALL_TRUTH + _noise(4, scale=3.0), -10 * _noise(1)):
        assert not train_verdict.judge(_unfixed_evidence(wrong))["ok"]
    assert not train_verdict.judge(_unfixed_evidence(SMALL_TRUTH + _noise(4, scale=1.8), fp64=False))["ok"]


def test_the_bench_judges_a_tensor_eager_cannot_fix_alike():
    from engine.tools.step_verdict import StepEvidence, judge_step

    def judged(ours):
        evidence = _unfixed_evidence(ours)
        return judge_step(StepEvidence(
            eager=[(n, e) for n, e, _ in evidence.pairs], ours=[(n, a) for n, _, a in evidence.pairs],
            fp64=list(evidence.fp64.items()), rerun=evidence.rerun, repeats=evidence.repeats))
    result = judged(SMALL_TRUTH + _noise(4, scale=1.8))
    assert result["ok"] and result["judged_by_spread"] == ["param:w"], result
    assert not judged(SMALL_TRUTH + _noise(4, scale=3.0))["ok"]
