"""Explanations anchored to generated lines: one sentence per kernel naming the lines of the generated module
it talks about, and, for any generated line, the IR node, ATen nodes, FX nodes and user lines it came from
(the record's provenance). Reads the record's JSON only."""
from __future__ import annotations

from visualizers.graphs import short_target


def kernel_sentences(graph: dict) -> list[dict]:
    """{"kernel", "lines": [first, last], "text"} per generated kernel, in module order."""
    code = graph.get("code") or {}
    by_line: dict[str, set[int]] = {}
    for entry in code.get("provenance") or []:
        by_line.setdefault(entry["kernel"], set()).update(entry.get("user_lines") or [])
    sentences = []
    for kernel in graph.get("kernels") or []:
        lines = kernel.get("lines") or []
        if len(lines) != 2:
            continue
        ops = [short_target({"target": op}) for op in kernel.get("ops") or []]
        users = sorted(by_line.get(kernel["name"], ()))
        text = (f"{kernel['name']} (lines {lines[0]}–{lines[1]}) is a {kernel.get('kind')} kernel computing "
                f"{' + '.join(dict.fromkeys(ops)) or 'its IR nodes'} ({len(kernel.get('ir_nodes') or [])} IR node(s) "
                f"fused)" + (f", from your line{'s' if len(users) > 1 else ''} {', '.join(map(str, users))}"
                             if users else ""))
        sentences.append({"kernel": kernel["name"], "lines": lines, "text": text})
    return sentences


def line_origin(graph: dict, line: int) -> dict | None:
    """Where generated line `line` came from (its provenance entry and the user lines' text), or None."""
    code = graph.get("code") or {}
    entry = next((p for p in code.get("provenance") or [] if p["line"] == line), None)
    if entry is None:
        return None
    source_lines = {}
    for node in (graph.get("aten") or []) + (graph.get("fx") or []):
        source = node.get("source") or {}
        if source.get("lineno") in (entry.get("user_lines") or []):
            source_lines[source["lineno"]] = source.get("line", "")
    text = (code.get("source") or "").splitlines()
    return {**entry, "text": text[line - 1] if 0 < line <= len(text) else "",
            "user_text": {str(k): v for k, v in sorted(source_lines.items())}}
