"""Run and verify: the evidence for the verdict (eager's outputs, a float64 run's, a second eager run's) from
the model, judged by engine/verdict.py (Note [Tolerance policy], Note [Verdicts], Note [Verdict from data]).

Note [Float64 reference]
The float64 run upcasts every float32/half input and the model's floating parameters and buffers: a module
is deep-copied and converted; a function's modules (those it closes over, its bound `self`, the globals it
names) are converted in place and given back their very tensors afterwards (a half or float32 value is exact
in float64, so nothing changes). The model's own code computes it: a model that looks at its inputs' dtype
can move its own reference (README, "Security", says what the verdict promises against such a model).
"""
from __future__ import annotations

import contextlib
import copy

import torch

from engine import verdict
from engine.verdict import (COMPLEX_PARTS, FP64_MULTIPLIER, TOLERANCES, Evidence, compare,  # noqa: F401
                            compare_tensor, judge, judge_against_fp64, tolerance_for)

UPCAST = (torch.float32, torch.float16, torch.bfloat16)
_comparable = verdict.comparable


def flatten_outputs(value) -> list:
    """Tensors of any output structure: tuples, lists, dicts, dataclasses, (named) tuples."""
    return verdict.tensors(value)


def _upcast(value):
    if isinstance(value, torch.Tensor) and value.dtype in UPCAST:
        return value.detach().to(torch.float64)
    return value


def _modules_of(fn) -> list[torch.nn.Module]:
    """The modules a function computes with (Note [Float64 reference]): those it closes over, its bound self,
    the globals it names."""
    code, names = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    candidates = [cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ())
                  if _filled(cell)] + [getattr(fn, "__self__", None)]
    candidates += [names.get(name) for name in (code.co_names if code is not None else ())]
    return list({id(m): m for m in candidates if isinstance(m, torch.nn.Module)}.values())


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def _float64_in_place(modules: list[torch.nn.Module]):
    """The modules' floating parameters and buffers in float64 for a while; afterwards each gets back its very
    tensor (Note [Float64 reference])."""
    saved = []
    seen = set()
    try:
        for module in {id(s): s for m in modules for s in m.modules()}.values():
            for name, p in module._parameters.items():
                if p is not None and p.dtype in UPCAST and id(p) not in seen:
                    seen.add(id(p))
                    saved.append((p, p.data))
                    p.data = p.data.to(torch.float64)
            for name, b in list(module._buffers.items()):
                if b is not None and b.dtype in UPCAST:
                    saved.append((module, name, b))
                    module._buffers[name] = b.to(torch.float64)
        yield
    finally:
        for item in reversed(saved):
            if len(item) == 2:
                item[0].data = item[1]
            else:
                item[0]._buffers[item[1]] = item[2]


def fp64_leaves(model, inputs) -> tuple[list | None, str]:
    """The leaves of the model's outputs on float64 inputs and parameters (Note [Float64 reference]), or
    (None, why not)."""
    modules = [] if isinstance(model, torch.nn.Module) else _modules_of(model)
    if not any(isinstance(x, torch.Tensor) and x.dtype in UPCAST for x in torch.utils._pytree.tree_leaves(
            list(inputs))) and not isinstance(model, torch.nn.Module) and not modules:
        return None, "no low-precision floating input or parameter"
    try:
        upcast = torch.utils._pytree.tree_map(_upcast, list(inputs))
        if isinstance(model, torch.nn.Module):
            with torch.no_grad():
                return verdict.leaves(copy.deepcopy(model).to(torch.float64)(*upcast)), ""
        with torch.no_grad(), _float64_in_place(modules):
            return verdict.leaves(model(*upcast)), ""
    except Exception as error:  # the model may insist on its dtypes: then rule 1 alone decides
        return None, f"model does not run in float64 ({type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''})"


def fp64_reference(model, inputs) -> tuple[list | None, str]:
    """The model's tensor outputs on float64 inputs (and float64 parameters), or (None, why not)."""
    found, why_not = fp64_leaves(model, inputs)
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
    with torch.no_grad():
        eager = verdict.leaves(model(*fresh(inputs)))
    found = Evidence(eager, verdict.leaves(outputs), tolerance=tolerance)
    if reference and _floating(eager):
        found.fp64, found.fp64_why_not = fp64_leaves(model, fresh(inputs))
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
    finally:
        _COLLECTORS.remove(found)


def verify(model, inputs, outputs, tolerance: dict | None = None, reference: bool = True) -> dict:
    """Run the model eagerly (and in float64) and judge every leaf of the outputs (Note [Tolerance policy],
    Note [Verdicts])."""
    found = evidence(model, inputs, outputs, tolerance, reference)
    for collector in _COLLECTORS:
        collector.append(found)
    return judge(found)
