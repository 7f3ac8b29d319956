"""Capture with TorchDynamo: subgraphs, graph breaks, guards and recompiles.

Every use of Dynamo's private API for capture lives in this file. Glassbox is a Dynamo backend like
Inductor: Dynamo traces the user's Python, calls our backend once per captured graph, and keeps doing
guards, graph breaks and recompiles itself.
"""
from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch._dynamo


@dataclass
class GraphBreak:
    reason: str
    filename: str
    lineno: int | None
    line: str


@dataclass
class Recompile:
    reason: str
    inputs: str  # the input shapes that triggered it


@dataclass
class CaptureLog:
    """What Dynamo told us while running the model."""
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    current_inputs: str = ""

    def on_graph(self, gm: torch.fx.GraphModule) -> None:
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is None or not reason.graph_break:
            return
        frame = reason.user_stack[-1] if reason.user_stack else None
        filename = frame.filename if frame else ""
        lineno = frame.lineno if frame else None
        line = (linecache.getline(filename, lineno).strip() if frame and lineno else "") or (frame.line if frame else "")
        self.graph_breaks.append(GraphBreak(explain_break(reason.reason), filename, lineno, line or ""))

    def on_guards(self, guards) -> None:
        for guard in guards:
            text = describe_guard(guard)
            if text and text not in self.guards:
                self.guards.append(text)

    def on_guard_fail(self, failure) -> None:
        self.recompiles.append(Recompile(str(getattr(failure, "reason", failure)), self.current_inputs))


def describe_guard(guard) -> str:
    """One readable line per guard: what is checked, on which value."""
    name = getattr(guard, "name", "")
    kind = getattr(getattr(guard, "create_fn", None), "__name__", "") or "guard"
    code = getattr(guard, "code_list", None)
    if code:
        return f"{name}: {' and '.join(code)}"
    if kind in ("TENSOR_MATCH", "SHAPE_ENV"):
        return f"{kind.lower()}: {name}" if name else kind.lower()
    return f"{kind.lower()} on {name}" if name else kind.lower()


_PLAIN_WORDS = [
    (re.compile(r"generic_jump|Data-dependent jump|data dependent", re.I),
     "Python control flow depends on a tensor's value (an `if` on a tensor): Dynamo cannot know which branch "
     "to trace, so it ends the graph here and resumes after the branch."),
    (re.compile(r"builtin: print|call_function BuiltinVariable\(print\)|print", re.I),
     "print() has a side effect Dynamo does not put in a graph: the graph ends before it and a new one starts "
     "after it."),
    (re.compile(r"Tensor\.item|\.item\(\)|_local_scalar_dense", re.I),
     "tensor.item() turns a tensor into a Python number, which a graph cannot hold (without "
     "capture_scalar_outputs): the graph ends here."),
    (re.compile(r"graph_break|torch\._dynamo\.graph_break", re.I),
     "an explicit torch._dynamo.graph_break() call."),
]


def explain_break(reason: str) -> str:
    """Dynamo's reason, led by a sentence in plain words where we recognise it."""
    for pattern, words in _PLAIN_WORDS:
        if pattern.search(reason):
            return f"{words} (Dynamo: {reason.strip().splitlines()[0][:300]})"
    return reason.strip().splitlines()[0][:500] if reason.strip() else "graph break"


def describe_inputs(inputs) -> str:
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append(f"{str(x.dtype).replace('torch.', '')}[{', '.join(map(str, x.shape))}]")
        else:
            parts.append(type(x).__name__)
    return ", ".join(parts)


def dynamo_compile(model: Callable, backend: Callable, log: CaptureLog | None, dynamic: bool | None) -> Callable:
    """The model wrapped by Dynamo with our backend; guards and failures reported into `log`."""
    if log is None:
        return torch._dynamo.optimize(backend, dynamic=dynamic)(model)

    def recording_backend(gm, example_inputs):
        log.on_graph(gm)
        return backend(gm, example_inputs)

    return torch._dynamo.optimize(recording_backend, dynamic=dynamic, guard_export_fn=log.on_guards,
                                  guard_fail_fn=log.on_guard_fail)(model)


def reset() -> None:
    """Forget compiled frames, so an exploration sees a cold Dynamo (graphs, guards and breaks again)."""
    torch._dynamo.reset()


def user_source_line(stack_trace: str | None) -> tuple[str, int] | None:
    """The innermost frame of a node's stack trace that is user code (not torch)."""
    if not stack_trace:
        return None
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack_trace)
    for filename, lineno in reversed(frames):
        if "/torch/" not in filename:
            return filename, int(lineno)
    return (frames[-1][0], int(frames[-1][1])) if frames else None


def fx_origin_names(aten_node: torch.fx.Node, fx_names: set[str]) -> list[str]:
    """Names of the Dynamo FX nodes an ATen node came from (AOTAutograd records them in meta['from_node'])."""
    found: list[str] = []

    def walk(sources: Any) -> None:
        for source in sources or ():
            name = getattr(source, "name", None)
            if name in fx_names and name not in found:
                found.append(name)
            walk(getattr(source, "from_node", None))

    walk(aten_node.meta.get("from_node"))
    return found
