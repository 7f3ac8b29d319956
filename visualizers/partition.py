"""A forward graph's partition (GraphRecord.partition, engine/partition.py) -> DOT and table rows.

The joint forward+backward graph with each node on its side: forward (blue), backward (orange), recomputed in the
backward (green, dashed); values the forward saves for the backward are drawn bold with their size, and the edges
that carry a saved value into the backward are the cut.
"""
from __future__ import annotations

import plotly.graph_objects as go

from engine.record import PartitionRecord, VerifyRecord

SIDE_STYLE = {
    "forward": ("#dbeafe", "#3b82f6", "forward"),
    "backward": ("#ffedd5", "#ea580c", "backward"),
    "recomputed": ("#dcfce7", "#16a34a", "recomputed in the backward"),
}


def legend_html() -> str:
    """The joint graph's legend: the three sides, saved values and the cut."""
    chips = [f'<span style="display:inline-block;margin:0 10px 4px 0;font-size:0.8rem"><span style="display:'
             f'inline-block;width:0.9em;height:0.9em;background:{fill};border:1.5px {"dashed" if side == "recomputed" else "solid"} '
             f'{border};border-radius:3px;vertical-align:-0.1em;margin-right:4px"></span>{text}</span>'
             for side, (fill, border, text) in SIDE_STYLE.items()]
    chips.append('<span style="font-size:0.8rem;margin-right:10px"><b>bold border</b>: saved for the backward</span>')
    chips.append('<span style="font-size:0.8rem;color:#dc2626">red edge: a saved value crossing into the backward '
                 '(the cut)</span>')
    return '<div class="gb-legend">' + "".join(chips) + "</div>"


def _quote(text: str) -> str:
    """A DOT string: quotes and backslashes escaped, line breaks as DOT's centred \\n."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def node_reasons(partition: PartitionRecord) -> dict[str, str]:
    """Why each joint node is where it is, in words: saved and recomputed values carry the partitioner's reason,
    a value it would not recompute its ban (the tooltip of its node)."""
    reasons = {n.name: f"must stay in the forward: {n.ban}" for n in partition.joint or [] if n.ban}
    reasons.update({r.name: r.reason for r in partition.recomputed or []})
    reasons.update({s.name: f"saved: {s.reason}" for s in partition.saved or []})
    return reasons


def joint_dot(partition: PartitionRecord, max_nodes: int = 400) -> str:
    nodes = (partition.joint or [])[:max_nodes]
    saved = {s.name: s for s in partition.saved or []}
    reasons = node_reasons(partition)
    side_of = {n.name: n.side for n in nodes}
    lines = ["digraph joint {", "  rankdir=TB; node [shape=box, style=\"rounded,filled\", fontname=Helvetica, "
             "fontsize=10]; edge [color=\"#9ca3af\"];"]
    for node in nodes:
        fill, border, _ = SIDE_STYLE.get(node.side, SIDE_STYLE["forward"])
        computes = node.op != node.name  # a placeholder's op is its own name
        op = node.op.split(".")[0]  # aten.mm.default -> mm; said once when the value is named after it
        label = node.name + (f"\n{op}" if computes and op != node.name else "")
        label += f"\n{node.dtype}[{', '.join(node.shape)}]"
        extra = ""
        if node.name in saved:
            count = saved[node.name].bytes
            label += f"\nsaved {_size(count)}" if count else "\nsaved (alive anyway)"
            extra = ", penwidth=3"
        if node.side == "recomputed":
            extra += ', style="rounded,filled,dashed"'
        tooltip = f"{node.name} ({node.op if computes else 'an input of the joint graph'}, {SIDE_STYLE.get(node.side, SIDE_STYLE['forward'])[2]})"
        if node.name in reasons:
            tooltip += f": {reasons[node.name]}"
        extra += f", tooltip={_quote(tooltip)}"
        lines.append(f"  {_quote(node.name)} [label={_quote(label)}, fillcolor={_quote(fill)}, "
                     f"color={_quote(border)}{extra}];")
    for node in nodes:
        for arg in node.args:
            if arg not in side_of:
                continue
            cut = arg in saved and node.side != "forward" and side_of[arg] == "forward"
            style = ' [color="#dc2626", penwidth=2]' if cut else ""
            lines.append(f"  {_quote(arg)} -> {_quote(node.name)}{style};")
    lines.append("}")
    return "\n".join(lines)


def saved_rows(partition: PartitionRecord) -> list[dict]:
    return [{"value": s.name, "op": s.op, "shape": "x".join(s.shape) or "scalar", "dtype": s.dtype,
             "bytes": s.bytes, "reason": s.reason} for s in partition.saved or []]


def recomputed_rows(partition: PartitionRecord) -> list[dict]:
    return [{"value": r.name, "op": r.op, "from": ", ".join(r.inputs), "reason": r.reason}
            for r in partition.recomputed or []]


def gradient_rows(verify: VerifyRecord) -> list[dict]:
    """Loss, every gradient (named by parameter path or input) and buffer of a training step's verify."""
    entries = ([verify.loss] if verify.loss else []) + (verify.gradients or []) + (verify.buffers or [])
    return [{"tensor": e.name, "ok": bool(e.ok), "max abs error": e.max_abs_err, "max rel error": e.max_rel_err,
             "judged by": e.judged_by or "", "note": e.problem or e.note or ""} for e in entries]


def memory_bars(partition: PartitionRecord, bench_case: dict | None = None) -> list[tuple[str, int, str]]:
    """(label, bytes, what it is) of the activation memory of one training step, ours first: the record's two
    partitions of this graph and, once a training step was benchmarked, what autograd really kept for each
    compiler's backward (engine/tools/train_bench.py Note [Training-step bench]; all graphs of the model)."""
    bars = [("our partition", partition.saved_bytes or 0, "what engine/partition.py saves (this graph)"),
            ("save all the backward reads", partition.saved_all_bytes or 0,
             "no recomputation: every forward value the backward reads (this graph)")]
    measured = (bench_case or {}).get("saved_bytes") or {}
    for who, label in (("glassbox", "ours, measured"), ("inductor", "Inductor's partition, measured"),
                       ("eager", "eager autograd, measured")):
        if isinstance(measured.get(who), (int, float)):
            bars.append((label, measured[who], "bytes autograd kept for the backward in a benchmarked step"))
    return bars


def memory_figure(partition: PartitionRecord, bench_case: dict | None = None, height: int = 260):
    bars = memory_bars(partition, bench_case)
    colours = {"our partition": "#2563eb", "ours, measured": "#2563eb", "save all the backward reads": "#94a3b8",
               "Inductor's partition, measured": "#f97316", "eager autograd, measured": "#64748b"}
    figure = go.Figure(go.Bar(y=[b[0] for b in bars], x=[b[1] for b in bars], orientation="h",
                              text=[_size(b[1]) for b in bars], textposition="auto",
                              customdata=[b[2] for b in bars], marker_color=[colours[b[0]] for b in bars],
                              hovertemplate="%{y}: %{x:,} bytes<br>%{customdata}<extra></extra>"))
    figure.update_layout(title=dict(text="Activation memory: what the forward keeps for the backward",
                                    font=dict(size=14)), height=height, margin=dict(l=10, r=10, t=40, b=10),
                         xaxis_title="bytes", yaxis=dict(autorange="reversed"), showlegend=False)
    return figure


def saved_figure(partition: PartitionRecord, height: int = 300, top: int = 30):
    """Bytes of each saved value (the largest `top`), the reason on hover; inputs and parameters cost nothing."""
    saved = sorted(partition.saved or [], key=lambda s: -s.bytes)[:top]
    figure = go.Figure(go.Bar(x=[s.name for s in saved], y=[s.bytes for s in saved],
                              customdata=[s.reason for s in saved],
                              marker_color=["#2563eb" if s.bytes else "#cbd5e1" for s in saved],
                              hovertemplate="%{x}: %{y:,} bytes<br>%{customdata}<extra></extra>"))
    figure.update_layout(title=dict(text="Saved for the backward, per value (grey: an input or parameter, free)",
                                    font=dict(size=14)), height=height, margin=dict(l=10, r=10, t=40, b=10),
                         yaxis_title="bytes", showlegend=False)
    return figure
