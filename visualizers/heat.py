"""Metrics where the code is: the per-kernel profile (engine/runtime/profile.py) painted on the graph's nodes
and summed onto the user's source lines through provenance. Reads the typed record only.

Note [Time on lines]
A kernel's measured time belongs to the ATen nodes it computes (each node shows its kernel's time and share;
nodes fused into one kernel share one figure, since a fused kernel has no per-op time). On the source, a
kernel's time is split evenly over the distinct user lines its ATen nodes came from (their stack traces, as
provenance reads them), so the lines' figures sum to the kernels' total: a line's figure is what the kernels
it contributes to cost, shared with the other lines they fuse.
"""
from __future__ import annotations

import html

from engine.record import Exploration, GraphRecord, KernelRecord


def _timed(graph: GraphRecord) -> list[KernelRecord]:
    return [k for k in graph.kernels if k.time_ms is not None]


def node_heat(graph: GraphRecord) -> dict[str, dict]:
    """ATen node -> {ms, share, kernel} of the kernel that computes it (Note [Time on lines])."""
    heat = {}
    for kernel in _timed(graph):
        for node in kernel.aten_origins:
            heat[node] = {"ms": kernel.time_ms, "share": kernel.share or 0.0, "kernel": kernel.name,
                          "gbps": kernel.gbps}
    return heat


def kernel_lines(graph: GraphRecord, kernel: KernelRecord, filename: str | None = None) -> list[int]:
    """The user lines a kernel's ATen nodes came from (their own stack traces, or their FX nodes'), in
    `filename` when given (a module of torch's own, nn.LayerNorm say, has no line of the user's)."""
    aten = {n.name: n for n in graph.aten}
    fx = {n.name: n for n in graph.fx}
    lines = []
    for name in kernel.aten_origins:
        node = aten.get(name)
        if node is None:
            continue
        sources = [node.source] + [fx[f].source for f in node.fx_origins if f in fx]
        lines += [s.lineno for s in sources if s and s.lineno and (not filename or s.filename == filename)]
    return list(dict.fromkeys(lines))


def line_heat(record: Exploration) -> dict[int, dict]:
    """User line -> {ms, share (of all timed kernels), kernels} (Note [Time on lines])."""
    total = sum(k.time_ms for g in record.graphs for k in _timed(g)) or 0.0
    filename = record.source.filename or None
    heat: dict[int, dict] = {}
    for graph in record.graphs:
        for kernel in _timed(graph):
            lines = kernel_lines(graph, kernel, filename)
            for line in lines:
                entry = heat.setdefault(line, {"ms": 0.0, "kernels": []})
                entry["ms"] += kernel.time_ms / len(lines)
                entry["kernels"].append(f"g{graph.index}:{kernel.name}")
    for entry in heat.values():
        entry["share"] = entry["ms"] / total if total else 0.0
    return heat


def heat_colour(fraction: float) -> str:
    """White (0) to deep red (1), as #rrggbb."""
    fraction = min(max(fraction, 0.0), 1.0)
    red, green, blue = 255, int(255 - 200 * fraction), int(255 - 220 * fraction)
    return f"#{red:02x}{green:02x}{blue:02x}"


def graph_paint(graph: GraphRecord) -> tuple[dict, dict]:
    """(paint, notes) for visualizers/overlay.py: each ATen node in its kernel's heat, with time and share."""
    heat = node_heat(graph)
    hottest = max((h["ms"] for h in heat.values()), default=0.0) or 1.0
    paint = {node: (heat_colour(h["ms"] / hottest), "#7f1d1d" if h["ms"] >= hottest else "#9ca3af")
             for node, h in heat.items()}
    notes = {node: f"{h['kernel']}: {h['ms']:.3g} ms ({h['share']:.0%})" for node, h in heat.items()}
    return paint, notes


def source_heat_html(source: str, heat: dict[int, dict]) -> str:
    """The user's source with each line's time in a gutter and its background in the heat scale."""
    hottest = max((h["ms"] for h in heat.values()), default=0.0) or 1.0
    rows = []
    for number, line in enumerate(source.splitlines(), start=1):
        entry = heat.get(number)
        colour = heat_colour(entry["ms"] / hottest) if entry else "transparent"
        gutter = f"{entry['ms']:.3g} ms {entry['share']:.0%}" if entry else ""
        title = html.escape(", ".join(entry["kernels"]), quote=True) if entry else ""
        rows.append(f"<tr class='gb-heat-line' data-line='{number}' title='{title}' style='background:{colour}'>"
                    f"<td class='gb-heat-ms'>{html.escape(gutter)}</td><td class='gb-heat-no'>{number}</td>"
                    f"<td><pre>{html.escape(line) or ' '}</pre></td></tr>")
    style = ("<style>.gb-heat{border-collapse:collapse;font-family:monospace;font-size:12px;width:100%}"
             ".gb-heat td{padding:0 6px;vertical-align:top}.gb-heat pre{margin:0;white-space:pre-wrap}"
             ".gb-heat-ms{color:#7f1d1d;text-align:right;white-space:nowrap;width:9em}"
             ".gb-heat-no{color:#9ca3af;text-align:right;width:3em}</style>")
    return style + "<table class='gb-heat'>" + "".join(rows) + "</table>"


def legend() -> list[tuple[str, str, str]]:
    return [(heat_colour(0.1), "#9ca3af", "cheap"), (heat_colour(0.5), "#9ca3af", "half the hottest kernel"),
            (heat_colour(1.0), "#7f1d1d", "hottest kernel"), ("#f3f4f6", "#9ca3af", "not timed")]
