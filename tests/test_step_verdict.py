"""The bench's training-step check (engine/tools/step_verdict.py): against eager, against float64 where a
half-precision step leaves eager itself far from the true gradient, and within eager's own spread where a step
decides near-ties by rounding (Note [Eager's own spread])."""
import pytest
import torch

from engine.eager_spread import MAX_SPREAD
from engine.tools.step_verdict import StepEvidence, judge_step, step_from, step_payload


def _evidence(ours_grad: torch.Tensor, fp64: bool) -> StepEvidence:
    truth = torch.linspace(-1, 1, 64, dtype=torch.float64)
    eager = (truth + 0.2 * torch.sin(truth * 40)).bfloat16()  # eager's half-precision step: far from the truth
    loss = torch.tensor(1.0)
    return StepEvidence([("loss", loss), ("gradient[0]", eager)], [("loss", loss), ("gradient[0]", ours_grad)],
                        "glassbox", [("loss", loss.double()), ("gradient[0]", truth)] if fp64 else [])


def test_a_gradient_off_from_eager_but_closer_to_float64_passes_by_that_rule():
    truth = torch.linspace(-1, 1, 64, dtype=torch.float64)
    verdict = judge_step(_evidence(truth.bfloat16(), fp64=True))
    assert verdict["ok"] and verdict["judged_by_fp64"] == ["gradient[0]"] and verdict["max_rel_err"] > 0.05
    assert not judge_step(_evidence(truth.bfloat16(), fp64=False))["ok"]  # without float64: eager decides


def test_a_gradient_farther_from_float64_than_eager_fails():
    wrong = torch.linspace(-1, 1, 64, dtype=torch.float64)
    wrong[10] += 5.0  # one element far past eager's own error from float64
    verdict = judge_step(_evidence(wrong.bfloat16(), fp64=True))
    assert not verdict["ok"] and "gradient[0]" in verdict["problem"] and not verdict["judged_by_fp64"]


def test_the_float64_values_travel_with_the_evidence():
    evidence = _evidence(torch.linspace(-1, 1, 64).bfloat16(), fp64=True)
    again = step_from(step_payload(evidence))
    assert [name for name, _ in again.fp64] == ["loss", "gradient[0]"]
    assert judge_step(again)["ok"] == judge_step(evidence)["ok"]


# A float32 step that decides ReLUs by rounding, as the small ResNet-50 bench's does: eager's gradient[0] took one
# ReLU otherwise than float64 did (a channel 0.2 off), eager's own step with its inputs one ulp off (a repeat) takes
# another one the other way too (0.2 more on another channel), and so does ours; 1e-7 rounding noise elsewhere.
# gradient[1] eager computes as accurately as float64, and the loss too.
TRUTH = torch.linspace(-1, 1, 64, dtype=torch.float64)
EAGER = TRUTH + torch.where((torch.arange(64) >= 32) & (torch.arange(64) < 40), 0.2, 0.0).double()
CHANNEL = torch.where(torch.arange(64) < 8, 1.0, 0.0).double()
FLIPPED = EAGER + 0.2 * CHANNEL


def _unstable(ours_grad: torch.Tensor, ours_loss: float = 2.0, ours_other: torch.Tensor = TRUTH,
              rerun_moves: bool = False, repeats: bool = True, flip: float = 0.2) -> StepEvidence:
    noise = 1e-7 * torch.sin(torch.arange(64.0))
    loss, eager = ("loss", torch.tensor(2.0)), [("gradient[0]", EAGER.float()), ("gradient[1]", TRUTH.float())]
    repeat = [loss, ("gradient[0]", (EAGER + flip * CHANNEL).float() + noise), ("gradient[1]", TRUTH.float() + noise)]
    rerun = [loss] + (repeat[1:] if rerun_moves else eager)
    return StepEvidence([loss] + eager, [("loss", torch.tensor(ours_loss)), ("gradient[0]", ours_grad.float()),
                                         ("gradient[1]", ours_other.float())], "glassbox",
                        [("loss", torch.tensor(2.0, dtype=torch.float64)), ("gradient[0]", TRUTH),
                         ("gradient[1]", TRUTH)], rerun if repeats else [], [repeat] if repeats else [])


def test_a_gradient_eager_itself_moves_under_rounding_passes_within_that_spread():
    ours = FLIPPED - 1e-7 * torch.cos(torch.arange(64.0)).double()  # ours took the other side, as the repeat did
    verdict = judge_step(_unstable(ours))
    assert verdict["ok"] and verdict["judged_by_spread"] == ["gradient[0]"]
    assert verdict["eager_spread"] == pytest.approx(0.2, rel=1e-3) and "own spread" in verdict["reference"]
    alone = judge_step(_unstable(ours, repeats=False))  # without eager's repeats: a mismatch, as before
    assert not alone["ok"] and "gradient[0]" in alone["problem"]


@pytest.mark.parametrize("wrong", ["zeroed", "negated", "doubled", "past twice the spread"])
def test_a_wrong_gradient_fails_whatever_eager_spread(wrong):
    ours = {"zeroed": torch.zeros(64, dtype=torch.float64), "negated": -EAGER, "doubled": 2 * EAGER,
            "past twice the spread": EAGER + 0.45 * CHANNEL}[wrong]
    verdict = judge_step(_unstable(ours))
    assert not verdict["ok"] and "gradient[0]" in verdict["problem"]
    assert "outside eager's own spread" in verdict["problem"] and verdict["max_rel_err"] > 2 * 0.2


def test_no_spread_passes_a_gradient_half_its_size_off():
    verdict = judge_step(_unstable(EAGER + 0.55 * CHANNEL, flip=0.4))  # eager's repeat moved it by 0.4
    assert not verdict["ok"] and verdict["eager_spread"] == pytest.approx(0.4, rel=1e-3)
    assert judge_step(_unstable(EAGER + 0.45 * CHANNEL, flip=0.4))["ok"]


def test_past_half_its_size_eager_cannot_fix_a_gradient_and_float64_judges_it():
    """Note [Tensors eager cannot fix]: eager's repeat moved the gradient by 0.6 of its size, so a gradient 0.55
    off eager's passes as no farther from float64 than twice eager's farthest run; one 1.5 off does not."""
    verdict = judge_step(_unstable(EAGER + 0.55 * CHANNEL, flip=0.6))
    assert verdict["ok"] and verdict["judged_by_spread"] == ["gradient[0]"], verdict
    assert verdict["eager_spread"] == pytest.approx(0.6, rel=1e-3) and "cannot fix" in verdict["reference"]
    wrong = judge_step(_unstable(EAGER + 1.5 * CHANNEL, flip=0.6))
    assert not wrong["ok"] and "gradient[0]" in wrong["problem"]


@pytest.mark.parametrize("where", ["loss", "gradient[1]"])
def test_what_eager_computes_as_float64_does_keeps_the_check_in_an_unstable_step(where):
    ours = dict(ours_loss=2.01) if where == "loss" else dict(ours_other=TRUTH * 1.1)  # 0.5% and 10% off
    verdict = judge_step(_unstable(FLIPPED, **ours))
    assert not verdict["ok"] and verdict["problem"].startswith(where)


def test_a_step_whose_rerun_moves_is_random_and_has_no_spread():
    verdict = judge_step(_unstable(FLIPPED, rerun_moves=True))
    assert not verdict["ok"] and verdict["eager_spread"] == 0.0 and not verdict["judged_by_spread"]


def test_eager_rerun_and_repeats_travel_with_the_evidence():
    evidence = _unstable(FLIPPED)
    again = step_from(step_payload(evidence))
    names = ["loss", "gradient[0]", "gradient[1]"]
    assert [[name for name, _ in run] for run in [again.rerun] + again.repeats] == [names] * 2
    assert judge_step(again) == judge_step(evidence)
