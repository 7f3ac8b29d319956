"""The verdict of a sandboxed job, judged outside it.

Note [Judged outside the job]
A model runs in the job's process, so whatever that process computes it can reach: one line that replaces
engine.run.compare_tensor, torch.allclose or json.dumps turned a wrong compile into `verify.ok=true`. So for a
sandboxed job (`explore --sandbox`, every exploration of the app) the job's own verdict is not believed: the
job writes its Evidence (engine/verdict.py, Note [Verdict from data]: the outputs of eager, of the compiled
code, of the float64 run, as tensors and plain values) to `evidence.pt`, and a fresh sandboxed process that
never ran a model (`python -m engine judge FILE`) loads it with weights_only and judges it. Its verdicts replace
the record's, each marked with `judged_in`. The process that judges is sandboxed too: the file was written by a
model. A record with no evidence, or evidence that cannot be read, is no pass. A training step's evidence
(engine/train_verdict.py, Note [Training verdict from data]) travels and is judged the same way.
What this cannot promise: the outputs themselves come from the model's process, so a model that forges the
evidence (returns eager's values as the compiled ones, writes its tensors behind ATen's back) still fools the
verdict; README, "Security", says so. Its float64 reference it cannot steer by what it tests (its inputs'
dtype, is_compiling()): it is the float64 shadow of eager's run (Note [Float64 shadow],
engine/shadow64.py).
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USER_ERROR = 0, 1, 2  # the CLI's exit codes (engine/__main__.py)
EVIDENCE_NAME = "evidence.pt"
EVIDENCE_LIMIT_BYTES = 512 << 20
OUTSIDE = "a separate process the model never ran in"


def read_evidence(path: Path, limit_bytes: int = EVIDENCE_LIMIT_BYTES) -> bytes | None:
    """The evidence a job wrote, read as only what it claims to be: a regular file with one link, not through a
    symbolic link, not a FIFO, no larger than the limit (Note [Reading what a worker wrote] in app/worker.py)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit_bytes or info.st_nlink != 1:
            return None
        data = file.read(limit_bytes + 1)
    return data if len(data) <= limit_bytes else None


def save_evidence(evidences: list, path) -> None:
    """A job's evidence, inference runs' and training steps' alike, as tensors and plain values."""
    import torch

    from engine import train_verdict, verdict
    from engine.tools.step_verdict import StepEvidence, step_payload

    torch.save([train_verdict.payload(e) if isinstance(e, train_verdict.TrainingEvidence)
                else step_payload(e) if isinstance(e, StepEvidence)
                else verdict.evidence_payload(e) for e in evidences], path)


def judge_file(path) -> list[dict]:
    """The verdicts of a saved evidence file; runs no model code (`python -m engine judge`)."""
    from engine import train_verdict, verdict
    from engine.tools.step_verdict import judge_step, step_from

    verdicts = []
    for payload in verdict.load_payloads(path):
        if isinstance(payload, dict) and payload.get("kind") == "train":
            verdicts.append({**train_verdict.judge(train_verdict.from_payload(payload)), "role": "explore"})
        elif isinstance(payload, dict) and payload.get("kind") == "step":  # a bench's training step
            step = step_from(payload)
            verdicts.append({**judge_step(step), "role": step.role})
        else:
            evidence = verdict.evidence_from(payload)
            verdicts.append({**verdict.judge(evidence), "role": evidence.role})
    return verdicts


def judge_command(evidence: Path) -> list[str]:
    return [sys.executable, "-m", "engine", "judge", str(evidence)]


def judge_in_sandbox(data: bytes, timeout_s: float = 300.0, memory_mb: int = 4096) -> tuple[list[dict] | None, str]:
    """(the verdicts of a job's evidence, "") judged by a fresh sandboxed process, or (None, why not)."""
    from engine.tools.isolation import WorkDirectory
    from engine.tools.sandbox import Limits, run_sandboxed

    directory = WorkDirectory()
    try:
        path = directory.path / EVIDENCE_NAME
        path.write_bytes(data)
        result = run_sandboxed(judge_command(path), Limits(timeout_s=timeout_s, memory_mb=memory_mb),
                               workdir=directory.path)
    finally:
        directory.remove()
    return parse_verdicts(result.stdout) if result.ok else (None, result.explain() or "the judge failed")


def parse_verdicts(text: str) -> tuple[list[dict] | None, str]:
    try:
        document = json.loads(text)
    except ValueError:
        return None, "the judge printed no verdicts"
    verdicts = document.get("verifies") if isinstance(document, dict) else None
    if not isinstance(verdicts, list) or not all(isinstance(v, dict) for v in verdicts):
        return None, "the judge printed no verdicts"
    return verdicts, ""


def apply_verdicts(record: dict, verdicts: list[dict] | None, why_not: str = "") -> dict:
    """The record with its verify (and its other input sets' verify) replaced by the verdicts judged outside
    the job (Note [Judged outside the job]). Without them the verify is a failure that says why."""
    runs = [run for run in record.get("runs") or [] if isinstance(run, dict)]
    if isinstance(record.get("inductor"), dict) and "verify" in record["inductor"]:
        apply_inductor_verdict(record["inductor"], verdicts, why_not)
    verdicts = None if verdicts is None else [_without_role(v) for v in verdicts if v.get("role") != "inductor"]
    if verdicts is None or len(verdicts) != 1 + len(runs):
        problem = ("the job's outputs could not be judged outside it, so nothing is verified: "
                   + (why_not or f"it returned {len(verdicts or [])} sets of outputs for {1 + len(runs)} runs"))
        unjudged = {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                    "outputs": [], "problem": problem, "judged_in": OUTSIDE}
        record["verify"] = dict(unjudged)
        for run in runs:
            run["verify"] = dict(unjudged)
        return record
    record["verify"] = {**verdicts[0], "judged_in": OUTSIDE}
    for run, verdict in zip(runs, verdicts[1:]):
        run["verify"] = {**verdict, "judged_in": OUTSIDE}
    return record


def apply_inductor_verdict(report: dict, verdicts: list[dict] | None, why_not: str = "") -> dict:
    """Inductor's report (engine/reference.py) with its verify judged outside the job (Note [Judged outside the
    job]), or a failure that says why it could not be."""
    found = [v for v in verdicts or [] if v.get("role") == "inductor"]
    if len(found) == 1:
        report["verify"] = {**_without_role(found[0]), "judged_in": OUTSIDE}
    else:
        report["verify"] = {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"),
                            "max_rel_err": float("inf"), "outputs": [], "judged_in": OUTSIDE,
                            "problem": "Inductor's outputs could not be judged outside the job, so nothing is verified: "
                                       + (why_not or f"the job returned {len(found)} sets of them")}
    return report


def _without_role(verdict: dict) -> dict:
    return {k: v for k, v in verdict.items() if k != "role"}


def verdict_code(record: dict, name: str = "the model", verbose: bool = False) -> tuple[int, list[str]]:
    """explore's exit code from its record's verdicts, and what to say about them (Note [Verdicts] in
    engine/verdict.py): a fallback or a mismatch 1, "random" 2 (the model cannot be checked as given), else 0;
    "nothing compared" and "layout differs" are said, not failed."""
    words = []
    fallbacks = [e for e in record.get("errors") or [] if isinstance(e, dict) and e.get("kind") == "fallback"]
    if fallbacks:  # the model ran (eagerly where we failed): a Glassbox bug, reported as one
        if verbose and fallbacks[0].get("traceback"):
            words.append(str(fallbacks[0]["traceback"]))
        message = " ".join(str(fallbacks[0].get("message") or "").split())
        return EXIT_FAILED, words + [f"Glassbox failed while compiling {name}: {message}."
                                     + ("" if verbose else " Run with --verbose for the traceback.")]
    checks = [record.get("verify") or {}] + [run.get("verify") or {} for run in record.get("runs") or []
                                             if isinstance(run, dict)]
    checks = [check if isinstance(check, dict) else {} for check in checks]
    vacuous = [check for check in checks if check.get("verdict") == "nothing compared"]
    if vacuous:
        words.append(f"Nothing was verified for {name}: {vacuous[0].get('problem')}")
    checks = [check for check in checks if check not in vacuous]
    words += [f"Warning: {name}: {check.get('problem')}" for check in checks if check.get("verdict") == "layout differs"]
    random = [check for check in checks if check.get("verdict") == "random"]
    if random:
        return EXIT_USER_ERROR, words + [f"Nothing could be verified for {name}: {random[0].get('problem')}"]
    if not all(check.get("ok") is True for check in checks):
        problems = [check["problem"] for check in checks if check.get("problem")]
        return EXIT_FAILED, words + [f"Glassbox's output for {name} differs from eager PyTorch (see verify above)."
                                     + (f" {problems[0]}" if problems else "")]
    return EXIT_OK, words
