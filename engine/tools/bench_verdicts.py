"""The engine's verdict on a compiled run's outputs, for the benches (`bench gpu`, `bench gemm`)."""
from __future__ import annotations


class Verdicts:
    """The engine's verdict on a compiled run's outputs (Note [Tolerance policy] in engine/run.py): close to
    eager, or where not, no less accurate than eager against a float64 run of the model. The float64 reference
    is computed once per case, only when some output of ours or Inductor's is not close to eager (a bf16 model
    whose eager output is itself far from the true result: hf_llama_prefill flagged both compilers by a bf16
    tolerance of the bench's own), so the verdict is the one `explore` gives
    (bench gpu's zoo; bench gemm's end-to-end cases, where the same bf16 Llama prefill had both compilers
    'WRONG' by the bench's fixed tolerance on an H200)."""

    def __init__(self, model, inputs, expected: list, tolerance: dict | None):
        self.model, self.inputs, self.expected, self.tolerance = model, inputs, expected, tolerance
        self.references, self.fp64_note = None, ""

    def _reference(self) -> list | None:
        from engine.run import fp64_reference, fresh

        if self.references is None and not self.fp64_note:
            references, why_not = fp64_reference(self.model, fresh(self.inputs))
            if references is None or len(references) != len(self.expected):
                self.fp64_note = why_not or "the float64 run returned a different number of tensors"
            else:
                self.references, self.fp64_note = references, "computed (some output not close to eager)"
        return self.references

    def __call__(self, name: str, actual: list) -> dict:
        from engine.run import compare_tensor

        if len(actual) != len(self.expected):
            return {f"{name}_ok": False, f"{name}_max_abs_err": float("inf")}
        checks = [compare_tensor(e, a, tolerance=self.tolerance) for e, a in zip(self.expected, actual)]
        if not all(c["ok"] for c in checks) and self._reference() is not None:
            checks = [compare_tensor(e, a, r, self.tolerance) for e, a, r in zip(self.expected, actual,
                                                                                  self.references)]
        return {f"{name}_ok": all(c["ok"] for c in checks),
                f"{name}_max_abs_err": max((c["max_abs_err"] for c in checks), default=0.0),
                f"{name}_judged_by": "fp64" if any(c["judged_by"] == "fp64" for c in checks) else "eager"}
