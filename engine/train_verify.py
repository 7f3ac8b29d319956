"""A training step (output -> loss -> backward) run compiled and eagerly, and its gradients compared.

Note [Training step]
`explore(..., train=True)` compiles a copy of the model and runs one step: the model's output goes through
`loss_fn(output, *inputs)` (a model file may define it) or, by default, the sum of every floating output,
then `.backward()`. Floating inputs get requires_grad, so their gradients are checked too; parameters frozen
with requires_grad=False get no gradient and are listed as skipped. The eager reference is another copy of
the model, taken before the compiled step, so both start from the same parameters and buffers (batch norm's
running stats move in both; we compare them after the step as well).

Note [Same RNG state]
A model with dropout draws a random mask on every call. We keep aten.native_dropout whole (decompose.py):
its Fallback calls eager's kernel, in the graph's order, which is the model's order. So the eager step is run
from the RNG state the compiled step started from, and both draw the same masks. A model drawing random
numbers our compiled code makes itself (none today: random ops are Fallbacks) would differ; verify then
says the step is random instead of failing on every tensor.

Every tensor (loss, outputs, gradients named by parameter path or input position, buffers) is judged by
verdict.py's per-tensor policy (Note [Tolerance policy]), with the float64 rule from the float64 shadow of
eager's step, from values alone (engine/train_verdict.py, Note [Training verdict from data]); the result has a
`verdict` ("ok", "mismatch", "random") and a `reference` in words.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine import eager_spread, run, shadow64, train_verdict, verdict
from engine.train_verdict import TrainingEvidence


class TrainingInputError(ValueError):
    """The model cannot be trained as given; the message says why in plain words."""


def default_loss(output, *inputs) -> torch.Tensor:
    floating = [t for t in run.flatten_outputs(output) if t.dtype.is_floating_point or t.dtype.is_complex]
    if not floating:
        raise TrainingInputError(
            "the model returns no floating-point tensor (integer or bool outputs only), so there is nothing to "
            "differentiate. Return a floating output, or define `loss_fn(output, *inputs)` in the model file.")
    return sum(t.float().sum() if t.dtype in (torch.float16, torch.bfloat16) else t.sum() for t in floating)


def _leaf_inputs(inputs, frozen: frozenset = frozenset()) -> tuple:
    """Fresh copies; floating tensors (but the leaves numbered in `frozen`) require grad: their gradient is
    checked."""
    leaves, spec = torch.utils._pytree.tree_flatten(list(inputs))
    prepared = []
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor):
            x = x.detach().clone()
            if x.dtype.is_floating_point and i not in frozen:
                x.requires_grad_(True)
        prepared.append(x)
    return tuple(torch.utils._pytree.tree_unflatten(prepared, spec))


def _input_leaves(inputs) -> list[tuple[str, torch.Tensor]]:
    leaves = torch.utils._pytree.tree_leaves(list(inputs))
    return [(f"input[{i}]", x) for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.requires_grad]


@dataclass
class StepResult:
    outputs: Any
    loss: torch.Tensor
    gradients: dict[str, torch.Tensor | None]  # name -> .grad (None: no gradient reached it)
    buffers: dict[str, torch.Tensor]


@dataclass
class TrainingStep:
    """Note [Training step]. `model` is the copy to compile; `run(compiled)` does the compiled step."""
    original: Callable
    inputs: tuple
    loss_fn: Callable | None = None
    model: Callable = None
    reference: Callable = None
    frozen_inputs: frozenset = frozenset()  # input leaves not differentiated (changed in place)
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rng_state: torch.Tensor | None = None
    compiled_result: StepResult | None = None

    def __post_init__(self):
        module = isinstance(self.original, torch.nn.Module)
        self.model = copy.deepcopy(self.original) if module else self.original
        self.reference = copy.deepcopy(self.original) if module else self.original
        if module:
            self.skipped = [name for name, p in self.original.named_parameters() if not p.requires_grad]
            if self.skipped:
                self.notes.append(f"{len(self.skipped)} parameter(s) frozen with requires_grad=False get no "
                                  f"gradient and are not checked: {', '.join(self.skipped)}")
        self._check_input_grads()

    def _check_input_grads(self) -> None:
        """Autograd forbids two things on inputs that require grad: an in-place op on a leaf, and setting
        requires_grad on a view of one (HuBERT's feature extractor sets it on input_values[:, None]). A dry run
        of the model with inputs that require grad tells; where it raises and a run without them does not, the
        inputs the model changes in place, or else all of them, are not differentiated, and we say so."""
        leaves = torch.utils._pytree.tree_leaves(list(self.inputs))
        if not any(isinstance(x, torch.Tensor) and x.dtype.is_floating_point for x in leaves):
            return
        try:
            with torch.enable_grad():
                self._dry_model()(*_leaf_inputs(self.inputs, self.frozen_inputs))
            return
        except Exception as error:
            refused = f"{type(error).__name__}: {str(error).strip()[:200]}"
        copies = run.fresh(self.inputs)
        try:
            with torch.no_grad():
                self._dry_model()(*copies)
        except Exception:
            return  # the step itself will report it
        changed = frozenset(i for i, (before, after) in enumerate(zip(leaves, torch.utils._pytree.tree_leaves(
            list(copies)))) if isinstance(before, torch.Tensor) and before.dtype.is_floating_point
            and not torch.equal(before, after))
        if changed:
            self.frozen_inputs = changed
            self.notes.append(f"the model changes input(s) {', '.join(f'input[{i}]' for i in sorted(changed))} in "
                              "place, which autograd forbids on a tensor that requires grad: they are not "
                              "differentiated. Clone an input inside the model to get its gradient.")
            return
        self.frozen_inputs = frozenset(i for i, x in enumerate(leaves)
                                       if isinstance(x, torch.Tensor) and x.dtype.is_floating_point)
        self.notes.append(f"the model raises when its inputs require grad ({refused}) and runs when they do not: "
                          "its inputs are not differentiated, and their gradients are not checked.")

    def _dry_model(self):
        return copy.deepcopy(self.reference) if isinstance(self.reference, torch.nn.Module) else self.reference

    def _step(self, fn: Callable, owner) -> StepResult:
        """One step of `fn`; `owner` is the module whose parameters and buffers it trains (None: a function)."""
        inputs = _leaf_inputs(self.inputs, self.frozen_inputs)
        with torch.enable_grad():
            outputs = fn(*inputs)
            loss = (self.loss_fn or default_loss)(outputs, *inputs)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TrainingInputError(f"loss_fn must return a one-element tensor, got {_describe(loss)}")
            if not loss.requires_grad:
                raise TrainingInputError(
                    "the loss has no gradient path: no output depends on a parameter or an input that requires "
                    "grad (every parameter frozen, outputs detached or computed under no_grad, or only integer "
                    "math). There is no backward pass to compile.")
            loss.backward()
        gradients, buffers = {}, {}
        if owner is not None:
            gradients = {f"param:{n}": p.grad for n, p in owner.named_parameters() if p.requires_grad}
            buffers = {f"buffer:{n}": b.detach().clone() for n, b in owner.named_buffers() if b.dtype.is_floating_point}
        gradients.update({name: x.grad for name, x in _input_leaves(inputs)})
        return StepResult(outputs, loss.detach(), gradients, buffers)

    def _owner(self, model):
        return model if isinstance(model, torch.nn.Module) else None

    def run(self, compiled: Callable) -> StepResult:
        """The compiled step (Note [Same RNG state]: remembers where the RNG started)."""
        self.rng_state = torch.get_rng_state()
        self.compiled_result = self._step(compiled, self._owner(self.model))
        return self.compiled_result

    def eager(self, model: Callable | None = None, inputs: tuple | None = None) -> StepResult:
        """An eager step of the reference (or of `model` on `inputs`) from the compiled step's RNG state."""
        after = torch.get_rng_state()
        torch.set_rng_state(self.rng_state)
        try:
            if model is None:
                return self._step(self.reference, self._owner(self.reference))
            step = TrainingStep(model, inputs, self.loss_fn, frozen_inputs=self.frozen_inputs)
            return step._step(step.reference, step._owner(step.reference))
        finally:
            torch.set_rng_state(after)

    def evidence(self, tolerance: dict | None = None) -> TrainingEvidence:
        """The step's evidence as values (Note [Training verdict from data]): eager's step under the float64
        shadow (so every tensor has its float64 value, Note [Float64 shadow]), ours, and when some tensor is not
        close to eager a second eager step's loss."""
        tolerance = verdict.validate_tolerance(tolerance)
        mode = shadow64.Float64Shadow()
        why_not = ""
        try:
            with mode:
                eager = self.eager()
        except Exception as error:  # the model raised only under the shadow: eager alone, rule 1 decides
            eager, mode = self.eager(), None
            why_not = f"the float64 shadow of eager's step failed ({type(error).__name__}: {str(error)[:120]})"
        pairs = [(name, e, a) for name, (e, a) in self._pairs(eager, self.compiled_result).items()]
        fp64 = {} if mode is None else {name: mode.shadow_of(e) for name, e, _ in pairs
                                        if isinstance(e, torch.Tensor) and (e.is_floating_point() or e.is_complex())}
        found = TrainingEvidence(pairs, fp64, why_not, skipped=list(self.skipped), notes=list(self.notes),
                                 tolerance=tolerance)
        if not train_verdict.close_to_eager(pairs, tolerance):
            again = self.eager(self.original, self.inputs)
            found.again_loss, found.rerun = again.loss, self._named(again)
        return found

    def verify(self, tolerance: dict | None = None) -> dict:
        """Every tensor of the step judged by Note [Tolerance policy] (engine/train_verdict.py), and where that
        fails, again within eager's own spread (Note [Eager's own spread]: two or three more eager steps, taken
        only then); the evidence goes to run.collect_evidence's collectors too, for a judge outside the job."""
        found = self.evidence(tolerance)
        result = train_verdict.judge(found)
        if result["verdict"] == "mismatch" and found.rerun and found.fp64:
            found.repeats = self._repeats()
            result = train_verdict.judge(found)
        for collector in run.evidence_collectors():
            collector.append(found)
        return result

    def _repeats(self) -> list[list]:
        """Eager's step with every floating input and parameter one ulp up, then down, and on the CPU with one
        more thread (Note [Eager's own spread] in engine/eager_spread.py), each as named tensors."""
        repeats = []
        for toward in (math.inf, -math.inf):
            model = copy.deepcopy(self.original) if isinstance(self.original, torch.nn.Module) else self.original
            inputs = run.fresh(self.inputs)
            floating = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
            floating += [x for x in torch.utils._pytree.tree_leaves(list(inputs))
                         if isinstance(x, torch.Tensor) and x.is_floating_point()]
            eager_spread.nudge_(floating, toward)
            repeats.append(self._named(self.eager(model, inputs)))
        tensors = [x for x in torch.utils._pytree.tree_leaves(list(self.inputs)) if isinstance(x, torch.Tensor)]
        if all(x.device.type == "cpu" for x in tensors):
            threads = torch.get_num_threads()
            torch.set_num_threads(threads + 1)  # another split of each parallel sum
            try:
                repeats.append(self._named(self.eager(self.original, self.inputs)))
            finally:
                torch.set_num_threads(threads)
        return repeats

    def _named(self, result: StepResult) -> list:
        """A step's tensors by the names the check gives them."""
        return [(name, value) for name, (_, value) in self._pairs(result, result).items()]

    @staticmethod
    def _pairs(eager: StepResult, ours: StepResult) -> dict[str, tuple]:
        """name -> (eager's tensor, ours) for the loss, the outputs, the gradients and the buffers."""
        pairs = {"loss": (eager.loss, ours.loss)}
        pairs.update({f"output[{i}]": (e.detach(), a.detach()) for i, (e, a) in enumerate(zip(
            run.flatten_outputs(eager.outputs), run.flatten_outputs(ours.outputs)))})
        pairs.update({name: (expected, ours.gradients.get(name)) for name, expected in eager.gradients.items()})
        pairs.update({n: (e, ours.buffers[n]) for n, e in eager.buffers.items() if n in ours.buffers})
        return pairs


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return type(value).__name__
