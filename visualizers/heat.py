"""Metrics where the code is: the per-kernel profile (engine/runtime/profile.py) painted on the graph's nodes
and summed onto the user's source lines through provenance. Reads the typed record only.

Note [Time on lines]
A kernel's measured time belongs to the ATen nodes it computes (each node shows its kernel's time and share;
nodes fused into one kernel share one figure, since a fused kernel has no per-op time). On the source, a
kernel's time is split evenly over the distinct user lines its ATen nodes came from (their stack traces, as
provenance reads them), so the lines' figures sum to the kernels' total: a line's figure is what the kernels
it contributes to cost, shared with the other lines they fuse. A line is a place (file, line) outside torch's
own files: the user's file, and the library code a model is built from (a Hugging Face model's ops come from
its modeling file, so its heat lands there, per file, hottest lines first). A line's bytes and FLOPs are split the
same way, so its GB/s and GFLOP/s are its share of bytes and FLOPs over its share of time, and its % of the roof is its
kernels' %, weighted by the time each gives it (Note [Roofs from the datasheet] in engine/runtime/peaks.py).
"""
from __future__ import annotations

import html

from engine.record import Exploration, GraphRecord, KernelRecord


def _timed(graph: GraphRecord) -> list[KernelRecord]:
    return [k for k in graph.kernels if k.time_ms is not None]


def roof_pct(kernel: KernelRecord) -> float | None:
    """The kernel's % of the roof at its arithmetic intensity, when the profile placed it."""
    return kernel.roofline.pct if kernel.roofline else None


def rates_text(gbps, gflops, pct) -> str:
    """"12 GB/s · 3.4 GFLOP/s · 56% of roof", leaving out what is unknown."""
    parts = [f"{gbps:.3g} GB/s" if gbps else "", f"{gflops:.3g} GFLOP/s" if gflops else "",
             f"{pct:.0f}% of roof" if pct is not None else ""]
    return " · ".join(p for p in parts if p)


def node_heat(graph: GraphRecord) -> dict[str, dict]:
    """ATen node -> {ms, share, kernel, gbps, gflops, pct} of the kernel that computes it (Note [Time on lines])."""
    heat = {}
    for kernel in _timed(graph):
        for node in kernel.aten_origins:
            heat[node] = {"ms": kernel.time_ms, "share": kernel.share or 0.0, "kernel": kernel.name,
                          "gbps": kernel.gbps, "gflops": kernel.gflops, "pct": roof_pct(kernel)}
    return heat


def kernel_heat(graph: GraphRecord) -> dict[str, dict]:
    """Kernel name -> {ms, share, label, fill, nodes}: a timed kernel as a box around its ATen nodes, in the heat
    scale, labelled with its time and rates."""
    timed = _timed(graph)
    hottest = max((k.time_ms for k in timed), default=0.0) or 1.0
    clusters = {}
    for kernel in timed:
        rates = rates_text(kernel.gbps, kernel.gflops, roof_pct(kernel))
        clusters[kernel.name] = {
            "ms": kernel.time_ms, "share": kernel.share or 0.0, "nodes": list(kernel.aten_origins),
            "fill": heat_colour(kernel.time_ms / hottest),
            "label": f"{kernel.name}: {kernel.time_ms:.3g} ms ({kernel.share or 0.0:.0%})"
                     + (f"\n{rates}" if rates else "")}
    return clusters


def torch_own(filename: str | None) -> bool:
    """A file of torch's own (nn.Linear's forward, F.layer_norm): not a line the user wrote or chose."""
    return not filename or "/torch/" in filename.replace("\\", "/")


def kernel_places(graph: GraphRecord, kernel: KernelRecord) -> list[tuple[str, int, str]]:
    """(filename, line, its text) of every line a kernel's ATen nodes came from (their own stack traces, or
    their FX nodes'), outside torch's own files: the user's file, and the library code the model is (a Hugging
    Face model's modeling file)."""
    aten = {n.name: n for n in graph.aten}
    fx = {n.name: n for n in graph.fx}
    places = []
    for name in kernel.aten_origins:
        node = aten.get(name)
        if node is None:
            continue
        sources = [node.source] + [fx[f].source for f in node.fx_origins if f in fx]
        places += [(s.filename, s.lineno, s.line) for s in sources if s and s.lineno and not torch_own(s.filename)]
    return list(dict.fromkeys(places))


def kernel_lines(graph: GraphRecord, kernel: KernelRecord, filename: str | None = None) -> list[int]:
    """The lines of `filename` (every file's, when None) a kernel's ATen nodes came from."""
    return list(dict.fromkeys(line for file, line, _ in kernel_places(graph, kernel)
                              if not filename or file == filename))


def place_heat(record: Exploration) -> dict[tuple[str, int], dict]:
    """(filename, line) -> {ms, share (of all timed kernels), kernels, text, gbps, gflops, pct} (Note [Time on
    lines]): each kernel's time, bytes and FLOPs split evenly over its places."""
    total = sum(k.time_ms for g in record.graphs for k in _timed(g)) or 0.0
    heat: dict[tuple[str, int], dict] = {}
    for graph in record.graphs:
        for kernel in _timed(graph):
            places = kernel_places(graph, kernel)
            pct = roof_pct(kernel)
            for file, line, text in places:
                entry = heat.setdefault((file, line), {"ms": 0.0, "kernels": [], "bytes": 0.0, "flops": 0.0,
                                                       "text": text, "_roof_ms": 0.0, "_pct_ms": 0.0})
                ms = kernel.time_ms / len(places)
                entry["ms"] += ms
                entry["bytes"] += (kernel.bytes or 0) / len(places)
                entry["flops"] += (kernel.flops or 0) / len(places)
                if pct is not None:
                    entry["_roof_ms"] += ms
                    entry["_pct_ms"] += pct * ms
                entry["kernels"].append(f"g{graph.index}:{kernel.name}")
    for entry in heat.values():
        entry["share"] = entry["ms"] / total if total else 0.0
        ms = entry["ms"]
        entry["gbps"] = entry["bytes"] / ms / 1e6 if ms > 0 and entry["bytes"] else None
        entry["gflops"] = entry["flops"] / ms / 1e6 if ms > 0 and entry["flops"] else None
        roof_ms, pct_ms = entry.pop("_roof_ms"), entry.pop("_pct_ms")
        entry["pct"] = pct_ms / roof_ms if roof_ms > 0 else None
    return heat


def line_heat(record: Exploration) -> dict[int, dict]:
    """The user's own file's lines of place_heat: line -> {ms, share, kernels, ...} (Note [Time on lines])."""
    filename = record.source.filename or None
    return {line: entry for (file, line), entry in place_heat(record).items() if not filename or file == filename}


def library_heat(record: Exploration) -> dict[str, list[tuple[int, dict]]]:
    """place_heat's lines outside the user's file, per file, hottest first: where a model built from a library
    (transformers' modeling_gpt2.py) spends its time."""
    filename = record.source.filename or None
    files: dict[str, list[tuple[int, dict]]] = {}
    for (file, line), entry in place_heat(record).items():
        if filename and file != filename:
            files.setdefault(file, []).append((line, entry))
    ordered = sorted(files.items(), key=lambda item: -sum(e["ms"] for _, e in item[1]))
    return {file: sorted(lines, key=lambda item: -item[1]["ms"]) for file, lines in ordered}


def short_file(filename: str) -> str:
    """A library file by its package path (transformers/models/gpt2/modeling_gpt2.py), not its install path."""
    parts = filename.replace("\\", "/").split("/")
    anchor = max((i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages")), default=None)
    return "/".join(parts[anchor + 1:]) if anchor is not None else "/".join(parts[-3:])


def library_heat_html(record: Exploration, limit: int = 12) -> str:
    """Per library file, its hottest lines with their figures and text (library_heat)."""
    files = library_heat(record)
    if not files:
        return ""
    hottest = max((e["ms"] for lines in files.values() for _, e in lines), default=0.0) or 1.0
    out = []
    for file, lines in files.items():
        rows = ["<tr class='gb-heat-head'><th>ms</th><th>share</th><th>GB/s</th><th>GFLOP/s</th><th>% roof</th>"
                "<th>line</th><th style='text-align:left'>code</th></tr>"]
        for line, entry in lines[:limit]:
            cells = _cells(entry)
            title = html.escape(", ".join(entry["kernels"]), quote=True)
            rows.append(f"<tr class='gb-heat-line' data-line='{line}' title='{title}' "
                        f"style='background:{heat_colour(entry['ms'] / hottest)}'>"
                        + "".join(f"<td class='gb-heat-ms'>{html.escape(c)}</td>" for c in cells)
                        + f"<td class='gb-heat-no'>{line}</td>"
                        + f"<td><pre>{html.escape(entry['text'] or '')}</pre></td></tr>")
        more = f" (the {limit} hottest of {len(lines)} lines)" if len(lines) > limit else ""
        out.append(f"<div class='gb-heat-file'>{html.escape(short_file(file))}{html.escape(more)}</div>"
                   f"<table class='gb-heat'>{''.join(rows)}</table>")
    return _STYLE + "".join(out)


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
    notes = {node: f"{h['ms']:.3g} ms ({h['share']:.0%})" for node, h in heat.items()}
    return paint, notes


def graph_clusters(graph: GraphRecord) -> dict[str, tuple[str, str, list[str]]]:
    """Kernel boxes for visualizers/overlay.py: kernel -> (label with time and rates, heat fill, its nodes)."""
    return {name: (k["label"], k["fill"], k["nodes"]) for name, k in kernel_heat(graph).items() if k["nodes"]}


def source_heat_html(source: str, heat: dict[int, dict]) -> str:
    """The user's source with each line's time in a gutter and its background in the heat scale."""
    hottest = max((h["ms"] for h in heat.values()), default=0.0) or 1.0
    rows = ["<tr class='gb-heat-head'><th>ms</th><th>share</th><th>GB/s</th><th>GFLOP/s</th><th>% roof</th>"
            "<th>#</th><th style='text-align:left'>your source</th></tr>"]
    for number, line in enumerate(source.splitlines(), start=1):
        entry = heat.get(number)
        colour = heat_colour(entry["ms"] / hottest) if entry else "transparent"
        cells = _cells(entry) if entry else ["", "", "", "", ""]
        title = html.escape(", ".join(entry["kernels"]), quote=True) if entry else ""
        rows.append(f"<tr class='gb-heat-line' data-line='{number}' title='{title}' style='background:{colour}'>"
                    + "".join(f"<td class='gb-heat-ms'>{html.escape(c)}</td>" for c in cells)
                    + f"<td class='gb-heat-no'>{number}</td><td><pre>{html.escape(line) or ' '}</pre></td></tr>")
    return _STYLE + "<table class='gb-heat'>" + "".join(rows) + "</table>"


_STYLE = ("<style>.gb-heat{border-collapse:collapse;font-family:monospace;font-size:12px;width:100%}"
          ".gb-heat td{padding:0 5px;vertical-align:top}.gb-heat pre{margin:0;white-space:pre-wrap}"
          ".gb-heat th{font-weight:normal;color:#6b7280;text-align:right;padding:0 5px;white-space:nowrap;"
          "border-bottom:1px solid #e5e7eb}"
          ".gb-heat-ms{color:#7f1d1d;text-align:right;white-space:nowrap}"
          ".gb-heat-no{color:#9ca3af;text-align:right;width:3em}"
          ".gb-heat-file{font-family:monospace;font-size:12px;font-weight:600;margin:10px 0 2px}</style>")


def _cells(entry: dict) -> list[str]:
    """ms, share, GB/s, GFLOP/s and % of roof of a line's heat entry, as text."""
    pct = entry["pct"]  # place_heat's entries carry every figure, None where it has none
    return [f"{entry['ms']:.3g}", f"{entry['share']:.0%}", _rate(entry["gbps"]), _rate(entry["gflops"]),
            f"{pct:.0f}%" if pct is not None else ""]


def _rate(value) -> str:
    return f"{value:.3g}" if value else ""


def roof_caption(record: Exploration) -> str:
    """Which roofs the % of roof is of (the record's machine.peaks), in words."""
    peaks = record.machine.peaks
    if peaks is None or not peaks.gbps:
        return ""
    compute = f", {peaks.fp32_gflops:.4g} GFLOP/s fp32" if peaks.fp32_gflops else ""
    tensor = (f", {peaks.tensor_gflops:.4g} GFLOP/s fp16/bf16 matmul"
              if peaks.tensor_gflops and peaks.tensor_gflops != peaks.fp32_gflops else "")
    return (f"% of roof: achieved over attainable at the kernel's FLOP/byte, under {peaks.gbps:.4g} GB/s"
            f"{compute}{tensor} ({peaks.source}; {peaks.name})")


def legend() -> list[tuple[str, str, str]]:
    return [(heat_colour(0.1), "#9ca3af", "cheap"), (heat_colour(0.5), "#9ca3af", "half the hottest kernel"),
            (heat_colour(1.0), "#7f1d1d", "hottest kernel"), ("#f3f4f6", "#9ca3af", "not timed")]
