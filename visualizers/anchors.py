"""Explanations anchored to generated lines: one sentence per kernel naming the lines of the generated module
it talks about, and, for any generated line, the IR node, ATen nodes, FX nodes and user lines it came from
(the record's provenance); the same for the loop IR's listing, a sentence per IR node and a line's origin.
Reads the typed record only."""
from __future__ import annotations

from engine.record import GraphRecord
from visualizers.code import ir_listing
from visualizers.graphs import short_op
from visualizers.heat import short_file


def kernel_sentences(graph: GraphRecord, own_file: str | None = None) -> list[dict]:
    """{"kernel", "lines": [first, last], "text"} per generated kernel, in module order; the lines it came from
    named as the user's (in `own_file`) or by their library file."""
    aten = {n.name: n for n in graph.aten}
    sentences = []
    for kernel in graph.kernels:
        lines = kernel.lines
        if len(lines) != 2:
            continue
        ops = [short_op(op) for op in kernel.ops]
        places = [(aten[a].source.filename, aten[a].source.lineno) for a in kernel.aten_origins
                  if a in aten and aten[a].source is not None and aten[a].source.lineno]
        where_from = _places_text(places, own_file)
        text = (f"{kernel.name} (lines {lines[0]}–{lines[1]}) is a {kernel.kind} kernel computing "
                f"{' + '.join(dict.fromkeys(ops)) or 'its IR nodes'} ({len(kernel.ir_nodes)} IR node(s) "
                f"fused)" + (f", from {where_from}" if where_from else ""))
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


def _dims(sizes: list[str]) -> str:
    return "×".join(sizes) or "1"


def _places_text(places: list[tuple[str, int]], own_file: str | None) -> str:
    """"your line 14" or "transformers/models/gpt2/modeling_gpt2.py line 569": the user's file by that name."""
    mine = sorted({line for file, line in places if not own_file or file == own_file})
    words = [f"your line{'s' if len(mine) > 1 else ''} {', '.join(map(str, mine))}"] if mine else []
    others: dict[str, list[int]] = {}
    for file, line in places:
        if own_file and file != own_file:
            others.setdefault(file, []).append(line)
    words += [f"{short_file(file)} line{'s' if len(set(lines)) > 1 else ''} {', '.join(map(str, sorted(set(lines))))}"
              for file, lines in others.items()]
    return " and ".join(words)


def ir_sentences(graph: GraphRecord, own_file: str | None = None) -> list[dict]:
    """{"node", "lines": [first, last], "text"} per loop-IR node, in the order of the IR listing
    (visualizers/code.py's ir_listing: grouped by kernel), each naming the listing's lines it talks about: what
    the loop computes over which index space, the ATen op and the line it came from (yours, in `own_file`, or a
    library's), what it reads and where."""
    listing, where = ir_listing(graph)
    text = listing.splitlines()
    aten = {n.name: n for n in graph.aten}
    ir_nodes = {n.name: n for n in (graph.ir.nodes if graph.ir else [])}
    kernel_of = {name: k.name for k in graph.kernels for name in k.ir_nodes}
    sentences = []
    for name, lines in where.items():
        node = ir_nodes[name]
        ops = [short_op(aten[a].target).split(".")[0] for a in node.aten_origins if a in aten]
        places = [(aten[a].source.filename, aten[a].source.lineno) for a in node.aten_origins
                  if a in aten and aten[a].source is not None and aten[a].source.lineno]
        where_from = _places_text(places, own_file)
        if node.kind == "reduction" and node.reduction_size:
            what = (f"a reduction: {node.reduction_type or 'a combine'} over {_dims(node.reduction_size)} elements "
                    f"for each of {_dims(node.size)} outputs")
        elif node.kind == "pointwise":
            what = f"a pointwise loop over {_dims(node.size)}: one output element per iteration"
        else:
            what = f"a {node.kind} node of size {_dims(node.size)}"
        loads = [(number, line.split("load ", 1)[1].split("[", 1)[0]) for number in lines
                 for line in [text[number - 1]] if "load " in line]
        reads = ", ".join(f"{buffer} (line {number})" for number, buffer in loads)
        sentence = (f"{name} (lines {lines[0]}–{lines[-1]}) is {what}, computing "
                    f"{' + '.join(dict.fromkeys(ops)) or 'no ATen op of its own'}"
                    + (f" from {where_from}" if where_from else "")
                    + (f"; it reads {reads}" if reads else "")
                    + (f"; it runs in {kernel_of[name]}" if name in kernel_of else "; no kernel computes it"))
        sentences.append({"node": name, "lines": [lines[0], lines[-1]], "text": sentence})
    return sentences


def ir_line_origin(graph: GraphRecord, line: int) -> dict | None:
    """Where line `line` of the IR listing came from: its IR node, the node's ATen and FX nodes, its kernel and
    the user lines with their text; None for a comment or blank line."""
    listing, where = ir_listing(graph)
    node_name = next((name for name, lines in where.items() if line in lines), None)
    if node_name is None:
        return None
    node = next(n for n in graph.ir.nodes if n.name == node_name)
    aten = {n.name: n for n in graph.aten}
    fx = sorted({f for a in node.aten_origins if a in aten for f in aten[a].fx_origins})
    user_text = {str(aten[a].source.lineno): aten[a].source.line for a in node.aten_origins
                 if a in aten and aten[a].source is not None and aten[a].source.lineno}
    kernel = next((k.name for k in graph.kernels if node_name in k.ir_nodes), None)
    return {"ir_node": node_name, "aten_nodes": list(node.aten_origins), "fx_nodes": fx, "kernel": kernel,
            "text": listing.splitlines()[line - 1],
            "user_text": dict(sorted(user_text.items(), key=lambda item: int(item[0])))}
