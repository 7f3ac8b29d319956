"""Run and verify: compiled outputs against eager, with a per-dtype tolerance policy and an fp64 reference.

Note [Tolerance policy]
Compiled code may reorder float arithmetic (fusion, vectorized reductions), compute half types in float32
and call other math libraries than eager (libmvec, our erfinv), so results differ from eager by rounding.
An output passes when either test holds:

1. Close to eager: |ours - eager| <= atol + rtol * |eager| elementwise (NaN matching NaN, equal infinities),
   with (atol, rtol) per dtype, modeled on torch.testing.assert_close's defaults and loosened where
   reordering is expected: float64 1e-7/1e-7, float32 1e-4/1e-4 (assert_close: 1e-5/1.3e-6), bfloat16
   1e-2/1.6e-2, float16 1e-3/1e-3. Integers and bools must be equal. A model file may set `tolerance`.
2. No less accurate than eager: where eager itself is far from the true result (a long float32 sum, a
   cancellation, a half-precision chain), "close to eager" asks the impossible. Like torch's own accuracy
   checks (torch._dynamo.utils.same with an fp64 reference), we run the model once more on inputs upcast to
   float64 and pass an output when  rmse(ours, fp64) <= FP64_MULTIPLIER * rmse(eager, fp64) + atol / 10,
   with NaN and infinity in the same places as eager's. The reference is skipped (and rule 2 is not used)
   when the model does not accept float64 inputs, or when there is no floating output to check.

Every output reports both errors: `max_abs_err`/`max_rel_err` against eager, and under `fp64` the RMS and
max errors of ours and of eager against the float64 reference, and `judged_by` ("eager" or "fp64").
"""
from __future__ import annotations

import copy
import dataclasses

import torch

TOLERANCES = {
    torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1.6e-2),
    torch.float16: (1e-3, 1e-3),
}
FP64_MULTIPLIER = 2.0  # our error vs fp64 may be up to this many times eager's (torch's `same` uses 2 or 3)
UPCAST = (torch.float32, torch.float16, torch.bfloat16)


def flatten_outputs(value) -> list:
    """Tensors of any output structure: tuples, lists, dicts, dataclasses, (named) tuples."""
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in flatten_outputs(getattr(value, f.name))]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten_outputs(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten_outputs(v)]
    return []


def tolerance_for(dtype: torch.dtype, tolerance: dict | None = None) -> tuple[float, float]:
    atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    if tolerance:
        atol, rtol = tolerance.get("atol", atol), tolerance.get("rtol", rtol)
    return atol, rtol


def compare(expected: torch.Tensor, actual: torch.Tensor, tolerance: dict | None = None) -> dict:
    """One output against eager (rule 1 of Note [Tolerance policy])."""
    atol, rtol = tolerance_for(expected.dtype, tolerance)
    result = {"shape": list(expected.shape), "dtype": str(expected.dtype).replace("torch.", ""),
              "atol": atol, "rtol": rtol}
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return {**result, "ok": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "problem": f"got {str(actual.dtype).replace('torch.', '')}{list(actual.shape)}"}
    e, a = expected.detach().cpu(), actual.detach().cpu()
    if e.dtype.is_floating_point:
        e64, a64 = e.double(), a.double()
        both_nan = e64.isnan() & a64.isnan()
        same_inf = (e64 == a64)
        diff = (e64 - a64).abs().masked_fill(both_nan | same_inf, 0)
        max_abs = float(diff.max()) if diff.numel() else 0.0
        rel = diff / e64.abs().clamp_min(1e-12)
        max_rel = float(rel.masked_fill(diff == 0, 0).max()) if diff.numel() else 0.0
        ok = bool(torch.allclose(a64, e64, atol=atol, rtol=rtol, equal_nan=True))
    else:
        diff = (e.long() - a.long()).abs() if e.dtype != torch.bool else (e != a).long()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = max_abs
        ok = bool(torch.equal(e, a))
    return {**result, "ok": ok, "max_abs_err": max_abs, "max_rel_err": max_rel}


def _errors_vs(reference: torch.Tensor, value: torch.Tensor) -> tuple[float, float]:
    """(rmse, max abs error) of `value` against `reference`, over the places where both are finite."""
    r, v = reference.detach().cpu().double(), value.detach().cpu().double()
    finite = r.isfinite() & v.isfinite()
    if not bool(finite.any()):
        return 0.0, 0.0
    diff = (r - v)[finite].abs()
    return float(diff.square().mean().sqrt()), float(diff.max())


def judge_against_fp64(expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor,
                       atol: float) -> dict:
    """Rule 2 of Note [Tolerance policy]: ours is no less accurate than eager, measured against fp64."""
    ours_rmse, ours_max = _errors_vs(reference, actual)
    eager_rmse, eager_max = _errors_vs(reference, expected)
    e, a = expected.detach().cpu(), actual.detach().cpu()
    same_specials = bool(torch.equal(e.isnan(), a.isnan())) and bool(
        torch.equal(e.isinf(), a.isinf())) and bool(torch.equal(e[e.isinf()], a[a.isinf()]))
    ok = same_specials and ours_rmse <= FP64_MULTIPLIER * eager_rmse + atol / 10
    return {"ok": ok, "ours_rmse": ours_rmse, "eager_rmse": eager_rmse, "ours_max_abs": ours_max,
            "eager_max_abs": eager_max}


def _upcast(value):
    if isinstance(value, torch.Tensor) and value.dtype in UPCAST:
        return value.detach().to(torch.float64)
    return value


def fp64_reference(model, inputs) -> tuple[list | None, str]:
    """The model's tensor outputs on float64 inputs (and float64 parameters), or (None, why not)."""
    if not any(isinstance(x, torch.Tensor) and x.dtype in UPCAST for x in
               torch.utils._pytree.tree_leaves(list(inputs))) and not isinstance(model, torch.nn.Module):
        return None, "no low-precision floating input"
    try:
        reference_model = model
        if isinstance(model, torch.nn.Module):
            reference_model = copy.deepcopy(model).to(torch.float64)
        upcast = torch.utils._pytree.tree_map(_upcast, list(inputs))
        with torch.no_grad():
            return flatten_outputs(reference_model(*upcast)), ""
    except Exception as error:  # the model may insist on its dtypes: then rule 1 alone decides
        return None, f"model does not run in float64 ({type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''})"


def fresh(inputs) -> tuple:
    """Copies of the inputs, so that a model that mutates them sees the same values on every run."""
    return tuple(torch.utils._pytree.tree_map(
        lambda x: x.clone() if isinstance(x, torch.Tensor) else x, list(inputs)))


def _is_random(model, inputs, expected_list, tolerance) -> bool:
    """Does eager disagree with itself? Then no comparison can hold (dropout in training, torch.rand)."""
    with torch.no_grad():
        again = flatten_outputs(model(*fresh(inputs)))
    return len(again) != len(expected_list) or not all(
        compare(e, a, tolerance)["ok"] for e, a in zip(expected_list, again))


def verify(model, inputs, outputs, tolerance: dict | None = None, reference: bool = True) -> dict:
    """Run the model eagerly (on copies of `inputs`, which must be the values the compiled run saw) and
    compare every output (Note [Tolerance policy])."""
    with torch.no_grad():
        expected = model(*fresh(inputs))
    expected_list, actual_list = flatten_outputs(expected), flatten_outputs(outputs)
    if len(expected_list) != len(actual_list):
        return {"ok": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"), "outputs": [],
                "problem": f"eager returned {len(expected_list)} tensors, compiled {len(actual_list)}"}
    per_output = [compare(e, a, tolerance) for e, a in zip(expected_list, actual_list)]
    for entry in per_output:
        entry["close_to_eager"] = entry["ok"]
        entry["judged_by"] = "eager"
    result_extra = {}
    if not all(o["ok"] for o in per_output) and _is_random(model, inputs, expected_list, tolerance):
        return {"ok": False, "max_abs_err": max(o["max_abs_err"] for o in per_output),
                "max_rel_err": max(o["max_rel_err"] for o in per_output), "outputs": per_output,
                "problem": "the model is random: two eager runs on the same inputs disagree (dropout in training "
                           "mode, torch.rand, ...), so its outputs cannot be checked. Call model.eval(), or make "
                           "the randomness an input."}
    if reference and any(e.dtype.is_floating_point and "problem" not in o for o, e in zip(per_output, expected_list)):
        references, why_not = fp64_reference(model, fresh(inputs))
        if references is None or len(references) != len(expected_list):
            result_extra["fp64"] = why_not or "fp64 run returned a different number of tensors"
        else:
            for entry, e, a, r in zip(per_output, expected_list, actual_list, references):
                if not e.dtype.is_floating_point or "problem" in entry or r.shape != e.shape:
                    continue
                judged = judge_against_fp64(e, a, r, entry["atol"])
                entry["fp64"] = judged
                if not entry["ok"] and judged["ok"]:
                    entry["ok"], entry["judged_by"] = True, "fp64"
    return {
        "ok": all(o["ok"] for o in per_output),
        "max_abs_err": max((o["max_abs_err"] for o in per_output), default=0.0),
        "max_rel_err": max((o["max_rel_err"] for o in per_output), default=0.0),
        "outputs": per_output,
        **result_extra,
    }

