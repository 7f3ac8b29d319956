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
   float64, and judge element by element: element i passes when
       |ours_i - fp64_i| <= FP64_MULTIPLIER * max(|eager_i - fp64_i|, q) + atol + rtol * |fp64_i|
   where q, eager's rounding-noise level over the output, is the EAGER_NOISE_QUANTILE quantile of eager's
   errors (rounding puts eager's and our errors at different elements; q keeps that noise from failing us,
   while one element far off still fails: an RMS over the whole output would hide it). NaN and infinity
   must be in the same places as eager's. Half-precision outputs are judged the same way. The reference is
   skipped (and rule 2 is not used) when the model does not accept float64 inputs.

Every output reports both errors: `max_abs_err`/`max_rel_err` against eager, and under `fp64` the RMS and
max errors of ours and of eager against the float64 reference, how many elements fail rule 2 and the worst
one's index, and `judged_by` ("eager" or "fp64"). `compare_tensor` is the whole rule for one tensor (the
gradient check calls it too).

Note [Verdicts]
`verify()["verdict"]` is "ok", "mismatch", "random" (eager disagrees with itself) or "nothing compared" (the
model returned no tensor, so nothing could be checked); `ok` is true only for "ok". A verdict of nothing is
not a pass.
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
EAGER_NOISE_QUANTILE = 0.999
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


COMPLEX_PARTS = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}


def tolerance_for(dtype: torch.dtype, tolerance: dict | None = None) -> tuple[float, float]:
    atol, rtol = TOLERANCES.get(COMPLEX_PARTS.get(dtype, dtype), (0.0, 0.0))  # complex: as its parts
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
    e, a = _comparable(expected), _comparable(actual)
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


def _comparable(tensor: torch.Tensor) -> torch.Tensor:
    """A dense, real CPU tensor with the same values: sparse layouts densified, complex numbers as (re, im)
    pairs, so a complex output is compared on both parts (as floats) rather than cast to an integer."""
    tensor = tensor.detach().cpu()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor.resolve_conj() if tensor.dtype != torch.complex32 else tensor)
    return tensor


def _errors_vs(reference: torch.Tensor, value: torch.Tensor) -> tuple[float, float]:
    """(rmse, max abs error) of `value` against `reference`, over the places where both are finite."""
    r, v = _comparable(reference).double(), _comparable(value).double()
    finite = r.isfinite() & v.isfinite()
    if not bool(finite.any()):
        return 0.0, 0.0
    diff = (r - v)[finite].abs()
    return float(diff.square().mean().sqrt()), float(diff.max())


def _noise_level(errors: torch.Tensor) -> float:
    """The EAGER_NOISE_QUANTILE quantile of eager's element errors (Note [Tolerance policy], rule 2)."""
    flat = errors.flatten()
    if flat.numel() == 0:
        return 0.0
    k = max(1, min(flat.numel(), int(round(EAGER_NOISE_QUANTILE * flat.numel()))))
    return float(flat.kthvalue(k).values)


def judge_against_fp64(expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor,
                       atol: float, rtol: float = 0.0) -> dict:
    """Rule 2 of Note [Tolerance policy]: ours is no less accurate than eager, element by element, against fp64."""
    ours_rmse, ours_max = _errors_vs(reference, actual)
    eager_rmse, eager_max = _errors_vs(reference, expected)
    e, a = _comparable(expected), _comparable(actual)
    same_specials = bool(torch.equal(e.isnan(), a.isnan())) and bool(
        torch.equal(e.isinf(), a.isinf())) and bool(torch.equal(e[e.isinf()], a[a.isinf()]))
    r, e64, a64 = _comparable(reference).double(), e.double(), a.double()
    finite = r.isfinite() & e64.isfinite() & a64.isfinite()
    zero = torch.zeros((), dtype=torch.float64)
    eager_error = torch.where(finite, (e64 - r).abs(), zero)
    ours_error = torch.where(finite, (a64 - r).abs(), zero)
    allowed = FP64_MULTIPLIER * eager_error.clamp_min(_noise_level(eager_error[finite])) + atol + rtol * r.abs()
    failing = (ours_error > allowed) & finite
    count = int(failing.sum())
    result = {"ok": same_specials and count == 0, "ours_rmse": ours_rmse, "eager_rmse": eager_rmse,
              "ours_max_abs": ours_max, "eager_max_abs": eager_max, "failing_elements": count}
    if count:
        worst = int(((ours_error - allowed).masked_fill(~failing, float("-inf"))).flatten().argmax())
        index = list(torch.unravel_index(torch.tensor(worst), r.shape)) if r.dim() else []
        result["worst_index"] = [int(i) for i in index]
        result["worst"] = {"ours": float(a64.flatten()[worst]), "eager": float(e64.flatten()[worst]),
                           "fp64": float(r.flatten()[worst])}
    if not same_specials:
        result["problem"] = "NaN or infinity in other places than eager's"
    return result


def compare_tensor(expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor | None = None,
                   tolerance: dict | None = None) -> dict:
    """One tensor under the whole of Note [Tolerance policy]: rule 1 against eager, then rule 2 against the
    float64 `reference` (when given) where rule 1 fails. The entry verify() reports per output."""
    entry = compare(expected, actual, tolerance)
    entry["close_to_eager"], entry["judged_by"] = entry["ok"], "eager"
    if (reference is None or not expected.dtype.is_floating_point or "problem" in entry
            or reference.shape != expected.shape):
        return entry
    judged = judge_against_fp64(expected, actual, reference, entry["atol"], entry["rtol"])
    entry["fp64"] = judged
    if not entry["ok"] and judged["ok"]:
        entry["ok"], entry["judged_by"] = True, "fp64"
    return entry


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
    """Copies of the inputs in the layout the user gave (strides, expansion, storage offset: the whole storage
    is copied and viewed the same way), so that a model that mutates them sees the same values on every run
    and the compiled code meets the layout it will meet in use. Dense tensors with no offset are cloned."""
    return tuple(torch.utils._pytree.tree_map(
        lambda x: same_layout_copy(x) if isinstance(x, torch.Tensor) else x, list(inputs)))


def same_layout_copy(x: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
    """A copy of x (on `device`, default its own) with its sizes, strides and storage offset."""
    device = x.device if device is None else torch.device(device)
    if x.layout != torch.strided or (x.is_contiguous() and x.storage_offset() == 0):
        return x.to(device, copy=True)
    with torch.no_grad():
        storage = x.untyped_storage()
        flat = x.new_empty(0).set_(storage, 0, (storage.nbytes() // x.element_size(),), (1,)).to(device, copy=True)
        copy = flat.new_empty(0).set_(flat.untyped_storage(), x.storage_offset(), x.size(), x.stride())
    return copy.requires_grad_(x.requires_grad) if x.is_leaf and x.requires_grad else copy


def _is_random(model, inputs, expected_list, tolerance) -> bool:
    """Does eager disagree with itself? Then no comparison can hold (dropout in training, torch.rand)."""
    with torch.no_grad():
        again = flatten_outputs(model(*fresh(inputs)))
    return len(again) != len(expected_list) or not all(
        compare(e, a, tolerance)["ok"] for e, a in zip(expected_list, again))


def verify(model, inputs, outputs, tolerance: dict | None = None, reference: bool = True) -> dict:
    """Run the model eagerly (on copies of `inputs`, which must be the values the compiled run saw) and
    compare every output (Note [Tolerance policy], Note [Verdicts])."""
    with torch.no_grad():
        expected = model(*fresh(inputs))
    expected_list, actual_list = flatten_outputs(expected), flatten_outputs(outputs)
    if len(expected_list) != len(actual_list):
        return {"ok": False, "verdict": "mismatch", "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "outputs": [], "problem": f"eager returned {len(expected_list)} tensors, compiled {len(actual_list)}"}
    if not expected_list:  # (an empty tensor still has its shape and dtype compared)
        return {"ok": False, "verdict": "nothing compared", "max_abs_err": 0.0, "max_rel_err": 0.0, "outputs": [],
                "problem": "the model returned no tensor, so no output could be compared with eager: nothing was "
                           "verified. Return the tensors you want checked."}
    per_output = [compare_tensor(e, a, tolerance=tolerance) for e, a in zip(expected_list, actual_list)]
    result_extra = {}
    if not all(o["ok"] for o in per_output) and _is_random(model, inputs, expected_list, tolerance):
        return {"ok": False, "verdict": "random", "max_abs_err": max(o["max_abs_err"] for o in per_output),
                "max_rel_err": max(o["max_rel_err"] for o in per_output), "outputs": per_output,
                "problem": "the model is random: two eager runs on the same inputs disagree (dropout in training "
                           "mode, torch.rand, ...), so its outputs cannot be checked. Call model.eval(), or make "
                           "the randomness an input."}
    if reference and any(e.dtype.is_floating_point and "problem" not in o for o, e in zip(per_output, expected_list)):
        references, why_not = fp64_reference(model, fresh(inputs))
        if references is None or len(references) != len(expected_list):
            result_extra["fp64"] = why_not or "fp64 run returned a different number of tensors"
        else:
            per_output = [compare_tensor(e, a, r, tolerance)
                          for e, a, r in zip(expected_list, actual_list, references)]
    ok = all(o["ok"] for o in per_output)
    return {
        "ok": ok,
        "verdict": "ok" if ok else "mismatch",
        "max_abs_err": max((o["max_abs_err"] for o in per_output), default=0.0),
        "max_rel_err": max((o["max_rel_err"] for o in per_output), default=0.0),
        "outputs": per_output,
        **result_extra,
    }
