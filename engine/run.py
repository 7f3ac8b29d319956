"""Run and verify: the evidence for the verdict (eager's outputs, a float64 run's, a second eager run's) from
the model, judged by engine/verdict.py (Note [Tolerance policy], Note [Verdicts], Note [Verdict from data]).

The float64 reference is not the model's own float64 run: it is eager's run, shadowed op by op in float64
(engine/shadow64.py, Note [Float64 shadow]), so a model that looks at its inputs' dtype cannot move it.
"""
from __future__ import annotations

import contextlib

import torch

from engine import shadow64, verdict
from engine.verdict import (COMPLEX_PARTS, FP64_MULTIPLIER, TOLERANCES, Evidence, compare,  # noqa: F401
                            compare_tensor, judge, judge_against_fp64, tolerance_for)

_comparable = verdict.comparable


def flatten_outputs(value) -> list:
    """Tensors of any output structure: tuples, lists, dicts, dataclasses, (named) tuples."""
    return verdict.tensors(value)


def eager_with_fp64(model, inputs, reference: bool = True) -> tuple[list, list | None, str]:
    """(eager's output leaves, the float64 leaves of the same run, why not) on copies of `inputs`: one eager
    run under the float64 shadow (Note [Float64 shadow]); the model is never called in float64."""
    copies = fresh(inputs)
    if not reference:
        with torch.no_grad():
            return verdict.leaves(model(*copies)), None, ""
    try:
        with torch.no_grad():
            outputs, mode = shadow64.under_shadow(model, *copies)
    except Exception as error:  # the model raised only under the shadow: eager without it, rule 1 alone decides
        with torch.no_grad():
            eager = verdict.leaves(model(*fresh(inputs)))
        return eager, None, f"the float64 shadow of eager's run failed ({type(error).__name__}: {str(error)[:120]})"
    eager = verdict.leaves(outputs)
    return eager, shadow64.shadow_leaves(mode, eager), ""


def fp64_reference(model, inputs) -> tuple[list | None, str]:
    """The float64 values of the model's tensor outputs (Note [Float64 shadow]), or (None, why not)."""
    _, found, why_not = eager_with_fp64(model, inputs)
    return ([leaf for _, leaf in found if isinstance(leaf, torch.Tensor)] if found is not None else None), why_not


def fresh(inputs) -> tuple:
    """Copies of the inputs in the layout the user gave (strides, expansion, storage offset: the whole storage
    is copied and viewed the same way), so that a model that mutates them sees the same values on every run
    and the compiled code meets the layout it will meet in use. Dense tensors with no offset are cloned."""
    return tuple(torch.utils._pytree.tree_map(
        lambda x: same_layout_copy(x) if isinstance(x, torch.Tensor) else x, list(inputs)))


DYNAMIC_MARKS = ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices",
                 "_dynamo_strict_unbacked_indices", "_dynamo_static_indices", "_dynamo_dynamic_range")


def same_layout_copy(x: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
    """A copy of x (on `device`, default its own) with its sizes, strides and storage offset, and the dims the
    user marked dynamic (Note [Dynamic marks travel with copies])."""
    device = x.device if device is None else torch.device(device)
    if x.layout != torch.strided or (x.is_contiguous() and x.storage_offset() == 0):
        return _with_marks(x, x.to(device, copy=True))
    with torch.no_grad():
        storage = x.untyped_storage()
        flat = x.new_empty(0).set_(storage, 0, (storage.nbytes() // x.element_size(),), (1,)).to(device, copy=True)
        copy = flat.new_empty(0).set_(flat.untyped_storage(), x.storage_offset(), x.size(), x.stride())
    return _with_marks(x, copy.requires_grad_(x.requires_grad) if x.is_leaf and x.requires_grad else copy)


def _with_marks(x: torch.Tensor, copy: torch.Tensor) -> torch.Tensor:
    # Note [Dynamic marks travel with copies]
    # torch._dynamo.mark_dynamic(x, 0) is an attribute on the tensor object (a set of dims), and Dynamo reads it
    # from the tensor it is called with. Every run hands the model fresh copies of the example inputs, so a mark
    # the model file (or the recompile what-if) put on an example tensor is copied onto its copy; without this
    # the mark is silently lost and the compile specializes the size it was asked to keep symbolic.
    for name in DYNAMIC_MARKS:
        if hasattr(x, name):
            value = getattr(x, name)
            setattr(copy, name, value.copy() if hasattr(value, "copy") else value)
    return copy


def _floating(entries: list) -> bool:
    return any((isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()))
               or (isinstance(v, (float, complex)) and not isinstance(v, bool)) for _, v in entries)


def evidence(model, inputs, outputs, tolerance: dict | None = None, reference: bool = True) -> Evidence:
    """Everything the verdict needs, as values (Note [Verdict from data]): eager's outputs (on copies of
    `inputs`, which must be the values the compiled run saw), the float64 run's, and a second eager run's when
    an output is not close to eager (to tell a random model from a wrong compile, Note [Verdict from data])."""
    tolerance = verdict.validate_tolerance(tolerance)
    eager, fp64, why_not = eager_with_fp64(model, inputs, reference)
    found = Evidence(eager, verdict.leaves(outputs), tolerance=tolerance)
    if reference and _floating(eager):
        found.fp64, found.fp64_why_not = fp64, why_not
    if not all(o.get("close_to_eager") for o in judge(Evidence(eager, found.ours, tolerance=tolerance))["outputs"]):
        with torch.no_grad():
            found.again = verdict.leaves(model(*fresh(inputs)))
    return found


_COLLECTORS: list[list[Evidence]] = []


@contextlib.contextmanager
def collect_evidence():
    """Every Evidence verify() gathers meanwhile, in order (explore's first call, then its other input sets):
    what a sandboxed job hands back for its parent to judge (Note [Verdict from data])."""
    found: list[Evidence] = []
    _COLLECTORS.append(found)
    try:
        yield found
    finally:  # by identity: two collectors open at once hold equal lists (the same evidence)
        del _COLLECTORS[next(n for n, c in enumerate(_COLLECTORS) if c is found)]


def evidence_collectors() -> list[list]:
    """The collectors open now (collect_evidence): a training step adds its evidence to them too."""
    return list(_COLLECTORS)


def verify(model, inputs, outputs, tolerance: dict | None = None, reference: bool = True) -> dict:
    """Run the model eagerly (and in float64) and judge every leaf of the outputs (Note [Tolerance policy],
    Note [Verdicts])."""
    found = evidence(model, inputs, outputs, tolerance, reference)
    for collector in _COLLECTORS:
        collector.append(found)
    return judge(found)
