"""The compile and a run on a timeline (plotly): the record's spans (Note [Compile trace] in engine/runtime/spans.py)
and a profiled call's kernels, as horizontal bars from their start. Reads the typed record only."""
from __future__ import annotations

import plotly.graph_objects as go

from engine.record import Exploration
from visualizers.charts import STAGE_COLOURS
from visualizers.graphs import KIND_STYLE

PASS_COLOUR = "#cbd5e1"


def _layout(figure: go.Figure, title: str, rows: int) -> go.Figure:
    figure.update_layout(title=dict(text=title, font=dict(size=14)), height=90 + 22 * max(rows, 3),
                         margin=dict(l=10, r=10, t=40, b=30), plot_bgcolor="white", paper_bgcolor="white",
                         barmode="overlay", showlegend=False)
    figure.update_yaxes(autorange="reversed", type="category")
    return figure


def compile_timeline_figure(record: Exploration) -> go.Figure | None:
    """Every stage and pass as a bar from its start (seconds since explore began); one row per name, stages
    first in the order they began, each graph's spans in its own colour intensity."""
    spans = record.trace
    if not spans:
        return None
    figure = go.Figure()
    rows = list(dict.fromkeys((s.name if s.cat == "stage" else f"  {s.name}") for s in spans))
    for entry in spans:
        row = entry.name if entry.cat == "stage" else f"  {entry.name}"
        graph = entry.graph
        detail = "".join(f"<br>{k}: {v:.3f}" if isinstance(v, float) else f"<br>{k}: {v}"
                         for k, v in entry.args.items())
        figure.add_bar(y=[row], x=[entry.dur_s], base=[entry.start_s], orientation="h",
                       marker_color=STAGE_COLOURS.get(entry.name, PASS_COLOUR), marker_line_width=0.5,
                       marker_line_color="#334155",
                       hovertemplate=f"{entry.name}" + (f" (graph {graph})" if graph is not None else "")
                       + f"<br>start %{{base:.3f}} s, %{{x:.4f}} s{detail}<extra></extra>")
    figure.update_xaxes(title_text="seconds since the exploration began")
    return _layout(figure, "Compile timeline: every stage and pass", len(rows))


def run_timeline_figure(record: Exploration) -> go.Figure | None:
    """One call of each profiled graph, its kernels from their start (ms; graphs one after another)."""
    graphs = [g for g in record.graphs if g.profile.timeline]
    if not graphs:
        return None
    figure = go.Figure()
    offset, rows = 0.0, []
    for graph in graphs:
        kinds = {k.name: k.kind for k in graph.kernels}
        timeline = graph.profile.timeline
        for item in timeline:
            label = f"graph {graph.index}" if item.kernel == "call" else item.kernel
            row = f"g{graph.index} {label}" if item.kernel != "call" else label
            rows.append(row)
            colour = "#94a3b8" if item.kernel == "call" else \
                KIND_STYLE.get(kinds.get(item.kernel), KIND_STYLE["other"])[1]
            figure.add_bar(y=[row], x=[item.dur_ms], base=[offset + item.start_ms], orientation="h",
                           marker_color=colour, marker_line_width=0.5, marker_line_color="#334155",
                           hovertemplate=f"{label} ({kinds.get(item.kernel, 'graph call')})<br>start %{{base:.4f}} "
                                         "ms, %{x:.4f} ms<extra></extra>")
        offset += next((t.dur_ms for t in timeline if t.kernel == "call"), 0.0)
    figure.update_xaxes(title_text="milliseconds (one call of each graph, one after another)")
    return _layout(figure, "Run timeline: kernels of one call", len(rows))
