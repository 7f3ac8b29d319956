"""Record graphs -> Graphviz DOT (built with the graphviz package): FX and ATen graphs with op kinds coloured, kernels as clusters, fallbacks
marked, graph breaks drawn between subgraphs, and big graphs collapsed by nn.Module path.

A graph here is a GraphRecord of the typed record (engine/record.py): its fx and aten nodes, IR nodes and kernels.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import graphviz

from engine.record import Exploration, FxNode, GraphBreakRecord, GraphRecord

# kind -> (fill colour, border colour, legend text)
KIND_STYLE = {
    "input": ("#dbeafe", "#3b82f6", "input"),
    "param": ("#e0f2fe", "#7dd3fc", "weight / buffer"),
    "pointwise": ("#dcfce7", "#16a34a", "pointwise"),
    "reduction": ("#ffedd5", "#ea580c", "reduction"),
    "extern": ("#ede9fe", "#7c3aed", "library call (mm, conv, sdpa)"),
    "template": ("#ede9fe", "#7c3aed", "template"),
    "fallback": ("#fee2e2", "#dc2626", "fallback (runs eagerly)"),
    "view": ("#f3f4f6", "#9ca3af", "view / no compute"),
    "other": ("#fef9c3", "#ca8a04", "other"),
    "output": ("#e5e7eb", "#4b5563", "output"),
    "module": ("#e0e7ff", "#4338ca", "collapsed module"),
}
KIND_PRIORITY = ["fallback", "extern", "template", "reduction", "pointwise", "view"]
BOX_WORDS = {"extern": "library", "fallback": "eager"}  # a folded module's op counts, in users' words
HIGHLIGHT = "#dc2626"
OTHER_SIDE = "#2563eb"
FADED = "#9ca3af"

VIEW_WORDS = ("view", "reshape", "permute", "transpose", "expand", "squeeze", "unsqueeze", "slice", "select",
              "getitem", "split", "chunk", "contiguous", "flatten", "unflatten", "t", "alias", "as_strided",
              "detach", "clone", "unbind", "narrow", "_unsafe_view")


def short_target(node: FxNode) -> str:
    return short_op(node.target)


def short_op(target: str) -> str:
    """An op's target without its namespace: aten.mm.default -> mm.default."""
    target = str(target)
    for prefix in ("_VariableFunctionsClass.", "aten::", "aten.", "torch.", "_operator.", "operator."):
        if target.startswith(prefix):
            target = target[len(prefix):]
    return target


def shape_text(node: FxNode) -> str:
    shape, dtype = node.shape, node.dtype or ""
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
             "int32": "i32", "bool": "bool", "int8": "i8", "uint8": "u8"}.get(dtype, dtype)
    if isinstance(shape, list) and shape and all(isinstance(s, (str, int)) for s in shape):
        return f"{short}[{', '.join(str(s) for s in shape)}]"
    if isinstance(shape, list) and not shape and dtype and dtype != "tuple":
        return f"{short}[]"
    if dtype == "tuple":
        return "tuple"
    return short


# --- what each node is ---------------------------------------------------------------------------------------


def _strongest(kinds) -> str | None:
    kinds = set(kinds)
    for kind in KIND_PRIORITY:
        if kind in kinds:
            return kind
    return None


def _io_kind(node: FxNode) -> str | None:
    op = node.op
    if op == "placeholder":
        name = node.name
        return "param" if ("parameters_" in name or "buffers_" in name) else "input"
    if op == "get_attr":
        return "param"
    if op == "output":
        return "output"
    return None


def _guess_kind(node: FxNode) -> str:
    name = short_target(node).split(".")[0].lower()
    return "view" if name in VIEW_WORDS else "other"


def param_names(graph: GraphRecord, which: str) -> set[str]:
    """Placeholders that hold weights or buffers (Dynamo lifts them to inputs). ATen placeholders carry no names
    of their own, but AOTAutograd keeps the FX graph's input order, so the i-th of each is the same input."""
    fx_inputs = [n for n in graph.fx if n.op in ("placeholder", "get_attr")]
    fx_params = [n.name for n in fx_inputs if _io_kind(n) == "param"]
    if which == "fx":
        return set(fx_params)
    aten_inputs = [n for n in graph.aten if n.op == "placeholder"]
    fx_placeholders = [n for n in fx_inputs if n.op == "placeholder"]
    if len(aten_inputs) != len(fx_placeholders):
        return set()
    return {a.name for a, f in zip(aten_inputs, fx_placeholders) if _io_kind(f) == "param"}


def aten_kinds(graph: GraphRecord) -> dict[str, str]:
    """ATen node -> kind, from what it became: its IR nodes' kinds and its kernel's kind."""
    found: dict[str, list[str]] = defaultdict(list)
    for ir_node in (graph.ir.nodes if graph.ir else []):
        kind = "view" if ir_node.kind == "multi_output" else ir_node.kind
        for origin in ir_node.aten_origins:
            found[origin].append(kind)
    for kernel in graph.kernels:
        if kernel.kind in ("fallback", "extern", "template"):
            for origin in kernel.aten_origins:
                found[origin].append(kernel.kind)
    params = param_names(graph, "aten")
    kinds = {}
    for node in graph.aten:
        kind = _io_kind(node) or _strongest(found.get(node.name, ())) or _guess_kind(node)
        kinds[node.name] = "param" if node.name in params else kind
    return kinds


def fx_kinds(graph: GraphRecord) -> dict[str, str]:
    """FX node -> kind: the strongest kind among the ATen nodes it decomposed into."""
    by_aten = aten_kinds(graph)
    children: dict[str, list[str]] = defaultdict(list)
    for node in graph.aten:
        for origin in node.fx_origins:
            children[origin].append(by_aten.get(node.name, "other"))
    kinds = {}
    for node in graph.fx:
        kinds[node.name] = _io_kind(node) or _strongest(children.get(node.name, ())) or _guess_kind(node)
    return kinds


def node_kinds(graph: GraphRecord, which: str) -> dict[str, str]:
    return aten_kinds(graph) if which == "aten" else fx_kinds(graph)


def node_kernels(graph: GraphRecord, which: str) -> dict[str, list[str]]:
    """Node -> the kernels it ended up in (an FX node may be spread over several)."""
    key = "aten_origins" if which == "aten" else "fx_origins"
    result: dict[str, list[str]] = defaultdict(list)
    for kernel in graph.kernels:
        for origin in getattr(kernel, key):
            if kernel.name not in result[origin]:
                result[origin].append(kernel.name)
    return dict(result)


def module_paths(graph: GraphRecord, which: str) -> dict[str, str]:
    """Node -> nn.Module path; an ATen node without its own takes its FX origin's, and a weight, buffer or
    constant the module its users share (Note [Weights fold into their module])."""
    fx_paths = {n.name: n.module_path for n in graph.fx}
    if which == "fx":
        paths = dict(fx_paths)
    else:
        paths = {}
        for node in graph.aten:
            path = node.module_path
            if not path:
                origins = [fx_paths.get(o, "") for o in node.fx_origins]
                path = next((p for p in origins if p), "")
            paths[node.name] = path
    weights = param_names(graph, which) | {n.name for n in getattr(graph, which) if n.op == "get_attr"}
    users: dict[str, list[str]] = defaultdict(list)
    for node in getattr(graph, which):
        for arg in node.args:
            if arg in weights:
                users[arg].append(paths.get(node.name, ""))
    for name in weights:
        paths[name] = common_module(users.get(name, []))
    return paths


def common_module(paths: list[str]) -> str:
    """The deepest module that holds every one of `paths` ("" when one is outside every module)."""
    if not paths or not all(paths):
        return ""
    common = paths[0].split(".")
    for path in paths[1:]:
        parts = path.split(".")
        while common and parts[:len(common)] != common:
            common.pop()
    return ".".join(common)


# --- collapsing by module -----------------------------------------------------------------------------------
# Note [Weights fold into their module]
# Dynamo lifts every weight and buffer to a graph input, so a 24-layer model's graph opens with hundreds of
# inputs, and a model wrapped in a function with dozens of constants, none of them in a module (an input's
# module is not recorded). A weight, buffer or constant belongs where it is used: it takes the deepest module
# all its users share, so a folded module box holds its weights too (counted apart from its ops), and only
# the model's real inputs and its output stay drawn beside the boxes.


# Note [Constants fold into their readers]
# Some of a graph's values depend on no input at all: a rotary embedding's cos/sin tables, made from a buffer
# and an arange of positions, feed every layer's attention. Folded by module, such a box (model.rotary_emb)
# sends an edge to each of its readers, and in a 24-layer Llama those 24 long edges across the whole graph are
# most of what one sees. A box or node whose every op is constant (no graph input reaches it) and that feeds more
# than FAN_OUT boxes is drawn without those edges: it says how many modules read it, and each reader names it,
# as a module names the weights folded into it.
FAN_OUT = 3


def constant_nodes(graph: GraphRecord, which: str) -> set[str]:
    """Nodes no graph input reaches: weights, buffers, constants and the ops computed from them alone."""
    nodes = getattr(graph, which)
    names = {n.name for n in nodes}
    constant = param_names(graph, which) | {n.name for n in nodes if n.op == "get_attr"}
    for node in nodes:  # in graph order: a node's arguments come before it
        if node.op not in ("placeholder", "output", "get_attr") and all(
                a in constant for a in node.args if a in names):
            constant.add(node.name)
    return constant


def natural_key(path: str) -> list:
    """Sort key that puts layers.2 before layers.10."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.split(".")]


def group_of(path: str, depth: int) -> str:
    if depth <= 0 or not path:
        return ""
    return ".".join(path.split(".")[:depth])


def _foldable(node: FxNode, weights: set[str]) -> bool:
    """Ops fold into their module, and so do weights, buffers and constants (Note [Weights fold into their
    module]); the graph's own inputs and its output stay drawn."""
    kind = _io_kind(node)
    return kind is None or kind == "param" or node.name in weights


def module_groups(graph: GraphRecord, which: str, depth: int) -> Counter:
    """Group key -> node count at this depth (nodes without a module path are not grouped)."""
    nodes = getattr(graph, which)
    paths = module_paths(graph, which)
    weights = param_names(graph, which)
    return Counter(g for n in nodes if (g := group_of(paths.get(n.name, ""), depth)) and _foldable(n, weights))


def max_module_depth(graph: GraphRecord, which: str) -> int:
    paths = module_paths(graph, which).values()
    return max((len(p.split(".")) for p in paths if p), default=0)


def box_count(graph: GraphRecord, which: str, depth: int, hide_params: bool = False) -> int:
    nodes = getattr(graph, which)
    hidden = param_names(graph, which) if hide_params else set()
    groups = module_groups(graph, which, depth)
    paths = module_paths(graph, which)
    weights = param_names(graph, which)
    loose = sum(1 for n in nodes if n.name not in hidden
                and (not group_of(paths.get(n.name, ""), depth) or not _foldable(n, weights)))
    return loose + len(groups)


FIRST_VIEW_BOXES = 60  # the app's first view of a big graph: tens of boxes (a 24-layer model: one per layer)


# Note [A depth that splits its modules]
# A finer depth reads better only if it opens modules into their children. A ResNet block's own op (the residual
# add) sits beside its children (the convolutions, the activation): one depth finer, each block becomes three
# boxes, its add alone in a box named by the block, beside boxes for its children. When most of the modules a
# depth opens keep such a box of their own, the first view stays one depth coarser: one box per block.


def _splits_its_modules(graph: GraphRecord, which: str, depth: int) -> bool:
    """Whether most modules that `depth` opens keep a box of their own ops beside their children's boxes."""
    if depth <= 1:
        return False
    coarse, fine = module_groups(graph, which, depth - 1), module_groups(graph, which, depth)
    opened = [group for group, count in coarse.items() if fine.get(group) != count]
    kept = [group for group in opened if group in fine]
    return len(kept) * 2 > len(opened)


def auto_depth(graph: GraphRecord, which: str, limit: int = 30, hide_params: bool = True) -> int:
    """The finest module depth that keeps the drawing under `limit` boxes (0: draw every node), skipping a depth
    that splits its modules' own ops from their children (Note [A depth that splits its modules])."""
    if box_count(graph, which, 0, hide_params) <= limit:
        return 0
    for depth in range(max_module_depth(graph, which), 0, -1):
        if box_count(graph, which, depth, hide_params) <= limit and not _splits_its_modules(graph, which, depth):
            return depth
    return 1 if max_module_depth(graph, which) else 0


def big(graph: GraphRecord, which: str, limit: int = 30) -> bool:
    """Graphs bigger than this hide their weights and start collapsed."""
    return len(getattr(graph, which)) > limit


# --- DOT --------------------------------------------------------------------------------------------------------


def dot_text(value) -> graphviz.quoting.NoHtml:
    """Record text as a DOT string: graphviz quotes it; backslashes stay literal, newlines become line breaks,
    and <...> is never taken for an HTML label (record text may be the user's source)."""
    return graphviz.nohtml(str(value).replace("\\", "\\\\").replace("\n", "\\n"))


def _attrs(**attrs) -> dict:
    return {key: dot_text(value) for key, value in attrs.items() if value is not None}


@dataclass
class DrawOptions:
    kernels_as_clusters: bool = False
    highlight: frozenset = frozenset()  # drawn red, the rest faded
    highlight_other: frozenset = frozenset()  # drawn blue: the other side of a fusion decision
    collapse_depth: int = 0
    expanded: frozenset = frozenset()  # group keys drawn node by node (as a labelled cluster)
    show_kernel_in_label: bool = False
    hide_params: bool = False  # leave weight/buffer inputs out (big models have dozens)


@dataclass
class _Drawn:
    first: str | None = None  # where an incoming break edge should land
    last: str | None = None  # where an outgoing break edge should leave


def _node_label(node: FxNode, kind: str, kernels: list[str], options: DrawOptions) -> str:
    op = node.op
    if op == "output":
        return "output"
    shape = shape_text(node)
    if op in ("placeholder", "get_attr"):
        name = str(node.target if op == "get_attr" else node.name)
        return f"{name}\n{shape}" if shape else name
    target = short_target(node)
    head = target if node.name == target else f"{node.name} = {target}"
    lines = [head]
    if shape:
        lines.append(shape)
    if kind == "fallback":
        lines.append("FALLBACK (eager)")
    if options.show_kernel_in_label and kernels:
        lines.append("in " + ", ".join(kernels))
    return "\n".join(lines)


def _few(names: list[str], count: int = 3) -> str:
    return ", ".join(names[:count]) + (f" +{len(names) - count}" if len(names) > count else "")


def _tooltip(node: FxNode, kernels: list[str], path: str) -> str:
    parts = [f"{node.name}: {node.target}"]
    source = node.source
    if source and source.lineno:
        parts.append(f"line {source.lineno}: {source.line}")
    if path:
        parts.append(f"module: {path}")
    if kernels:
        parts.append("kernel: " + ", ".join(kernels))
    return "\n".join(parts)


def _draw_graph(graph: GraphRecord, which: str, prefix: str, options: DrawOptions, out: graphviz.Digraph) -> _Drawn:
    """Draw one record graph into `out` (a graph, or a cluster of the record's drawing)."""
    nodes = getattr(graph, which)
    kinds = node_kinds(graph, which)
    kernels = node_kernels(graph, which)
    paths = module_paths(graph, which)
    kernel_kind = {k.name: k.kind for k in graph.kernels}
    drawn = _Drawn()

    if options.hide_params:  # a weight that is picked (Find a node) is drawn all the same
        hidden = param_names(graph, which) - options.highlight - options.highlight_other
        nodes = [n for n in nodes if n.name not in hidden]
    visible: dict[str, str] = {}  # node name -> DOT id it is drawn as (its own, or its collapsed module's)
    collapsed: dict[str, list[FxNode]] = defaultdict(list)
    weights = param_names(graph, which)
    for node in (getattr(graph, which)) if options.collapse_depth else ():  # hidden weights fold in too
        group = group_of(paths.get(node.name, ""), options.collapse_depth)
        if group and _foldable(node, weights) and group not in options.expanded:
            collapsed[group].append(node)
    group_ids = {group: f"{prefix}mod{i}" for i, group in enumerate(collapsed)}
    for group, members in collapsed.items():
        for node in members:
            visible[node.name] = group_ids[group]
    for node in nodes:
        visible.setdefault(node.name, f"{prefix}{node.name}")
    edges = []
    for node in nodes:
        for arg in node.args:
            if arg not in visible:
                continue
            edge = (visible[arg], visible[node.name])
            if edge[0] != edge[1] and edge not in edges:
                edges.append(edge)
    edges, notes = _without_constant_fans(graph, which, visible, edges, group_ids)

    def draw_node(node: FxNode, into: graphviz.Digraph) -> None:
        name = node.name
        kind = kinds.get(name, "other")
        fill, border, _ = KIND_STYLE.get(kind, KIND_STYLE["other"])
        mine = kernels.get(name, [])
        style = "rounded,filled" + (",dashed" if kind in ("fallback", "view") else "")
        note = f"\n{notes[visible[name]]}" if visible[name] in notes else ""
        attrs = dict(label=_node_label(node, kind, mine, options) + note, fillcolor=fill, color=border,
                     style=style, tooltip=_tooltip(node, mine, paths.get(name, "")))
        if kind in ("input", "param", "output"):
            attrs["shape"] = "oval"
        if kind == "fallback":
            attrs["penwidth"] = "2"
        if options.highlight or options.highlight_other:
            if name in options.highlight:  # class: an SVG viewer can find it (app/components/graph_view.py)
                attrs.update(color=HIGHLIGHT, penwidth="3", fontcolor="#000000", **{"class": "gb-selected"})
            elif name in options.highlight_other:
                attrs.update(color=OTHER_SIDE, penwidth="3", fontcolor="#000000")
            else:
                attrs.update(fontcolor=FADED, color=FADED)
        into.node(dot_text(visible[name]), **_attrs(**attrs))

    individual = [n for n in nodes if visible[n.name] == f"{prefix}{n.name}"]
    # clusters: kernels (fusion groups) when asked, otherwise the expanded modules
    clusters: dict[str, list[FxNode]] = defaultdict(list)
    cluster_attrs: dict[str, dict] = {}
    for node in individual:
        if _io_kind(node):
            continue
        if options.kernels_as_clusters:
            mine = kernels.get(node.name, [])
            if len(mine) == 1:
                clusters[mine[0]].append(node)
                kind = kernel_kind.get(mine[0], "")
                _, border, _ = KIND_STYLE.get(kind, KIND_STYLE["other"])
                cluster_attrs[mine[0]] = dict(
                    label=f"{mine[0]} · {kind}" + (" (eager)" if kind == "fallback" else ""), color=border,
                    fontcolor=border, style="rounded,dashed" if kind == "fallback" else "rounded", penwidth="2")
        else:
            group = group_of(paths.get(node.name, ""), options.collapse_depth)
            if group and group in options.expanded:
                clusters[group].append(node)
                cluster_attrs[group] = dict(label=group, color="#4338ca", fontcolor="#4338ca", style="rounded,dotted")
    in_cluster = set()
    for number, (key, members) in enumerate(clusters.items()):
        with out.subgraph(name=f"cluster_{prefix}c{number}") as cluster:  # dot boxes subgraphs named cluster*
            cluster.attr(**_attrs(**cluster_attrs[key]))
            for node in members:
                draw_node(node, cluster)
                in_cluster.add(node.name)
    for node in individual:
        if node.name not in in_cluster:
            draw_node(node, out)
    for group, group_nodes in collapsed.items():
        fill, border, _ = KIND_STYLE["module"]
        ops = [n for n in group_nodes if not _io_kind(n) and n.name not in weights]
        counts = Counter(kinds.get(n.name, "other") for n in ops)
        summary = ", ".join(f"{c} {BOX_WORDS.get(k, k)}" for k, c in counts.most_common(3))
        held = len(group_nodes) - len(ops)
        summary += f"\n{held} weight{'s' if held != 1 else ''} / constant{'s' if held != 1 else ''}" if held else ""
        highlighted = any(n.name in options.highlight for n in group_nodes)
        other = any(n.name in options.highlight_other for n in group_nodes)
        # Note [Kernels when folded]: a folded module still names the kernels its ops run in
        inside = list(dict.fromkeys(k for n in group_nodes for k in kernels.get(n.name, [])))
        ran = f"\n{len(inside)} kernel{'s' if len(inside) != 1 else ''}: " + _few(inside) if inside else ""
        note = f"\n{notes[group_ids[group]]}" if group_ids[group] in notes else ""
        attrs = dict(label=f"{group}\n{len(ops)} op{'s' if len(ops) != 1 else ''}: {summary}{ran}{note}", shape="box3d",
                     style="filled",
                     fillcolor=fill, color=HIGHLIGHT if highlighted else OTHER_SIDE if other else border,
                     tooltip=f"module {group}: {len(group_nodes)} nodes (Find a node unfolds it); inside: "
                             + " ".join(dict.fromkeys(paths.get(n.name, "") for n in group_nodes
                                                      if paths.get(n.name, "") != group))
                             + "; nodes: " + " ".join(n.name for n in group_nodes))
        if highlighted or other:
            attrs["penwidth"] = "3"
        elif options.highlight or options.highlight_other:
            attrs["fontcolor"] = FADED
        out.node(dot_text(group_ids[group]), **_attrs(**attrs))

    for source, target in edges:
        out.edge(dot_text(source), dot_text(target))

    inputs = [n for n in nodes if n.op == "placeholder"]
    outputs = [n for n in nodes if n.op == "output"]
    if nodes:
        drawn.first = visible[(inputs or nodes)[0].name]
        drawn.last = visible[(outputs or nodes)[-1].name]
    return drawn


def _without_constant_fans(graph: GraphRecord, which: str, visible: dict[str, str], edges: list,
                           group_ids: dict[str, str]) -> tuple[list, dict[str, str]]:
    """`edges` less those of constant boxes read by more than FAN_OUT others, and a line for each such box and
    its readers to say so (DOT id -> line; Note [Constants fold into their readers])."""
    constant, weights = constant_nodes(graph, which), param_names(graph, which)
    units: dict[str, list[str]] = defaultdict(list)  # DOT id -> the nodes drawn as it
    for name, unit in visible.items():
        units[unit].append(name)
    names = {unit: group for group, unit in group_ids.items()}
    readers: dict[str, list[str]] = defaultdict(list)
    for source, target in edges:
        readers[source].append(target)
    fans = [source for source, targets in readers.items()
            if len(targets) > FAN_OUT and all(n in constant for n in units[source])
            and any(n not in weights for n in units[source])]  # a computed value, not a lone weight
    notes: dict[str, str] = {}
    for source in fans:
        notes[source] = f"constant, read by {len(readers[source])} (edges not drawn)"
        for target in readers[source]:
            notes.setdefault(target, f"reads {names.get(source) or units[source][0]}")
    return [(source, target) for source, target in edges if source not in fans], notes


def _digraph(title: str | None, direction: str) -> graphviz.Digraph:
    dot = graphviz.Digraph("G", graph_attr=dict(rankdir=direction, nodesep="0.25", ranksep="0.35", bgcolor="transparent"),
                           node_attr=dict(shape="box", fontname="Helvetica", fontsize="10", margin="0.12,0.05",
                                          height="0.3"),
                           edge_attr=dict(color="#6b7280", arrowsize="0.6"))
    if title:
        dot.attr(label=dot_text(title), labelloc="t", fontname="Helvetica", fontsize="12")
    return dot


def graph_dot(graph: GraphRecord, which: str = "fx", options: DrawOptions | None = None, title: str | None = None,
              direction: str = "TB") -> str:
    """One graph (FX or ATen) as DOT."""
    dot = _digraph(title, direction)
    _draw_graph(graph, which, f"g{graph.index}_", options or DrawOptions(), dot)
    return dot.source


def wrap(words: str, width: int) -> list[str]:
    lines, current = [], ""
    for word in words.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return lines + ([current] if current else [])


def break_label(graph_break: GraphBreakRecord, width: int = 34, max_lines: int = 3) -> str:
    """"graph break at line 15" and the first clause of the reason, wrapped to a compact box."""
    reason = str(graph_break.reason or "graph break").split(" (Dynamo:")[0]
    first = reason.split(": ")[0].split(". ")[0].strip()
    lines = wrap(first, width)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1].rstrip(".,;") + " …"
    where = f" at line {graph_break.lineno}" if graph_break.lineno else ""
    return "\n".join([f"GRAPH BREAK{where}"] + lines)


def record_dot(record: Exploration, which: str = "fx", options: DrawOptions | None = None,
               direction: str = "TB") -> str:
    """Every graph of the record, each as a cluster, with its graph breaks drawn between them (in order)."""
    options = options or DrawOptions()
    graphs = record.graphs
    breaks = record.graph_breaks
    dot = _digraph(None, direction)
    drawn = []
    for graph in graphs:
        index = graph.index
        with dot.subgraph(name=f"cluster_graph{index}") as cluster:
            cluster.attr(label=f"graph {index}", style="rounded", color="#2563eb", fontcolor="#2563eb",
                         penwidth="1.5")
            drawn.append(_draw_graph(graph, which, f"g{index}_", options, cluster))
    for number, graph_break in enumerate(breaks):
        marker = f"break{number}"
        dot.node(marker, **_attrs(label=break_label(graph_break), shape="octagon", style="filled",
                                  fillcolor="#fee2e2", color="#dc2626", fontcolor="#991b1b",
                                  tooltip=graph_break.reason))
        before = drawn[number] if number < len(drawn) else None
        after = drawn[number + 1] if number + 1 < len(drawn) else None
        if before is not None and before.last:
            dot.edge(dot_text(before.last), marker, style="dashed", color="#dc2626")
        if after is not None and after.first:
            dot.edge(marker, dot_text(after.first), style="dashed", color="#dc2626")
    return dot.source


def legend_html(kinds) -> str:
    """A one-line colour legend for the kinds present."""
    chips = []
    for kind in [k for k in KIND_STYLE if k in set(kinds)]:
        fill, border, text = KIND_STYLE[kind]
        chips.append(f'<span style="display:inline-block;margin:0 10px 4px 0;font-size:0.8rem">'
                     f'<span style="display:inline-block;width:0.9em;height:0.9em;background:{fill};'
                     f'border:1.5px solid {border};border-radius:3px;vertical-align:-0.1em;margin-right:4px">'
                     f'</span>{text}</span>')
    return '<div class="gb-legend">' + "".join(chips) + "</div>"


# --- fusion decisions on the graph ----------------------------------------------------------------------------


def decision_buffers(graph: GraphRecord, side: str) -> list[str]:
    """The IR buffers one side of a fusion decision names. Long groups are written "buf3+...+buf11 (9 nodes)"
    (engine/schedule); the elided middle is the run of the kernel (or, failing that, the IR list) between the
    first and last names."""
    names = [part.strip() for part in str(side or "").split(" (")[0].split("+")]
    if "..." not in names:
        return [n for n in names if n]
    first, last = names[0], names[-1]
    for order in [k.ir_nodes for k in graph.kernels] + [
            [n.name for n in (graph.ir.nodes if graph.ir else [])]]:
        if first in order and last in order and order.index(first) <= order.index(last):
            return order[order.index(first):order.index(last) + 1]
    return [first, last]

