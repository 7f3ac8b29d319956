"""Provenance: follow one thing through the stages, both ways, using only the record's maps.

    user source line  <->  FX nodes (node.source.lineno)
    FX node           <->  ATen nodes (aten node.fx_origins)
    ATen node         <->  IR nodes (ir node.aten_origins)
    IR node           <->  kernel (kernel.ir_nodes)
    generated line    ->   kernel, IR node, ATen nodes, FX nodes, user lines (code.provenance)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.record import FxNode, GraphRecord
from visualizers.code import helper_lines

NOT_COMPUTED = ("placeholder", "output", "get_attr")  # FX nodes that compute nothing (inputs, weights, result)


@dataclass
class Trace:
    fx: set = field(default_factory=set)
    aten: set = field(default_factory=set)
    ir: set = field(default_factory=set)
    kernels: set = field(default_factory=set)
    generated_lines: set = field(default_factory=set)  # line numbers in code.source
    user_lines: set = field(default_factory=set)


def _source_line(node: FxNode) -> int | None:
    return node.source.lineno if node.source else None


def _provenance(graph: GraphRecord) -> list:
    return graph.code.provenance if graph.code else []


def _complete(graph: GraphRecord, trace: Trace) -> Trace:
    """Given FX nodes (and maybe more), fill in everything downstream of them."""
    trace.aten |= {n.name for n in graph.aten if set(n.fx_origins) & trace.fx}
    trace.ir |= {n.name for n in (graph.ir.nodes if graph.ir else []) if set(n.aten_origins) & trace.aten}
    trace.kernels |= {k.name for k in graph.kernels if set(k.ir_nodes) & trace.ir}
    # shared helpers (the prelude, a template's macros) serve every kernel: not this node's lines
    prelude = graph.code.prelude_lines if graph.code else 0
    helpers = helper_lines(graph.code.source) if graph.code else set()
    trace.generated_lines |= {e.line for e in _provenance(graph) if e.line > prelude and e.line not in helpers
                              and (e.ir_node in trace.ir or set(e.fx_nodes) & trace.fx)}
    trace.user_lines |= {_source_line(n) for n in graph.fx if n.name in trace.fx and _source_line(n)}
    return trace


def from_fx(graph: GraphRecord, names) -> Trace:
    return _complete(graph, Trace(fx=set(names)))


def from_user_line(graph: GraphRecord, lineno: int) -> Trace:
    """Everything that came from one line of the user's code (call nodes only: inputs are not computed there)."""
    names = {n.name for n in graph.fx if _source_line(n) == lineno and n.op not in NOT_COMPUTED}
    trace = _complete(graph, Trace(fx=names))
    trace.user_lines.add(lineno)
    return trace


def from_generated_line(graph: GraphRecord, line: int) -> Trace:
    """Where one generated line came from (exactly that line's IR node, not its whole FX node's)."""
    for entry in _provenance(graph):
        if entry.line == line:
            return Trace(fx=set(entry.fx_nodes), aten=set(entry.aten_nodes),
                         ir={entry.ir_node} if entry.ir_node else set(),
                         kernels={entry.kernel} if entry.kernel else set(),
                         generated_lines={line}, user_lines=set(entry.user_lines))
    return Trace()


def traced_lines(graph: GraphRecord) -> list[int]:
    """Generated lines that have provenance, in order."""
    return sorted({e.line for e in _provenance(graph)})


def user_lines_with_nodes(graph: GraphRecord) -> list[int]:
    lines = {_source_line(n) for n in graph.fx if n.op not in NOT_COMPUTED}
    return sorted(line for line in lines if line)


def compute_nodes(graph: GraphRecord) -> list[FxNode]:
    """FX nodes worth choosing: the ones that compute something."""
    return [n for n in graph.fx if n.op in ("call_function", "call_method", "call_module")]
