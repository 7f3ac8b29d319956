"""The rewrite registry: named passes over the ATen graph, in order, each recording what it did and refused.

    @register_rewrite("attention", "matmul, scale, mask, softmax, matmul -> scaled_dot_product_attention")
    def attention(graph: RewriteGraph) -> None: ...

A pass finds its pattern, checks that the replacement is legal, and either replaces the matched nodes
(`graph.matched(...)`) or says why not (`graph.refused(...)`): a near-miss is data, never silence.
Passes run in registration order (the order of the imports in engine/rewrite/__init__.py); `resolve()` turns
the user's `rewrites=` setting into the tuple of passes that run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from torch._guards import detect_fake_mode

from engine.runtime import spans
from engine.rewrite.edit import add_node, inherit_provenance, node_sources, origin_names


@dataclass(frozen=True)
class Rewrite:
    name: str
    summary: str
    fn: Callable[["RewriteGraph"], None]
    default: bool = True  # on unless the user turns it off
    before_joint: bool = False  # in training it must run before AOTAutograd traces the joint graph (Note [Where rewrites run])
    needs_freezing: bool = False  # runs only with freezing=True (Note [Freezing])


REWRITES: dict[str, Rewrite] = {}


class DuplicateRewrite(Exception):
    """Two passes under one name: the later would silently replace the earlier."""


def register_rewrite(name: str, summary: str, default: bool = True, before_joint: bool = False,
                     needs_freezing: bool = False):
    def decorate(fn):
        if name in REWRITES:
            raise DuplicateRewrite(f"a rewrite named {name!r} is already registered ({REWRITES[name].fn.__module__})")
        REWRITES[name] = Rewrite(name, summary, fn, default, before_joint, needs_freezing)
        return fn

    return decorate


def resolve(setting: str | Iterable[str] | None, freezing: bool = False) -> tuple[str, ...]:
    """resolve_names(setting), without the passes that need freezing=True unless it is on."""
    return tuple(name for name in resolve_names(setting) if freezing or not REWRITES[name].needs_freezing)


def resolve_names(setting: str | Iterable[str] | None) -> tuple[str, ...]:
    """The passes a `rewrites=` setting turns on, in pipeline order.

    None or "default": every default pass. "none": no pass. "all": every pass. Otherwise names, comma-separated
    or a list: plain names are exactly the passes that run; names prefixed with "-" turn a default pass off
    ("-attention": the defaults without attention). An unknown name is an error that lists the known ones."""
    if setting is None:
        items: list[str] = ["default"]
    elif isinstance(setting, str):
        items = [item.strip() for item in setting.split(",") if item.strip()]
    else:
        items = [str(item).strip() for item in setting]
    if items in (["default"], []):
        return tuple(name for name, rewrite in REWRITES.items() if rewrite.default) if items else ()
    if items == ["none"]:
        return ()
    if items == ["all"]:
        return tuple(REWRITES)
    removed = {item[1:] for item in items if item.startswith("-")}
    kept = {item for item in items if not item.startswith("-")}
    unknown = sorted((removed | kept) - set(REWRITES))
    if unknown:
        known = "; ".join(f"{name}: {rewrite.summary}" for name, rewrite in REWRITES.items())
        raise ValueError(f"unknown rewrite(s) {', '.join(unknown)}; the passes are {', '.join(REWRITES)} "
                         f"(or default, none, all; -NAME turns one off). {known}")
    if removed and kept:
        raise ValueError("rewrites: give either the passes to run (attention,padding) or the ones to turn off "
                         "(-attention), not both")
    if removed:
        return tuple(name for name, rewrite in REWRITES.items() if rewrite.default and name not in removed)
    return tuple(name for name in REWRITES if name in kept)


@dataclass
class Outcome:
    """One match (applied) or near-miss (refused) of a pass, in graph terms; report.py makes it record data."""
    rewrite: str
    applied: bool
    nodes: list[str]  # the matched ATen nodes (a refusal: the nodes it looked at)
    reason: str
    replacement: list[str] = field(default_factory=list)  # the new nodes
    replacement_text: str = ""  # the replacement, readable
    fx_origins: list[str] = field(default_factory=list)
    sources: list[tuple[str, int]] = field(default_factory=list)  # the user's (file, line)s


@dataclass
class RewriteGraph:
    """The graph a pass rewrites, and what the passes said about it. `phase` is inference, forward (before the
    joint graph of a training graph is traced) or backward; `constants` maps get_attr targets the freezing pass
    made to their tensors."""
    gm: torch.fx.GraphModule
    phase: str = "inference"
    device: str = "cpu"
    training: bool = False  # the graph is traced for a training step (dropout draws)
    fx_names: set[str] = field(default_factory=set)  # Dynamo's graph's node names: the records' fx_origins
    inputs: list | None = None  # the graph's real inputs (Dynamo's example inputs), for freezing
    static_inputs: frozenset | None = None  # which of them are parameters and buffers
    constants: dict = field(default_factory=dict)  # get_attr target -> tensor, made by the freezing passes
    outcomes: list[Outcome] = field(default_factory=list)
    current: str = ""  # the pass running

    @property
    def graph(self) -> torch.fx.Graph:
        return self.gm.graph

    def matched(self, nodes: list[torch.fx.Node], replacement: list[torch.fx.Node], text: str, reason: str) -> None:
        self.outcomes.append(Outcome(self.current, True, [n.name for n in nodes], reason,
                                     [n.name for n in replacement], text, origin_names(nodes, self.fx_names), node_sources(nodes)))

    def add_node(self, target, args: tuple, kwargs: dict, origins) -> torch.fx.Node:
        return add_node(self.graph, target, args, kwargs, origins)

    def constant_node(self, name: str, value: torch.Tensor, origins) -> torch.fx.Node:
        """A get_attr of `value`, a constant of the graph from now on (freezing, a padded frozen weight)."""
        target = f"_frozen_{len(self.constants)}_{name}"
        self.constants[target] = value
        self.gm.register_buffer(target, value)
        node = self.graph.get_attr(target)
        node.meta["val"] = self.fake(value)
        inherit_provenance(node, origins)
        return node

    def fake(self, value: torch.Tensor) -> torch.Tensor:
        """A fake tensor of `value` in the graph's fake mode (a new node's meta['val'])."""
        mode = detect_fake_mode([node.meta.get("val") for node in self.graph.find_nodes(op="placeholder")])
        return mode.from_tensor(value, static_shapes=True) if mode is not None else value

    def erase_unused(self, nodes: list[torch.fx.Node]) -> None:
        """Erase the matched nodes nothing reads any more, users first (not a graph-wide dead-code pass: an
        unused random op elsewhere still draws its numbers)."""
        for node in sorted(set(nodes), key=self._order().__getitem__, reverse=True):
            if not node.users and node.op == "call_function":
                self.graph.erase_node(node)

    def _order(self) -> dict:
        return {node: number for number, node in enumerate(self.graph.nodes)}

    def refused(self, nodes: list[torch.fx.Node], reason: str) -> None:
        self.outcomes.append(Outcome(self.current, False, [n.name for n in nodes], reason,
                                     fx_origins=origin_names(nodes, self.fx_names), sources=node_sources(nodes)))


def run_rewrites(graph: RewriteGraph, names: Iterable[str], before_joint: bool | None = None) -> RewriteGraph:
    """Run the named passes in registration order (only those with before_joint == `before_joint`, if given)."""
    wanted = set(names)
    for name, rewrite in REWRITES.items():
        if name not in wanted or (before_joint is not None and rewrite.before_joint != before_joint):
            continue
        graph.current = name
        before = len(graph.outcomes)
        with spans.span(f"rewrite {name}") as entry:  # a pass of the rewrite stage (Note [Compile trace])
            rewrite.fn(graph)
            entry["args"]["applied"] = sum(1 for outcome in graph.outcomes[before:] if outcome.applied)
        if any(outcome.applied for outcome in graph.outcomes[before:]):
            graph.graph.lint()
    graph.gm.recompile()
    graph.current = ""
    return graph
