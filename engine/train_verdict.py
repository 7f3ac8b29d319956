"""The verdict of a training step, from values alone (Note [Verdict from data] in engine/verdict.py).

Note [Training verdict from data]
A training step's evidence is, per named tensor (the loss, the outputs, every gradient by parameter path or
input position, the buffers after the step), eager's value and ours; the float64 shadow of eager's step
(engine/shadow64.py, Note [Float64 shadow]: the backward's ops are shadowed too, so every gradient has its
float64 value without the model ever running in float64); and, when some tensor is not close to eager, the
loss of a second eager step from the same RNG state (to tell a random step from a wrong compile), and where
the step still fails, eager's step rerun and repeated under rounding-level changes (Note [Eager's own spread]
in engine/eager_spread.py: a tensor eager's own step moves as far passes within that spread). judge()
here runs no model code, so a sandboxed job hands this back as data and a process the model never ran in
judges it (engine/tools/judged.py, Note [Judged outside the job]), as for inference.
"""
from __future__ import annotations

import dataclasses

import torch

from engine import eager_spread, verdict


@dataclasses.dataclass
class TrainingEvidence:
    """What judge() needs: `pairs` [(name, eager's tensor or None, ours or None)], `fp64` {name: float64 value}."""
    pairs: list
    fp64: dict
    fp64_why_not: str = ""
    again_loss: torch.Tensor | None = None
    skipped: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    tolerance: dict | None = None
    rerun: list = dataclasses.field(default_factory=list)  # eager's step again: [(name, tensor)]
    repeats: list = dataclasses.field(default_factory=list)  # ... nudged by rounding: [[(name, tensor)], ...]


def entry(name: str, expected, actual, reference, tolerance) -> dict:
    """One named tensor of the step under Note [Tolerance policy]."""
    if expected is None and actual is None:
        return {"name": name, "ok": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "judged_by": "eager",
                "close_to_eager": True,
                "note": "no gradient reaches it (unused in this step), in eager as in ours"}
    if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
        return {"name": name, "ok": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "judged_by": "eager", "close_to_eager": False,
                "problem": f"{'eager' if not isinstance(expected, torch.Tensor) else 'compiled'} has no gradient"}
    reference = reference if isinstance(reference, torch.Tensor) else None
    return {"name": name, **verdict.compare_tensor(expected, actual, reference, tolerance)}


def close_to_eager(pairs: list, tolerance: dict | None) -> bool:
    """Whether every tensor passes rule 1 (the job asks this to know whether a second eager step is needed)."""
    return all(entry(name, e, a, None, tolerance)["ok"] for name, e, a in pairs)


def judge(evidence: TrainingEvidence) -> dict:
    """The training step's verify dict (Note [Training verdict from data])."""
    tolerance = verdict.validate_tolerance(evidence.tolerance)
    checked = [entry(name, e, a, evidence.fp64.get(name), tolerance) for name, e, a in evidence.pairs]
    losses = [e for e in checked if e["name"] == "loss"]
    ok = bool(losses) and all(e["ok"] for e in checked)
    result = {
        "ok": ok, "verdict": "ok" if ok else "mismatch",
        "max_abs_err": max((e["max_abs_err"] for e in checked), default=0.0),
        "max_rel_err": max((e["max_rel_err"] for e in checked), default=0.0),
        "loss": losses[0] if losses else {"name": "loss", "ok": False, "problem": "the step returned no loss"},
        "outputs": [e for e in checked if e["name"].startswith("output[")],
        "gradients": [e for e in checked if e["name"].startswith(("param:", "input["))],
        "buffers": [e for e in checked if e["name"].startswith("buffer:")],
        "skipped": [str(s) for s in evidence.skipped], "notes": [str(n) for n in evidence.notes],
        "reference": verdict.reference_words(checked, evidence.fp64_why_not),
        **({"fp64": evidence.fp64_why_not} if evidence.fp64_why_not else {}),
    }
    if not all(e.get("close_to_eager") for e in checked):
        eager_loss = next((e for name, e, _ in evidence.pairs if name == "loss"), None)
        if not isinstance(evidence.again_loss, torch.Tensor) or not isinstance(eager_loss, torch.Tensor):
            result.update(ok=False, verdict="mismatch")
            result.setdefault("problem", "some tensors differ from eager, and no second eager step shows that eager "
                                         "repeats itself, so the float64 rule cannot be used")
        elif not verdict.compare(eager_loss, evidence.again_loss, tolerance)["ok"]:
            result.update(ok=False, verdict="random", problem=(
                "the training step is random: two eager steps from the same RNG state disagree, so it cannot be "
                "checked. Make the randomness an input, or call model.eval()."))
        elif not ok and evidence.repeats:
            _judge_by_spread(evidence, checked, result)
    return result


def _judge_by_spread(evidence: TrainingEvidence, checked: list[dict], result: dict) -> None:
    """Note [Eager's own spread]: the failing tensors judged again within eager's own spread, in place."""
    eager = {name: e for name, e, _ in evidence.pairs if isinstance(e, torch.Tensor)}
    ours = {name: a for name, _, a in evidence.pairs}
    spread = eager_spread.eager_spread(eager, evidence.rerun, evidence.repeats)
    result["eager_spread"] = spread
    for entry in checked:
        name = entry["name"]
        if entry["ok"] or name not in eager or not isinstance(ours.get(name), torch.Tensor) or \
                ours[name].shape != eager[name].shape:
            continue
        reference = evidence.fp64.get(name)
        if eager_spread.within_spread(eager[name], ours[name], reference, spread):
            entry["ok"], entry["judged_by"] = True, "spread"
            entry["note"] = (f"within {eager_spread.SPREAD_MULTIPLIER:g}x eager's own spread: eager's step moves by "
                             f"up to {spread:.3g} of a tensor's largest value when its inputs and parameters move by "
                             "one ulp, and eager is itself farther than that from float64 here")
        elif eager_spread.unfixed_by_eager(eager[name], ours[name], reference,
                                           eager_spread.runs_of(name, evidence.rerun, evidence.repeats), spread):
            entry["ok"], entry["judged_by"] = True, "spread"
            entry["note"] = (f"eager cannot fix this tensor: its own step moves it by more than "
                             f"{eager_spread.MAX_SPREAD:g} of its largest value when its inputs and parameters move by "
                             f"one ulp, and ours is within {eager_spread.SPREAD_MULTIPLIER:g}x the farthest of eager's "
                             "runs from float64 (Note [Tensors eager cannot fix])")
    if all(entry["ok"] for entry in checked):
        result.update(ok=True, verdict="ok")
        result.pop("problem", None)
    result["reference"] = verdict.reference_words(checked, evidence.fp64_why_not)


# --- as data -------------------------------------------------------------------------------------------------

def payload(evidence: TrainingEvidence) -> dict:
    """Tensors and plain values only, for torch.save (loaded back with weights_only)."""
    def plain(value):
        return value.detach().cpu() if isinstance(value, torch.Tensor) else value
    return {"kind": "train", "pairs": [[str(n), plain(e), plain(a)] for n, e, a in evidence.pairs],
            "fp64": {str(k): plain(v) for k, v in evidence.fp64.items()}, "fp64_why_not": evidence.fp64_why_not,
            "again_loss": plain(evidence.again_loss), "skipped": list(evidence.skipped),
            "notes": list(evidence.notes), "tolerance": evidence.tolerance,
            "rerun": [[str(n), plain(t)] for n, t in evidence.rerun],
            "repeats": [[[str(n), plain(t)] for n, t in repeat] for repeat in evidence.repeats]}


def from_payload(data: dict) -> TrainingEvidence:
    pairs = data.get("pairs")
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 3 and isinstance(p[0], str)
                                              for p in pairs):
        raise ValueError("the job's training evidence is malformed")
    fp64 = data.get("fp64") if isinstance(data.get("fp64"), dict) else {}
    return TrainingEvidence([(n, e, a) for n, e, a in pairs], fp64, str(data.get("fp64_why_not") or ""),
                            data.get("again_loss"), list(data.get("skipped") or []), list(data.get("notes") or []),
                            data.get("tolerance"), _named(data.get("rerun", [])),
                            [_named(repeat) for repeat in _list(data.get("repeats", []))])


def _list(value) -> list:
    if not isinstance(value, list):
        raise ValueError("the job's training evidence is malformed")
    return value


def _named(entries) -> list:
    """[(name, tensor or None)] from the payload's pairs, or ValueError."""
    if not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and
               (e[1] is None or isinstance(e[1], torch.Tensor)) for e in _list(entries)):
        raise ValueError("the job's training evidence is malformed")
    return [(n, t) for n, t in entries]
