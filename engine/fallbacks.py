"""Loud fallbacks: what ran eagerly because of us, said to an engine.compile user as a Python warning.

Note [A fallback is loud]
A graph whose compile or first run raised runs its ATen graph eagerly (Note [Internal failure falls back to eager]
in pipeline.py), and an op we do not lower runs eagerly as a Fallback node. explore() writes both into the record;
engine.compile() has no record, so each becomes one FallbackWarning per graph and reason, naming the stage, the
reason and the user's line, and a bench row built on such a compile says it fell back rather than passing its
time off as ours. Python's warning filters still apply (a user may silence or escalate the class).
"""
from __future__ import annotations

import warnings
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from engine.capture import user_source_line
from engine.ir.nodes import Fallback


class FallbackWarning(UserWarning):
    """Glassbox ran part of a model eagerly: a whole graph (our compile or first run raised) or an op we do
    not lower. The message names the stage, the reason and the user's source line; `.eager_run` holds them
    as data."""

    def __init__(self, message: str, eager_run: "EagerRun | None" = None):
        # a plain message first: tools rebuild a warning from its class and text (pytest-xdist's workers do)
        super().__init__(message)
        self.eager_run = eager_run


@dataclass(frozen=True)
class EagerRun:
    """One thing that ran eagerly: `scope` is "graph" (the whole graph) or "op" (the named ops)."""
    scope: str
    stage: str
    reason: str
    where: str  # "file.py:12", or "" when no user line is known
    ops: tuple[str, ...] = ()

    def row_text(self) -> str:
        """How a bench table marks a row built on this (Note [A fallback is loud])."""
        if self.scope == "graph":
            return f"fell back: {self.stage} stage, {self.reason}"
        return f"ran eagerly: {', '.join(self.ops)} ({self.reason})"

    def message(self) -> str:
        at = f" (at {self.where})" if self.where else ""
        if self.scope == "graph":
            return (f"Glassbox: the whole graph{at} ran eagerly: our {self.stage} stage failed: {self.reason}. "
                    "Its results are eager's; its time is not ours.")
        return (f"Glassbox: {', '.join(self.ops)} ran eagerly{at}: {self.reason}. The rest of the graph is "
                "compiled.")


def user_line(nodes) -> str:
    """The first user source line among FX nodes, as "file:line" ("" if none has one)."""
    for node in nodes:
        where = user_source_line(node.meta.get("stack_trace"))
        if where is not None:
            return f"{where[0]}:{where[1]}"
    return ""


def graph_fallback(stage: str, error: BaseException, fx_gm: torch.fx.GraphModule | None) -> EagerRun:
    reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:500]}"
    return EagerRun("graph", stage, reason, user_line(fx_gm.graph.nodes) if fx_gm is not None else "")


def op_fallbacks(lowered_nodes, aten_gm: torch.fx.GraphModule) -> list[EagerRun]:
    """The lowered graph's Fallback nodes, one entry per reason (ops and the first user line among them)."""
    by_name = {node.name: node for node in aten_gm.graph.nodes}
    grouped: dict[str, list] = defaultdict(list)
    for node in lowered_nodes:
        if isinstance(node, Fallback):
            grouped[node.reason].append(node)
    found = []
    for reason, nodes in grouped.items():
        targets = tuple(dict.fromkeys(str(getattr(n.target, "__name__", n.target)) for n in nodes))
        origins = [by_name[o] for n in nodes for o in n.origins if o in by_name]
        found.append(EagerRun("op", "lower", reason, user_line(origins), targets))
    return found


def warn(fallback: EagerRun) -> None:
    warnings.warn(FallbackWarning(fallback.message(), fallback), stacklevel=3)


@contextmanager
def collected() -> Iterator[list[EagerRun]]:
    """Collects the fallbacks warned inside the block (every one, not once per call site) instead of showing
    them: for a caller that reports them itself, as bench's rows do."""
    found: list[EagerRun] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            yield found
    finally:  # outside the recording: there, showwarning would append to `caught` while we walk it
        for warning in caught:
            if isinstance(warning.message, FallbackWarning) and warning.message.eager_run is not None:
                found.append(warning.message.eager_run)
            else:  # anything else is shown as it would have been
                warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
