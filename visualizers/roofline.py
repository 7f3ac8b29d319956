"""The per-kernel profile as charts (plotly): time per kernel beside Inductor's, and a roofline.

Both read the record only: kernels' time_ms / bytes / flops / gflops and the machine's measured roofs
(engine/runtime/profile.py). A record explored without the profile has none of them; the functions then return None.
"""
from __future__ import annotations

import plotly.graph_objects as go

from engine.record import Exploration, KernelRecord
from visualizers.graphs import KIND_STYLE

OURS, THEIRS = "#2563eb", "#f97316"


def _kernels(record: Exploration) -> list[tuple[int, KernelRecord]]:
    return [(g.index, k) for g in record.graphs for k in g.kernels if k.time_ms is not None]


def _layout(figure: go.Figure, title: str, height: int) -> go.Figure:
    figure.update_layout(title=dict(text=title, font=dict(size=14)), height=height,
                         margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white", paper_bgcolor="white")
    return figure


def kernel_time_figure(record: Exploration, height: int | None = None) -> go.Figure | None:
    """Each kernel's median time with its interquartile range, labelled with its share of the call; Inductor's
    kernels (when the record has them) as a second colour."""
    kernels = _kernels(record)
    if not kernels:
        return None
    names = [f"graph {g} {k.name}" if len(record.graphs) > 1 else k.name for g, k in kernels]
    figure = go.Figure(go.Bar(
        y=names, x=[k.time_ms for _, k in kernels], orientation="h", name="Glassbox", marker_color=OURS,
        error_x=dict(type="data", array=[k.time_iqr_ms or 0 for _, k in kernels], visible=True),
        text=[f"{k.share:.0%}" if k.share is not None else "" for _, k in kernels],
        textposition="auto",
        customdata=[[k.kind, k.gbps or 0, ", ".join(k.ops)] for _, k in kernels],
        hovertemplate="%{y} (%{customdata[0]}): %{x:.4f} ms, %{customdata[1]:.2f} GB/s<br>%{customdata[2]}"
                      "<extra>Glassbox</extra>"))
    theirs = (record.inductor.kernel_times if record.inductor else None) or []  # engine/reference.py's report
    if theirs:
        figure.add_bar(y=[f"Inductor {t.name}" for t in theirs], x=[t.time_ms for t in theirs],
                       orientation="h", name="Inductor", marker_color=THEIRS,
                       hovertemplate="%{y}: %{x:.4f} ms<extra>Inductor</extra>")
    rows = len(names) + len(theirs)
    figure.update_traces(cliponaxis=False)  # labels and error bars past the longest bar stay visible
    figure.update_layout(xaxis=dict(title="ms per call (median; bar: interquartile range; label: share of the call)",
                                    rangemode="tozero", automargin=True),
                         yaxis=dict(autorange="reversed", automargin=True), showlegend=bool(theirs))
    return _layout(figure, "Time per kernel", height or max(220, 60 + 26 * rows))


def roofline_figure(record: Exploration, height: int = 380) -> go.Figure | None:
    """Achieved GFLOP/s against arithmetic intensity (FLOPs per byte moved), under the machine's two roofs:
    the measured copy bandwidth (memory-bound slope) and the measured matmul throughput (compute ceiling)."""
    machine = record.machine
    points = [(g, k) for g, k in _kernels(record) if k.flops and k.bytes and k.gflops]
    peaks = machine.peaks  # datasheet or measured (Note [Roofs from the datasheet])
    bandwidth = (peaks.gbps if peaks else None) or machine.copy_gbps
    if not points or not bandwidth:
        return None
    intensity = [k.flops / k.bytes for _, k in points]
    low, high = min(intensity + [0.05]) / 2, max(intensity + [50.0]) * 2
    peak = (peaks.fp32_gflops if peaks else None) or machine.matmul_gflops or None
    where = "datasheet" if peaks and peaks.part else "measured"
    roofs = [(peak, "fp32", "#64748b")]
    if peaks and peaks.tensor_gflops and peaks.tensor_gflops != peak:
        roofs.append((peaks.tensor_gflops, "fp16/bf16 matmul", "#a855f7"))
    figure = go.Figure()
    for top, name, colour in roofs:
        ridge = top / bandwidth if top else high
        xs = [low, min(ridge, high), high]
        ys = [min(bandwidth * x, top or bandwidth * x) for x in xs]
        figure.add_scatter(x=xs, y=ys, mode="lines", name=f"{where} roof: {bandwidth:.4g} GB/s"
                           + (f", {name} {top:.4g} GFLOP/s" if top else ""), line=dict(color=colour, dash="dash"),
                           hoverinfo="skip")
    figure.add_scatter(
        x=intensity, y=[k.gflops for _, k in points], mode="markers+text", name="kernels",
        text=[k.name for _, k in points], textposition="top center",
        marker=dict(size=11, color=[KIND_STYLE.get(k.kind, KIND_STYLE["other"])[1] for _, k in points]),
        customdata=[[k.time_ms, k.gbps or 0, k.roofline.pct if k.roofline else 0] for _, k in points],
        hovertemplate="%{text}: %{x:.3f} FLOP/byte, %{y:.2f} GFLOP/s, %{customdata[0]:.4f} ms, "
                      "%{customdata[1]:.2f} GB/s, %{customdata[2]:.0f}% of roof<extra></extra>")
    figure.update_layout(xaxis=dict(type="log", dtick=1, title="arithmetic intensity (FLOP per byte moved, estimated)"),
                         yaxis=dict(type="log", dtick=1, title="achieved GFLOP/s"),  # a label at every decade
                         legend=dict(orientation="h", y=-0.25))
    return _layout(figure, f"Roofline: each kernel against the {where} roofs", height)
