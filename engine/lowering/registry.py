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


def register_lowering(*targets):
    def decorate(fn):
        for target in targets:
            if isinstance(target, torch._ops.OpOverloadPacket):
                for overload in target.overloads():
                    LOWERINGS[getattr(target, overload)] = fn
            else:
                LOWERINGS[target] = fn
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
