"""The explorer's graph logic without a browser: a fusion decision's two sides drawn in two colours, elided
groups read back, folded modules naming their kernels, the selected node unfolded and marked, the big-graph
viewer's page. (The browser tests in test_browser_explorer.py drive the same views in Chromium.)"""
from __future__ import annotations

import pytest

import engine
from app import ui
from app.components import graph_view
from engine.record import Exploration, GraphRecord
from visualizers import graphs, tables, teaching


@pytest.fixture(scope="module")
def layernorm() -> Exploration:
    import torch

    model = torch.nn.LayerNorm(64)
    return Exploration.from_json(engine.explore(model, (torch.randn(8, 64),), name="layernorm").to_json())


def test_elided_groups_are_read_back_to_their_buffers(layernorm):
    graph = layernorm.graphs[0]
    kernel = graph.kernels[0]
    first, last = kernel.ir_nodes[0], kernel.ir_nodes[-1]
    label = f"{first}+...+{last} ({len(kernel.ir_nodes)} nodes)"
    assert graphs.decision_buffers(graph, label) == kernel.ir_nodes
    assert graphs.decision_buffers(graph, f"{first}+{last}") == [first, last]


def test_decisions_name_ops_and_their_sides_are_drawn_in_two_colours(layernorm):
    graph = layernorm.graphs[0]
    rows = tables.decision_rows(graph)
    assert rows and all(not row["producer ops"].startswith("buf") for row in rows)
    decision = next(d for d in tables.decisions(graph)
                    if set(teaching.decision_ops(graph, d.consumer)["aten"])
                    - set(teaching.decision_ops(graph, d.producer)["aten"]))
    options = graphs.DrawOptions(kernels_as_clusters=True,
                                 highlight_other=frozenset(teaching.decision_ops(graph, decision.producer)["aten"]),
                                 highlight=frozenset(teaching.decision_ops(graph, decision.consumer)["aten"]))
    dot = graphs.graph_dot(graph, "aten", options)
    assert graphs.OTHER_SIDE in dot and graphs.HIGHLIGHT in dot and graphs.FADED in dot


def test_table_filters_keep_kinds_rules_refusals_and_a_module_with_its_children():
    kernels = [{"kind": "pointwise", "module": "layers.3.mlp"}, {"kind": "reduction", "module": "layers.3"},
               {"kind": "reduction", "module": "layers.30"}, {"kind": "extern", "module": ""},
               {"kind": "pointwise", "module": None}]
    assert tables.filtered(kernels) == [0, 1, 2, 3, 4]  # no filter: every row
    assert tables.filtered(kernels, kinds=["reduction"]) == [1, 2]
    assert tables.filtered(kernels, kinds=["reduction", "extern"]) == [1, 2, 3]
    # a module keeps itself and what is inside it, not a sibling whose name merely starts the same
    assert tables.filtered(kernels, module="layers.3") == [0, 1]
    assert tables.filtered(kernels, module="layers.30") == [2]
    assert tables.filtered(kernels, module="layers.3.mlp") == [0]
    assert tables.filtered(kernels, module="layers") == [0, 1, 2]
    assert tables.filtered(kernels, module="layers.3.") == [] and tables.filtered(kernels, module="layer") == []
    assert tables.filtered(kernels, kinds=["reduction"], module="layers.3") == [1]  # both filters at once

    decisions = [{"rule": "library call", "fused": False, "module": "layers.3.attn"},
                 {"rule": "pointwise chain", "fused": True, "module": "layers.3"},
                 {"rule": "cycle", "fused": False, "module": "layers.31"},
                 {"rule": "", "fused": True, "module": ""}]
    assert tables.filtered(decisions, rules=["library call"]) == [0]
    assert tables.filtered(decisions, rules=["library call", "cycle"]) == [0, 2]
    assert tables.filtered(decisions, only_refused=True) == [0, 2]
    assert tables.filtered(decisions, only_refused=True, module="layers.3") == [0]
    assert tables.filtered(decisions, rules=["pointwise chain"], only_refused=True) == []


def _chain(blocks: int, per_block: int) -> GraphRecord:
    fx = [{"name": "x", "op": "placeholder", "target": "x", "args": [], "shape": ["8"], "dtype": "float32"}]
    for i in range(blocks * per_block):
        fx.append({"name": f"op{i}", "op": "call_function", "target": "add", "args": [fx[-1]["name"]],
                   "shape": ["8"], "dtype": "float32", "module_path": str(i // per_block)})
    fx.append({"name": "output", "op": "output", "target": "output", "args": [fx[-1]["name"]]})
    kernels = [{"name": f"kernel_{b}", "kind": "pointwise", "fx_origins": [f"op{b * per_block + j}"
                                                                           for j in range(per_block)]}
               for b in range(blocks)]
    return GraphRecord.from_json({"index": 0, "fx": fx, "aten": [], "kernels": kernels})


def _residual_blocks(blocks: int) -> GraphRecord:
    """A ResNet-like chain: each block `blocks.N` runs two children (`conv`, `act`) and adds of its own."""
    fx = [{"name": "x", "op": "placeholder", "target": "x", "args": [], "shape": ["8"], "dtype": "float32"}]
    for b in range(blocks):
        for path in (f"blocks.{b}.conv", f"blocks.{b}.conv", f"blocks.{b}.act", f"blocks.{b}"):
            fx.append({"name": f"op{len(fx)}", "op": "call_function", "target": "add", "args": [fx[-1]["name"]],
                       "shape": ["8"], "dtype": "float32", "module_path": path})
    fx.append({"name": "output", "op": "output", "target": "output", "args": [fx[-1]["name"]]})
    return GraphRecord.from_json({"index": 0, "fx": fx, "aten": [], "kernels": []})


def test_the_first_view_keeps_a_block_whole_rather_than_split_from_its_own_ops():
    graph = _residual_blocks(16)  # depth 3 would be 48 boxes, each block's add alone beside its two children
    assert graphs.box_count(graph, "fx", 3) <= graphs.FIRST_VIEW_BOXES
    depth = graphs.auto_depth(graph, "fx", limit=graphs.FIRST_VIEW_BOXES)
    assert depth == 2 and set(graphs.module_groups(graph, "fx", depth)) == {f"blocks.{b}" for b in range(16)}


def test_folded_modules_name_their_kernels_and_the_selected_node_is_unfolded():
    graph = _chain(200, 10)  # 2000 nodes
    depth = graphs.auto_depth(graph, "fx")
    folded = graphs.graph_dot(graph, "fx", graphs.DrawOptions(collapse_depth=depth))
    assert folded.count("box3d") == 200 and "1 kernel: kernel_123" in folded
    options = graphs.DrawOptions(collapse_depth=depth)
    options.highlight = ui.selected_names(graph, "fx", "op1234")
    paths = graphs.module_paths(graph, "fx")
    options.expanded = frozenset([graphs.group_of(paths["op1234"], depth)])
    dot = graphs.graph_dot(graph, "fx", options)
    assert "gb-selected" in dot and "op1234 = add" in dot and dot.count("box3d") == 199


def test_the_big_graph_viewer_is_one_offline_page():
    page = graph_view.viewer_html("<svg viewBox='0 0 10 10'><g class='node'><title>a</title></g></svg>", 2002)
    assert "2002 nodes" in page and "<svg" in page and "src=" not in page and "href=" not in page


def test_module_paths_read_as_the_model_names_them():
    from engine.report import module_path_text

    assert module_path_text("G['net'].model.layers[3].mlp") == "model.layers.3.mlp"
    assert module_path_text("L['self']._modules['layers']._modules['3'].mlp") == "layers.3.mlp"
    assert module_path_text("getattr(L['self'].layers, '3').mlp") == "layers.3.mlp"
    assert module_path_text("L['self']") == ""


def _wrapped_layers(layers: int):
    """A model wrapped in a function, its layers in a container: the shape of a pasted Hugging Face model."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(Block() for _ in range(layers))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    net = Net().eval()
    return (lambda x: net(x)), (torch.randn(4, 16),)


@pytest.fixture(scope="module")
def wrapped() -> Exploration:
    model, inputs = _wrapped_layers(24)
    return Exploration.from_json(engine.explore(model, inputs, name="wrapped").to_json())


@pytest.mark.slow
def test_a_wrapped_model_folds_by_module_path_with_its_weights(wrapped):
    graph = wrapped.graphs[0]
    for which in ("fx", "aten"):
        paths = graphs.module_paths(graph, which)
        assert not any("[" in p or "G" in p.split(".")[0] for p in paths.values()), set(paths.values())
        weights = graphs.param_names(graph, which)
        assert len(weights) == 24 * 4 and all(paths[w].startswith("layers.") for w in weights)
        depth = graphs.auto_depth(graph, which, limit=graphs.FIRST_VIEW_BOXES)
        boxes = graphs.box_count(graph, which, depth, hide_params=True)
        groups = graphs.module_groups(graph, which, depth)
        assert 10 <= boxes <= graphs.FIRST_VIEW_BOXES and set(groups) == {f"layers.{i}" for i in range(24)}
    dot = graphs.graph_dot(graph, "aten", graphs.DrawOptions(collapse_depth=2, hide_params=True))
    assert dot.count("box3d") == 24 and "4 weights / constants" in dot and "layers.7" in dot


def test_a_folded_module_is_found_by_the_names_inside_it(wrapped):
    graph = wrapped.graphs[0]
    paths = graphs.module_paths(graph, "aten")
    inside = next(n.name for n in graph.aten if paths.get(n.name) == "layers.5.up" and n.op != "placeholder")
    dot = graphs.graph_dot(graph, "aten", graphs.DrawOptions(collapse_depth=2, hide_params=True))
    folded = [line for line in dot.splitlines() if "box3d" in line and "layers.5\\n" in line]
    assert len(folded) == 1 and inside in folded[0]  # the viewer's search reads the tooltip
    options = graphs.DrawOptions(collapse_depth=2, hide_params=True)
    options.highlight = ui.selected_names(graph, "aten", inside)
    options.expanded = frozenset([graphs.group_of(paths[inside], 2)])
    unfolded = graphs.graph_dot(graph, "aten", options)
    assert "gb-selected" in unfolded and unfolded.count("box3d") == 23


def test_a_picked_weight_is_drawn_though_weights_are_hidden(wrapped):
    graph = wrapped.graphs[0]
    weight = sorted(graphs.param_names(graph, "aten"))[5]
    paths = graphs.module_paths(graph, "aten")
    options = graphs.DrawOptions(collapse_depth=2, hide_params=True, highlight=frozenset([weight]),
                                 expanded=frozenset([graphs.group_of(paths[weight], 2)]))
    assert "gb-selected" in graphs.graph_dot(graph, "aten", options)


def _table_model(from_input: bool):
    """Six layers reading one table made from a buffer (a rotary embedding's cos/sin), or also from the input."""
    import torch

    class Table(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("freq", torch.arange(16.0))

        def forward(self, x):
            table = (self.freq * 0.1).cos()
            return table * x.mean() if from_input else table

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x, table):
            return self.lin(x) * table

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = Table()
            self.layers = torch.nn.ModuleList(Layer() for _ in range(6))

        def forward(self, x):
            table = self.table(x)
            for layer in self.layers:
                x = layer(x, table)
            return x

    net = Net().eval()
    record = engine.explore(lambda x: net(x), (torch.randn(4, 16),), name="table").to_json()
    return Exploration.from_json(record).graphs[0]


def test_a_constant_read_by_many_modules_is_folded_into_its_readers():
    """Note [Constants fold into their readers]: no fan of edges from a box no input reaches; each reader names it."""
    import re

    for from_input in (False, True):
        graph = _table_model(from_input)
        dot = graphs.graph_dot(graph, "aten", graphs.DrawOptions(collapse_depth=2, hide_params=True))
        box = re.search(r'(\S+) \[label="table\\n', dot).group(1)
        edges_out = re.findall(rf"^\s*{re.escape(box)} -> ", dot, re.MULTILINE)
        if from_input:  # a value of the input: its edges stay
            assert len(edges_out) == 6 and "reads table" not in dot
        else:
            assert not edges_out and "constant, read by 6" in dot and dot.count("reads table") == 6
