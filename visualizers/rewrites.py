"""The rewrite stage of a record graph as tables and marked graphs (the app's Rewrites stage, the HTML report).

A graph's `rewrites` lists every match (applied) and near-miss (refused) of each pass, in order; `aten_before` is
the ATen graph before them when one applied, `aten` the graph after (docs/record.md). Pure functions of the record.
"""
from __future__ import annotations

from pathlib import Path

from engine.record import GraphRecord, RewriteRecord


def passes(graph: GraphRecord) -> list[dict]:
    """One row per pass that matched or came close: how often it rewrote and how often it refused."""
    rows: dict[str, dict] = {}
    for entry in graph.rewrites:
        row = rows.setdefault(entry.rewrite, {"pass": entry.rewrite, "rewrote": 0, "refused": 0})
        row["rewrote" if entry.applied else "refused"] += 1
    return list(rows.values())


def matches(graph: GraphRecord) -> list[RewriteRecord]:
    return [entry for entry in graph.rewrites if entry.applied]


def refusals(graph: GraphRecord) -> list[RewriteRecord]:
    return [entry for entry in graph.rewrites if not entry.applied]


def lines_text(entry: RewriteRecord) -> str:
    return ", ".join(f"{Path(s.filename).name}:{s.lineno}" for s in entry.source)


def match_rows(graph: GraphRecord) -> list[dict]:
    return [{"pass": m.rewrite, "graph": m.where, "nodes": len(m.nodes),
             "replacement": m.replacement_text, "why": m.reason, "your lines": lines_text(m)}
            for m in matches(graph)]


def refusal_rows(graph: GraphRecord) -> list[dict]:
    return [{"pass": r.rewrite, "graph": r.where, "why not": r.reason,
             "nodes": ", ".join(r.nodes[:6]) + (" ..." if len(r.nodes) > 6 else ""),
             "your lines": lines_text(r)} for r in refusals(graph)]


def before_graph(graph: GraphRecord) -> GraphRecord | None:
    """The graph before the rewrites, as a record graph for visualizers/graphs.py (which="aten")."""
    if not graph.aten_before:
        return None
    return GraphRecord(index=graph.index, phase=graph.phase, fx=graph.fx, aten=graph.aten_before)


def marked_nodes(graph: GraphRecord, chosen: int | None = None) -> tuple[frozenset, frozenset]:
    """(nodes to mark before, nodes to mark after): the matched nodes and their replacements, of one match or of
    all. A training graph's forward was rewritten before AOTAutograd retraced it (where == "forward"): its
    replacement's names are the rewritten forward's, so after it the library calls from the same FX nodes are
    marked instead."""
    chosen_matches = matches(graph)
    if chosen is not None:
        chosen_matches = chosen_matches[chosen:chosen + 1]
    after_names = {n.name for n in graph.aten}
    before, after = set(), set()
    for match in chosen_matches:
        before |= set(match.nodes)
        replaced = set(match.replacement) & after_names
        if not replaced:
            origins = set(match.fx_origins)
            replaced = {n.name for n in graph.aten
                        if "scaled_dot_product" in str(n.target) and origins & set(n.fx_origins)}
        after |= replaced
    if not chosen_matches:  # nothing applied: mark what the near-misses looked at
        for refusal in refusals(graph):
            after |= set(refusal.nodes) & after_names
    return frozenset(before), frozenset(after)
