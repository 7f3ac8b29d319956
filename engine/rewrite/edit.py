"""Small graph-editing helpers the rewrite passes share: new nodes with their fake values, provenance, views."""
from __future__ import annotations

from typing import Any

import torch
from torch._guards import detect_fake_mode

from engine.capture import fx_origin_names, user_source_line

aten = torch.ops.aten
prims = torch.ops.prims


def val(node: Any):
    """A node's traced value (a fake tensor, a SymInt) or the constant itself."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


def shape(node: Any) -> tuple | None:
    value = val(node)
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def add_node(graph: torch.fx.Graph, target, args: tuple, kwargs: dict | None = None,
             origins: list[torch.fx.Node] = ()) -> torch.fx.Node:
    """Insert target(*args, **kwargs) at the graph's insertion point, with meta['val'] traced on the arguments'
    fake values and its provenance (from_node, stack trace, module) taken from `origins`."""
    kwargs = kwargs or {}
    node = graph.call_function(target, args, kwargs)
    fake_args, fake_kwargs = torch.utils._pytree.tree_map(val, (args, kwargs))
    fake_mode = detect_fake_mode(torch.utils._pytree.tree_leaves((fake_args, fake_kwargs)))
    if fake_mode is not None:
        with fake_mode:
            node.meta["val"] = target(*fake_args, **fake_kwargs)
    else:  # constants only (a freezing fold): a real value
        node.meta["val"] = target(*fake_args, **fake_kwargs)
    inherit_provenance(node, origins)
    return node


def inherit_provenance(node: torch.fx.Node, origins) -> None:
    """The new node came from `origins`: report.py traces it back through their FX origins and user lines."""
    sources = []
    for origin in origins:
        for source in origin.meta.get("from_node") or ():
            if source not in sources:
                sources.append(source)
    if sources:
        node.meta["from_node"] = sources
    for key in ("stack_trace", "nn_module_stack", "seq_nr"):
        for origin in reversed(list(origins)):  # the last origin (the pattern's output) speaks for it
            if key in origin.meta:
                node.meta[key] = origin.meta[key]
                break


def origin_names(nodes, fx_names: set[str]) -> list[str]:
    """The Dynamo FX nodes these ATen nodes came from (their from_node chains), in order, once each."""
    found: list[str] = []
    for node in nodes:
        for name in fx_origin_names(node, fx_names):
            if name not in found:
                found.append(name)
    return found


def node_sources(nodes) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for node in nodes:
        where = user_source_line(node.meta.get("stack_trace"))
        if where is not None and where not in found:
            found.append(where)
    return found


VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.alias.default}
CLONES = {aten.clone.default, aten.contiguous.default}
CASTS = {prims.convert_element_type.default, aten._to_copy.default}


def is_call(node: Any, targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def strip_casts(node: torch.fx.Node, path: list) -> torch.fx.Node:
    """Walk up through dtype casts (softmax in float32 and back, an upcast of the scores), collecting them."""
    while is_call(node, CASTS) and _only_dtype(node):
        path.append(node)
        node = node.args[0]
    return node


def _only_dtype(node: torch.fx.Node) -> bool:
    """A cast that changes the dtype only (not the device, the shape or the values' order)."""
    out, source = val(node), val(node.args[0])
    return (isinstance(out, torch.Tensor) and isinstance(source, torch.Tensor) and out.shape == source.shape
            and out.device == source.device and len(node.args) <= 2)
