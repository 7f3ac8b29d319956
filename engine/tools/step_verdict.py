"""A bench's training-step check from values alone (engine/tools/train_bench.py, Note [Training-step bench]), so
that a sandboxed bench's steps are judged outside the job (Note [Bench and compare judged outside the job] in
engine/tools/judged_commands.py).

The rule for tensors eager's own step cannot decide is Note [Eager's own spread] in engine/eager_spread.py.
"""
from __future__ import annotations

import dataclasses

import torch

from engine import verdict
from engine.eager_spread import (SPREAD_MULTIPLIER, eager_spread, relative_error, runs_of, unfixed_by_eager,
                                 within_spread)

HALF = (torch.float16, torch.bfloat16)


@dataclasses.dataclass
class StepEvidence:
    """A compiled training step's loss and gradients beside an eager step's, each [(name, tensor or None)], and
    where eager's step ran under the float64 shadow, their float64 values [(name, tensor)]; and eager's
    step rerun as it was and repeated under rounding-level changes, [(name, tensor)] each (Note [Eager's own
    spread])."""
    eager: list
    ours: list
    role: str = "glassbox"
    fp64: list = dataclasses.field(default_factory=list)
    rerun: list = dataclasses.field(default_factory=list)
    repeats: list = dataclasses.field(default_factory=list)


def judge_step(evidence: StepEvidence) -> dict:
    """The bench's check of a step from values alone: the largest error of the loss or any gradient, relative to
    that tensor's largest eager value, at most 1e-3 (5e-2 where a gradient is half precision: a gradient summed
    over thousands of products differs by rounding). A tensor past that limit that has a float64 value passes
    when it is as close to float64 as eager's is (rule 2 of Note [Tolerance policy] in engine/verdict.py): a
    half-precision step at random weights can leave eager itself far from the true gradient. One that eager's
    own repeats move past the limit too passes within their spread (Note [Eager's own spread])."""
    eager, ours, fp64 = dict(evidence.eager), dict(evidence.ours), dict(evidence.fp64)
    if list(eager) != list(ours) or "loss" not in eager:
        return _unjudged("the compiled step's loss and gradients do not match eager's in number or name")
    half = any(isinstance(t, torch.Tensor) and t.dtype in HALF for t in eager.values())
    limit = 5e-2 if half else 1e-3
    spread = eager_spread(eager, evidence.rerun, evidence.repeats, limit)
    worst_abs = worst_rel = 0.0
    by_fp64, by_spread, failing = [], [], []
    for name, expected in eager.items():
        actual = ours[name]
        if expected is None:
            continue
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
            return _unjudged(f"{name}: missing or of another shape in the compiled step")
        error, relative = relative_error(expected, actual)
        worst_abs, worst_rel = max(worst_abs, error), max(worst_rel, relative)
        if relative <= limit:
            continue
        reference = fp64.get(name)
        if isinstance(reference, torch.Tensor) and verdict.compare_tensor(expected, actual, reference)["ok"]:
            by_fp64.append(name)
        elif within_spread(expected, actual, reference, spread) or unfixed_by_eager(
                expected, actual, reference, runs_of(name, evidence.rerun, evidence.repeats), spread):
            by_spread.append(name)
        else:
            failing.append(name)
    ok = not failing
    result = {"ok": ok, "verdict": "ok" if ok else "mismatch", "max_abs_err": worst_abs, "max_rel_err": worst_rel,
              "reference": _reference_words(limit, by_fp64, by_spread, spread), "judged_by_fp64": by_fp64,
              "judged_by_spread": by_spread}
    if evidence.repeats:
        result["eager_spread"] = spread  # 0 where the rerun moved (a random step)
    if not ok:
        result["problem"] = (f"{', '.join(failing[:4])} {'is' if len(failing) == 1 else 'are'} up to "
                             f"{worst_rel:.3g} off relative to eager's (limit {limit:g})" +
                             (", and farther from float64 than eager's" if fp64 else "") +
                             (f", and outside eager's own spread ({spread:.3g})" if spread else ""))
    return result


def _unjudged(problem: str) -> dict:
    return {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
            "problem": problem}


def _reference_words(limit: float, by_fp64: list, by_spread: list, spread: float) -> str:
    def some(names):
        return f"{len(names)} of them: {', '.join(names[:4])}" + (", ..." if len(names) > 4 else "")
    words = f"an eager step: the loss and every gradient within {limit:g} of its largest value"
    if by_fp64:
        words += f", or as close to float64 as eager's ({some(by_fp64)})"
    if by_spread:
        words += (f", or within {SPREAD_MULTIPLIER:g}x eager's own spread, where eager's step itself moves by up "
                  f"to {spread:.3g} of a tensor's largest value when its inputs and parameters move by one ulp or "
                  f"its threads change: near-ties (a ReLU at zero) decided by rounding, or tensors eager's own runs "
                  f"cannot fix, judged by float64 (Note [Tensors eager cannot fix]) ({some(by_spread)})")
    return words


def step_payload(evidence: StepEvidence) -> dict:
    def pack(entries):
        return [[str(n), t.detach().cpu() if isinstance(t, torch.Tensor) else None] for n, t in entries]
    return {"kind": "step", "eager": pack(evidence.eager), "ours": pack(evidence.ours), "role": evidence.role,
            "fp64": pack(evidence.fp64), "rerun": pack(evidence.rerun),
            "repeats": [pack(repeat) for repeat in evidence.repeats]}


def step_from(payload: dict) -> StepEvidence:
    def unpack(entries):
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                                    and (e[1] is None or isinstance(e[1], torch.Tensor))
                                                    for e in entries):
            raise ValueError("the job's step evidence is malformed")
        return [(n, t) for n, t in entries]
    role, repeats = payload.get("role"), payload.get("repeats", [])
    if not isinstance(repeats, list):
        raise ValueError("the job's step evidence is malformed")
    return StepEvidence(unpack(payload.get("eager")), unpack(payload.get("ours")),
                        role if isinstance(role, str) and len(role) <= 64 else "glassbox",
                        unpack(payload.get("fp64", [])), unpack(payload.get("rerun", [])),
                        [unpack(repeat) for repeat in repeats])
