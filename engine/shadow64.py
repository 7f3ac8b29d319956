"""The float64 reference, computed from the ATen ops of eager's own run rather than by the model's code.

Note [Float64 shadow]
The fp64 rule (Note [Tolerance policy] in engine/verdict.py) needs the true result of the computation eager
did. Calling the model on float64 inputs lets the model choose it: a model that looks at its inputs' dtype
(or checks torch.compiler.is_compiling(), with a compiled program that is wrong by construction) returned
what it liked in float64 and had a wrong output "judged by fp64". So the model is never called in float64.
Its one eager run (the reference run, on its own dtypes) goes under a dispatch mode that, for every ATen op
eager executes, executes the same op once more on float64 shadows of its tensor arguments:

- a tensor the mode has not seen (an input, a parameter, a constant) gets as shadow a float64 copy of its
  value at first use (integer and bool tensors: a copy, so that an in-place op never runs twice on it);
- floating dtypes named in an op's arguments (`.half()`, `empty(dtype=...)`) become float64, so casts to half
  precision do not round the shadow;
- an op whose outputs a shadow cannot reproduce (random draws: the RNG must advance once, as in eager;
  bit casts; an op with no float64 kernel) gives the float64 value of eager's own output as its shadow.

The model's code sees only its own dtypes, so nothing it tests can steer the reference; a shadow that loses
track of a tensor (written through numpy, outside ATen) falls back to eager's value, which makes the fp64
rule stricter (eager's error is then 0), not looser. Decisions (argmax, top-k, a ReLU's sign) are the
shadow's own, as in a float64 run; Python control flow follows eager's values. `.item()` results are kept
so that a Python-number output finds its float64 value. Half-precision kernels that fail in float64 on the
GPU (flash attention) are computed by the math reference (SHADOW_RULES).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten
FLOAT64 = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
           torch.float64: torch.float64, torch.complex32: torch.complex128, torch.complex64: torch.complex128,
           torch.complex128: torch.complex128}
OPAQUE = {aten.view.dtype}  # bit casts: the shadow's bits are not eager's

# op -> fn(arguments by name, real outputs) -> shadow outputs (Note [Float64 shadow])
SHADOW_RULES: dict = {}


def shadow_rule(*names: str) -> Callable:
    def register(fn):
        for name in names:
            packet = getattr(aten, name, None)
            if packet is not None:
                SHADOW_RULES[packet.default] = fn
        return fn
    return register


def _wide(value):
    """A floating dtype named in an op's arguments, in float64."""
    return FLOAT64.get(value, value) if isinstance(value, torch.dtype) else value


def bind(func, args, kwargs) -> dict:
    """An op's arguments by their schema's names, defaults filled in."""
    bound = {}
    for i, argument in enumerate(func._schema.arguments):
        if i < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[i]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


def deterministic(func, bound: dict) -> bool:
    """Whether the op draws no random number: not seeded, or a dropout of probability 0 (or not training)."""
    if torch.Tag.nondeterministic_seeded not in func.tags:
        return True
    if bound.get("dropout_p", None) == 0 or (func is aten.native_dropout.default and not bound.get("train")):
        return True
    return False


@shadow_rule("_softmax", "_log_softmax")
def _softmax(func, bound, real):
    # half_to_float applies to half inputs only, and the shadow is float64
    return func(bound["self"], bound["dim"], False)


@shadow_rule("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
def _attention(func, bound, real):
    """Fused attention kernels have no float64 kernel on the GPU: the shadow computes the attention with the
    math reference; the other outputs (logsumexp, seeds: for the backward) are eager's, widened."""
    query, key, value = bound["query"], bound["key"], bound["value"]
    mask = bound.get("attn_bias", bound.get("attn_mask"))
    if isinstance(mask, torch.Tensor) and mask.dtype.is_floating_point:
        mask = mask.to(query.dtype)
    out = aten._scaled_dot_product_attention_math.default(query, key, value, mask, 0.0, bool(bound["is_causal"]),
                                                          scale=bound.get("scale"))[0]
    return (out, *[_widened(r) for r in real[1:]])


def _widened(value):
    """The float64 value of one of eager's outputs (a shadow that follows eager)."""
    if isinstance(value, torch.Tensor):
        with torch.no_grad():
            return value.detach().to(FLOAT64.get(value.dtype, value.dtype), copy=True)
    return value


class Float64Shadow(TorchDispatchMode):
    """While active, every ATen op also runs on float64 shadows (Note [Float64 shadow]); `shadow_of(t)` is a
    tensor's float64 value, `scalar_of(x)` an `.item()` result's."""

    def __init__(self):
        super().__init__()
        self.shadows = WeakIdKeyDictionary()
        self.scalars: dict = {}  # eager's .item() value -> the shadow's (None where two shadows disagree)
        self.failed: set[str] = set()  # ops whose shadow fell back to eager's value

    def shadow_of(self, tensor: torch.Tensor) -> torch.Tensor:
        found = self.shadows.get(tensor)
        if found is None:
            found = _widened(tensor)
            self.shadows[tensor] = found
        return found

    def scalar_of(self, value):
        """The float64 value of a Python number eager's run produced by `.item()`, or None."""
        return self.scalars.get(value) if isinstance(value, (float, complex)) and not isinstance(value, bool) else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        # shadows of the arguments before the op runs: an in-place op must not change the value a shadow starts from
        try:
            shadow_args = tree_unflatten([self.shadow_of(v) if isinstance(v, torch.Tensor) else _wide(v)
                                          for v in flat], spec)
        except Exception:  # a tensor that cannot be copied to float64 (a subclass, meta): eager's outputs
            shadow_args = None
        real = func(*args, **kwargs)
        try:
            if shadow_args is None:
                raise ValueError("no float64 shadow of the arguments")
            self._follow(func, real, shadow_args)
        except Exception:  # no float64 kernel, a shape the shadow cannot take: eager's value, widened
            self.failed.add(str(func))
            self._follow_eager(real)
        return real

    def _follow(self, func, real, shadow_args) -> None:
        if func in OPAQUE or not deterministic(func, bind(func, *shadow_args)):
            self._follow_eager(real)  # a random draw runs once (the RNG advances as in eager); bit casts
            return
        args, kwargs = shadow_args
        with torch.no_grad():
            rule = SHADOW_RULES.get(func)
            shadow = rule(func, bind(func, args, kwargs), real) if rule is not None else func(*args, **kwargs)
        if func is aten._local_scalar_dense.default:
            self._keep_scalar(real, shadow)
            return
        real_leaves, shadow_leaves = tree_flatten(real)[0], tree_flatten(shadow)[0]
        if len(real_leaves) != len(shadow_leaves):
            raise ValueError("the shadow's outputs do not match eager's")
        followed = []
        for r, s in zip(real_leaves, shadow_leaves):
            if not isinstance(r, torch.Tensor):
                continue
            if isinstance(s, torch.Tensor) and s.dtype != FLOAT64.get(r.dtype, r.dtype) and (
                    s.is_floating_point() and r.is_floating_point()):
                s = s.to(FLOAT64[s.dtype])  # a float32 result of the default dtype (int * 0.5): widened
            if not isinstance(s, torch.Tensor) or s.shape != r.shape or s.dtype != FLOAT64.get(r.dtype, r.dtype):
                raise ValueError("the shadow's output is not eager's in float64")
            followed.append((r, s))
        for r, s in followed:
            self.shadows[r] = s

    def _follow_eager(self, real) -> None:
        for r in tree_flatten(real)[0]:
            if isinstance(r, torch.Tensor):
                self.shadows[r] = _widened(r)

    def _keep_scalar(self, real, shadow) -> None:
        if not isinstance(real, (float, complex)) or isinstance(real, bool) or (
                isinstance(real, float) and math.isnan(real)):
            return
        if real in self.scalars and self.scalars[real] != shadow:
            self.scalars[real] = None  # two .item() calls gave this value with other shadows: ambiguous
        else:
            self.scalars[real] = shadow


def shadow_leaves(mode: Float64Shadow, leaves: list) -> list:
    """(path, float64 value) for each leaf of eager's outputs (engine/verdict.py leaves()): a floating tensor's
    shadow, a Python number's `.item()` shadow (or the number itself), other leaves as they are."""
    found = []
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            found.append((path, mode.shadow_of(leaf)))
        elif isinstance(leaf, float):
            shadow = mode.scalar_of(leaf)
            found.append((path, float(shadow) if isinstance(shadow, (int, float)) else leaf))
        elif isinstance(leaf, complex):
            shadow = mode.scalar_of(leaf)
            found.append((path, complex(shadow) if isinstance(shadow, (int, float, complex)) else leaf))
        else:
            found.append((path, leaf))
    return found


def under_shadow(fn: Callable, *args):
    """(fn(*args), the mode that shadowed it): fn's result is eager's own, unchanged."""
    mode = Float64Shadow()
    with mode:
        result = fn(*args)
    return result, mode


