"""Plotly figures from the record and from `python -m engine bench --json`: stage times, eager vs Glassbox vs
Inductor, speedups, per-kernel numbers, and compile time per stage (ours) next to Inductor's cold compile."""
from __future__ import annotations

import plotly.graph_objects as go

from engine.record import STAGE_NAMES, KernelRecord

STAGE_COLOURS = {"capture": "#60a5fa", "decompose": "#818cf8", "lower": "#34d399", "schedule": "#fbbf24",
                 "codegen": "#f472b6", "build": "#a78bfa", "run": "#94a3b8"}
SYSTEM_COLOURS = {"eager": "#94a3b8", "Glassbox": "#2563eb", "Inductor": "#f97316"}


def _layout(figure: go.Figure, title: str, height: int) -> go.Figure:
    figure.update_layout(title=dict(text=title, font=dict(size=14)), height=height,
                         margin=dict(l=10, r=10, t=40, b=10),
                         legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                                     font=dict(size=11)))
    return figure


def ordered_stages(timings: dict) -> list[str]:
    known = [s for s in STAGE_NAMES if s in timings]
    return known + [s for s in timings if s not in known]


def stage_times_figure(timings: dict, inductor_compile_s: float | None = None, height: int = 190,
                       legend: bool = True, include_run: bool = False) -> go.Figure:
    """Seconds per compiler stage as one stacked bar (and Inductor's cold compile as a second bar, when known).
    `run` (verifying against eager) is not compiling, so it is left out unless asked for."""
    figure = go.Figure()
    timings = {k: v for k, v in (timings or {}).items() if include_run or k != "run"}
    rows = ["Glassbox"] + (["Inductor (cold)"] if inductor_compile_s else [])
    for stage in ordered_stages(timings or {}):
        seconds = timings[stage]
        if not isinstance(seconds, (int, float)):
            continue
        figure.add_bar(y=["Glassbox"], x=[seconds], name=stage, orientation="h",
                       marker_color=STAGE_COLOURS.get(stage, "#cbd5e1"),
                       hovertemplate=f"{stage}: %{{x:.3f}} s<extra></extra>",
                       text=[stage if seconds > 0.08 * max(sum_numbers(timings), 1e-9) else ""],
                       textposition="inside", insidetextanchor="middle")
    if inductor_compile_s:
        figure.add_bar(y=["Inductor (cold)"], x=[inductor_compile_s], name="Inductor compile", orientation="h",
                       marker_color=SYSTEM_COLOURS["Inductor"],
                       hovertemplate="Inductor cold compile: %{x:.2f} s<extra></extra>")
    figure.update_layout(barmode="stack", yaxis=dict(categoryorder="array", categoryarray=rows[::-1]))
    _layout(figure, "Compile time per stage (s)", height + (50 if inductor_compile_s else 0))
    if legend:
        figure.update_layout(margin=dict(t=70))
    figure.update_layout(showlegend=legend)
    return figure


def sum_numbers(values: dict) -> float:
    return float(sum(v for v in (values or {}).values() if isinstance(v, (int, float))))


def _verdict(case: dict, key: str) -> dict | None:
    return (case.get("verdicts") or {}).get(key)


def bench_figure(case: dict, height: int = 300) -> go.Figure:
    """Steady-state milliseconds per call: eager, Glassbox, Inductor, each with its spread (the interquartile
    range of the interleaved rounds) as an error bar and in its label."""
    systems = [("eager", "eager"), ("Glassbox", "glassbox"), ("Inductor", "inductor")]
    systems = [(name, case.get(f"{who}_ms"), case.get(f"{who}_iqr_ms")) for name, who in systems
               if isinstance(case.get(f"{who}_ms"), (int, float))]
    labels = [f"{ms:.3f} ms" + (f" ±{spread:.3f}" if isinstance(spread, (int, float)) else "")
              for _, ms, spread in systems]
    spreads = [spread / 2 if isinstance(spread, (int, float)) else 0 for _, _, spread in systems]
    figure = go.Figure(go.Bar(x=[n for n, _, _ in systems], y=[ms for _, ms, _ in systems], text=labels,
                              textposition="outside", error_y=dict(type="data", array=spreads, visible=True),
                              marker_color=[SYSTEM_COLOURS[n] for n, _, _ in systems],
                              hovertemplate="%{x}: %{y:.4f} ms<extra></extra>"))
    values = [ms for _, ms, _ in systems if ms and ms > 0]
    log = bool(values) and max(values) / min(values) > 30  # one bar would flatten the others
    figure.update_layout(yaxis_title="ms per call (median of rounds)" + (", log scale" if log else ""),
                         showlegend=False, yaxis_type="log" if log else "linear")
    if log:
        figure.update_yaxes(dtick=1)  # a label at every decade
    return _layout(figure, "Time per call (± interquartile range)", height)


def speedup_figure(case: dict, height: int = 260) -> go.Figure:
    """Speedup over eager (higher is better) for Glassbox and Inductor, each bar with the range its ratio could
    take (from the quartiles); a ratio the bench could not judge (a spread too wide) is grey and says so."""
    eager = case.get("eager_ms")
    bars = []
    for name, key, verdict_key in (("Glassbox", "glassbox_ms", "speedup_vs_eager"),
                                   ("Inductor", "inductor_ms", "inductor_speedup_vs_eager")):
        ms = case.get(key)
        if isinstance(eager, (int, float)) and isinstance(ms, (int, float)) and ms > 0:
            verdict = _verdict(case, verdict_key) or {}
            value = eager / ms
            judged = verdict.get("judged", True)
            bars.append((name, value, verdict.get("low", value), verdict.get("high", value), judged))
    figure = go.Figure(go.Bar(
        x=[b[0] for b in bars], y=[b[1] for b in bars],
        text=[f"{b[1]:.2f}x" if b[4] else "too noisy to judge" for b in bars], textposition="outside",
        error_y=dict(type="data", symmetric=False, array=[b[3] - b[1] for b in bars],
                     arrayminus=[b[1] - b[2] for b in bars], visible=True),
        marker_color=[SYSTEM_COLOURS[b[0]] if b[4] else "#cbd5e1" for b in bars]))
    figure.add_hline(y=1.0, line_dash="dot", line_color="#6b7280", annotation_text="eager",
                     annotation_position="top left")
    figure.update_layout(yaxis_title="speedup over eager", showlegend=False)
    return _layout(figure, "Speedup over eager (bars: the range from the quartiles)", height)


def compile_figure(case: dict, timings: dict | None = None, height: int = 240) -> go.Figure:
    """Compile seconds: Glassbox cold and warm (bench), its stages (record), and Inductor's cold compile."""
    figure = go.Figure()
    if timings:
        for stage in ordered_stages(timings):
            if stage == "run" or not isinstance(timings[stage], (int, float)):
                continue
            figure.add_bar(y=["Glassbox stages"], x=[timings[stage]], name=stage, orientation="h",
                           marker_color=STAGE_COLOURS.get(stage, "#cbd5e1"),
                           hovertemplate=f"{stage}: %{{x:.3f}} s<extra></extra>")
    for label, key, colour in (("Glassbox cold", "compile_s", SYSTEM_COLOURS["Glassbox"]),
                               ("Glassbox warm", "compile_warm_s", "#93c5fd"),
                               ("Inductor cold", "inductor_compile_s", SYSTEM_COLOURS["Inductor"])):
        value = case.get(key)
        if isinstance(value, (int, float)):
            figure.add_bar(y=[label], x=[value], name=label, orientation="h", marker_color=colour,
                           text=[f"{value:.2f} s"], textposition="auto",
                           hovertemplate=f"{label}: %{{x:.2f}} s<extra></extra>")
    figure.update_layout(barmode="stack", showlegend=False)
    return _layout(figure, "Compile time (s): Glassbox per stage vs Inductor's cold compile", height)


def kernel_figure(kernels: list[KernelRecord], height: int = 280) -> go.Figure:
    """Per kernel: its measured time when the record has it (--profile), otherwise bytes moved (estimated by
    the scheduler)."""
    names = [k.name for k in kernels]
    if any(k.time_ms is not None for k in kernels):
        values = [k.time_ms for k in kernels]
        figure = go.Figure(go.Bar(x=names, y=values, marker_color="#2563eb",
                                  hovertemplate="%{x}: %{y:.4f} ms<extra></extra>"))
        figure.update_layout(yaxis_title="ms per call")
        return _layout(figure, "Time per kernel", height)
    from visualizers.graphs import KIND_STYLE
    values = [k.bytes for k in kernels]
    colours = [KIND_STYLE.get(k.kind, KIND_STYLE["other"])[1] for k in kernels]
    figure = go.Figure(go.Bar(x=names, y=[v / 1024 for v in values], marker_color=colours,
                              text=[k.kind for k in kernels], textposition="inside",
                              hovertemplate="%{x}: %{y:.1f} KiB moved<extra></extra>"))
    figure.update_layout(yaxis_title="KiB read + written", bargap=0.7 if len(names) <= 2 else 0.25)
    return _layout(figure, "Bytes moved per kernel (estimate)", height)
