"""The pages' bodies. Each page file under app/views/ is one call into here; the sidebar is in streamlit_app.py."""
from __future__ import annotations

import re

import streamlit as st

from app import inputs as input_specs
from app import break_view, stages, state, ui
from app.safe_text import description_markdown, html_text, md_text
from visualizers import charts, graphs, inductor, provenance
from visualizers import code as code_html
from visualizers import tables

CHART_CONFIG = {"displayModeBar": False}


def _explored() -> dict | None:
    """Explore (or fetch) the current request; show its problem if any. The record, or None to stop."""
    outcome = state.exploration()
    if outcome.problem is not None:
        ui.show_problem(outcome.problem, state.user_source(), state.model_path_name())
        if outcome.record is None:
            st.info("Fix the code on the **Model code** page, or pick a sample in the sidebar: the app keeps "
                    "working.")
            return None
    return outcome.record


# --- Explorer -------------------------------------------------------------------------------------------------


def _step(offset: int) -> None:
    current = st.session_state.get("stage_left") or stages.STAGES[0]
    index = (stages.STAGES.index(current) + offset) % len(stages.STAGES)
    st.session_state.stage_left = stages.STAGES[index]


def _header(record: dict) -> None:
    kernels = [k for g in record.get("graphs") or [] for k in g.get("kernels") or []]
    verify = record.get("verify") or {}
    timings = record.get("timings") or {}
    compile_s = sum(v for k, v in timings.items() if k != "run" and isinstance(v, (int, float)))
    left, right = st.columns([5, 4], vertical_alignment="top")
    with left:
        backend = state.BACKENDS.get(record.get("backend"), record.get("backend"))
        dynamic = " · dynamic shapes" if (record.get("options") or {}).get("dynamic") else ""
        st.markdown(f"### {html_text(record.get('model', 'model'))} <span style='font-size:0.9rem;color:#6b7280'>· "
                    f"{html_text(backend)} · {html_text(record.get('device', ''))}{dynamic}</span>",
                    unsafe_allow_html=True)  # Note [Record text]: every record field escaped
        columns = st.columns(4)
        columns[0].metric("graphs", len(record.get("graphs") or []))
        columns[1].metric("graph breaks", len(record.get("graph_breaks") or []))
        fallbacks = sum(1 for k in kernels if k.get("kind") == "fallback")
        columns[2].metric("kernels", len(kernels), help=f"{fallbacks} fallback(s)" if fallbacks else None)
        columns[3].metric("matches eager", "yes" if verify.get("ok") else "NO",
                          help=f"max abs error {verify.get('max_abs_err')}")
        if record.get("description"):
            with st.expander("About this model", expanded=True):
                st.markdown(description_markdown(record["description"]))
    with right:
        st.plotly_chart(charts.stage_times_figure(timings, height=130, legend=False), width="stretch",
                        key="header_stage_chart", config=CHART_CONFIG)
        st.caption(f"compiled in {compile_s:.2f} s; the bench stage times it against eager and Inductor")


def explorer_page() -> None:
    record = _explored()
    if record is None:
        return
    _header(record)
    st.session_state.setdefault("stage_left", "capture")
    st.session_state.setdefault("stage_right", "code")
    several = len(record.get("graphs") or []) > 1
    picker, stepper, compare = st.columns([1.4, 6, 1.8] if several else [0.001, 7.4, 1.8],
                                          vertical_alignment="bottom")
    with picker:
        graph_index = ui.graph_picker(record, key="explorer_graph") or 0
    with stepper.container(horizontal=True, vertical_alignment="bottom", gap="small"):
        st.button("◀", key="stage_back", on_click=_step, args=(-1,), help="previous stage")
        st.segmented_control("Stage", stages.STAGES, key="stage_left", required=True,
                             help="Step through the compiler: each stage's artifact, from your code to timed kernels")
        st.button("▶", key="stage_next", on_click=_step, args=(1,), help="next stage")
    compare.selectbox("Side by side with", ["none"] + stages.STAGES, key="stage_right")
    left_stage = st.session_state.stage_left or "capture"
    right_stage = st.session_state.stage_right
    if right_stage and right_stage != "none":
        left, right = st.columns(2, gap="medium")
        with left:
            stages.render(left_stage, record, graph_index, "L")
        with right:
            stages.render(right_stage, record, graph_index, "R")
    else:
        stages.render(left_stage, record, graph_index, "L")


# --- Model code -----------------------------------------------------------------------------------------------


def _inputs_to_prefill() -> str | None:
    """The explored inputs' shapes, when the shapes box should show them (the user is not editing it)."""
    outcome = state.cached("explore")
    current = input_specs.format_inputs(outcome.inputs) if outcome is not None else ""
    shown = st.session_state.get("inputs_prefill", "")
    if current and st.session_state.get("inputs_text", "") in ("", shown) and current != shown:
        return current
    return None


def _prefill_inputs() -> None:
    current = _inputs_to_prefill()
    if current is not None:  # before the widget exists in this run: a widget's value cannot change after
        st.session_state.inputs_text = current
        st.session_state.inputs_prefill = current


def model_page() -> None:
    st.markdown("### Model code")
    st.caption("A model file defines `model` (an nn.Module instance or a function) and `example_inputs` (a tuple "
               "of tensors); optionally `description`, `dynamic_inputs` and `tolerance`. Edit a sample or paste "
               "your own, then Explore. It runs in a separate worker process with a time limit.")
    _prefill_inputs()
    edit, view = st.columns(2, gap="medium")
    st.html("<style>.st-key-editor textarea{font-family:'Source Code Pro',ui-monospace,monospace;"
            "font-size:13px;line-height:1.45;white-space:pre;tab-size:4}</style>")
    with edit:
        st.text_area("Edit or paste Python", key="editor", height=520,
                     help="Ctrl+Enter applies the edit to the preview; Explore runs it.")
    with view:
        ui.show_code(st.session_state.editor or "", "python", caption="preview with line numbers", max_height=540)
    shapes, dtype_help = st.columns([3, 2], vertical_alignment="bottom")
    shapes.text_input("Example input shapes and dtypes", key="inputs_text",
                      placeholder="e.g. float32[64, 256], int64[8]",
                      help="One dtype[sizes] per input, in order. Changing them rebuilds example_inputs with the "
                           "same value ranges; your code stays as it is.")
    dtype_help.caption("dtypes: " + ", ".join(input_specs.DTYPES))
    with st.container(horizontal=True):
        st.button("Explore", type="primary", key="explore_button", on_click=state.apply_editor)
        st.button("Reset to sample", key="reset_button", on_click=state.reset_editor)
    if st.session_state.get("input_error"):
        st.error(st.session_state.input_error)
    description = state.description_of(st.session_state.editor or "")
    record = _explored()
    if _inputs_to_prefill() is not None:
        st.rerun()  # the first exploration of this code just told us its input shapes: show them
    if record is None:
        return
    breaks = record.get("graph_breaks") or []
    kernels = sum(len(g.get("kernels") or []) for g in record.get("graphs") or [])
    matches = "match" if (record.get("verify") or {}).get("ok") else "DO NOT match"
    message = (f"Explored **{record.get('model')}**: {len(record.get('graphs') or [])} graph(s), {kernels} kernel(s), "
               f"{len(breaks)} graph break(s); outputs {matches} eager.")
    st.success(message)
    links = st.columns(3)
    links[0].page_link("views/explorer.py", label="Explore the stages", icon=":material/account_tree:")
    if breaks:
        links[1].page_link("views/breaks.py", label="See the graph breaks", icon=":material/call_split:")
    if description:
        with st.expander("Description", expanded=False):
            st.markdown(description_markdown(description))


# --- Provenance -------------------------------------------------------------------------------------------------


def _user_source(record: dict) -> str:
    return (record.get("source") or {}).get("text") or state.user_source()


def provenance_page() -> None:
    st.markdown("### Provenance")
    st.caption("Pick an FX node, a line of your code or a generated line, and follow it through every stage.")
    record = _explored()
    if record is None:
        return
    if not record.get("graphs"):
        st.info("No graphs were captured, so there is nothing to trace.")
        return
    several = len(record["graphs"]) > 1
    picker, start_from, choice = st.columns([1.2, 2.2, 4] if several else [0.001, 2.6, 4],
                                            vertical_alignment="bottom")
    with picker:
        graph_index = ui.graph_picker(record, key="prov_graph") or 0
    graph = record["graphs"][graph_index]
    with start_from:
        start = st.radio("Start from", ["FX node", "your source line", "generated line"], horizontal=True,
                         key="prov_start")
    source = _user_source(record)
    source_lines = source.splitlines()
    with choice:
        trace = _pick_trace(graph, start, source_lines)
    if trace is None:
        return
    _show_trace(record, graph, trace, source)


def _pick_trace(graph: dict, start: str, source_lines: list[str]) -> provenance.Trace | None:
    if start == "FX node":
        nodes = provenance.compute_nodes(graph)
        if not nodes:
            st.info("This graph has no computing node.")
            return None
        names = [n["name"] for n in nodes]
        chosen = st.selectbox("FX node", names, key="prov_fx", index=_first_compiled(graph, names, provenance.from_fx),
                              format_func=lambda name: _fx_label(graph, name))
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
    module = (graph.get("code") or {}).get("source", "").splitlines()
    chosen = st.selectbox("Generated line", lines, key="prov_gen",
                          format_func=lambda n: f"{n}: {module[n - 1].strip()[:90] if 0 < n <= len(module) else ''}")
    return provenance.from_generated_line(graph, chosen)


def _first_compiled(graph: dict, options: list, trace_of) -> int:
    """Start on something that reaches generated code (the first FX node may well be a view)."""
    for index, option in enumerate(options):
        trace = trace_of(graph, [option]) if trace_of is provenance.from_fx else trace_of(graph, option)
        if trace.generated_lines:
            return index
    return 0


def _fx_label(graph: dict, name: str) -> str:
    node = next((n for n in graph.get("fx") or [] if n["name"] == name), {})
    line = (node.get("source") or {}).get("lineno") if isinstance(node.get("source"), dict) else None
    return f"{name} = {graphs.short_target(node)}" + (f"  (line {line})" if line else "")


def _show_trace(record: dict, graph: dict, trace: provenance.Trace, source: str) -> None:
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
    code = graph.get("code") or {}
    language = code.get("language") or record.get("backend") or "cpp"
    module = code.get("source") or ""
    if trace.generated_lines:
        snippet, first = code_html.crop(module, sorted(trace.generated_lines), context=4)
        ui.show_code(snippet, language, hl_lines=sorted(trace.generated_lines), first_line=first,
                     caption=f"kernel(s) {', '.join(sorted(trace.kernels))}", max_height=480)
    wrapper = code.get("wrapper") or ""
    names = sorted(trace.kernels | trace.ir)
    wrapper_lines = [number for number, line in enumerate(wrapper.splitlines(), start=1)
                     if names and re.search(r"\b(" + "|".join(map(re.escape, names)) + r")\b", line)]
    if wrapper_lines:
        ui.show_code(wrapper, "python", hl_lines=wrapper_lines, caption="wrapper: where the kernels are called",
                     max_height=320)
    if not trace.generated_lines and not wrapper_lines:
        st.info("No generated line comes from this (it may be a view, or work that fused away).")


def _trace_options(graph: dict, which: str, highlighted) -> graphs.DrawOptions:
    """Big graphs: weights hidden and modules collapsed, except the modules that hold a highlighted node."""
    if not graphs.big(graph, which):
        return graphs.DrawOptions(highlight=frozenset(highlighted))
    depth = graphs.auto_depth(graph, which)
    paths = graphs.module_paths(graph, which)
    open_groups = {graphs.group_of(paths.get(name, ""), depth) for name in highlighted} - {""}
    return graphs.DrawOptions(highlight=frozenset(highlighted), collapse_depth=depth,
                              expanded=frozenset(open_groups), hide_params=True)


# --- Graph breaks ------------------------------------------------------------------------------------------------


def breaks_page() -> None:
    st.markdown("### Graph breaks, guards and recompiles")
    record = _explored()
    if record is None:
        return
    breaks = record.get("graph_breaks") or []
    source = _user_source(record)
    count = len(record.get("graphs") or [])
    recompiled = sum(run.get("new_graphs") or 0 for run in record.get("runs") or [])
    extra = f" (plus {recompiled} compiled again when the inputs changed)" if recompiled else ""
    if breaks:
        st.warning(f"Dynamo split this model at {len(breaks)} graph break(s) into {count - recompiled} graph(s)"
                   f"{extra}. Each graph is compiled on its own, so nothing fuses across a break.")
    else:
        st.success(f"No graph breaks: Dynamo captured the model as {max(count - recompiled, 0)} graph{extra}.")
    left, right = st.columns([1, 1], gap="medium")
    with left:
        st.markdown("**Your code**, break lines highlighted")
        ui.show_code(source, "python", hl_lines=[b["lineno"] for b in breaks if b.get("lineno")], max_height=620)
    with right:
        for number, graph_break in enumerate(breaks, start=1):
            where = f"line {graph_break.get('lineno')}" if graph_break.get("lineno") else "unknown line"
            with st.container(border=True):
                st.markdown(f"**Break {number} — {where}**")
                if graph_break.get("line"):
                    st.code(graph_break["line"], language="python")
                reason, _, dynamo = str(graph_break.get("reason", "")).partition(" (Dynamo: ")
                st.markdown(md_text(reason))
                if dynamo:
                    st.caption("Dynamo said: " + md_text(dynamo[:-1] if dynamo.endswith(")") else dynamo))
                break_view.show_fix(graph_break)
        recompiles = tables.recompile_rows(record)
        runs = tables.run_rows(record)
        st.markdown("**Recompiles when inputs change**")
        for row in recompiles:
            with st.container(border=True):
                st.markdown(f"**{md_text(row['inputs'])}** recompiled")
                st.caption(md_text(row["reason"]))
        if not recompiles and runs:
            st.caption("The other inputs in `dynamic_inputs` ran without a recompile"
                       + (" (dynamic shapes)." if (record.get("options") or {}).get("dynamic") else "."))
        elif not recompiles:
            st.caption("No recompiles. A model file's `dynamic_inputs` (other input shapes) shows them; "
                       "see the dynamic_seq and bucketing samples.")
        if runs:
            st.markdown("**Every input set** (`dynamic_inputs`)")
            st.dataframe(runs, hide_index=True, width="stretch",
                         column_config={"max abs error": st.column_config.NumberColumn(format="%.2e")})
    guards = record.get("guards") or []
    st.markdown(f"**Guards** ({len(guards)}): what Dynamo checks before reusing a compiled graph")
    for group, items in tables.guard_groups(guards).items():
        with st.expander(f"{group} ({len(items)})", expanded=group == "shapes and sizes"):
            st.code("\n".join(items), language="python", wrap_lines=True)
    if breaks:
        st.markdown("**The graphs and the breaks between them**")
        ui.show_graph(graphs.record_dot(record, "fx"))


# --- Inductor ------------------------------------------------------------------------------------------------


def inductor_page() -> None:
    st.markdown("### Inductor beside Glassbox")
    st.caption("Real torch.compile (Inductor) on the same model and inputs, in a worker: its output code, kernels "
               "and cold compile time, next to ours.")
    record = _explored()
    if record is None:
        return
    outcome = state.cached("inductor")
    if st.button("Compile with Inductor" if outcome is None else "Compile with Inductor again", type="primary",
                 key="inductor_button", help="10-40 s on a small CPU: Inductor builds its C++ or Triton kernels"):
        outcome = state.run_inductor()
    document = outcome.document if outcome is not None else None
    ours = [k for g in record.get("graphs") or [] for k in g.get("kernels") or []]
    timings = record.get("timings") or {}
    ours_compile = sum(v for k, v in timings.items() if k != "run" and isinstance(v, (int, float)))
    left, right = st.columns(2, gap="medium")
    with left:
        st.markdown("**Glassbox**")
        columns = st.columns(2)
        columns[0].metric("kernels", len(ours))
        columns[1].metric("compile", f"{ours_compile:.2f} s")
        st.dataframe([{"graph": g.get("index"), "kernel": k["name"], "kind": k.get("kind"), "ops": ", ".join(
            str(o).replace("aten::", "") for o in k.get("ops") or [])}
            for g in record.get("graphs") or [] for k in g.get("kernels") or []], hide_index=True,
            width="stretch", height=min(36 * (len(ours) + 1) + 2, 300))
        graph_index = ui.graph_picker(record, key="inductor_graph") or 0
        graph = record["graphs"][graph_index] if record.get("graphs") else {}
        code = graph.get("code") or {}
        start = code_html.kernels_start_line(code.get("source") or "", graph.get("kernels") or [])
        ui.show_code("\n".join((code.get("source") or "").splitlines()[start - 1:]), code.get("language") or "cpp",
                     first_line=start, caption="our kernels", max_height=520)
        ui.show_code(code.get("wrapper") or "", "python", caption="our wrapper", max_height=320)
    with right:
        st.markdown("**Inductor**")
        if outcome is None:
            st.info("Press **Compile with Inductor** to run it (on demand: it is slow to compile).")
        elif outcome.problem is not None:
            ui.show_problem(outcome.problem, state.user_source(), state.model_path_name())
        if document and document.get("ok"):
            kernels = document.get("kernels") or []
            generated = [k for k in kernels if k.get("kind") != "extern"]
            columns = st.columns(2)
            columns[0].metric("kernels", len(generated), help=f"plus {len(kernels) - len(generated)} library calls")
            columns[1].metric("compile (cold)", f"{document.get('compile_s', 0):.2f} s")
            st.dataframe([{"kernel": k["name"], "kind": k["kind"], "graph": k.get("graph")} for k in kernels],
                         hide_index=True, width="stretch", height=min(36 * (len(kernels) + 1) + 2, 300))
            codes = document.get("codes") or []
            if codes:
                which = st.selectbox("Output code", list(range(len(codes))), key="inductor_code",
                                     format_func=lambda i: f"graph {i}") if len(codes) > 1 else 0
                view = st.segmented_control("Show", ["kernels", "call", "whole output code"], default="kernels",
                                            key="inductor_view", required=True)
                if view == "kernels":
                    for kernel in inductor.kernel_sources(codes[which]):
                        ui.show_code(kernel["source"], kernel["language"], max_height=520,
                                     caption=f"{kernel['name']} ({kernel['kind']})")
                elif view == "call":
                    ui.show_code(inductor.call_function(codes[which]), "python",
                                 caption="Inductor's call(): allocates and runs the kernels", max_height=520)
                else:
                    ui.show_code(codes[which], "python", max_height=640,
                                 caption=f"Inductor's output code (torch {document.get('torch')})")
