"""One renderer per compiler stage, each drawing one pane of the explorer from the record.

capture -> ATen -> loop IR -> fusion -> code -> run -> bench (docs/design.md, "The spine"). A renderer gets the record,
the chosen graph and a key prefix (the left and right panes hold the same widgets under different keys). The record
is the typed Exploration (engine/record.py), read by attribute.
"""
from __future__ import annotations

import streamlit as st

from app import anchored_pane, compile_trace, numerics_pane, state, take_away, training, ui
from app.safe_text import description_markdown, md_code, md_text
from engine.record import STAGE_NAMES, AssemblyRecord, Exploration, GraphRecord
from visualizers import charts, graphs, tables, teaching
from visualizers import rewrites as rewrite_views
from visualizers import code as code_html

# The compiler's stages (engine/record.py STAGE_NAMES) as the stepper names their artifacts; build has no pane of
# its own (its output is the code's), and bench follows run.
LABELS = {"capture": "capture", "decompose": "ATen", "rewrite": "rewrites", "lower": "loop IR", "schedule": "fusion", "codegen": "code",
          "run": "run"}
STAGES = [LABELS[name] for name in STAGE_NAMES if name in LABELS] + ["bench"]
STAGE_HELP = {
    "capture": "Dynamo's FX graph(s): what torch.compile captured from your Python, split at graph breaks.",
    "ATen": "The functional ATen graph after decomposition: the ops the compiler really lowers.",
    "rewrites": "Named graph rewrites before lowering (attention -> one library call, ...): each match with the "
                "nodes it replaced, why, and your lines; each near-miss with why not.",
    "loop IR": "Each ATen op as a loop body over its index space: loads, math, reductions.",
    "fusion": "Which IR nodes were fused into one kernel, and why the others were not.",
    "code": "The generated kernels and the Python wrapper that calls them.",
    "run": "Glassbox's outputs against eager PyTorch's.",
    "bench": "Compile time per stage; eager vs Glassbox vs Inductor, timed side by side.",
}


def render(stage: str, record: Exploration, graph_index: int, key: str) -> None:
    st.markdown(f"#### {stage}")
    st.caption(STAGE_HELP[stage])
    # what happened to this model at this stage, in sentences made from its record (visualizers/teaching.py);
    # they quote record text (the user's line, reasons), so nothing in them may load: Note [Record text]
    told = teaching.stage_text(record, _graph(record, graph_index), stage)
    if told:
        st.info(description_markdown("\n\n".join(told)), icon=":material/school:")
    RENDERERS[stage](record, graph_index, key)


def _graph(record: Exploration, graph_index: int) -> GraphRecord | None:
    return record.graphs[min(graph_index, len(record.graphs) - 1)] if record.graphs else None


def _graph_stage(record: Exploration, graph_index: int, key: str, which: str) -> None:
    all_graphs = record.graphs
    if not all_graphs:
        st.info("Dynamo captured no graph: the model ran entirely as Python (see Graph breaks).")
        return
    show_all = len(all_graphs) > 1 and st.toggle("All graphs, with the breaks between them",
                                                 value=which == "fx", key=f"{key}_{which}_all")
    graph = _graph(record, graph_index)
    options = ui.collapse_controls(graph, which, f"{key}_{which}_{graph_index}")
    ui.select_node(options, graph, which)
    # small FX graphs name the kernel(s) each node ended up in: the link from Python to generated code
    options.show_kernel_in_label = which == "fx" and not graphs.big(graph, which)
    kinds = set()
    for shown in (all_graphs if show_all else [graph]):
        kinds |= set(graphs.node_kinds(shown, which).values())
    if options.collapse_depth:
        kinds.add("module")
    ui.legend(kinds)
    if show_all:
        ui.show_graph(graphs.record_dot(record, which, options), sum(len(getattr(g, which)) for g in all_graphs))
    else:
        ui.show_graph(graphs.graph_dot(graph, which, options), len(getattr(graph, which)))
    nodes = getattr(graph, which)
    computing = [n for n in nodes if n.op not in ("placeholder", "output", "get_attr")]
    st.caption(f"graph {graph.index}: {len(computing)} ops, {sum(1 for n in nodes if n.op == 'placeholder')} inputs")


def capture_stage(record: Exploration, graph_index: int, key: str) -> None:
    breaks = record.graph_breaks
    if breaks:
        st.warning(f"{len(breaks)} graph break(s): " + "; ".join(
            f"line {b.lineno}" for b in breaks) + " (details on the Graph breaks page)")
    _graph_stage(record, graph_index, key, "fx")


def aten_stage(record: Exploration, graph_index: int, key: str) -> None:
    _graph_stage(record, graph_index, key, "aten")
    if graph_index is not None and record.graphs:
        training.partition_pane(_graph(record, graph_index), key)  # a forward graph's saved/recomputed values


def rewrites_stage(record: Exploration, graph_index: int, key: str) -> None:
    """The graph before and after the rewrites with the matched nodes marked, the passes with their counts, each
    match's reason and your lines, and the near-misses with why not (Note [Rewrite stage])."""
    graph = _graph(record, graph_index)
    ran = record.options.rewrites
    st.caption("passes that ran: " + (", ".join(ran) if ran else "none") + " (turn them off with --rewrites)"
               if ran is not None else "this record predates the rewrite stage")
    if graph is None or not graph.rewrites:
        st.info("No rewrite matched in this graph, and none came close.")
        return
    st.dataframe(rewrite_views.passes(graph), hide_index=True, width="content")
    found = rewrite_views.matches(graph)
    chosen = None
    if len(found) > 1:
        labels = ["all"] + [f"{number + 1}: {m.rewrite} at {rewrite_views.lines_text(m) or 'no line'}"
                            for number, m in enumerate(found)]
        picked = st.selectbox("Mark", labels, key=f"{key}_rewrite_pick")
        chosen = None if picked == "all" else labels.index(picked) - 1
    before_marked, after_marked = rewrite_views.marked_nodes(graph, chosen)
    before = rewrite_views.before_graph(graph)
    panes = st.columns(2) if before is not None else [st.container()]
    if before is not None:
        with panes[0]:
            st.markdown(f"**Before** — :red[{len(before_marked)} matched nodes]")
            ui.show_graph(graphs.graph_dot(before, "aten", graphs.DrawOptions(highlight=before_marked)),
                          len(before.aten))
    with panes[-1]:
        st.markdown("**After** — :red[the replacement]" if before is not None else
                    "**The graph** — :red[what the near-misses looked at]")
        ui.show_graph(graphs.graph_dot(graph, "aten", graphs.DrawOptions(highlight=after_marked)), len(graph.aten))
    for match in found if chosen is None else found[chosen:chosen + 1]:
        st.markdown(f"**{md_text(match.rewrite)}**: {md_text(match.reason)}")
        st.code(match.replacement_text, language="text")
        lines = sorted({s.lineno for s in match.source})
        source = record.source.text or ""
        if lines and source and all(s.filename == record.source.filename for s in match.source):
            snippet, first = code_html.crop(source, lines, context=1)
            ui.show_code(snippet, "python", hl_lines=lines, first_line=first,
                         caption=f"your lines {', '.join(map(str, lines))}", max_height=200)
        elif match.source:
            st.caption("your lines: " + md_text(rewrite_views.lines_text(match)))
    refused = rewrite_views.refusal_rows(graph)
    if refused:
        st.markdown(f"**Near-misses** ({len(refused)}) — why not")
        st.dataframe(refused, hide_index=True, width="stretch",
                     column_config={"why not": st.column_config.TextColumn(width="large")})


def ir_stage(record: Exploration, graph_index: int, key: str) -> None:
    graph = _graph(record, graph_index)
    ir_nodes = graph.ir.nodes if graph and graph.ir else []
    if not ir_nodes:
        st.info("No loop IR for this graph.")
        return
    counts = {}
    for node in ir_nodes:
        counts[node.kind] = counts.get(node.kind, 0) + 1
    st.caption(" · ".join(f"{count} {kind}" for kind, count in counts.items()))
    for node in ir_nodes:
        if node.kind == "fallback":
            st.warning(f"**{md_text(node.name)}** runs eagerly (fallback): {md_text(node.reason or 'no lowering')}")
    anchored_pane.render_ir(graph, key, record.source.filename)  # a sentence per IR node, anchored to the listing's lines
    text, _ = code_html.ir_listing(graph)
    ui.show_code(text, "ir", caption=f"loop IR of graph {graph.index}, grouped by kernel", max_height=640)


def fusion_stage(record: Exploration, graph_index: int, key: str) -> None:
    graph = _graph(record, graph_index)
    if graph is None or not graph.kernels:
        st.info("No kernels in this graph.")
        return
    kernels, memory = graph.kernels, graph.memory
    ir_count = len(graph.ir.nodes) if graph.ir else 0
    columns = st.columns(3)
    columns[0].metric("kernels", len(kernels), help=f"from {ir_count} loop-IR nodes")
    columns[1].metric("peak memory", ui.bytes_text(memory.peak_bytes if memory else None),
                      help="peak bytes of intermediate buffers, with fusion and buffer reuse")
    if memory and memory.unfused_peak_bytes:
        columns[2].metric("without fusion", ui.bytes_text(memory.unfused_peak_bytes))
    kinds = set(graphs.aten_kinds(graph).values())
    ui.legend(kinds)
    options = ui.collapse_controls(graph, "aten", f"{key}_fusion_{graph_index}")
    options.kernels_as_clusters = True
    # the tables are drawn below the graph, but the row picked in them (kept in session state) is drawn on the
    # graph now: a kernel's ops red; a decision's producer blue and consumer red
    kernel_rows = tables.kernel_rows(graph)
    rows = tables.decision_rows(graph)
    module = st.session_state.get(f"{key}_module") or ""
    kernel_shown = tables.filtered(kernel_rows, kinds=st.session_state.get(f"{key}_kinds"), module=module)
    shown = tables.filtered(rows, rules=st.session_state.get(f"{key}_rules"), module=module,
                            only_refused=bool(st.session_state.get(f"{key}_refused")))
    table_key = f"{key}_decisions_{graph_index}_{hash(tuple(shown))}"
    kernel_key = f"{key}_kernels_{graph_index}_{hash(tuple(kernel_shown))}"
    picked = ui.picked_row(table_key, len(shown))
    picked_kernel = ui.picked_row(kernel_key, len(kernel_shown))
    if picked is not None:
        decision = tables.decisions(graph)[shown[picked]]
        row = rows[shown[picked]]
        options.highlight_other = frozenset(teaching.decision_ops(graph, decision.producer)["aten"])
        options.highlight = frozenset(teaching.decision_ops(graph, decision.consumer)["aten"])
        _unfold(options, graph, options.highlight | options.highlight_other)
        st.caption(f"Decision: :blue[producer {md_text(row['producer ops'])}] and "
                   f":red[consumer {md_text(row['consumer ops'])}] — "
                   f"{'fused' if decision.fused else 'not fused'}: {md_text(row['why'])}")
    elif picked_kernel is not None:
        kernel = graph.kernels[kernel_shown[picked_kernel]]
        options.highlight = frozenset(kernel.aten_origins)
        _unfold(options, graph, options.highlight)
        st.caption(f"Kernel {md_code(kernel.name)}: {md_text(kernel_rows[kernel_shown[picked_kernel]]['ops'])}")
    else:
        ui.select_node(options, graph, "aten")
    ui.show_graph(graphs.graph_dot(graph, "aten", options), len(graph.aten))
    modules = sorted({r["module"] for r in kernel_rows + rows if r["module"]}, key=graphs.natural_key)
    filters = st.columns([2, 2, 3])
    filters[0].multiselect("Kernel kinds", sorted({r["kind"] for r in kernel_rows}), key=f"{key}_kinds",
                           placeholder="every kind")
    filters[1].multiselect("Decision rules", sorted({r["rule"] for r in rows if r["rule"]}), key=f"{key}_rules",
                           placeholder="every rule")
    filters[2].selectbox("Module", [""] + modules, key=f"{key}_module", format_func=lambda m: m or "every module",
                         help="Kernels and decisions inside this module (layers.3 keeps layers.3.mlp)")
    st.markdown(f"**Kernels** ({len(kernel_shown)} of {len(kernel_rows)}) — the ops each fused, the bytes it "
                "moves, how its loops are tiled and why; pick one to see it on the graph")
    st.dataframe([kernel_rows[i] for i in kernel_shown], hide_index=True, width="stretch", on_select="rerun",
                 selection_mode="single-row", key=kernel_key,
                 column_config={"bytes moved": st.column_config.NumberColumn(format="%d"),
                                "tiling: why": st.column_config.TextColumn(width="large")})
    st.toggle("Only refusals (why not fused)", value=False, key=f"{key}_refused")
    st.markdown(f"**Fusion decisions** ({len(shown)} of {len(rows)}) — pick one to see both sides on the graph")
    if shown:
        st.dataframe([{k: v for k, v in rows[i].items() if k not in ("producer", "consumer")} for i in shown],
                     hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row",
                     key=table_key, column_config={"why": st.column_config.TextColumn(width="large"),
                                                   "bytes": st.column_config.NumberColumn(format="%d")})


def _unfold(options: graphs.DrawOptions, graph: GraphRecord, names) -> None:
    """Unfold the modules the picked ops are folded into, so they are drawn."""
    paths = graphs.module_paths(graph, "aten")
    options.expanded = options.expanded | frozenset(
        g for name in names if (g := graphs.group_of(paths.get(name, ""), options.collapse_depth)))


def code_stage(record: Exploration, graph_index: int, key: str) -> None:
    graph = _graph(record, graph_index)
    if graph is None:
        st.info("Dynamo captured no graph, so there is no generated code.")
        return
    code, kernels = graph.code, graph.kernels
    language = (code.language if code else "") or record.backend or "cpp"
    views = ["kernels", "wrapper", "whole module"] + (["Triton lowering"] if language == "triton" else [])
    view = st.segmented_control("Show", views, default="kernels", key=f"{key}_code_view") or "kernels"
    source = code.source if code else ""
    if view == "kernels":
        launches = tables.launch_rows(graph)
        if launches:
            st.dataframe(launches, hide_index=True, width="stretch")
        for rows in (tables.template_rows(graph), tables.autotune_rows(graph)):  # GEMM templates
            if rows:
                st.dataframe(rows, hide_index=True, width="stretch")
        start = (code.prelude_lines if code else 0) + 1
        body = code_html.fold_helpers("\n".join(source.splitlines()[start - 1:]))
        ui.show_code(body, language, line_numbers=False,
                     caption=f"{len(kernels)} kernels ({language}); the shared helpers and the engine's notes "
                             "folded (they are under 'whole module', with line numbers)", max_height=640)
        take_away.download_pane(record, graph, key)  # Note [Kernel reproducers]
        anchored_pane.render(graph, language, key, record.source.filename)  # explained, anchored to lines
    elif view == "wrapper":
        ui.show_code(code.wrapper if code else "", "python", caption="the Python wrapper: allocates, calls kernels",
                     max_height=640)
    elif view == "whole module":
        ui.show_code(source, language, caption=f"the whole generated {language} module", max_height=640)
    else:
        lowering_view(graph, graph_index, key)


LOWERING_STAGES = ("ttir", "ttgir", "llir", "ptx", "sass")


def lowering_view(graph: GraphRecord, graph_index: int, key: str) -> None:
    """Triton -> TTIR -> TTGIR -> LLIR -> PTX -> SASS for one kernel, compiled on request by the engine in a
    worker (no GPU needed: an explicit sm_90 target)."""
    kernels = [k.name for k in graph.kernels if k.triton is not None]
    if not kernels:
        st.info("No Triton kernel in this graph to lower (choose the Triton backend in the sidebar).")
        return
    kernel = st.selectbox("Kernel", kernels, key=f"{key}_asm_kernel")
    outcome = state.cached(f"asm:{graph_index}:{kernel}")
    if outcome is None:
        if st.button(f"Lower {kernel} to TTIR / PTX / SASS", key=f"{key}_asm_button",
                     help="Compiles the kernel for an sm_90 GPU target in a worker (a few seconds; no GPU needed)"):
            outcome = state.run_assembly(graph, graph_index, kernel)
        else:
            st.caption("On request: each kernel takes a second or two to lower.")
            return
    if outcome.problem is not None:
        ui.show_problem(outcome.problem)
        return
    document = {"kernels": {}, **(outcome.document or {})}  # app/worker_main.py: {"kernels": {name: asm}} or {"error"}
    if "error" in document:
        st.error(document["error"])
        return
    found = document["kernels"]
    asm = AssemblyRecord.from_json(found[kernel]) if kernel in found else AssemblyRecord(target="cuda sm_90")
    if asm.error:
        st.error(asm.error)
        return
    present = [name for name in LOWERING_STAGES if getattr(asm, name)]
    if not present:
        st.info(asm.sass_note or "Triton produced no lowering text for this kernel.")
        return
    stage = st.segmented_control("Lowering", present, default=present[0], key=f"{key}_asm_stage",
                                 required=True, format_func=str.upper)
    text = code_html.tidy_sass(getattr(asm, stage)) if stage == "sass" else getattr(asm, stage)
    ui.show_code(text, stage, caption=f"{kernel}: {stage.upper()} for {asm.target}", max_height=640)
    if asm.sass_note and "sass" not in present:
        st.caption(asm.sass_note)


def run_stage(record: Exploration, graph_index: int, key: str) -> None:
    for error in record.errors:
        st.warning(md_text(error.message))
    verify = record.verify
    if verify.verdict == "random":
        st.warning(md_text(f"Nothing could be checked: {verify.problem or 'the model is random'}"))
    elif verify.ok:
        st.success(f"Outputs match eager PyTorch (max abs error {_number(verify.max_abs_err)}, "
                   f"max rel error {_number(verify.max_rel_err)}).")
        if verify.verdict == "layout differs":
            st.warning(md_text(verify.problem or "the layout differs from eager's"))
    elif verify.ok is not None:
        st.error("Glassbox's outputs differ from eager PyTorch: see the table.")
    if verify.reference or verify.judged_in:  # Note [Verdicts]: which reference, and where
        st.caption(md_text(f"Judged by: {verify.reference or '?'}"
                           + (f"; in {verify.judged_in}" if verify.judged_in else "")))
    rows = tables.numerics_rows(verify)
    if rows:
        st.markdown("**Numerics per output**")
        st.dataframe(rows, hide_index=True, width="stretch",
                     column_config={"max abs error": st.column_config.NumberColumn(format="%.3e"),
                                    "max rel error": st.column_config.NumberColumn(format="%.3e")})
    training.gradients_pane(verify)
    numerics_pane.render(record, _graph(record, graph_index), key)  # Note [Numerics bisect]
    runs = tables.run_rows(record)
    if runs:
        st.markdown("**Other inputs** (`dynamic_inputs`): recompiles and numerics")
        st.dataframe(runs, hide_index=True, width="stretch")
    if "run" in record.timings:
        st.caption(f"verification ran in {record.timings['run'] * 1e3:.1f} ms")


def _number(value) -> str:
    return f"{value:.2e}" if isinstance(value, (int, float)) else str(value)


def bench_stage(record: Exploration, graph_index: int, key: str) -> None:
    bench = state.cached_bench()
    case = _bench_case(bench)
    st.plotly_chart(charts.stage_times_figure(record.timings,
                                              (case or {}).get("inductor_compile_s")),
                    width="stretch", key=f"{key}_stage_chart", config={"displayModeBar": False})
    compile_trace.compile_pane(record, key)  # Note [Compile trace]: when each stage and pass ran
    left, right = st.columns([2, 3])
    with_inductor = right.toggle("with Inductor", key=f"{key}_bench_inductor",
                                 help="Also time torch.compile (Inductor): its cold compile adds 10-40 s on a "
                                      "small CPU.")
    if left.button("Run benchmark: eager vs Glassbox" + (" vs Inductor" if with_inductor else ""),
                   key=f"{key}_bench", help="Runs in a worker, the runners taking turns in rounds; a few seconds "
                                            "without Inductor."):
        bench = state.run_bench(with_inductor)
        case = _bench_case(bench)
    if bench is None:
        st.caption("Timing is on demand: press the button to measure.")
    elif bench.problem is not None:
        ui.show_problem(bench.problem, state.user_source(), state.model_path_name())
    if case:
        if case.get("error"):
            st.error(case["error"])
        left, right = st.columns(2)
        left.plotly_chart(charts.bench_figure(case), width="stretch", key=f"{key}_bench_chart",
                          config={"displayModeBar": False})
        right.plotly_chart(charts.speedup_figure(case), width="stretch", key=f"{key}_speedup_chart",
                           config={"displayModeBar": False})
        st.plotly_chart(charts.compile_figure(case, record.timings), width="stretch",
                        key=f"{key}_compile_chart", config={"displayModeBar": False})
        if case.get("load_warning"):
            st.warning(case["load_warning"])
        for line in teaching.bench_case_lines(case):
            st.caption(line)
    graph = _graph(record, graph_index)
    kernels = graph.kernels if graph else []
    if kernels:
        st.plotly_chart(charts.kernel_figure(kernels), width="stretch", key=f"{key}_kernel_chart",
                        config={"displayModeBar": False})


def _bench_case(outcome) -> dict | None:
    if outcome is None or not outcome.document:
        return None
    cases = outcome.document.get("cases") or []
    return cases[0] if cases else None


RENDERERS = {"capture": capture_stage, "ATen": aten_stage, "rewrites": rewrites_stage, "loop IR": ir_stage, "fusion": fusion_stage,
             "code": code_stage, "run": run_stage, "bench": bench_stage}
