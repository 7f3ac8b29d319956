"""The memory plan as a buffer-lifetime timeline (plotly): which buffer lives when, which reuses which, the peak.

Reads graph.memory.buffers (the record's MemoryBuffer, from engine/schedule/memory.py's BufferLife: name, bytes, first = the kernel that
writes it, last = the last kernel that reads it, reuses = the dead buffer whose storage it takes). One row per
buffer, a bar from its first to its last kernel; buffers sharing one storage share a colour; under it, the bytes
live after each kernel, with the peak marked.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.record import GraphRecord, MemoryBuffer

PALETTE = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#65a30d", "#db2777"]


def _storage_of(buffers: list[MemoryBuffer]) -> dict[str, str]:
    """Buffer -> the first buffer of its reuse chain (its storage)."""
    reuses = {b.name: b.reuses for b in buffers}
    storage = {}
    for buffer in buffers:
        root, seen = buffer.name, set()
        while reuses.get(root) and root not in seen:
            seen.add(root)
            root = reuses[root]
        storage[buffer.name] = root
    return storage


def live_bytes(buffers: list[MemoryBuffer], steps: int) -> list[int]:
    """Bytes held after each kernel (a storage counts once, from its first writer to its last reader)."""
    storage = _storage_of(buffers)
    spans: dict[str, list] = {}
    for buffer in buffers:
        span = spans.setdefault(storage[buffer.name], [buffer.first, buffer.last, buffer.bytes])
        span[0], span[1] = min(span[0], buffer.first), max(span[1], buffer.last)
        span[2] = max(span[2], buffer.bytes)
    return [sum(size for first, last, size in spans.values() if first <= step <= last) for step in range(steps)]


def memory_timeline_figure(graph: GraphRecord, kernel_labels: dict | None = None) -> go.Figure | None:
    buffers = graph.memory.buffers if graph.memory else []
    if not buffers:
        return None
    kernels = graph.kernels
    steps = max(max(b.last for b in buffers), len(kernels)) + 1
    storage = _storage_of(buffers)
    colours = {root: PALETTE[i % len(PALETTE)] for i, root in enumerate(dict.fromkeys(storage.values()))}
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    for buffer in buffers:
        reuse = f", reuses {buffer.reuses}'s memory" if buffer.reuses else ""
        figure.add_bar(
            y=[buffer.name], x=[buffer.last - buffer.first + 0.8], base=[buffer.first - 0.4],
            orientation="h", marker_color=colours[storage[buffer.name]], showlegend=False,
            text=[f"{buffer.bytes:,} B" + (f" ← {buffer.reuses}" if buffer.reuses else "")],
            textposition="inside", insidetextanchor="start",
            hovertemplate=f"{buffer.name}: {buffer.bytes:,} bytes, written by kernel {buffer.first}, "
                          f"last read by kernel {buffer.last}{reuse}<extra></extra>", row=1, col=1)
    live = live_bytes(buffers, steps)
    peak = max(live) if live else 0
    figure.add_scatter(x=list(range(steps)), y=live, mode="lines+markers", line=dict(shape="hv", color="#334155"),
                       name="live bytes", showlegend=False,
                       hovertemplate="after kernel %{x}: %{y:,} bytes live<extra></extra>", row=2, col=1)
    if peak:
        at = live.index(peak)
        figure.add_annotation(x=at, y=peak, text=f"peak {peak:,} B", showarrow=True, arrowhead=2, row=2, col=1)
    labels = kernel_labels or {i: k.name for i, k in enumerate(kernels)}
    figure.update_xaxes(tickmode="array", tickvals=list(labels), ticktext=list(labels.values()), row=2, col=1)
    figure.update_yaxes(autorange="reversed", row=1, col=1)
    figure.update_yaxes(title_text="bytes", row=2, col=1)
    figure.update_layout(height=max(260, 90 + 22 * len(buffers) + 120), margin=dict(l=10, r=10, t=40, b=10),
                         title=dict(text="Buffer lifetimes (same colour: one storage, reused)", font=dict(size=14)),
                         barmode="overlay", plot_bgcolor="white")
    return figure
