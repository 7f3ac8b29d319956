"""Run and verify: compiled outputs against eager, with a per-dtype tolerance policy.

Note [Tolerance policy]
Compiled code may reorder float arithmetic (fusion, vectorized reductions) and compute half types in
float32, so results differ from eager by rounding. Per dtype (atol, rtol), modeled on torch.testing's
defaults: float64 1e-7/1e-7, float32 1e-4/1.3e-5 (loosened to 1e-4/1e-4 for reordered reductions),
bfloat16 1e-2/1.6e-2, float16 1e-3/1e-3; integers and bools exactly. A model file may set `tolerance`.
"""
from __future__ import annotations

import dataclasses

import torch

TOLERANCES = {
    torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1.6e-2),
    torch.float16: (1e-3, 1e-3),
}


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


def compare(expected: torch.Tensor, actual: torch.Tensor, tolerance: dict | None = None) -> dict:
    atol, rtol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    if tolerance:
        atol, rtol = tolerance.get("atol", atol), tolerance.get("rtol", rtol)
    result = {"shape": list(expected.shape), "dtype": str(expected.dtype).replace("torch.", ""),
              "atol": atol, "rtol": rtol}
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return {**result, "ok": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "problem": f"got {actual.dtype}{list(actual.shape)}"}
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


def verify(model, inputs, outputs, tolerance: dict | None = None) -> dict:
    """Run the model eagerly and compare every output."""
    with torch.no_grad():
        expected = model(*inputs)
    expected_list, actual_list = flatten_outputs(expected), flatten_outputs(outputs)
    if len(expected_list) != len(actual_list):
        return {"ok": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"), "outputs": [],
                "problem": f"eager returned {len(expected_list)} tensors, compiled {len(actual_list)}"}
    per_output = [compare(e, a, tolerance) for e, a in zip(expected_list, actual_list)]
    return {
        "ok": all(o["ok"] for o in per_output),
        "max_abs_err": max((o["max_abs_err"] for o in per_output), default=0.0),
        "max_rel_err": max((o["max_rel_err"] for o in per_output), default=0.0),
        "outputs": per_output,
    }
