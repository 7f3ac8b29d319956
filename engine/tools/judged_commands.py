"""The checks of `bench` and `compare`, judged outside the job as explore's verdict is.

Note [Bench and compare judged outside the job]
`bench` and `compare` run the model, so whatever their process computes the model can reach: a model that
patches torch.allclose, the verifier or json.dumps forges their "matches eager" too. With `--sandbox` (and in
the app, which always runs them sandboxed) the job returns its evidence as data (Note [Judged outside the job]
in engine/tools/judged.py), each check marked with whose it is: a bench case's `bench:N:glassbox` (the cold
and the warm compile's outputs) and `bench:N:inductor`, a training step's as a StepEvidence (its loss and
gradients beside an eager step's, engine/tools/step_verdict.py), a compare side's `a` and `b`. A fresh
sandboxed process that never ran a model judges them, and the parent replaces every check in the job's
document with its verdict, marked `judged_in`; a check with no evidence is a failure that says why, never a pass. Without
`--sandbox` the CLI says on stderr that the check is judged where the model runs.
What this cannot promise is what explore's cannot: the outputs come from the model's process.
"""
from __future__ import annotations

from engine.tools.judged import OUTSIDE


def unjudged(why_not: str) -> dict:
    return {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
            "judged_in": OUTSIDE, "problem": "this check could not be judged outside the job, so nothing is "
                                             f"verified: {why_not}"}


def brief(verdict: dict) -> dict:
    """A bench row's check: its verdict in brief (Note [Verdicts] in engine/verdict.py)."""
    keys = ("ok", "verdict", "max_abs_err", "max_rel_err", "problem", "reference", "judged_in")
    return {key: verdict[key] for key in keys if key in verdict}


def bench_roles(evidences: list, index: int) -> None:
    """Case `index`'s evidence marked as its own (in the job): `bench:N:glassbox`, `bench:N:inductor`; what
    else ran a verify meanwhile (the per-kernel profile's exploration) is left out."""
    evidences[:] = [e for e in evidences if e.role in ("glassbox", "inductor")]
    for evidence in evidences:
        evidence.role = f"bench:{index}:{evidence.role}"


def apply_bench_verdicts(document: dict, verdicts: list[dict] | None, why_not: str = "") -> dict:
    """The bench document with every case's checks replaced by the verdicts judged outside the job. A case that
    shares another's Inductor figures (bench --templates on,off) takes that case's Inductor verdict."""
    by_role: dict[str, list[dict]] = {}
    for verdict in verdicts or []:
        by_role.setdefault(str(verdict.get("role")), []).append(verdict)
    cases = [case for case in document.get("cases") or [] if isinstance(case, dict)]
    for index, case in enumerate(cases):
        checks = case.get("verify")
        if not isinstance(checks, dict):
            continue
        for who in list(checks):
            found = by_role.get(f"bench:{index}:{who}", [])
            if not found and who == "inductor":  # measured by the first case of the same model and mode
                first = next((n for n, other in enumerate(cases[:index]) if other.get("name") == case.get("name")
                              and other.get("mode") == case.get("mode")), None)
                found = by_role.get(f"bench:{first}:inductor", []) if first is not None else []
            if verdicts is None or not found:
                checks[who] = unjudged(why_not or f"the job returned no evidence of {who}'s outputs")
            else:  # the cold and the warm compile's outputs: the worse of them is the row's check
                worst = min(found, key=lambda v: (v.get("ok") is True, -float(v.get("max_abs_err") or 0)))
                checks[who] = {**brief(worst), "judged_in": OUTSIDE}
    return document


def apply_compare_verdicts(document: dict, verdicts: list[dict] | None, why_not: str = "") -> dict:
    """compare's document (engine/tools/compare.py, Comparison.to_json) with each side's verify judged outside
    the job: the worst of the side's checks (its example inputs', and its other input sets'); a side that ran
    no check (it failed to compile) keeps none."""
    document["verify"] = {}
    for side in ("a", "b"):
        record = (document.get(side) or {}).get("record")
        if not isinstance(record, dict):
            continue
        found = [v for v in verdicts or [] if v.get("role") == side]
        if found and verdicts is not None:
            worst = min(found, key=lambda v: v.get("ok") is True)
            record["verify"] = {**{k: v for k, v in worst.items() if k != "role"}, "judged_in": OUTSIDE}
        elif record.get("verify") or not record.get("errors"):
            record["verify"] = unjudged(why_not or f"the job returned no evidence of side {side}'s outputs")
        document["verify"][side] = (record.get("verify") or {}).get("ok")
    return document


def document_code(document: dict) -> int:
    """bench's or compare's exit code from its document, as explore's (engine/tools/judged.py, verdict_code): a
    case or side that failed, or a check that is not a pass, 1; a check that found the model random 2 (it cannot
    be checked as given); else 0."""
    from engine.tools.judged import EXIT_FAILED, EXIT_OK, EXIT_USER_ERROR

    cases = [case for case in document.get("cases") or [] if isinstance(case, dict)]
    checks = [check for case in cases for check in (case.get("verify") or {}).values()]
    records = [(document.get(side) or {}).get("record") for side in ("a", "b") if isinstance(document.get(side), dict)]
    checks += [record["verify"] for record in records if isinstance(record, dict) and record.get("verify")]
    errors = document.get("errors")
    failed = (any(case.get("error") for case in cases) or any(isinstance(r, dict) and r.get("errors") for r in records)
              or (any(errors.values()) if isinstance(errors, dict) else bool(errors)))
    checks = [check if isinstance(check, dict) else {} for check in checks]
    if failed or any(check.get("ok") is not True and check.get("verdict") != "random" for check in checks):
        return EXIT_FAILED
    return EXIT_USER_ERROR if any(check.get("verdict") == "random" for check in checks) else EXIT_OK
