"""Fusion mechanism: merge IR nodes into kernels, recording a decision (with a reason) for every candidate.

Candidates, in this order:
  vertical    each producer -> consumer edge, in program order (prologues, epilogues, elementwise chains)
  horizontal  sibling groups of the same shape that read a common buffer
A merge happens when the policy agrees, it creates no cycle between kernels, and the merged loop nest is
valid (Note [Fused loop shape]).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from engine.ir.handlers import AccessRecorder, Var
from engine.ir.nodes import Buffer, Extern, Fallback, MultiOutput, Pointwise, Reduction, Template, TensorValue
from engine.ir.ops import use_handler
from engine.lowering.graph import LoweredGraph
from engine.schedule import policy, templates
from engine.schedule.kernel_plan import Inliner, KernelPlan, NotFusable, group_shape


@dataclass
class FusionDecision:
    producer: str  # kernel-group label, e.g. "buf3" or "buf3+buf4"
    consumer: str
    kind: str  # vertical | horizontal
    fused: bool
    reason: str


@dataclass
class Kernel:
    name: str
    kind: str  # pointwise | reduction | extern | fallback | template
    nodes: list[Buffer]
    stored: list[str]  # buffers this kernel writes to memory
    reads: list[str]  # buffers it reads from memory
    rows: sympy.Expr = sympy.Integer(1)
    red: sympy.Expr = sympy.Integer(1)

    @property
    def plan(self) -> KernelPlan:
        return KernelPlan(self.nodes, self.rows, self.red)


@dataclass
class Schedule:
    kernels: list[Kernel]
    decisions: list[FusionDecision] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)  # loop nodes nobody reads: in no kernel (Note [Unused nodes])
    templates: list[dict] = field(default_factory=list)  # per matmul: template or library call, and why


def _label(group: list[Buffer]) -> str:
    return "+".join(n.name for n in group)


def node_reads(node: Buffer, buffers: dict) -> list[str]:
    """Names of the buffers a node reads (loop body loads, or a library call's tensor arguments)."""
    if isinstance(node, (Extern, Fallback)):
        return list(dict.fromkeys(node.inputs))
    if isinstance(node, MultiOutput):
        return [node.parent]
    recorder = AccessRecorder(buffers)
    with use_handler(recorder):
        if isinstance(node, Reduction):
            node.inner_fn([sympy.Integer(0)] * len(node.size), [sympy.Integer(0)] * len(node.reduction_size))
        elif isinstance(node, Pointwise):
            node.inner_fn([sympy.Integer(0)] * len(node.size))
    return list(dict.fromkeys(name for name, _ in recorder.loads))


def check_loop_nest(nodes: list[Buffer], buffers: dict, private: set[str] = frozenset()) -> str | None:
    """None when the nodes can share one loop nest; otherwise why not. `private` nodes are only ever
    inlined into their consumers (never stored), so their own size does not matter."""
    if any(isinstance(n, Template) for n in nodes):  # Note [GEMM templates]
        return templates.check_epilogue(nodes, buffers)
    rows, red = group_shape([n for n in nodes if n.name not in private] or nodes)
    plan = KernelPlan(nodes, rows, red)
    for node in nodes:
        if node.name in private:
            continue
        if isinstance(node, Pointwise) and plan.role(node) == "row" and sympy.expand(node.numel - rows) != 0:
            return f"{node.name} has {node.numel} elements, neither {rows} rows nor {rows * red} elements"
    inliner = Inliner(plan, external=lambda name, index: Var("load", buffers[name].dtype),
                      accumulator=lambda name: Var("acc", buffers[name].dtype))
    recorder = AccessRecorder(buffers, on_load=inliner.load)
    try:
        with use_handler(recorder):
            for node in nodes:
                if node.name in private:
                    continue
                if isinstance(node, Reduction):
                    node.inner_fn(plan.index(node), plan.rindex(node))
                else:
                    node.inner_fn(plan.index(node))
    except NotFusable as reason:
        return str(reason)
    return policy.too_many_passes(reduction_depth(nodes, buffers))


def reduction_depth(nodes: list[Buffer], buffers: dict) -> int:
    """Passes over each row the group needs: the longest chain of reductions feeding each other."""
    names = {n.name for n in nodes}
    depth: dict[str, int] = {}
    for node in nodes:
        deps = [depth.get(r, 0) for r in _reads_through_group(node, nodes, buffers, names)]
        own = 1 if isinstance(node, Reduction) else 0
        depth[node.name] = max(deps, default=0) + own
    return max(depth.values(), default=0)


def _reads_through_group(node, nodes, buffers, names):
    return [r for r in node_reads(node, buffers) if r in names]


# Note [Unused nodes]
# Lowering can leave loop nodes whose value nobody reads: aten.copy(dst, src) overwrites all of dst, so the
# full_like that made dst is never loaded (torch.diff(x, 0) is such a graph). A kernel made only of such
# nodes would store nothing: an empty kernel, and a launch with no arguments. The scheduler drops them before
# fusion, walking back from the graph outputs and the library/eager calls; Extern and Fallback nodes always
# stay (an eager op may have effects, a random one advances the generator). The record lists them as unused.


def unused_nodes(nodes: list[Buffer], reads: dict[str, list[str]], outputs: set[str]) -> set[str]:
    """Names of the Pointwise/Reduction nodes that no output and no library or eager call depends on."""
    live = set(outputs) | {n.name for n in nodes if not isinstance(n, (Pointwise, Reduction))}
    for node in reversed(nodes):  # program order is a topological order: readers come after what they read
        if node.name in live:
            live.update(reads[node.name])
    return {n.name for n in nodes if n.name not in live}


class Scheduler:
    def __init__(self, graph: LoweredGraph, knobs: policy.FusionKnobs = policy.FusionKnobs(),
                 template_options: templates.TemplateOptions | None = None):
        self.graph = graph
        self.knobs = knobs
        self.buffers = graph.buffers
        self.output_names = {v.node.name for v in graph.outputs if isinstance(v, TensorValue)}
        reads = {n.name: node_reads(n, self.buffers) for n in graph.nodes}
        unused = unused_nodes(graph.nodes, reads, self.output_names)
        self.unused = [n.name for n in graph.nodes if n.name in unused]
        self.template_options = template_options or templates.TemplateOptions(templates="off")
        self.template_choices: list[dict] = []
        self.nodes = [self._template_or_node(n) for n in graph.nodes if n.name not in unused]
        self.order = {n.name: i for i, n in enumerate(self.nodes)}
        self.reads = {n.name: reads[n.name] for n in self.nodes}
        self.group_of: dict[str, list[Buffer]] = {n.name: [n] for n in self.nodes}
        for node in self.nodes:  # the pieces of a multi-result call belong to the call's own kernel
            if isinstance(node, MultiOutput):
                group = self.group_of[node.parent]
                group.append(node)
                self.group_of[node.name] = group
        self.decisions: list[FusionDecision] = []
        self.private: set[str] = set()  # nodes inlined into a consumer of another size, never stored

    def _template_or_node(self, node: Buffer) -> Buffer:
        """A matmul the template policy takes becomes a Template node (Note [GEMM templates])."""
        if type(node) is not Extern or node.target not in templates.GEMM_TARGETS:
            return node
        template, reason = templates.choose(node, self.template_options)
        self.template_choices.append({"node": node.name, "template": template is not None, "reason": reason})
        return template or node

    # -- dependencies between groups -----------------------------------------------------------------------
    def _group_id(self, group) -> int:
        return id(group)

    def _groups(self) -> list[list[Buffer]]:
        seen, groups = set(), []
        for node in self.nodes:
            group = self.group_of[node.name]
            if id(group) not in seen:
                seen.add(id(group))
                groups.append(group)
        return groups

    def _group_edges(self) -> dict[int, set[int]]:
        edges: dict[int, set[int]] = {}
        for node in self.nodes:
            consumer = id(self.group_of[node.name])
            for read in self.reads[node.name]:
                if read in self.group_of:
                    producer = id(self.group_of[read])
                    if producer != consumer:
                        edges.setdefault(producer, set()).add(consumer)
        return edges

    def _creates_cycle(self, a, b) -> bool:
        edges = self._group_edges()
        start = {id(a), id(b)}

        def reach(sources, graph):
            seen, stack = set(), list(sources)
            while stack:
                for nxt in graph.get(stack.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            return seen

        reverse: dict[int, set[int]] = {}
        for src, dsts in edges.items():
            for dst in dsts:
                reverse.setdefault(dst, set()).add(src)
        between = (reach(start, edges) & reach(start, reverse)) - start
        return bool(between)

    def _depends(self, a, b) -> bool:
        """Is there a path between the two groups (either way)?"""
        edges = self._group_edges()
        for src, dst in ((id(a), id(b)), (id(b), id(a))):
            seen, stack = set(), [src]
            while stack:
                cur = stack.pop()
                if cur == dst:
                    return True
                for nxt in edges.get(cur, ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
        return False

    # -- merging --------------------------------------------------------------------------------------------
    def _visible(self, group: list[Buffer]) -> list[Buffer]:
        return [n for n in group if n.name not in self.private] or group

    def _only_feeds(self, producer: list[Buffer], consumer: list[Buffer]) -> bool:
        """Every reader of the producer's nodes is in the consumer group (so they need no buffer)."""
        inside = {n.name for n in producer + consumer}
        names = {n.name for n in producer}
        return all(isinstance(n, Pointwise) and n.name not in self.output_names for n in producer) and all(
            c.name in inside for c in self.nodes if names & set(self.reads[c.name]))

    def try_merge(self, a: list[Buffer], b: list[Buffer], kind: str) -> None:
        refusal = policy.knob_refusal(self.knobs, a, b)
        if refusal:
            self.decisions.append(FusionDecision(_label(a), _label(b), kind, False, refusal))
            return
        ok, reason = policy.fusion_verdict(self._visible(a), self._visible(b), kind)
        newly_private: set[str] = set()
        if not ok and kind == "vertical" and self._only_feeds(a, b) and not policy.is_library(b):
            ok = True
            reason = (f"inlined: {_label(a)} only feeds this kernel, so it is recomputed where it is read "
                      f"instead of stored ({reason})")
            newly_private = {n.name for n in a}
        if ok and self._creates_cycle(a, b):
            ok, reason = False, "fusing would create a cycle: another kernel sits between them"
        if ok:
            merged = sorted(a + b, key=lambda n: self.order[n.name])
            problem = check_loop_nest(merged, self.buffers, self.private | newly_private)
            if problem:
                ok, reason = False, problem
        self.decisions.append(FusionDecision(_label(a), _label(b), kind, ok, reason))
        if ok:
            self.private |= newly_private
            for node in merged:
                self.group_of[node.name] = merged

    def run(self) -> Schedule:
        for node in self.nodes:  # vertical: producer -> consumer, in program order
            for read in self.reads[node.name]:
                if read not in self.group_of:
                    continue
                producer, consumer = self.group_of[read], self.group_of[node.name]
                if producer is not consumer:
                    self.try_merge(producer, consumer, "vertical")
        groups = self._groups()  # horizontal: siblings sharing an input
        for i, a in enumerate(groups):
            for b in groups[i + 1:]:
                a, b = self.group_of[a[0].name], self.group_of[b[0].name]
                if a is b or not self._share_reads(a, b) or self._depends(a, b):
                    continue
                if policy.fusion_verdict(self._visible(a), self._visible(b), "horizontal")[0]:
                    self.try_merge(a, b, "horizontal")
        return Schedule(self._kernels(), self.decisions, self.unused, self.template_choices)

    def _share_reads(self, a, b) -> bool:
        reads_a = {r for n in a for r in self.reads[n.name]}
        reads_b = {r for n in b for r in self.reads[n.name]}
        return bool(reads_a & reads_b)

    def _kernels(self) -> list[Kernel]:
        groups = self._topological(self._groups())
        kernels = []
        for index, group in enumerate(groups):
            names = {n.name for n in group}
            stored = [n.name for n in group if n.name in self.output_names or any(
                n.name in self.reads[c.name] and c.name not in names for c in self.nodes)]
            if isinstance(group[0], Template):
                kept = self._template_kernel(group, index, stored)
                if kept is not None:
                    kernels.append(kept)
                    continue
                group = [self.buffers[group[0].name]]  # back to the library call (its Extern node)
            if isinstance(group[0], (Extern, Fallback, MultiOutput)):
                kind = "fallback" if isinstance(group[0], Fallback) or (
                    isinstance(group[0], MultiOutput) and isinstance(self.buffers[group[0].parent], Fallback)) \
                    else "extern"
                kernels.append(Kernel(f"{kind}_{index}", kind, group, [n.name for n in group],
                                      [r for n in group for r in self.reads[n.name]]))
                continue
            rows, red = group_shape(self._visible(group))
            kind = "reduction" if any(isinstance(n, Reduction) for n in group) else "pointwise"
            reads = list(dict.fromkeys(r for n in group for r in self.reads[n.name] if r not in names))
            kernels.append(Kernel(f"kernel_{index}", kind, group, stored, reads, rows, red))
        return kernels

    def _template_kernel(self, group: list[Buffer], index: int, stored: list[str]) -> Kernel | None:
        template, epilogue = group[0], group[1:]
        keep, reason = templates.keep_template(template, epilogue, self.template_options)
        for choice in self.template_choices:
            if choice["node"] == template.name:
                choice.update(template=keep, reason=reason, epilogue=[n.name for n in epilogue])
        if not keep:
            return None
        names = {n.name for n in group}
        reads = list(dict.fromkeys(r for n in group for r in self.reads[n.name] if r not in names))
        spec = template.spec
        return Kernel(f"template_{index}", "template", group, stored, reads, sympy.Integer(spec.rows),
                      sympy.Integer(spec.n))

    def _topological(self, groups):
        edges = self._group_edges()
        indegree = {id(g): 0 for g in groups}
        for src, dsts in edges.items():
            for dst in dsts:
                indegree[dst] += 1
        by_id = {id(g): g for g in groups}
        position = {id(g): min(self.order[n.name] for n in g) for g in groups}
        ready = sorted([i for i, d in indegree.items() if d == 0], key=position.get)
        result = []
        while ready:
            current = ready.pop(0)
            result.append(by_id[current])
            for nxt in edges.get(current, ()):
                indegree[nxt] -= 1
                if indegree[nxt] == 0:
                    ready.append(nxt)
                    ready.sort(key=position.get)
        return result


def schedule(graph: LoweredGraph, knobs: policy.FusionKnobs = policy.FusionKnobs(),
             template_options: templates.TemplateOptions | None = None) -> Schedule:
    return Scheduler(graph, knobs, template_options).run()
