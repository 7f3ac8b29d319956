"""A graph with a measurement painted on its nodes (DOT): the numerics bisect's status per ATen node
(Note [Numerics bisect] in engine/divergence.py). Reads the typed record only."""
from __future__ import annotations

from engine.record import GraphRecord
from visualizers.graphs import _attrs, _digraph, dot_text, shape_text, short_target

STATUS_STYLE = {  # fill, border, legend
    "exact": ("#dcfce7", "#16a34a", "exact: equal to eager"),
    "within tolerance": ("#fef9c3", "#ca8a04", "within tolerance"),
    "diverging": ("#fee2e2", "#dc2626", "diverging from eager"),
}
UNCOMPARED = ("#f3f4f6", "#9ca3af", "not compared (a view, or no ATen value of its own)")


def overlay_dot(graph: GraphRecord, which: str, paint: dict[str, tuple[str, str]], notes: dict[str, str] | None = None,
                bold: frozenset = frozenset(), title: str | None = None,
                clusters: dict[str, tuple[str, str, list[str]]] | None = None) -> str:
    """The graph's nodes, each filled and bordered as `paint` says (name -> (fill, border)), with `notes` under
    its label and a thick border for `bold` (classed as picked: the app's graph viewer opens on them); nodes not painted are grey. `clusters` (name -> (label, fill,
    nodes)) boxes nodes together, as a kernel and its figures."""
    dot = _digraph(title, "TB")
    notes = notes or {}
    nodes = [n for n in getattr(graph, which) if n.op != "output"]
    names = {n.name for n in nodes}
    home: dict[str, int] = {}  # node -> the box it is drawn in
    for number, (_, _, members) in enumerate((clusters or {}).values()):
        for member in members:
            home.setdefault(member, number)
    boxes: dict[int, list] = {}
    for node in nodes:
        name = node.name
        fill, border = paint.get(name, UNCOMPARED[:2])
        label = name if node.op == "placeholder" else f"{short_target(node)}\n{name}"
        label += f"\n{shape_text(node)}" + (f"\n{notes[name]}" if name in notes else "")
        attrs = dict(label=label, fillcolor=fill, color=border, style="rounded,filled",
                     penwidth="3" if name in bold else "1", tooltip=f"{name}: {notes.get(name, '')}")
        if node.op == "placeholder":
            attrs["shape"] = "oval"
        if name in bold:
            attrs["class"] = "gb-selected"
        if name in home:
            boxes.setdefault(home[name], []).append((dot_text(name), _attrs(**attrs)))
        else:
            dot.node(dot_text(name), **_attrs(**attrs))
        for argument in node.args:
            if argument in names:
                dot.edge(dot_text(argument), dot_text(name))
    for number, (label, fill, _) in enumerate((clusters or {}).values()):
        if number in boxes:
            with dot.subgraph(name=f"cluster_k{number}") as box:
                box.attr(**_attrs(label=label, style="rounded,filled", fillcolor=fill, color="#7f1d1d",
                                  fontcolor="#450a0a", fontsize="11", labeljust="l"))
                for node_name, attrs in boxes[number]:
                    box.node(node_name, **attrs)
    return dot.source


def bisect_paint(graph: GraphRecord) -> tuple[dict, dict, frozenset]:
    """(paint, notes, bold) of a graph's numerics bisect: status colours, each node's error, the culprit's
    nodes bold."""
    bisect = graph.bisect
    errors: dict[str, float] = {}
    for kernel in bisect.kernels or []:
        for output in kernel.outputs:
            errors[output.node] = output.max_abs_err
    paint = {node: STATUS_STYLE[status][:2] for node, status in (bisect.nodes or {}).items()
             if status in STATUS_STYLE}
    notes = {node: f"err {error:.2g}" for node, error in errors.items() if error}
    return paint, notes, frozenset(bisect.culprit.nodes if bisect.culprit else [])


def bisect_legend() -> list[tuple[str, str, str]]:
    return list(STATUS_STYLE.values()) + [UNCOMPARED]
