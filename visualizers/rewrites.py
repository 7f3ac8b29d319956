"""The rewrite stage of a record graph as tables and marked graphs (the app's Rewrites stage, the HTML report).

A graph's `rewrites` lists every match (applied) and near-miss (refused) of each pass, in order; `aten_before` is
the ATen graph before them when one applied, `aten` the graph after (docs/record.md). Pure functions of the record.
"""
from __future__ import annotations

from pathlib import Path


def passes(graph) -> list[dict]:
    """One row per pass that matched or came close: how often it rewrote and how often it refused."""
    rows: dict[str, dict] = {}
    for entry in graph.get("rewrites") or []:
        row = rows.setdefault(entry["rewrite"], {"pass": entry["rewrite"], "rewrote": 0, "refused": 0})
        row["rewrote" if entry["applied"] else "refused"] += 1
    return list(rows.values())


def matches(graph) -> list:
    return [entry for entry in graph.get("rewrites") or [] if entry["applied"]]


def refusals(graph) -> list:
    return [entry for entry in graph.get("rewrites") or [] if not entry["applied"]]


def lines_text(entry) -> str:
    return ", ".join(f"{Path(s['filename']).name}:{s['lineno']}" for s in entry.get("source") or [])


def match_rows(graph) -> list[dict]:
    return [{"pass": m["rewrite"], "graph": m.get("where", ""), "nodes": len(m["nodes"]),
             "replacement": m.get("replacement_text", ""), "why": m["reason"], "your lines": lines_text(m)}
            for m in matches(graph)]


def refusal_rows(graph) -> list[dict]:
    return [{"pass": r["rewrite"], "graph": r.get("where", ""), "why not": r["reason"],
             "nodes": ", ".join(r["nodes"][:6]) + (" ..." if len(r["nodes"]) > 6 else ""),
             "your lines": lines_text(r)} for r in refusals(graph)]


def before_graph(graph) -> dict | None:
    """The graph before the rewrites, shaped like a record graph for visualizers/graphs.py (which="aten")."""
    before = graph.get("aten_before") or []
    if not before:
        return None
    return {"index": graph.get("index", 0), "fx": graph.get("fx") or [], "aten": before, "ir": None, "kernels": []}


def marked_nodes(graph, chosen: int | None = None) -> tuple[frozenset, frozenset]:
    """(nodes to mark before, nodes to mark after): the matched nodes and their replacements, of one match or of
    all. A training graph's forward was rewritten before AOTAutograd retraced it (where == "forward"): its
    replacement's names are the rewritten forward's, so after it the library calls from the same FX nodes are
    marked instead."""
    chosen_matches = matches(graph)
    if chosen is not None:
        chosen_matches = chosen_matches[chosen:chosen + 1]
    after_names = {n["name"] for n in graph.get("aten") or []}
    before, after = set(), set()
    for match in chosen_matches:
        before |= set(match["nodes"])
        replaced = set(match.get("replacement") or []) & after_names
        if not replaced:
            origins = set(match.get("fx_origins") or [])
            replaced = {n["name"] for n in graph.get("aten") or []
                        if "scaled_dot_product" in str(n.get("target")) and origins & set(n.get("fx_origins") or [])}
        after |= replaced
    if not chosen_matches:  # nothing applied: mark what the near-misses looked at
        for refusal in refusals(graph):
            after |= set(refusal["nodes"]) & after_names
    return frozenset(before), frozenset(after)
