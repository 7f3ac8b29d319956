"""Capture with TorchDynamo: subgraphs, graph breaks, guards and recompiles.

Every use of Dynamo's private API for capture lives in this file. Glassbox is a Dynamo backend like
Inductor: Dynamo traces the user's Python, calls our backend once per captured graph, and keeps doing
guards, graph breaks and recompiles itself.
"""
from __future__ import annotations

import functools
import json
import linecache
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch._dynamo

from engine.break_fixes import suggest
from engine.record import Suggestion


@dataclass
class GraphBreak:
    reason: str
    filename: str
    lineno: int | None
    line: str
    gb_type: str = ""  # Dynamo's graph-break type, e.g. "Data-dependent branching" (Note [Dynamo's explanations])
    gb_id: str = ""  # its entry in Dynamo's graph-break registry, e.g. "GB0170"
    explanation: str = ""  # Dynamo's explanation
    hints: list[str] = field(default_factory=list)  # Dynamo's hints
    suggestion: Suggestion | None = None  # a rewrite of the user's line (engine/break_fixes.py), when one applies


@dataclass
class Recompile:
    """One recompilation of one function (Note [One recompile, many failed guards])."""
    reason: str  # in plain words, then Dynamo's own words
    inputs: str  # the input shapes that triggered it
    function: str = ""  # what was compiled again: the model's function, or the part after a graph break
    failed_guards: list[str] = field(default_factory=list)  # Dynamo's reason for each compiled version it tried


@dataclass
class CaptureLog:
    """What Dynamo told us while running the model."""
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    gave_up: list[Recompile] = field(default_factory=list)  # past Dynamo's recompile limit: no compile, eager
    current_inputs: str = ""
    _checking: tuple | None = None  # (code, compile ids reported) of the recompile whose guards Dynamo reports

    def begin_call(self, inputs: str) -> None:
        """The model is about to run on other inputs (described as `inputs`)."""
        self._end_uncompiled()
        self.current_inputs = inputs

    def finish(self) -> None:
        """After the last call."""
        self._end_uncompiled()

    def on_graph(self, gm: torch.fx.GraphModule) -> None:
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is None or not reason.graph_break:
            return
        frame = reason.user_stack[-1] if reason.user_stack else None
        filename = frame.filename if frame else ""
        lineno = frame.lineno if frame else None
        line = (linecache.getline(filename, lineno).strip() if frame and lineno else "") or (frame.line if frame else "")
        explained = dynamo_explanation(reason.reason)
        self.graph_breaks.append(GraphBreak(
            explain_break(reason.reason), filename, lineno, line or "", **explained,
            suggestion=suggest(reason.reason, explained["gb_type"], line or "",
                               "".join(linecache.getlines(filename)) if filename else "", lineno)))

    def on_guards(self, guards) -> None:
        self._checking = None  # a function finished compiling: the next failed guard starts a new recompile
        for guard in guards:
            text = describe_guard(guard)
            if text and text not in self.guards:
                self.guards.append(text)

    def on_guard_fail(self, failure) -> None:
        # Note [One recompile, many failed guards]
        # Dynamo keeps one compiled version (cache entry) per set of guards, per function. When none fits, it
        # calls guard_fail_fn once per cached version, newest first, then compiles once: the third length
        # of a shape-specialized model reports two failures for one recompile. So consecutive failures in
        # one function, each from a version not reported yet, are one recompile; a finished compile
        # (on_guards), another function or a version reported again starts the next.
        code = getattr(failure, "orig_code", None)
        compile_id, failed = _split_guard_failure(str(getattr(failure, "reason", failure)))
        checking = self._checking
        if checking is None or checking[0] is not code or compile_id and compile_id in checking[1]:
            self._end_uncompiled()
            self._checking = checking = (code, set())
            self.recompiles.append(Recompile("", self.current_inputs, describe_function(code)))
        checking[1].add(compile_id)
        recompile = self.recompiles[-1]
        recompile.failed_guards.append(failed)
        recompile.reason = explain_recompile(recompile.failed_guards, recompile.function)

    def _end_uncompiled(self) -> None:
        """Close the failures being reported when no compile finished after them. With recompile_limit
        versions of the function already compiled, Dynamo compiles no more and runs it eagerly: that is not a
        recompile, and it moves to gave_up. (A compile that raised stays a recompile; explore reports the error.)"""
        if self._checking is None:
            return
        versions = len(self._checking[1])
        self._checking = None
        if versions >= torch._dynamo.config.recompile_limit:
            self.gave_up.append(self.recompiles.pop())


def describe_guard(guard) -> str:
    """One readable line per guard: what is checked, on which value."""
    name = getattr(guard, "name", "")
    kind = getattr(getattr(guard, "create_fn", None), "__name__", "") or "guard"
    code = getattr(guard, "code_list", None)
    if code:
        return f"{name}: {' and '.join(code)}" if name else " and ".join(code)  # no stray ": " before a global check
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


# Note [Dynamo's explanations]
# Dynamo's graph-break messages (torch >= 2.7) read "<graph-break type>\n  Explanation: ...\n  Hint: ...\n
# Developer debug context: ...\n For more details ... gb/gb0059.html". Its registry (graph_break_registry.json
# beside torch._dynamo, keyed by GB id) holds the same type, explanation and hints for every break it knows.
# A few breaks still arrive as bare internal words ("generic_jump TensorVariable()", data-dependent branching):
# those are looked up in the registry by their type. We keep the type, id, explanation and hints, and leave
# out the developer context.
_REGISTRY_ALIASES = {"generic_jump": "Data-dependent branching"}


@functools.lru_cache(maxsize=1)
def _graph_break_registry() -> dict[str, tuple[str, dict]]:
    """Dynamo's graph-break registry by type: {gb_type: (gb_id, entry with Explanation and Hints)}."""
    path = Path(torch._dynamo.__file__).parent / "graph_break_registry.json"
    try:
        registry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    by_type: dict[str, tuple[str, dict]] = {}
    for gb_id, entries in registry.items():
        for entry in entries:
            known = by_type.get(entry.get("Gb_type", ""))
            if known is None or (entry.get("Hints") and not known[1].get("Hints")):
                by_type[entry.get("Gb_type", "")] = (gb_id, entry)
    return by_type


def dynamo_explanation(reason: str) -> dict:
    """{gb_type, gb_id, explanation, hints} from Dynamo's message (Note [Dynamo's explanations])."""
    lines = [line.strip() for line in (reason or "").strip().splitlines()]
    gb_type = lines[0] if lines else ""
    explanation = " ".join(l.split(":", 1)[1].strip() for l in lines if l.startswith("Explanation:"))
    hints = [l.split(":", 1)[1].strip() for l in lines if l.startswith("Hint:")]
    found = re.search(r"gb/(gb\d+)\.html", reason or "", re.I)
    gb_id = found.group(1).upper() if found else ""
    alias = next((t for word, t in _REGISTRY_ALIASES.items() if gb_type.startswith(word)), None)
    if alias or not explanation:
        known = _graph_break_registry().get(alias or gb_type)
        if known is not None:
            gb_id, entry = known
            gb_type = entry.get("Gb_type", gb_type)
            explanation = explanation or _plain_registry_text(entry.get("Explanation", ""))
            hints = hints or [_plain_registry_text(h) for h in entry.get("Hints") or []]
    hints = [h for h in hints if h and "report an issue to PyTorch" not in h]
    return {"gb_type": gb_type, "gb_id": gb_id, "explanation": explanation, "hints": hints}


def _plain_registry_text(text: str) -> str:
    """Registry strings are Python source fragments at times ('"Detected ..." "Dynamo ..."'): join them."""
    pieces = re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    return ("".join(pieces) if pieces and text.strip().startswith('"') else text).strip()


def _split_guard_failure(text: str) -> tuple[str, str]:
    """Dynamo's "0/1: <failed check>  # <user code>\nUser stack trace: ..." -> ("0/1", "<failed check>")."""
    first = text.strip().split("\nUser stack trace:")[0].strip().splitlines()[0] if text.strip() else ""
    compile_id, colon, rest = first.partition(": ")
    if not colon or " " in compile_id:
        compile_id, rest = "", first
    return compile_id, rest.split("  # ")[0].strip()


_RESUME = re.compile(r"torch_dynamo_resume_in_(?P<function>.+)_at_(?P<line>\d+)$")


def describe_function(code) -> str:
    """The function Dynamo compiles: its name, the part of it after a graph break (a "resume" function), or
    the model's forward (which torch calls through a wrapper of its own, `inner(*args)`)."""
    name = getattr(code, "co_name", "") or "?"
    resume = _RESUME.match(name)
    if resume:
        return f"{resume['function']} after the graph break at line {resume['line']}"
    if "/torch/" in getattr(code, "co_filename", "").replace("\\", "/"):
        return "the model's forward"
    return name


# Dynamo's failed checks -> plain words. {old} is what a compiled version was made for; the failures of
# several versions that differ only in {old} read as one sentence ("compiled for 40, 24 or 16").
_GUARD_WORDS = [
    (re.compile(r"tensor '(?P<name>.+?)' size mismatch at index (?P<dim>\d+)\. expected (?P<old>\S+), "
                r"actual (?P<new>\S+)"),
     "{name}.shape[{dim}] is {new}, but {graph_was} compiled for {old} (a graph holds its sizes as constants "
     "unless the dimension is dynamic)"),
    (re.compile(r"tensor '(?P<name>.+?)' stride mismatch at index (?P<dim>\d+)\. expected (?P<old>\S+), "
                r"actual (?P<new>\S+)"),
     "{name}.stride({dim}) is {new}, but {graph_was} compiled for {old} (another memory layout)"),
    (re.compile(r"tensor '(?P<name>.+?)' rank mismatch\. expected (?P<old>\S+), actual (?P<new>\S+)"),
     "{name} has {new} dimension(s), but {graph_was} compiled for {old}"),
    (re.compile(r"tensor '(?P<name>.+?)' dtype mismatch\. expected (?P<old>\S+), actual (?P<new>\S+)"),
     "{name} has dtype {new}, but {graph_was} compiled for {old}"),
    (re.compile(r"tensor '(?P<name>.+?)' requires_grad mismatch\. expected requires_grad=(?P<old>\S+)"),
     "{name}.requires_grad changed ({graph_was} compiled for requires_grad={old})"),
    (re.compile(r"tensor '(?P<name>.+?)' (?P<what>.+?) mismatch"),
     "{name} has another {what} than {graph_was} compiled for"),
    (re.compile(r"(?P<old>.*\bsize\(\)\[\d+\].*)"),
     "an input size no longer satisfies what {graph_was} compiled for: {old} (Dynamo specializes sizes 0 "
     "and 1 even in a dynamic graph)"),
    (re.compile(r"___check_obj_id\((?P<name>.+?), \d+\)"),
     "{name} is another object than the one {graph_was} compiled with"),
    (re.compile(r"___check_type_id\((?P<name>.+?), \d+\)"),
     "{name} has another type than {graph_was} compiled for"),
    (re.compile(r"len\((?P<name>.+?)\) == (?P<old>\d+)$"),
     "{name} no longer has the length {graph_was} compiled for ({old})"),
    (re.compile(r"(?P<name>[\w.\[\]'\"]+) == (?P<old>.+)$"),
     "{name} is not the Python value {graph_was} compiled for ({old}), which is baked in as a constant"),
]


def explain_guard_failures(failed_guards: list[str]) -> list[str]:
    """The failed checks of one recompile (one per compiled version), in plain words where we recognise them."""
    sentences: dict[tuple, list[str]] = {}  # (pattern, fields other than old) -> old of each version
    for failed in failed_guards:
        for number, (pattern, _) in enumerate(_GUARD_WORDS):
            match = pattern.search(failed)
            if match:
                fields = match.groupdict()
                old = fields.pop("old", "")
                sentences.setdefault((number, tuple(sorted(fields.items()))), []).append(old)
                break
        else:
            sentences.setdefault((None, (("failed", failed),)), []).append("")
    words = []
    for (number, fields), olds in sentences.items():
        if number is None:
            words.append(f"a guard on the inputs failed: {dict(fields)['failed']}")
            continue
        distinct = list(dict.fromkeys(olds))
        old = distinct[0] if len(distinct) == 1 else ", ".join(distinct[:-1]) + " or " + distinct[-1]
        graph_was = "the graph was" if len(olds) == 1 else "the graphs were"
        words.append(_GUARD_WORDS[number][1].format(old=old, graph_was=graph_was, **dict(fields)))
    return words


def explain_recompile(failed_guards: list[str], function: str) -> str:
    """Why one recompile happened: what differs from each compiled version, then Dynamo's words."""
    reasons = explain_guard_failures(failed_guards)
    why = "; ".join(reasons)
    if len(failed_guards) > 1:
        why = f"none of the {len(failed_guards)} compiled versions fits: {why}"
    dynamo = f"; Dynamo: {failed_guards[0][:300]}" if failed_guards[0] and failed_guards[0] not in why else ""
    return f"{why} (in {function}{dynamo})"


def _layout(x: torch.Tensor) -> str:
    """How a tensor's layout differs from a fresh contiguous one, in words ("" when it does not): the layout
    the user gave is the one explored (run.fresh keeps it)."""
    if x.layout != torch.strided or (x.is_contiguous() and x.storage_offset() == 0):
        return ""
    words = [f"strides {tuple(x.stride())}"]
    if 0 in x.stride() and x.numel() > 1:
        words.append("expanded")
    if x.storage_offset():
        words.append(f"offset {x.storage_offset()}")
    return f" ({', '.join(words)})"


def describe_inputs(inputs) -> str:
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append(f"{str(x.dtype).replace('torch.', '')}[{', '.join(map(str, x.shape))}]{_layout(x)}")
        else:
            parts.append(type(x).__name__)
    return ", ".join(parts)


def dynamo_compile(model: Callable, backend: Callable, log: CaptureLog | None, dynamic: bool | None) -> Callable:
    """The model wrapped by Dynamo with our backend; guards and failures reported into `log`."""
    if log is None:
        return torch._dynamo.optimize(backend, dynamic=dynamic)(model)

    def recording_backend(gm, example_inputs):
        compiled = backend(gm, example_inputs)
        log.on_graph(gm)  # after: Dynamo may restart its analysis from inside the backend (Note [Restarted analysis])
        return compiled

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
