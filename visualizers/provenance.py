"""Provenance: follow one thing through the stages, both ways, using only the record's maps.

    user source line  <->  FX nodes (node.source.lineno)
    FX node           <->  ATen nodes (aten node.fx_origins)
    ATen node         <->  IR nodes (ir node.aten_origins)
    IR node           <->  kernel (kernel.ir_nodes)
    generated line    ->   kernel, IR node, ATen nodes, FX nodes, user lines (code.provenance)
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Trace:
    fx: set = field(default_factory=set)
    aten: set = field(default_factory=set)
    ir: set = field(default_factory=set)
    kernels: set = field(default_factory=set)
    generated_lines: set = field(default_factory=set)  # line numbers in code.source
    user_lines: set = field(default_factory=set)


def _source_line(node: dict) -> int | None:
    source = node.get("source")
    return source.get("lineno") if isinstance(source, dict) else None


def _complete(graph: dict, trace: Trace) -> Trace:
    """Given FX nodes (and maybe more), fill in everything downstream of them."""
    for node in graph.get("aten") or []:
        if set(node.get("fx_origins") or []) & trace.fx:
            trace.aten.add(node["name"])
    for node in (graph.get("ir") or {}).get("nodes") or []:
        if set(node.get("aten_origins") or []) & trace.aten:
            trace.ir.add(node["name"])
    for kernel in graph.get("kernels") or []:
        if set(kernel.get("ir_nodes") or []) & trace.ir:
            trace.kernels.add(kernel["name"])
    for entry in (graph.get("code") or {}).get("provenance") or []:
        if entry.get("ir_node") in trace.ir or set(entry.get("fx_nodes") or []) & trace.fx:
            trace.generated_lines.add(entry["line"])
    for node in graph.get("fx") or []:
        if node["name"] in trace.fx and _source_line(node):
            trace.user_lines.add(_source_line(node))
    return trace


def from_fx(graph: dict, names) -> Trace:
    return _complete(graph, Trace(fx=set(names)))


def from_user_line(graph: dict, lineno: int) -> Trace:
    """Everything that came from one line of the user's code (call nodes only: inputs are not computed there)."""
    names = {n["name"] for n in graph.get("fx") or []
             if _source_line(n) == lineno and n.get("op") not in ("placeholder", "output", "get_attr")}
    trace = _complete(graph, Trace(fx=names))
    trace.user_lines.add(lineno)
    return trace


def from_generated_line(graph: dict, line: int) -> Trace:
    """Where one generated line came from (exactly that line's IR node, not its whole FX node's)."""
    for entry in (graph.get("code") or {}).get("provenance") or []:
        if entry.get("line") == line:
            trace = Trace(fx=set(entry.get("fx_nodes") or []), aten=set(entry.get("aten_nodes") or []),
                          ir={entry["ir_node"]} if entry.get("ir_node") else set(),
                          kernels={entry["kernel"]} if entry.get("kernel") else set(),
                          generated_lines={line}, user_lines=set(entry.get("user_lines") or []))
            return trace
    return Trace()


def traced_lines(graph: dict) -> list[int]:
    """Generated lines that have provenance, in order."""
    return sorted({e["line"] for e in (graph.get("code") or {}).get("provenance") or [] if "line" in e})


def user_lines_with_nodes(graph: dict) -> list[int]:
    lines = {_source_line(n) for n in graph.get("fx") or []
             if n.get("op") not in ("placeholder", "output", "get_attr")}
    return sorted(line for line in lines if line)


def compute_nodes(graph: dict) -> list[dict]:
    """FX nodes worth choosing: the ones that compute something."""
    return [n for n in graph.get("fx") or [] if n.get("op") in ("call_function", "call_method", "call_module")]
