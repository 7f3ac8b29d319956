"""The bench's training-step check (engine/tools/step_verdict.py): against eager, and against float64 where a
half-precision step leaves eager itself far from the true gradient."""
import torch

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
