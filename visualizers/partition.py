"""A forward graph's partition (record["graphs"][i]["partition"], engine/partition.py) -> DOT and table rows.

The joint forward+backward graph with each node on its side: forward (blue), backward (orange), recomputed in the
backward (green, dashed); values the forward saves for the backward are drawn bold with their size, and the edges
that carry a saved value into the backward are the cut.
"""
from __future__ import annotations

SIDE_STYLE = {
    "forward": ("#dbeafe", "#3b82f6", "forward"),
    "backward": ("#ffedd5", "#ea580c", "backward"),
    "recomputed": ("#dcfce7", "#16a34a", "recomputed in the backward"),
}


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def joint_dot(partition: dict, max_nodes: int = 400) -> str:
    nodes = (partition.get("joint") or [])[:max_nodes]
    saved = {s["name"]: s for s in partition.get("saved") or []}
    side_of = {n["name"]: n["side"] for n in nodes}
    lines = ["digraph joint {", "  rankdir=TB; node [shape=box, style=\"rounded,filled\", fontname=Helvetica, "
             "fontsize=10]; edge [color=\"#9ca3af\"];"]
    for node in nodes:
        fill, border, _ = SIDE_STYLE.get(node["side"], SIDE_STYLE["forward"])
        label = f"{node['name']}\\n{node['op']}"
        extra = ""
        if node["name"] in saved:
            label += f"\\nsaved {_size(saved[node['name']]['bytes'])}"
            extra = ", penwidth=3"
        if node["side"] == "recomputed":
            extra += ', style="rounded,filled,dashed"'
        lines.append(f"  {_quote(node['name'])} [label={_quote(label)}, fillcolor={_quote(fill)}, "
                     f"color={_quote(border)}{extra}];")
    for node in nodes:
        for arg in node.get("args") or []:
            if arg not in side_of:
                continue
            cut = arg in saved and node["side"] != "forward" and side_of[arg] == "forward"
            style = ' [color="#dc2626", penwidth=2]' if cut else ""
            lines.append(f"  {_quote(arg)} -> {_quote(node['name'])}{style};")
    lines.append("}")
    return "\n".join(lines)


def saved_rows(partition: dict) -> list[dict]:
    return [{"value": s["name"], "op": s["op"], "shape": "x".join(s["shape"]) or "scalar", "dtype": s["dtype"],
             "bytes": s["bytes"], "reason": s["reason"]} for s in partition.get("saved") or []]


def recomputed_rows(partition: dict) -> list[dict]:
    return [{"value": r["name"], "op": r["op"], "from": ", ".join(r.get("inputs") or []), "reason": r["reason"]}
            for r in partition.get("recomputed") or []]


def gradient_rows(verify: dict) -> list[dict]:
    """Loss, every gradient (named by parameter path or input) and buffer of a training step's verify."""
    entries = [verify.get("loss") or {}] + (verify.get("gradients") or []) + (verify.get("buffers") or [])
    return [{"tensor": e.get("name"), "ok": bool(e.get("ok")), "max abs error": e.get("max_abs_err"),
             "max rel error": e.get("max_rel_err"), "judged by": e.get("judged_by", ""),
             "note": e.get("problem") or e.get("note") or ""} for e in entries if e]
