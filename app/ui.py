"""Small Streamlit helpers shared by the pages: the explored record, code, graphs, problems, graph pickers,
module collapsing."""
from __future__ import annotations

import streamlit as st

from app import state
from app.components import graph_view
from app.worker import Problem
from engine.record import Exploration, GraphRecord
from visualizers import code as code_html
from visualizers import graphs


def explored() -> Exploration | None:
    """Explore (or fetch) the current request; show its problem if any. The record, or None to stop."""
    outcome = state.exploration()
    if outcome.problem is not None:
        show_problem(outcome.problem, state.user_source(), state.model_path_name())
        if outcome.record is None:
            st.info("Fix the code on the **Model code** page, or pick a sample in the sidebar: the app keeps "
                    "working.")
            return None
    return outcome.record


def record_source(record: Exploration) -> str:
    """The user's code as the record holds it (the editor's, if the record has none)."""
    return record.source.text or state.user_source()


def show_code(text: str, language: str, hl_lines=(), first_line: int = 1, caption: str | None = None,
              max_height: int | None = 520, line_numbers: bool = True) -> None:
    st.html(code_html.highlight_html(text, language, hl_lines=hl_lines, first_line=first_line, caption=caption,
                                     max_height=max_height, line_numbers=line_numbers))


def show_graph(dot: str, node_count: int = 0, big: int = graph_view.BIG_NODES) -> None:
    """Small graphs with st.graphviz_chart; those of more than `big` nodes in the zoomable viewer (Note [Big
    graph view])."""
    if not graph_view.show(dot, node_count, big):
        # natural size: stretching would blow a three-node graph up to the pane's width
        st.graphviz_chart(dot, width="content")


def legend(kinds) -> None:
    st.html(graphs.legend_html(kinds))


def show_problem(problem: Problem, source: str | None = None, filename: str = "") -> None:
    """An error that reads as help: what went wrong, where (the line, highlighted), what to try, details."""
    st.error(f"**{problem.title}**")
    st.html(code_html.plain_text_html(problem.message))
    if problem.lineno and source:
        lines = source.splitlines()
        if 0 < problem.lineno <= len(lines):
            snippet, first = code_html.crop(source, [problem.lineno], context=4)
            show_code(snippet, "python", hl_lines=[problem.lineno], first_line=first,
                      caption=f"{filename or 'your code'}, line {problem.lineno}", max_height=260)
    if problem.hints:
        st.markdown("**What to try**\n" + "\n".join(f"- {hint}" for hint in problem.hints))
    if problem.log and problem.log.strip() != problem.message.strip():
        with st.expander("Worker output (details)"):
            st.code(problem.log[-6000:], language="text")


def graph_picker(record: Exploration, key: str, allow_all: bool = False, label: str = "Graph") -> int | None:
    """Which subgraph to show when Dynamo made several (None: all of them, with the breaks between)."""
    count = len(record.graphs)
    if count <= 1:
        return 0 if count else None
    options = (["all"] if allow_all else []) + list(range(count))
    breaks = len(record.graph_breaks)

    def name(option):
        if option == "all":
            return f"all {count} graphs ({breaks} breaks)"
        phase = record.graphs[option].phase
        return f"graph {option}" + (f" ({phase})" if phase != "inference" else "")

    choice = st.selectbox(label, options, format_func=name, key=key)
    return None if choice == "all" else int(choice)


def collapse_controls(graph: GraphRecord, which: str, key: str) -> graphs.DrawOptions:
    """For big graphs: hide the weights, group nodes by nn.Module path, expand chosen modules on demand."""
    count = len(getattr(graph, which))
    if not graphs.big(graph, which):
        return graphs.DrawOptions()
    depth_max = graphs.max_module_depth(graph, which)
    params = len(graphs.param_names(graph, which))
    with st.expander(f"{count} nodes: big graph view (weights hidden, modules collapsed)", expanded=False):
        show_params = st.toggle(f"Show the {params} weight and buffer inputs", value=False,
                                key=f"{key}_params") if params else False
        depth, expanded = 0, []
        if depth_max:
            auto = graphs.auto_depth(graph, which, limit=graphs.FIRST_VIEW_BOXES, hide_params=not show_params)
            depth = st.select_slider("Collapse modules at depth", options=list(range(0, depth_max + 1)), value=auto,
                                     format_func=lambda d: "off: every node" if d == 0 else str(d),
                                     key=f"{key}_depth")
            groups = graphs.module_groups(graph, which, depth)
            if groups:
                expanded = st.multiselect("Expand modules", sorted(groups, key=graphs.natural_key), key=f"{key}_expand",
                                          format_func=lambda g: f"{g} ({groups[g]} nodes)")
    return graphs.DrawOptions(collapse_depth=depth, expanded=frozenset(expanded), hide_params=not show_params)


def bytes_text(count) -> str:
    from visualizers.tables import human_bytes
    return human_bytes(count)


def picked_row(key: str, count: int) -> int | None:
    """The row picked in the st.dataframe under `key` (on_select), read before the table is drawn again."""
    event = st.session_state.get(key)
    try:
        rows = list(event["selection"]["rows"])
    except (KeyError, TypeError):
        return None
    return rows[0] if rows and 0 <= rows[0] < count else None


def selected_names(graph: GraphRecord, which: str, node: str | None) -> frozenset:
    """The drawn nodes for the selected node: itself, or the ATen nodes an FX node became (and back)."""
    if not node:
        return frozenset()
    nodes = getattr(graph, which)
    if any(n.name == node for n in nodes):
        return frozenset([node])
    if which == "aten":
        return frozenset(n.name for n in nodes if node in n.fx_origins)
    return frozenset(o for n in graph.aten if n.name == node for o in n.fx_origins)


def select_node(options: graphs.DrawOptions, graph: GraphRecord, which: str) -> None:
    """Highlight the selected node (session "node", in the URL) and unfold the module it is folded into."""
    chosen = selected_names(graph, which, st.session_state.node)
    if not chosen:
        return
    options.highlight = chosen
    paths = graphs.module_paths(graph, which)
    unfold = {graphs.group_of(paths.get(name, ""), options.collapse_depth) for name in chosen}
    options.expanded = options.expanded | frozenset(g for g in unfold if g)


def node_finder(record: Exploration, graph_index: int) -> None:
    """Search the graph's nodes by name (type to filter); the pick is highlighted on every graph pane."""
    if not record.graphs:
        return
    graph = record.graphs[min(graph_index, len(record.graphs) - 1)]
    names = sorted({n.name for nodes in (graph.fx, graph.aten) for n in nodes if n.op != "output"})
    where = {**graphs.module_paths(graph, "aten"), **graphs.module_paths(graph, "fx")}
    ops = {n.name: graphs.short_target(n) for nodes in (graph.fx, graph.aten) for n in nodes}
    current = st.session_state.node
    if st.session_state.get("node_finder") != current:
        st.session_state.node_finder = current if current in names else None

    def picked() -> None:
        st.session_state.node = st.session_state.node_finder

    def label(name: str) -> str:  # typing filters on the label: a name, an op or a module path finds the node
        op = ops.get(name, "")
        return " · ".join(part for part in (name, op if op != name else "", where.get(name, "")) if part)

    st.selectbox("Find a node", names, index=None, key="node_finder", on_change=picked, format_func=label,
                 placeholder=f"search {len(names)} nodes by name, op or module",
                 help="Type part of a node's name, its op or its module path (layers.3.mlp): it is highlighted on "
                      "the graphs (and unfolded if its module is folded); the link in the address bar keeps it.")
