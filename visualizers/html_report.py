"""An exploration as one self-contained, offline HTML file: the record -> HTML, nothing else.

Note [Offline report]
The file must open anywhere, years later, with no network: graphs are inline SVG rendered by Graphviz's `dot`
when the report is written (not in the browser), code and IR are highlighted by pygments with inline styles,
charts are plotly with plotly.js inlined once (no CDN), and the few lines of script (graph search, nothing
else) are inline too. Nothing in it refers to another file or host. Every string from the record (model
names, sources, reasons, the user's description) is escaped: the description is shown as text, so its images
and links are never fetched; a value that becomes an id or a link (a graph's index, a line number) must be an
int, else its position stands in. Big graphs are drawn folded by module (the app's rule, graphs.auto_depth), and a
graph dot cannot lay out in time is shown as a note and its DOT source, so a 2000-node model still gives a
usable file. A failed exploration renders too: its errors lead the page, and whatever stages it has follow.

Note [Report scripts]
A record can come from a model (`explore --sandbox --record-out` writes what the job returned), so the page
must run no script but ours: the Content-Security-Policy allows scripts by the SHA-256 of the ones written
here (the node search, plotly's), not 'unsafe-inline', and the search box is wired up by that script, not
by an inline event handler. Markup that slipped past the escaping would still not run.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import html
import re
import shutil
import subprocess

from engine.record import ErrorRecord, Exploration, GraphRecord, SourceFile, VerifyRecord
from visualizers import anchors, compile_cost, graphs, heat, overlay, roofline, tables, teaching, timeline
from visualizers import rewrites as rewrite_views
from visualizers.code import highlight_html, ir_listing

DOT_TIMEOUT_S = 60
FOLD_ABOVE = 150  # nodes: bigger graphs are drawn folded by module
PROVENANCE_ROWS = 1500  # at most this many generated-line rows per graph

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#111827;background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 24px 64px}
h1{font-size:1.5rem;margin:0.4rem 0} h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #e5e7eb}
h3{font-size:1rem;margin-top:1.4rem} nav a{margin-right:12px}
table{border-collapse:collapse;font-size:0.85rem;margin:0.4rem 0} td,th{border:1px solid #e5e7eb;padding:3px 6px;
text-align:left;vertical-align:top} th{background:#f9fafb}
.error{border:1px solid #dc2626;background:#fef2f2;color:#991b1b;padding:8px 12px;border-radius:6px;margin:8px 0}
.ok{color:#15803d} .bad{color:#b91c1c} .muted{color:#6b7280;font-size:0.85rem}
.svg{overflow:auto;max-height:900px;border:1px solid #e5e7eb;border-radius:6px;padding:4px}
.svg svg{max-width:none;height:auto} pre.plain{white-space:pre-wrap;font-size:0.85rem}
.hint{border-left:3px solid #2563eb;padding:4px 10px;background:#eff6ff;margin:4px 0}
g.node.gb-match polygon,g.node.gb-match ellipse,g.node.gb-match path{stroke:#dc2626;stroke-width:4px}
"""

_SEARCH_SCRIPT = """
function gbSearch(box){var q=box.value.trim().toLowerCase();var root=document.getElementById(box.dataset.target);
var hits=0,first=null;root.querySelectorAll('g.node').forEach(function(n){var t=(n.textContent||'').toLowerCase();
var m=q&&t.indexOf(q)>=0;n.classList.toggle('gb-match',!!m);if(m){hits++;if(!first)first=n;}});
document.getElementById(box.dataset.target+'-hits').textContent=q?hits+' match'+(hits==1?'':'es'):'';
if(first)first.scrollIntoView({block:'center',inline:'center'});}
document.addEventListener('DOMContentLoaded',function(){document.querySelectorAll('input[data-target]').forEach(
function(box){box.addEventListener('input',function(){gbSearch(box);});});});
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def _whole(value, default: int = 0) -> int:
    """A record value that goes into an id or a link: an int, or `default` (never the record's text)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _graph_index(graph: GraphRecord, position: int = 0) -> int:
    return _whole(graph.index, position)


def script_hashes(page_part: str) -> list[str]:
    """The CSP hashes of the inline scripts in a part of the page this module wrote (Note [Report scripts])."""
    return ["'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode() + "'"
            for body in _SCRIPT_BODY.findall(page_part)]


_SCRIPT_BODY = re.compile(r"<script\b[^>]*>(.*?)</script>", re.S | re.I)


def render_svg(dot: str) -> tuple[str | None, str]:
    """(inline SVG, "") from DOT with Graphviz's `dot`, or (None, why not)."""
    if not shutil.which("dot"):
        return None, "Graphviz's `dot` is not installed here (apt-get install graphviz), so the graph is given as DOT."
    try:
        result = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, timeout=DOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"`dot` did not lay this graph out within {DOT_TIMEOUT_S} s; here is its DOT source."
    if result.returncode != 0:
        return None, f"`dot` failed: {result.stderr.strip()[:300]}"
    svg = result.stdout
    start = svg.find("<svg")
    return (svg[start:] if start >= 0 else svg), ""  # drop the XML prolog and DOCTYPE (an external DTD URL)


def graph_section(dot: str, anchor: str, node_count: int, note: str = "") -> str:
    svg, problem = render_svg(dot)
    search = (f'<div><input type="search" placeholder="search nodes ({esc(node_count)})" data-target="{esc(anchor)}" '
              f'style="width:260px"> <span id="{esc(anchor)}-hits" class="muted"></span></div>')
    body = (f'<div class="svg" id="{esc(anchor)}">{svg}</div>' if svg else
            f'<p class="muted">{esc(problem)}</p><details><summary>DOT</summary><pre class="plain">{esc(dot)}'
            f'</pre></details>')
    return (f'<p class="muted">{esc(note)}</p>' if note else "") + (search if svg else "") + body


def _draw_options(graph: GraphRecord, which: str) -> tuple[graphs.DrawOptions, str]:
    count = len(getattr(graph, which))
    if count <= FOLD_ABOVE:
        return graphs.DrawOptions(), ""
    depth = graphs.auto_depth(graph, which, limit=FOLD_ABOVE)
    note = (f"{count} nodes: drawn folded to module depth {depth}, weights hidden" if depth
            else f"{count} nodes (no modules to fold): weights hidden")
    return graphs.DrawOptions(collapse_depth=depth, hide_params=True), note


def table(rows: list[dict]) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    heads = list(rows[0])
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row.values()) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _number(value, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def markdown_html(text) -> str:
    """A description's Markdown as HTML that loads nothing: escaped first, then paragraphs, **bold**, *italic*
    and `code` (images and links stay their text: nothing in the report is fetched)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", str(text or ""))  # images and links: their text
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    out = []
    for paragraph in paragraphs:
        body = esc(paragraph)
        body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", body)
        body = re.sub(r"(?<![*\w])\*(?!\s)(.+?)(?<!\s)\*(?![*\w])", r"<i>\1</i>", body)
        body = re.sub(r"`([^`]+)`", r"<code>\1</code>", body)
        out.append(f"<p>{body}</p>")
    return "".join(out)


def kernels_table(graph: GraphRecord) -> str:
    index = _graph_index(graph)
    code_lines = _kernel_code_lines(graph)
    nodes = teaching.node_index(graph)  # the graph's nodes by name, to say buffers as the ops that compute them
    rows = []
    for kernel in graph.kernels:
        name = kernel.name
        link = (f'<a href="#g{index}-code-{_whole(code_lines[name])}">{esc(name)}</a>' if name in code_lines
                else esc(name))
        rows.append({"kernel": link, "kind": esc(kernel.kind),
                     "ops": esc(", ".join(str(o).replace("aten.", "") for o in kernel.ops)),
                     "from FX": esc(", ".join(kernel.fx_origins)),
                     "bytes": esc(kernel.bytes),
                     "tiling": esc(" - ".join(part for part in tables.tiling_text(kernel.tiling, graph, nodes)
                                              if part)),
                     "time ms": _number(kernel.time_ms),
                     "share": f"{kernel.share:.0%}" if kernel.share is not None else "-",
                     "GB/s": _number(kernel.gbps, 2), "GFLOP/s": _number(kernel.gflops, 2),
                     "note": esc(tables.user_text(kernel.reason, graph, nodes))})
    return table(rows)


def _kernel_code_lines(graph: GraphRecord) -> dict[str, int]:
    """Kernel name -> the first generated line attributed to it (provenance), for links into the code."""
    first: dict[str, int] = {}
    for item in graph.code.provenance if graph.code else []:
        first.setdefault(item.kernel, item.line)
    return first


def provenance_table(graph: GraphRecord) -> str:
    index = _graph_index(graph)
    items = graph.code.provenance if graph.code else []
    rows = []
    for item in items[:PROVENANCE_ROWS]:
        users = " ".join(f'<a href="#src-{_whole(n)}">{_whole(n)}</a>' for n in item.user_lines)
        rows.append({"line": f'<a href="#g{index}-code-{_whole(item.line)}">{esc(item.line)}</a>',
                     "kernel": esc(item.kernel), "IR node": esc(item.ir_node),
                     "ATen": esc(", ".join(item.aten_nodes)),
                     "FX": esc(", ".join(item.fx_nodes)), "your line": users})
    more = (f'<p class="muted">{len(items) - PROVENANCE_ROWS} more lines not listed</p>'
            if len(items) > PROVENANCE_ROWS else "")
    return table(rows) + more


def figure_html(figure, first: list) -> str:
    """A plotly figure; plotly.js goes inline with the first one only (Note [Offline report])."""
    if figure is None:
        return ""
    include = not first
    written = figure.to_html(full_html=False, include_plotlyjs=include, config={"displaylogo": False})
    first.append(written)  # plotly writes the record's data as JSON with <, > and / escaped: no script ends early
    return written


def breaks_html(record: Exploration) -> str:
    parts = []
    for number, item in enumerate(record.graph_breaks, start=1):
        line = item.lineno
        where = f'<a href="#src-{_whole(line)}">line {_whole(line)}</a>' if isinstance(line, int) else "?"
        hints = "".join(f'<div class="hint">{esc(h)}</div>' for h in item.hints)
        fix = item.suggestion
        rewrite = (f'<div class="hint"><b>Suggested rewrite:</b> {esc(fix.why)}'
                   f'<pre class="plain">{esc(fix.before)}\n→\n{esc(fix.after)}</pre></div>'
                   if fix is not None else "")
        parts.append(f"<h3>Graph break {number} at {where}</h3><p>{esc(item.reason)}</p>"
                     f"<pre class='plain'>{esc(item.line)}</pre>{hints}{rewrite}")
    return "".join(parts) or '<p class="muted">No graph breaks: Dynamo captured the model whole.</p>'


def _verify_html(verify: VerifyRecord) -> str:
    if verify.ok is None:
        return '<span class="muted">not run</span>'
    words = {"random": '<b class="bad">random: nothing could be checked</b>',
             "nothing compared": '<b class="bad">nothing compared</b>',
             "layout differs": '<b class="bad">values match eager, layout differs</b>'}
    verdict = words.get(verify.verdict) or (
        '<b class="ok">matches eager</b>' if verify.ok is True else '<b class="bad">differs from eager</b>')
    return f"{verdict} (max abs err {esc(verify.max_abs_err)})" + (
        f" — {esc(verify.problem)}" if verify.problem else "") + (
        f" <span class='muted'>judged by: {esc(verify.reference)}</span>" if verify.reference else "")


def rewrites_html(graph: GraphRecord, position: int = 0) -> str:
    """The rewrite stage: passes with counts, the graph before with the matched nodes marked, each match's
    replacement, reason and user lines, and the near-misses with why not (the app's Rewrites stage)."""
    index = _graph_index(graph, position)
    out = ["<h3>Rewrites</h3>", table([{key: esc(value) for key, value in row.items()}
                                        for row in rewrite_views.passes(graph)])]
    before = rewrite_views.before_graph(graph)
    marked, _ = rewrite_views.marked_nodes(graph)
    if before is not None:
        options, note = _draw_options(before, "aten")
        options.highlight = marked
        out.append(f"<h4>Before the rewrites ({len(marked)} matched nodes marked; the ATen graph above is after)</h4>"
                   + graph_section(graphs.graph_dot(before, "aten", options), f"g{index}-rewrites",
                                   len(before.aten), note))
    out.append("<h4>Matches</h4>" + table([{key: esc(value) for key, value in row.items()}
                                            for row in rewrite_views.match_rows(graph)]))
    refused = rewrite_views.refusal_rows(graph)
    if refused:
        out.append("<h4>Near-misses</h4>" + table([{key: esc(value) for key, value in row.items()}
                                                    for row in refused]))
    return "".join(out)


def graph_html(record: Exploration, graph: GraphRecord, figures: list, position: int = 0) -> str:
    index = _graph_index(graph, position)
    out = [f'<h2 id="graph{index}">Graph {index}</h2>']
    profile = graph.profile
    if profile.call_ms is not None:
        out.append(f"<p>Call {_number(profile.call_ms)} ms (median of {esc(profile.repeats)}); "
                   f"kernels {_number(profile.kernels_ms)} ms + wrapper {_number(profile.overhead_ms)} ms"
                   + (" — Triton interpreter times, not GPU times" if profile.interpreted else "") + "</p>")
    for which, title in (("fx", "Dynamo's FX graph"), ("aten", "ATen graph")):
        if getattr(graph, which):
            options, note = _draw_options(graph, which)
            if which == "aten" and rewrite_views.matches(graph):  # the rewrites' replacements (section below)
                options.highlight = rewrite_views.marked_nodes(graph)[1]
                note = (note + "; " if note else "") + "marked: what the rewrites put in (see Rewrites below)"
            dot = graphs.graph_dot(graph, which, options)
            out.append(f"<h3>{title}</h3>" + graph_section(dot, f"g{index}-{which}", len(getattr(graph, which)), note))
    if graph.rewrites:
        out.append(rewrites_html(graph, position))
    if graph.ir is not None and graph.ir.nodes:
        text, _ = ir_listing(graph)
        out.append("<h3>Loop IR</h3>" + explained_html(anchors.ir_sentences(graph, record.source.filename),
                                                        f"g{index}-ir", "node")
                   + highlight_html(text, "ir", max_height=600, anchors=f"g{index}-ir"))
    out.append("<h3>Kernels</h3>" + kernels_table(graph))
    decisions = graph.fusion.decisions if graph.fusion else []
    out.append("<h3>Fusion decisions</h3>" + table([
        {"fused": "yes" if d.fused else "no", "producer": esc(d.producer),
         "consumer": esc(d.consumer), "kind": esc(d.kind), "why": esc(d.reason)}
        for d in decisions]))
    memory = graph.memory
    if memory is not None:
        out.append(f"<h3>Memory</h3><p>peak {esc(memory.peak_bytes)} bytes "
                   f"(unfused {esc(memory.unfused_peak_bytes)}); {len(memory.buffers)} buffers</p>")
    code = graph.code
    if code is not None and code.source:
        out.append(f"<h3>Generated {esc(code.language)} code</h3>"
                   + explained_html(anchors.kernel_sentences(graph, record.source.filename), f"g{index}-code",
                                    "kernel")
                   + highlight_html(code.source, code.language or "text", max_height=700,
                                    anchors=f"g{index}-code"))
    if code is not None and code.wrapper:
        out.append("<h3>Wrapper</h3>" + highlight_html(code.wrapper, "python", max_height=500))
    if code is not None and code.provenance:
        out.append("<h3>Provenance: generated line → kernel → IR → ATen → FX → your line</h3>"
                   + provenance_table(graph))
    return "".join(out)


def explained_html(sentences: list[dict], anchor: str, what: str) -> str:
    """visualizers/anchors.py's sentences, folded, each linking to the first of the lines it talks about."""
    if not sentences:
        return ""
    items = "".join(f'<li><a href="#{esc(anchor)}-{_whole(s["lines"][0])}">{esc(s[what])}</a>: {esc(s["text"])}</li>'
                    for s in sentences)
    return f"<details><summary>Explained, line by line ({len(sentences)})</summary><ul>{items}</ul></details>"


def _source_html(record: Exploration) -> str:
    text = record.source.text
    if not text:
        return ""
    marked = [b.lineno for b in record.graph_breaks if b.lineno is not None]
    return ("<h2 id='source'>Your model</h2>"
            + highlight_html(text, "python", hl_lines=marked, max_height=600, anchors="src"))


def report_html(record: Exploration, title: str | None = None) -> str:
    """The whole report (Note [Offline report])."""
    figures: list = []
    name = record.model or "model"
    settings = ", ".join(f"{k}={v}" for k, v in record.options.to_json().items() if v is not None)
    head = (f"<h1>Glassbox report: {esc(name)}</h1><p class='muted'>backend {esc(record.backend)}, device "
            f"{esc(record.device)}{', ' + esc(settings) if settings else ''}; inputs {esc(record.inputs)}; "
            f"written {esc(datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))}</p>")
    errors = "".join(f'<div class="error"><b>Error in {esc(e.stage or "?")}:</b> '
                     f'<pre class="plain">{esc(e.message)}</pre></div>' for e in record.errors)
    graphs_list = record.graphs
    nav = "<nav>" + "".join(f'<a href="#graph{_graph_index(g, i)}">graph {_graph_index(g, i)}</a>'
                            for i, g in enumerate(graphs_list)) + '<a href="#source">source</a></nav>'
    summary = (f"<p>{len(graphs_list)} graph(s), {sum(len(g.kernels) for g in graphs_list)} kernel(s), "
               f"{len(record.graph_breaks)} graph break(s). Output: {_verify_html(record.verify)}</p>")
    description = (f"<details open><summary>About this model</summary>{markdown_html(record.description)}"
                   "</details>" if record.description else "")
    machine = record.machine
    profile = ""
    if machine.copy_gbps is not None:
        warning = f'<div class="error">{esc(machine.load_warning)}</div>' if machine.load_warning else ""
        profile = ("<h2>Per-kernel profile</h2>"
                   f"<p class='muted'>machine: copy {_number(machine.copy_gbps, 1)} GB/s, matmul "
                   f"{_number(machine.matmul_gflops, 1)} GFLOP/s ({esc(machine.how)})</p>{warning}"
                   + figure_html(roofline.kernel_time_figure(record), figures)
                   + figure_html(roofline.roofline_figure(record), figures)
                   + figure_html(timeline.run_timeline_figure(record), figures)
                   + heat_html(record))
    breaks = "<h2>Graph breaks</h2>" + breaks_html(record)
    compile_timeline = figure_html(timeline.compile_timeline_figure(record), figures) + compile_cost_html(record)
    numerics = "".join(bisect_html(g, i) for i, g in enumerate(graphs_list))
    body = "".join(graph_html(record, g, figures, i) for i, g in enumerate(graphs_list))
    timings = record.timings
    stage_line = ("<p class='muted'>seconds per stage: " + esc(", ".join(f"{k} {v:.3f}" for k, v in timings.items()
                                                                         if isinstance(v, (int, float)))) + "</p>"
                  if timings else "")
    page_title = esc(title or f"Glassbox: {name}")
    # Note [Report scripts]: only the scripts written here run, each allowed by its hash
    hashes = " ".join(script_hashes(f"<script>{_SEARCH_SCRIPT}</script>") + [h for f in figures_html(figures)
                                                                               for h in script_hashes(f)])
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{page_title}</title>"
            f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
            f"script-src {hashes} 'unsafe-eval'; img-src data:; font-src data:\">"
            f"<style>{_STYLE}</style><script>{_SEARCH_SCRIPT}</script></head><body><main>"
            f"{head}{errors}{nav}{summary}{description}{stage_line}{compile_timeline}{numerics}{profile}{breaks}{body}{_source_html(record)}"
            f"</main></body></html>")


def compile_cost_html(record: Exploration) -> str:
    """The compile's cost per stage, pass and kernel, and the cache's part (visualizers/compile_cost.py)."""
    if not record.trace:
        return ""
    rows = [{"what": esc(row["what"]), "kind": esc(row["kind"]), "ms": f"{row['seconds'] * 1e3:.1f}"}
            for row in compile_cost.cost_rows(compile_cost.compile_cost(record))]
    return "<details><summary>Compile cost per stage, pass and kernel, and the cache</summary>" + table(rows) + \
        "</details>"


def heat_html(record: Exploration) -> str:
    """Where the time goes (Note [Time on lines] in visualizers/heat.py): each graph's nodes in their kernel's
    heat, and the user's lines with their share of the kernels' time."""
    lines = heat.line_heat(record)
    graphs_html = ""
    for position, graph in enumerate(record.graphs):
        paint, notes = heat.graph_paint(graph)
        if paint:
            index = _graph_index(graph, position)
            graphs_html += graph_section(overlay.overlay_dot(graph, "aten", paint, notes,
                                                             clusters=heat.graph_clusters(graph)),
                                         f"heat{index}", len(graph.aten),
                                         f"graph {index}: each kernel a box in the heat of its time, with its GB/s, "
                                         "GFLOP/s and % of roof; its ATen nodes inside")
    source = record.source.text
    if not graphs_html and not lines and not heat.library_heat(record):
        return ""
    return ("<h3>Where the time goes</h3>" + f"<p class='muted'>{esc(heat.roof_caption(record))}</p>" + graphs_html
            + (heat.source_heat_html(source, lines) if source and lines else "") + heat.library_heat_html(record))


def bisect_html(graph: GraphRecord, position: int = 0) -> str:
    """A graph's numerics bisect (Note [Numerics bisect] in engine/divergence.py), when it ran."""
    bisect = graph.bisect
    if bisect.status in (None, "failed"):
        return ""
    culprit = bisect.culprit
    line = culprit.user_line if culprit else None
    words = (f"clean: all {bisect.compared or 0} compared kernel outputs are exact or within tolerance"
             if bisect.status == "clean" or culprit is None else
             f"diverges first at {culprit.kernel} ({' + '.join(culprit.ops)}), max abs error "
             f"{culprit.max_abs_err:.3g} from inputs off by {culprit.input_max_abs_err:.3g}"
             + (f"; line {line.lineno}: {line.line}" if line else ""))
    paint, notes, bold = overlay.bisect_paint(graph)
    index = _graph_index(graph, position)
    return (f"<h3>Numerics bisect, graph {index}</h3><p>{esc(words)}</p>"
            + graph_section(overlay.overlay_dot(graph, "aten", paint, notes, bold), f"bisect{index}",
                            len(graph.aten)))


def figures_html(figures: list) -> list[str]:
    """The HTML of the plotly figures figure_html wrote (their scripts are hashed into the CSP)."""
    return [item for item in figures if isinstance(item, str)]


def failed_record(name: str, source: SourceFile, stage: str, message: str) -> Exploration:
    """The record of an exploration that did not produce one (the compile raised): enough for a report."""
    return Exploration(model=name, backend="", device="", source=source,
                       errors=[ErrorRecord(kind="compile", stage=stage, message=message)])


_SCRIPT_TAG = re.compile(r"<script\b[^>]*\bsrc=", re.I)


def is_self_contained(page: str) -> bool:
    """No script, stylesheet, image or frame loaded from elsewhere (a check for tests and the CLI)."""
    return not (_SCRIPT_TAG.search(page) or re.search(r"<link\b[^>]*\bhref=|<img\b[^>]*\bsrc=\s*[\"']?(https?:)?//|"
                                                      r"<iframe\b|@import", page, re.I))
