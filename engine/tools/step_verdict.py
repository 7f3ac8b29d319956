"""A bench's training-step check from values alone (engine/tools/train_bench.py, Note [Training-step bench]), so
that a sandboxed bench's steps are judged outside the job (Note [Bench and compare judged outside the job] in
engine/tools/judged_commands.py)."""
from __future__ import annotations

import dataclasses

import torch

HALF = (torch.float16, torch.bfloat16)


@dataclasses.dataclass
class StepEvidence:
    """A compiled training step's loss and gradients beside an eager step's, each [(name, tensor or None)]."""
    eager: list
    ours: list
    role: str = "glassbox"


def judge_step(evidence: StepEvidence) -> dict:
    """The bench's check of a step from values alone: the largest error of the loss or any gradient, relative to
    that tensor's largest eager value, at most 1e-3 (5e-2 where a gradient is half precision: a gradient summed
    over thousands of products differs by rounding)."""
    eager, ours = dict(evidence.eager), dict(evidence.ours)
    if list(eager) != list(ours) or "loss" not in eager:
        return {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "problem": "the compiled step's loss and gradients do not match eager's in number or name"}
    worst_abs = worst_rel = 0.0
    for name, expected in eager.items():
        actual = ours[name]
        if expected is None:
            continue
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
            return {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                    "problem": f"{name}: missing or of another shape in the compiled step"}
        error = float((actual.double() - expected.double()).abs().max()) if expected.numel() else 0.0
        error = error if error == error else float("inf")  # NaN where eager has none is the worst error
        scale = float(expected.double().abs().max()) if expected.numel() else 0.0
        worst_abs, worst_rel = max(worst_abs, error), max(worst_rel, error / max(scale, 1e-6))
    half = any(isinstance(t, torch.Tensor) and t.dtype in HALF for t in eager.values())
    limit = 5e-2 if half else 1e-3
    ok = worst_rel <= limit
    result = {"ok": ok, "verdict": "ok" if ok else "mismatch", "max_abs_err": worst_abs, "max_rel_err": worst_rel,
              "reference": f"an eager step: the loss and every gradient within {limit:g} of its largest value"}
    if not ok:
        result["problem"] = f"the loss or a gradient is {worst_rel:.3g} off relative to eager's (limit {limit:g})"
    return result


def step_payload(evidence: StepEvidence) -> dict:
    def pack(entries):
        return [[str(n), t.detach().cpu() if isinstance(t, torch.Tensor) else None] for n, t in entries]
    return {"kind": "step", "eager": pack(evidence.eager), "ours": pack(evidence.ours), "role": evidence.role}


def step_from(payload: dict) -> StepEvidence:
    def unpack(entries):
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                                    and (e[1] is None or isinstance(e[1], torch.Tensor))
                                                    for e in entries):
            raise ValueError("the job's step evidence is malformed")
        return [(n, t) for n, t in entries]
    role = payload.get("role")
    return StepEvidence(unpack(payload.get("eager")), unpack(payload.get("ours")),
                        role if isinstance(role, str) and len(role) <= 64 else "glassbox")
