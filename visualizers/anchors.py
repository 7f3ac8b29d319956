"""Explanations anchored to generated lines: one sentence per kernel naming the lines of the generated module
it talks about, and, for any generated line, the IR node, ATen nodes, FX nodes and user lines it came from
(the record's provenance). Reads the typed record only."""
from __future__ import annotations

from engine.record import GraphRecord
from visualizers.graphs import short_op


def kernel_sentences(graph: GraphRecord) -> list[dict]:
    """{"kernel", "lines": [first, last], "text"} per generated kernel, in module order."""
    provenance = graph.code.provenance if graph.code else []
    by_line: dict[str, set[int]] = {}
    for entry in provenance:
        by_line.setdefault(entry.kernel, set()).update(entry.user_lines)
    sentences = []
    for kernel in graph.kernels:
        lines = kernel.lines
        if len(lines) != 2:
            continue
        ops = [short_op(op) for op in kernel.ops]
        users = sorted(by_line.get(kernel.name, ()))
        text = (f"{kernel.name} (lines {lines[0]}–{lines[1]}) is a {kernel.kind} kernel computing "
                f"{' + '.join(dict.fromkeys(ops)) or 'its IR nodes'} ({len(kernel.ir_nodes)} IR node(s) "
                f"fused)" + (f", from your line{'s' if len(users) > 1 else ''} {', '.join(map(str, users))}"
                             if users else ""))
        sentences.append({"kernel": kernel.name, "lines": lines, "text": text})
    return sentences


def line_origin(graph: GraphRecord, line: int) -> dict | None:
    """Where generated line `line` came from (its provenance entry and the user lines' text), or None."""
    code = graph.code
    entry = next((p for p in (code.provenance if code else []) if p.line == line), None)
    if entry is None:
        return None
    source_lines = {}
    for node in graph.aten + graph.fx:
        if node.source is not None and node.source.lineno in entry.user_lines:
            source_lines[node.source.lineno] = node.source.line
    text = code.source.splitlines()
    return {**entry.to_json(), "text": text[line - 1] if 0 < line <= len(text) else "",
            "user_text": {str(k): v for k, v in sorted(source_lines.items())}}
