"""The Provenance page: pick an FX node, a line of the user's code or a generated line and follow it through
every stage."""
from __future__ import annotations

import re

import streamlit as st

from app import ui
from engine.record import Exploration, GraphRecord
from visualizers import code as code_html
from visualizers import graphs, provenance


def render() -> None:
    st.markdown("### Provenance")
    st.caption("Pick an FX node, a line of your code or a generated line, and follow it through every stage.")
    record = ui.explored()
    if record is None:
        return
    if not record.graphs:
        st.info("No graphs were captured, so there is nothing to trace.")
        return
    several = len(record.graphs) > 1
    picker, start_from, choice = st.columns([1.2, 2.2, 4] if several else [0.001, 2.6, 4],
                                            vertical_alignment="bottom")
    with picker:
        graph_index = ui.graph_picker(record, key="prov_graph") or 0
    graph = record.graphs[graph_index]
    with start_from:
        start = st.radio("Start from", ["FX node", "your source line", "generated line"], horizontal=True,
                         key="prov_start")
    source = ui.record_source(record)
    source_lines = source.splitlines()
    with choice:
        trace = _pick_trace(graph, start, source_lines)
    if trace is None:
        return
    _show_trace(record, graph, trace, source)


def _select_fx() -> None:
    st.session_state.node = st.session_state.prov_fx


def _pick_trace(graph: GraphRecord, start: str, source_lines: list[str]) -> provenance.Trace | None:
    if start == "FX node":
        nodes = provenance.compute_nodes(graph)
        if not nodes:
            st.info("This graph has no computing node.")
            return None
        names = [n.name for n in nodes]
        selected = st.session_state.node  # the node found on the Explorer page (and in the URL)
        index = names.index(selected) if selected in names else _first_compiled(graph, names, provenance.from_fx)
        chosen = st.selectbox("FX node", names, key="prov_fx", index=index,
                              format_func=lambda name: _fx_label(graph, name), on_change=_select_fx)
        return provenance.from_fx(graph, [chosen])
    if start == "your source line":
        lines = provenance.user_lines_with_nodes(graph)
        if not lines:
            st.info("No node of this graph records a source line.")
            return None
        def line_text(n: int) -> str:
            return f"{n}: {source_lines[n - 1].strip() if 0 < n <= len(source_lines) else ''}"

        chosen = st.selectbox("Line of your code", lines, key="prov_line", format_func=line_text,
                              index=_first_compiled(graph, lines, provenance.from_user_line))
        return provenance.from_user_line(graph, chosen)
    lines = provenance.traced_lines(graph)
    if not lines:
        st.info("The generated code has no provenance map for this graph.")
        return None
    module = (graph.code.source if graph.code else "").splitlines()
    chosen = st.selectbox("Generated line", lines, key="prov_gen",
                          format_func=lambda n: f"{n}: {module[n - 1].strip()[:90] if 0 < n <= len(module) else ''}")
    return provenance.from_generated_line(graph, chosen)


def _first_compiled(graph: GraphRecord, options: list, trace_of) -> int:
    """Start on something that reaches generated code (the first FX node may well be a view)."""
    for index, option in enumerate(options):
        trace = trace_of(graph, [option]) if trace_of is provenance.from_fx else trace_of(graph, option)
        if trace.generated_lines:
            return index
    return 0


def _fx_label(graph: GraphRecord, name: str) -> str:
    node = next((n for n in graph.fx if n.name == name), None)
    if node is None:
        return name
    line = node.source.lineno if node.source else None
    return f"{name} = {graphs.short_target(node)}" + (f"  (line {line})" if line else "")


def _show_trace(record: Exploration, graph: GraphRecord, trace: provenance.Trace, source: str) -> None:
    st.caption(f"{len(trace.fx)} FX node(s) → {len(trace.aten)} ATen node(s) → {len(trace.ir)} IR node(s) → "
               f"kernel(s) {', '.join(sorted(trace.kernels)) or 'none'} → {len(trace.generated_lines)} generated "
               f"line(s); your line(s): {', '.join(map(str, sorted(trace.user_lines))) or 'none'}")
    top_left, top_right = st.columns(2, gap="medium")
    with top_left:
        st.markdown("**Your code**")
        if trace.user_lines:
            snippet, first = code_html.crop(source, sorted(trace.user_lines), context=5)
        else:
            snippet, first = source, 1
        ui.show_code(snippet, "python", hl_lines=sorted(trace.user_lines), first_line=first, max_height=360)
    with top_right:
        st.markdown("**FX graph**")
        ui.show_graph(graphs.graph_dot(graph, "fx", _trace_options(graph, "fx", trace.fx)))
    mid_left, mid_right = st.columns(2, gap="medium")
    with mid_left:
        st.markdown("**ATen graph** (kernels as boxes)")
        options = _trace_options(graph, "aten", trace.aten)
        options.kernels_as_clusters = True
        ui.show_graph(graphs.graph_dot(graph, "aten", options))
    with mid_right:
        st.markdown("**Loop IR**")
        text, where = code_html.ir_listing(graph)
        lines = sorted(line for name in trace.ir for line in where.get(name, []))
        snippet, first = code_html.crop(text, lines, context=3) if lines else (text, 1)
        ui.show_code(snippet, "ir", hl_lines=lines, first_line=first, max_height=420)
    st.markdown("**Generated code**")
    code = graph.code
    language = (code.language if code else "") or record.backend or "cpp"
    module = code.source if code else ""
    if trace.generated_lines:
        snippet, first = code_html.crop(module, sorted(trace.generated_lines), context=4)
        ui.show_code(snippet, language, hl_lines=sorted(trace.generated_lines), first_line=first,
                     caption=f"kernel(s) {', '.join(sorted(trace.kernels))}", max_height=480)
    wrapper = code.wrapper if code else ""
    names = sorted(trace.kernels | trace.ir)
    wrapper_lines = [number for number, line in enumerate(wrapper.splitlines(), start=1)
                     if names and re.search(r"\b(" + "|".join(map(re.escape, names)) + r")\b", line)]
    if wrapper_lines:
        ui.show_code(wrapper, "python", hl_lines=wrapper_lines, caption="wrapper: where the kernels are called",
                     max_height=320)
    if not trace.generated_lines and not wrapper_lines:
        st.info("No generated line comes from this (it may be a view, or work that fused away).")


def _trace_options(graph: GraphRecord, which: str, highlighted) -> graphs.DrawOptions:
    """Big graphs: weights hidden and modules collapsed, except the modules that hold a highlighted node."""
    if not graphs.big(graph, which):
        return graphs.DrawOptions(highlight=frozenset(highlighted))
    depth = graphs.auto_depth(graph, which, limit=graphs.FIRST_VIEW_BOXES)
    paths = graphs.module_paths(graph, which)
    open_groups = {graphs.group_of(paths.get(name, ""), depth) for name in highlighted} - {""}
    return graphs.DrawOptions(highlight=frozenset(highlighted), collapse_depth=depth,
                              expanded=frozenset(open_groups), hide_params=True)


render()
