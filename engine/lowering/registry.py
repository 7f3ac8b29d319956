"""The lowering registry: ATen op -> function that builds loop IR.

Extension is by decorator into one plain dict, the way Inductor does it:

    @register_lowering(aten.relu)
    def relu(x): ...

A lowering receives the op's arguments with every tensor replaced by a TensorValue and every SymInt by a
sympy expression, and returns a TensorValue (or a tuple of them). It may raise `Unsupported(reason)`, and
then the op runs eagerly as a visible Fallback node instead. `current()` is the graph being lowered: it
knows the ATen node at hand (its output shape and dtype) and registers new IR nodes.
"""
from __future__ import annotations

import threading
from typing import Callable

import torch

LOWERINGS: dict[object, Callable] = {}


class Unsupported(Exception):
    """A lowering declines this call; the op becomes a Fallback with this reason."""


class DuplicateLowering(Exception):
    """Two lowerings claim one ATen overload: the later would silently replace the earlier."""


def _overloads(target) -> list:
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, name) for name in target.overloads()]
    return [target]


def register_lowering(*targets):
    def decorate(fn):
        overloads = [overload for target in targets for overload in _overloads(target)]
        for overload in overloads:  # all checked before any is added: a refused decorator changes nothing
            if overload in LOWERINGS:
                previous = LOWERINGS[overload]
                raise DuplicateLowering(f"{overload} already lowers through {previous.__module__}."
                                        f"{previous.__qualname__}; {fn.__module__}.{fn.__qualname__} "
                                        f"would replace it")
        for overload in overloads:
            LOWERINGS[overload] = fn
        return fn

    return decorate


def lowering_for(target) -> Callable | None:
    return LOWERINGS.get(target)


_state = threading.local()


def current():
    graph = getattr(_state, "graph", None)
    if graph is None:
        raise RuntimeError("lowering called outside GraphLowering.run()")
    return graph


def set_current(graph) -> object:
    previous = getattr(_state, "graph", None)
    _state.graph = graph
    return previous
