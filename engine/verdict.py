"""The verdict: compiled outputs judged against eager's and a float64 run's, from values alone.

Note [Tolerance policy]
Compiled code may reorder float arithmetic (fusion, vectorized reductions), compute half types in float32
and call other math libraries than eager (libmvec, our erfinv), so results differ from eager by rounding.
Every leaf of the outputs is compared: tensors, Python numbers, bools, strings, None (and the structure that
holds them). Integers, bools, strings and None must be equal. A floating leaf passes when either rule holds:

1. Close to eager: |ours - eager| <= atol + rtol * |eager| elementwise (NaN matching NaN, equal infinities),
   with (atol, rtol) per dtype, modeled on torch.testing.assert_close's defaults and loosened where
   reordering is expected: float64 1e-7/1e-7, float32 1e-4/1e-4 (assert_close: 1e-5/1.3e-6), bfloat16
   1e-2/1.6e-2, float16 1e-3/1e-3; a Python float as float32. A model file may set `tolerance` (finite,
   non-negative numbers: anything else is refused, since atol=inf would pass everything).
2. No less accurate than eager: where eager itself is far from the true result (a long float32 sum, a
   cancellation, a half-precision chain), "close to eager" asks the impossible. Like torch's own accuracy
   checks (torch._dynamo.utils.same), a float64 reference is computed: eager's own run, every ATen op
   repeated in float64 on float64 shadows (engine/shadow64.py, Note [Float64 shadow]; the model is never
   called in float64, so it cannot steer its reference), and element i passes when
       |ours_i - fp64_i| <= FP64_MULTIPLIER * max(|eager_i - fp64_i|, floor) + atol + rtol * |fp64_i|
   Each element's allowance is eager's own error at that element. Rounding puts eager's and our errors at
   different elements, so `floor` is the largest error that eager's typical rounding noise reaches among n
   elements: its median error, read as the spread of a normal distribution (median / 0.6745), times
   sqrt(2 ln n), the expected largest of n normal draws. A median cannot be inflated by a few noisy elements
   (one cancellation in 65 elements, or 1% of 20,200): an element 75% off fails at any output size unless
   half the output is as noisy. NaN and infinity must be in the same places as eager's.
   Half-precision leaves are judged by this rule first (their `judged_by` is "fp64" when it holds): eager's
   own float16/bfloat16 error is the allowance, since ours, computed in float32 inside, rounds elsewhere.

Every leaf reports `max_abs_err`/`max_rel_err` against eager, `judged_by` ("eager" or "fp64": which reference
decided) and, where the float64 run was used, `fp64`: ours' and eager's RMS and max errors against it, the
failing elements, the worst one, and the floor. A tensor's strides are compared with eager's on the
dimensions that matter (size above 1): a difference is the finding "layout" (Note [Verdicts]), since code
after the model (`.view(-1)`, a C extension, a data pointer) sees the layout.

Note [Unstable eager]
Where eager itself is unstable (a ReLU or a router's top-k decided by rounding, a bf16 batch norm), eager and
ours can land on different sides of a discontinuity, and an element fails by far more than rounding. Such an
element still fails (a real bug looks the same), but the float64 entry's `note` says, in words, at how many
failing elements eager is over UNSTABLE_EAGER times its own noise floor from float64.

Note [Verdicts]
`verdict` is "ok", "mismatch", "layout differs" (every value is right, some strides are not eager's: a
named finding, listed under `findings` and said by every front end, not a silent pass), "random" (a second
eager run disagrees with the first: nothing can be checked; said as such, not as a mismatch) or "nothing
compared" (the model returned no tensor and no float, so nothing was computed that could be checked). `ok`
is true for "ok" and "layout differs" (the values are right; outputs come back in eager's strides where
eager's are a dense layout, Note [Outputs in eager's strides], so what is left is an overlapping or gapped
layout, which failing would fail models whose values we compute exactly). `reference` says in
words which reference judged the outputs.

Note [Verdict from data]
judge() runs no model code: it takes the outputs of the compiled run, of eager, of the float64 run and (when
some output is not close to eager) of a second eager run, as values: the float64 rule is used only for a
model whose second eager run repeats the first (a random model's float64 run would license any output). So
the process that judges need not be the one the model ran in: a sandboxed job returns its Evidence
(save_evidence: tensors and plain Python values, loaded with weights_only), and a process that never ran a
model judges it (engine/tools/judged.py, Note [Judged outside the job]).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from engine.record import VerifyRecord

TOLERANCES = {
    torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1.6e-2),
    torch.float16: (1e-3, 1e-3),
}
FP64_MULTIPLIER = 2.0  # our error vs fp64 may be up to this many times eager's (torch's `same` uses 2 or 3)
UNSTABLE_EAGER = 10.0  # eager this many times its noise floor off float64 at an element: Note [Unstable eager]
HALF = (torch.float16, torch.bfloat16, torch.complex32)
COMPLEX_PARTS = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
PLAIN = (bool, int, float, complex, str, bytes, type(None))


class ToleranceError(ValueError):
    """A tolerance that is not a dict of finite, non-negative atol/rtol numbers."""


def validate_tolerance(tolerance) -> dict | None:
    """The tolerance as a dict, or ToleranceError in words: inf, nan, negatives, other keys are refused."""
    if tolerance is None:
        return None
    if not isinstance(tolerance, dict) or not set(tolerance) <= {"atol", "rtol"}:
        raise ToleranceError(f"tolerance must be a dict like dict(atol=1e-4, rtol=1e-4), got {tolerance!r}")
    for key, value in tolerance.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ToleranceError(f"tolerance[{key!r}] must be a finite number >= 0, got {value!r}: a tolerance of "
                                 "inf or nan would pass any output")
    return dict(tolerance)


def tolerance_for(dtype: torch.dtype, tolerance: dict | None = None) -> tuple[float, float]:
    atol, rtol = TOLERANCES.get(COMPLEX_PARTS.get(dtype, dtype), (0.0, 0.0))  # complex: as its parts
    if tolerance:
        atol, rtol = tolerance.get("atol", atol), tolerance.get("rtol", rtol)
    return atol, rtol


# --- the leaves of an output ---------------------------------------------------------------------------------

def leaves(value, path: str = "output") -> list[tuple[str, Any]]:
    """(path, leaf) for every leaf of an output: tensors and plain Python values; tuples, lists, dicts and
    dataclasses are walked. Any other object is the leaf {"object": its type name} (compared by type only)."""
    if isinstance(value, torch.Tensor) or isinstance(value, PLAIN):
        return [(path, value)]
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return [(path, str(value))]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [leaf for f in dataclasses.fields(value) for leaf in leaves(getattr(value, f.name), f"{path}.{f.name}")]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(v, f"{path}[{k!r}]")]
    if isinstance(value, (list, tuple)):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, f"{path}[{i}]")]
    return [(path, {"object": type(value).__name__})]


def tensors(value) -> list[torch.Tensor]:
    return [leaf for _, leaf in leaves(value) if isinstance(leaf, torch.Tensor)]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- rule 1: close to eager ------------------------------------------------------------------------------------

def comparable(tensor: torch.Tensor) -> torch.Tensor:
    """A dense, real CPU tensor with the same values: sparse layouts densified, complex numbers as (re, im)
    pairs, so a complex output is compared on both parts (as floats) rather than cast to an integer."""
    tensor = tensor.detach().cpu()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor.resolve_conj() if tensor.dtype != torch.complex32 else tensor)
    return tensor


def compare(expected: torch.Tensor, actual: torch.Tensor, tolerance: dict | None = None,
            tolerance_dtype: torch.dtype | None = None) -> dict:
    """One tensor against eager (rule 1 of Note [Tolerance policy])."""
    atol, rtol = tolerance_for(tolerance_dtype or expected.dtype, tolerance)
    result = {"shape": list(expected.shape), "dtype": _dtype_name(expected.dtype), "atol": atol, "rtol": rtol}
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return {**result, "ok": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "problem": f"got {_dtype_name(actual.dtype)}{list(actual.shape)}"}
    e, a = comparable(expected), comparable(actual)
    if e.dtype.is_floating_point:
        e64, a64 = e.double(), a.double()
        both_nan = e64.isnan() & a64.isnan()
        same_inf = (e64 == a64)
        diff = (e64 - a64).abs().masked_fill(both_nan | same_inf, 0)
        max_abs = float(diff.max()) if diff.numel() else 0.0
        rel = diff / e64.abs().clamp_min(1e-12)
        max_rel = float(rel.masked_fill(diff == 0, 0).max()) if diff.numel() else 0.0
        # written out (not torch.allclose): the rule is this module's, whatever a model did to torch's functions
        # a NaN in both is a match (its bound atol + rtol * |NaN| is NaN, which no comparison passes)
        within = ((diff <= atol + rtol * e64.abs()) | both_nan | same_inf) & (e64.isnan() == a64.isnan())
        ok = bool(within.all()) if within.numel() else True
    else:
        diff = (e.long() - a.long()).abs() if e.dtype != torch.bool else (e != a).long()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = max_abs
        ok = max_abs == 0.0
    return {**result, "ok": ok, "max_abs_err": max_abs, "max_rel_err": max_rel}


# --- rule 2: no less accurate than eager, against float64 -------------------------------------------------------

def _errors_vs(reference: torch.Tensor, value: torch.Tensor) -> tuple[float, float]:
    """(rmse, max abs error) of `value` against `reference`, over the places where both are finite."""
    r, v = comparable(reference).double(), comparable(value).double()
    finite = r.isfinite() & v.isfinite()
    if not bool(finite.any()):
        return 0.0, 0.0
    diff = (r - v)[finite].abs()
    return float(diff.square().mean().sqrt()), float(diff.max())


def noise_floor(errors: torch.Tensor) -> float:
    """The largest error eager's typical rounding noise reaches among these elements (Note [Tolerance policy],
    rule 2): median / 0.6745 * sqrt(2 ln n). A few large errors do not move it."""
    flat = errors.flatten()
    if flat.numel() == 0:
        return 0.0
    spread = float(flat.median()) / 0.6745
    return spread * math.sqrt(2 * math.log(max(flat.numel(), 2)))


def judge_against_fp64(expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor,
                       atol: float, rtol: float = 0.0) -> dict:
    """Rule 2 of Note [Tolerance policy]: ours is no less accurate than eager, element by element, against fp64."""
    ours_rmse, ours_max = _errors_vs(reference, actual)
    eager_rmse, eager_max = _errors_vs(reference, expected)
    e, a = comparable(expected), comparable(actual)
    same_specials = bool((e.isnan() == a.isnan()).all()) and bool((e.isinf() == a.isinf()).all()) and bool(
        (e[e.isinf()] == a[a.isinf()]).all())
    r, e64, a64 = comparable(reference).double(), e.double(), a.double()
    finite = r.isfinite() & e64.isfinite() & a64.isfinite()
    zero = torch.zeros((), dtype=torch.float64)
    eager_error = torch.where(finite, (e64 - r).abs(), zero)
    ours_error = torch.where(finite, (a64 - r).abs(), zero)
    structural_zero = (r == 0) & (e64 == 0)  # exact zeros (a ReLU's) say nothing of the rounding noise
    floor = noise_floor(eager_error[finite & ~structural_zero])
    allowed = FP64_MULTIPLIER * eager_error.clamp_min(floor) + atol + rtol * r.abs()
    failing = (ours_error > allowed) & finite
    count = int(failing.sum())
    result = {"ok": same_specials and count == 0, "ours_rmse": ours_rmse, "eager_rmse": eager_rmse,
              "ours_max_abs": ours_max, "eager_max_abs": eager_max, "failing_elements": count,
              "noise_floor": floor}
    if count:
        worst = int(((ours_error - allowed).masked_fill(~failing, float("-inf"))).flatten().argmax())
        index = list(torch.unravel_index(torch.tensor(worst), r.shape)) if r.dim() else []
        result["worst_index"] = [int(i) for i in index]
        result["worst"] = {"ours": float(a64.flatten()[worst]), "eager": float(e64.flatten()[worst]),
                           "fp64": float(r.flatten()[worst]), "allowed": float(allowed.flatten()[worst])}
        unstable = int((failing & (eager_error > UNSTABLE_EAGER * max(floor, 1e-300))).sum())
        if unstable:  # Note [Unstable eager]: said, and still failed
            result["note"] = (f"at {unstable} of the {count} failing elements eager itself is over "
                              f"{UNSTABLE_EAGER:g}x its typical error from float64: a decision within rounding (a "
                              "ReLU, a comparison, a router's top-k, a bf16 normalization) may have gone another way "
                              "there in eager or in ours; the elements still fail, since a real bug looks the same")
    if not same_specials:
        result["problem"] = "NaN or infinity in other places than eager's"
    return result


# --- one leaf ------------------------------------------------------------------------------------------------

def significant_strides(tensor: torch.Tensor) -> list[int | None]:
    """Strides on the dimensions where they matter (size above 1); None elsewhere."""
    return [stride if size > 1 else None for size, stride in zip(tensor.shape, tensor.stride())]


def layout_difference(expected: torch.Tensor, actual: torch.Tensor) -> dict | None:
    """{eager, ours} strides when the layouts differ where it matters; None when they agree (or cannot)."""
    if (expected.layout != torch.strided or actual.layout != torch.strided or expected.shape != actual.shape
            or expected.numel() <= 1):
        return None
    if significant_strides(expected) == significant_strides(actual):
        return None
    return {"eager": list(expected.stride()), "ours": list(actual.stride())}


def compare_tensor(expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor | None = None,
                   tolerance: dict | None = None, tolerance_dtype: torch.dtype | None = None) -> dict:
    """One tensor under the whole of Note [Tolerance policy]: rule 1 against eager, rule 2 against the float64
    `reference` (when given) where rule 1 fails, and for half precision first."""
    entry = compare(expected, actual, tolerance, tolerance_dtype)
    entry["close_to_eager"], entry["judged_by"] = entry["ok"], "eager"
    floating = expected.dtype.is_floating_point or expected.dtype.is_complex
    usable = (reference is not None and floating and "problem" not in entry and reference.shape == expected.shape
              and reference.is_floating_point() == expected.is_floating_point())
    if usable:  # every floating output reports its error against float64, ours and eager's
        judged = judge_against_fp64(expected, actual, reference, entry["atol"], entry["rtol"])
        entry["fp64"] = judged
        if judged["ok"] and (not entry["ok"] or expected.dtype in HALF):
            entry["ok"], entry["judged_by"] = True, "fp64"
        elif not entry["ok"]:
            entry["judged_by"] = "eager and fp64"  # both rules tried, both failed
    return entry


def compare_leaf(path: str, expected, actual, reference=None, tolerance: dict | None = None) -> dict:
    """One leaf of the outputs (Note [Tolerance policy]): a tensor by compare_tensor, a Python float as a
    float32 value, anything else by equality of type and value."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return _unequal(path, expected, actual)
        entry = compare_tensor(expected, actual, reference if isinstance(reference, torch.Tensor) else None, tolerance)
        entry["path"] = path
        layout = layout_difference(expected, actual)
        if layout is not None:
            entry["layout"] = layout
        return entry
    if isinstance(expected, (float, complex)) and not isinstance(expected, bool) and type(actual) is type(expected):
        as_tensor = lambda v: torch.tensor(v, dtype=torch.float64 if isinstance(v, float) else torch.complex128)  # noqa: E731
        ref = as_tensor(reference) if type(reference) is type(expected) else None
        entry = compare_tensor(as_tensor(expected), as_tensor(actual), ref, tolerance, torch.float32)
        return {**entry, "path": path, "dtype": type(expected).__name__, "value": {"eager": str(expected),
                                                                                    "ours": str(actual)}}
    if type(expected) is type(actual) and expected == actual:
        return {"path": path, "shape": [], "dtype": _kind(expected), "ok": True, "max_abs_err": 0.0,
                "max_rel_err": 0.0, "judged_by": "eager", "close_to_eager": True}
    return _unequal(path, expected, actual)


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {_dtype_name(value.dtype)}{list(value.shape)}"
    if isinstance(value, dict) and "object" in value:
        return value["object"]
    return type(value).__name__


def _short(value) -> str:
    text = repr(value) if not isinstance(value, torch.Tensor) else _kind(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unequal(path: str, expected, actual) -> dict:
    return {"path": path, "shape": [], "dtype": _kind(expected), "ok": False, "max_abs_err": float("inf"),
            "max_rel_err": float("inf"), "judged_by": "eager", "close_to_eager": False,
            "problem": f"{path}: eager gave {_short(expected)}, compiled {_short(actual)}"}


# --- the verdict ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Evidence:
    """What judge() needs, as values (Note [Verdict from data]): each a list of (path, leaf)."""
    eager: list
    ours: list
    fp64: list | None = None  # the float64 run's leaves, or None (fp64_why_not says why)
    fp64_why_not: str = ""
    again: list | None = None  # a second eager run's leaves, taken when the first judgment failed
    tolerance: dict | None = None
    role: str = "explore"  # whose check: explore's (its runs in order), "inductor", or a bench case's (judged_commands.py)


def _random_words() -> str:
    return ("the model is random: two eager runs on the same inputs disagree (dropout in training mode, "
            "torch.rand, ...), so its outputs cannot be checked. Call model.eval(), or make the randomness an "
            "input.")


def reference_words(outputs: list[dict], fp64_why_not: str = "") -> str:
    """Which reference judged the outputs, in words (Note [Verdicts])."""
    by_fp64 = sum(1 for o in outputs if o.get("judged_by") == "fp64")
    by_eager = sum(1 for o in outputs if o.get("judged_by") == "eager")
    by_spread = sum(1 for o in outputs if o.get("judged_by") == "spread")
    parts = []
    if by_eager:
        parts.append(f"{by_eager} output(s) judged against eager (within atol/rtol)")
    if by_fp64:
        parts.append(f"{by_fp64} output(s) judged against the float64 shadow of eager's run (no less accurate "
                     "than eager)")
    if by_spread:
        parts.append(f"{by_spread} within eager's own spread (eager's step moves as far when its inputs move by "
                     "one ulp: Note [Eager's own spread])")
    failed = sum(1 for o in outputs if not o.get("ok"))
    if failed:
        parts.append(f"{failed} output(s) failed")
    if fp64_why_not:
        parts.append(f"no float64 reference: {fp64_why_not}")
    return "; ".join(parts) or "nothing compared"


def judge(evidence: Evidence) -> dict:
    """The verify dict from values alone (Note [Tolerance policy], Note [Verdicts], Note [Verdict from data])."""
    tolerance = validate_tolerance(evidence.tolerance)
    eager, ours = evidence.eager, evidence.ours
    extra = {"fp64": evidence.fp64_why_not} if evidence.fp64_why_not else {}
    if [p for p, _ in eager] != [p for p, _ in ours]:
        return {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "outputs": [], "reference": "eager: the structure of the outputs differs", **extra,
                "problem": f"eager returned {len(eager)} leaves ({_kinds(eager)}), compiled {len(ours)} "
                           f"({_kinds(ours)})"}
    fp64 = dict(evidence.fp64) if evidence.fp64 is not None else {}
    outputs = [compare_leaf(path, e, a, fp64.get(path), tolerance) for (path, e), (_, a) in zip(eager, ours)]
    values_ok = all(o["ok"] for o in outputs)
    layouts = [o for o in outputs if o.get("layout")]
    result = {"max_abs_err": max((o["max_abs_err"] for o in outputs), default=0.0),
              "max_rel_err": max((o["max_rel_err"] for o in outputs), default=0.0), "outputs": outputs,
              "reference": reference_words(outputs, evidence.fp64_why_not), **extra}
    # the float64 rule trusts a reference only from a model that repeats itself: a random model's float64 run
    # is as far from eager as anything, and would license any output
    if not all(o.get("close_to_eager") for o in outputs):
        if evidence.again is None:
            far = next(o for o in outputs if not o.get("close_to_eager"))
            return {"ok": False, "verdict": "mismatch", **result,
                    "problem": f"{far['path']}: max abs err {far['max_abs_err']:.3g} against eager, and no second "
                               "eager run shows that eager repeats itself, so the float64 rule cannot be used"}
        if _disagrees(eager, evidence.again, tolerance):
            return {"ok": False, "verdict": "random", **result, "problem": _random_words()}
    if not values_ok:
        first = next(o for o in outputs if not o["ok"])
        problem = first.get("problem") or (f"max abs err {first['max_abs_err']:.3g} (atol {first.get('atol')}, "
                                            f"rtol {first.get('rtol')})")
        if (first.get("fp64") or {}).get("note"):
            problem += f"; {first['fp64']['note']}"
        return {"ok": False, "verdict": "mismatch", **result,
                "problem": problem if problem.startswith(first["path"]) else f"{first['path']}: {problem}"}
    computed = any(isinstance(e, torch.Tensor) or (isinstance(e, (float, complex)) and not isinstance(e, bool))
                   for _, e in eager)
    if not computed:
        return {"ok": False, "verdict": "nothing compared", **result,
                "problem": "the model returned no tensor, so no output could be compared with eager: nothing was "
                           "verified. Return the tensors you want checked."}
    if layouts:
        words = "; ".join(f"{o['path']}: strides {o['layout']['ours']}, eager's {o['layout']['eager']}"
                          for o in layouts[:3])
        return {"ok": True, "verdict": "layout differs", **result,
                "findings": [{"kind": "layout", "path": o["path"], **o["layout"]} for o in layouts],
                "problem": f"every value matches, but the layout differs from eager's ({words}): code that reads "
                           "the output's memory (.view, a C extension) would see other data"}
    return {"ok": True, "verdict": "ok", **result}


def verify_record(verify) -> VerifyRecord:
    """A verify dict as the record's VerifyRecord. One that does not fit the record did not come from judge():
    model code replaced the check (Note [Judged outside the job]), so it is a mismatch that says so, not an error
    that stops the exploration."""
    try:
        return VerifyRecord.from_json(verify)
    except (TypeError, ValueError) as error:
        return VerifyRecord(ok=False, verdict="mismatch", max_abs_err=float("inf"), max_rel_err=float("inf"),
                            outputs=[], problem=f"the check's result is malformed, so nothing is verified: {error}")


def _kinds(entries: list) -> str:
    text = ", ".join(_kind(leaf) for _, leaf in entries[:4])
    return text + (", ..." if len(entries) > 4 else "")


def _disagrees(eager: list, again: list, tolerance: dict | None) -> bool:
    if [p for p, _ in eager] != [p for p, _ in again]:
        return True
    return not all(compare_leaf(p, e, a, None, tolerance)["ok"] for (p, e), (_, a) in zip(eager, again))


# --- evidence as data ----------------------------------------------------------------------------------------

def evidence_payload(evidence: Evidence) -> dict:
    """Evidence as tensors and plain Python values only, for torch.save (loaded back with weights_only)."""
    def pack(entries):
        return None if entries is None else [[p, v.detach().cpu() if isinstance(v, torch.Tensor) else v]
                                             for p, v in entries]
    return {"kind": "infer", "eager": pack(evidence.eager), "ours": pack(evidence.ours), "fp64": pack(evidence.fp64),
            "fp64_why_not": evidence.fp64_why_not, "again": pack(evidence.again), "tolerance": evidence.tolerance,
            "role": evidence.role}


def save_evidence(evidences: list[Evidence], path) -> None:
    torch.save([evidence_payload(e) for e in evidences], path)


def load_payloads(path) -> list:
    """The payloads a job saved; weights_only: a file written by a model cannot make this process run code."""
    payloads = torch.load(path, weights_only=True, map_location="cpu")
    if not isinstance(payloads, list):
        raise ValueError("the job's evidence is not a list")
    return payloads


def load_evidence(path) -> list[Evidence]:
    """The Evidence of a job's inference runs."""
    return [evidence_from(payload) for payload in load_payloads(path)]


def evidence_from(payload) -> Evidence:
    if not isinstance(payload, dict):
        raise ValueError("the job's evidence is not a dict")

    def unpack(entries):
        if entries is None:
            return None
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                                    for e in entries):
            raise ValueError("the job's evidence is malformed")
        return [(p, v) for p, v in entries]
    return Evidence(unpack(payload.get("eager")) or [], unpack(payload.get("ours")) or [], unpack(payload.get("fp64")),
                    str(payload.get("fp64_why_not") or ""), unpack(payload.get("again")), payload.get("tolerance"),
                    _role(payload.get("role")))


def _role(role) -> str:
    """Whose check a payload is (explore's, "inductor", a bench case's "bench:N:glassbox"): a short name."""
    return role if isinstance(role, str) and 0 < len(role) <= 64 and role.isprintable() else "explore"
