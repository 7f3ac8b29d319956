"""Fusion mechanism: merge IR nodes into kernels, recording a decision (with its rule and reason) per candidate.

Candidates, in this order:
  vertical    each producer -> consumer edge, in program order (prologues, epilogues, elementwise chains)
  horizontal  sibling groups that read a common buffer
Each candidate is put to the policy once (policy.py: a list of named rules). When the policy wants a fusion,
the mechanism checks only legality: the merge creates no cycle between kernels, and the merged loop nest is
valid (Note [Fused loop shape]). A vertical candidate that is not fused is a second question: should the
consumer recompute the elementwise nodes it reads of the producer instead of reading them back (recompute.py,
Note [Recomputed in each reader] in policy.py)? Its answer is recorded as a decision too.

Note [Incremental group graph]
Fusion must cost O(nodes), not O(nodes^2): a 2000-op chain is 2000 candidates. So nothing is recomputed per
candidate from the whole graph:
- every node's reads are found once (one run of its loop body with an access recorder), and so are its readers;
- the graph between groups (producers/consumers) is updated by each merge, never rebuilt;
- groups carry a topological position (every edge goes from a lower to a higher one). A path between two groups
  can only pass through groups positioned between them, so the cycle check searches that window only; after
  a merge the window is reordered (Pearce and Kelly's dynamic topological order, for a contracted edge);
- the facts the policy reads (shape, element counts, library call, passes) merge in O(1) (groups.py);
- a node's reduction depth (the passes it needs, Note [Reduction passes]) changes only for the consumer side of
  a merge whose producer side reduces; the loop-nest check re-runs only the bodies that read a reduction of
  the merged group, since only such a load can be invalid (a read of another row). A merge of elementwise
  groups needs no check at all.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import sympy

from engine.ir.handlers import AccessRecorder, Var
from engine.ir.nodes import Buffer, Extern, Fallback, MultiOutput, Pointwise, Reduction, Scan, Scatter, TensorValue
from engine.ir.ops import use_handler
from engine.ir.graph import LoweredGraph
from engine.schedule import policy, recompute, templates
from engine.schedule.bodies import body_ops, load_positions, node_reads
from engine.schedule.groups import Group, same_size
from engine.schedule.kernel_plan import PERSISTENT_ROW, Inliner, KernelPlan, NotFusable, reduction_passes
from engine.schedule.strides import column_access, kernel_accesses, narrowest_column_read

# names of the legality checks, in the record beside the policy's rule names
LEGAL_ORDER = "legal_order"  # the kernels can still run in an order (no cycle)
LEGAL_LOOP_NEST = "legal_loop_nest"  # the nodes fit one loop nest (Note [Fused loop shape])


@dataclass
class FusionDecision:
    producer: str  # kernel-group label, e.g. "buf3" or "buf3+buf4"
    consumer: str
    kind: str  # vertical | horizontal
    fused: bool
    reason: str
    rule: str  # the policy rule (policy.py) or the legality check that decided


# Note [Reads on the kernel]
# Which buffers a node reads is found once, by the scheduler (one run of its loop body, `node_reads`), and
# travels with the kernel (`node_reads`, per node), and so do its reduction passes (derived from those reads
# when the kernel is made): code generation and split reductions read them there instead of running loop
# bodies again to find them.


@dataclass
class Kernel:
    name: str
    kind: str  # pointwise | reduction | extern | fallback | template
    nodes: list[Buffer]
    stored: list[str]  # buffers this kernel writes to memory
    reads: list[str]  # buffers it reads from memory
    node_reads: dict[str, tuple[str, ...]]  # each node's reads, kernel's own nodes included (Note [Reads on the kernel])
    rows: sympy.Expr = sympy.Integer(1)
    red: sympy.Expr = sympy.Integer(1)
    passes: list[list[Reduction]] = field(init=False)  # Note [Reduction passes]

    def __post_init__(self):
        self.passes = reduction_passes(self.nodes, lambda node: self.node_reads[node.name])

    @property
    def stored_nodes(self) -> list[Buffer]:
        """The nodes it writes to memory, in the kernel's order."""
        stored = set(self.stored)
        return [n for n in self.nodes if n.name in stored]

    @property
    def plan(self) -> KernelPlan:
        return KernelPlan(self.nodes, self.rows, self.red)

    @property
    def scans(self) -> list[Scan]:
        """Its Scan nodes (Note [Scans] in ir/nodes.py): the kernel walks their rows."""
        return [n for n in self.nodes if isinstance(n, Scan)]

    @property
    def accumulates(self) -> bool:
        """Whether it adds into data-dependent places of a zeroed buffer (a Scatter node, Note [Accumulating
        stores]): a second run would add twice, and it writes in place into nothing else."""
        return any(isinstance(n, Scatter) for n in self.nodes)


@dataclass
class Schedule:
    kernels: list[Kernel]
    decisions: list[FusionDecision] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)  # loop nodes nobody reads: in no kernel (Note [Unused nodes])
    templates: list[dict] = field(default_factory=list)  # per matmul: template or library call, and why


# Note [Reduction passes]
# A kernel's reductions run in passes over each row: a reduction that reads another of the same kernel (the
# variance reads the mean) needs the earlier one's result, so it runs in a later pass. A node's depth is the
# longest chain of reductions of its kernel that feed it, itself included; pass k holds the reductions of
# depth k. The scheduler keeps depths while it fuses; the Kernel groups its passes once, from the reads it
# carries (Note [Reads on the kernel]), for code generation and split reductions.


# Note [Unused nodes]
# Lowering can leave loop nodes whose value nobody reads: aten.copy(dst, src) overwrites all of dst, so the
# full_like that made dst is never loaded (torch.diff(x, 0) is such a graph). A kernel made only of such
# nodes would store nothing: an empty kernel, and a launch with no arguments. The scheduler drops them before
# fusion, walking back from the graph outputs and the library/eager calls; Extern and Fallback nodes always
# stay (an eager op may have effects, a random one advances the generator). The record lists them as unused.


def unused_nodes(nodes: list[Buffer], reads: dict[str, list[str]], outputs: set[str]) -> set[str]:
    """Names of the loop nodes (Pointwise, Reduction, Scatter) that no output and no library or eager call
    depends on."""
    live = set(outputs) | {n.name for n in nodes if not isinstance(n, (Pointwise, Reduction, Scan, Scatter))}
    for node in reversed(nodes):  # program order is a topological order: readers come after what they read
        if node.name in live:
            live.update(reads[node.name])
    return {n.name for n in nodes if n.name not in live}


# Note [Template first]
# A template kernel is its GEMM's main loop, then the epilogue on the output tile, so its node list starts with
# the Template (code generation reads nodes[0] as the GEMM). Program order is not that order: an epilogue can
# hold elementwise nodes that come before the GEMM in the program. In a residual block whose projection
# shortcut runs first (regnet: relu(bn(proj(x)) + bn(conv1x1(y)))), the shortcut's batch norm fuses with the
# add, and that group joins the 1x1 convolution's template as its epilogue: a valid epilogue (every node reads
# its inputs at the tile's element, templates.check_epilogue), but one whose first node in program order is the
# shortcut's. Such nodes cannot read the template (they run before it), so putting the template first keeps
# the kernel's order topological.


class Scheduler:
    def __init__(self, graph: LoweredGraph, knobs: policy.FusionKnobs = policy.FusionKnobs(),
                 template_options: templates.TemplateOptions | None = None):
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
        self.readers: dict[str, list[str]] = {}
        for node in self.nodes:
            for read in self.reads[node.name]:
                self.readers.setdefault(read, []).append(node.name)
        self.group_of: dict[str, Group] = {}
        for at, node in enumerate(self.nodes):
            if isinstance(node, MultiOutput) and node.parent in self.group_of:
                group = self.group_of[node.parent]  # the pieces of a multi-result call belong to the call's kernel
                group.nodes.append(node)
                group.names.add(node.name)
                group.last = at
                group.has_output = group.has_output or node.name in self.output_names
            else:
                group = Group.of(node, at, node.name in self.output_names)
                group.loads = sum(load_positions(node, self.buffers).values())
            self.group_of[node.name] = group
        for node in self.nodes:
            consumer = self.group_of[node.name]
            for read in self.reads[node.name]:
                producer = self.group_of.get(read)
                if producer is not None and producer is not consumer:
                    producer.consumers.add(consumer)
                    consumer.producers.add(producer)
                    producer.outside_readers.add(node.name)
        self.depth = {n.name: int(isinstance(n, Reduction)) for n in self.nodes}  # Note [Reduction passes]
        self.decisions: list[FusionDecision] = []
        self.private: set[str] = set()  # nodes inlined into a consumer of another size, never stored
        self._strided_rows: dict[tuple, bool] = {}  # (node, rows, red) -> reads strided along a row (_persistent_row)
        self._column_itemsize: dict[tuple, int | None] = {}  # (reduction, rows, red) -> its column reads' narrowest

    def _template_or_node(self, node: Buffer) -> Buffer:
        """A matmul the template policy takes becomes a Template node (Note [GEMM templates])."""
        if type(node) is not Extern or node.target not in templates.GEMM_TARGETS:
            return node
        template, reason = templates.choose(node, self.template_options)
        self.template_choices.append({"node": node.name, "template": template is not None, "reason": reason})
        return template or node

    def _visible(self, group: Group) -> list[Buffer]:
        return [n for n in group.nodes if n.name not in self.private] or group.nodes

    # -- the group graph (Note [Incremental group graph]) ---------------------------------------------------
    @staticmethod
    def _window(start: Group, end: Group, forward: bool) -> set[Group]:
        """Groups reachable from `start` (forward) or reaching it (backward) that lie strictly between the
        positions of start and end, without passing through `end`."""
        low, high = sorted((start.position, end.position))
        seen, stack = set(), [start]
        while stack:
            for group in (stack.pop().consumers if forward else stack.pop().producers):
                if group is not end and low < group.position < high and group not in seen:
                    seen.add(group)
                    stack.append(group)
        return seen

    def _path_through_others(self, a: Group, b: Group) -> bool:
        """Is there a path between the two groups that passes through a third one?"""
        low, high = (a, b) if a.position < b.position else (b, a)
        return any(high in group.consumers for group in self._window(low, high, forward=True))

    def _merge(self, a: Group, b: Group, inlined: bool, passes: int, depths: dict[str, int]) -> Group:
        low, high = (a, b) if a.position < b.position else (b, a)
        after_low = self._window(low, high, forward=True)  # must stay after the merged group
        before_high = self._window(high, low, forward=False)  # must stay before it
        slots = sorted(g.position for g in after_low | before_high | {low, high})
        keeper, other = (a, b) if len(a.nodes) >= len(b.nodes) else (b, a)
        if inlined:
            self.private |= a.names
        keeper.absorb(other, a if inlined else None, passes)
        for node in other.nodes:
            self.group_of[node.name] = keeper
        for producer in other.producers:
            producer.consumers.discard(other)
            producer.consumers.add(keeper)
            keeper.producers.add(producer)
        for consumer in other.consumers:
            consumer.producers.discard(other)
            consumer.producers.add(keeper)
            keeper.consumers.add(consumer)
        for edges in (keeper.producers, keeper.consumers):
            edges.discard(keeper)
            edges.discard(other)
        for name in other.names:
            keeper.outside_readers.discard(name)
        keeper.outside_readers |= {r for r in other.outside_readers if r not in keeper.names}
        ordered = sorted(before_high, key=lambda g: g.position) + [keeper] + \
            sorted(after_low, key=lambda g: g.position)
        for group, slot in zip(ordered, slots):
            group.position = slot
        self.depth.update(depths)
        return keeper

    # -- legality ---------------------------------------------------------------------------------------------
    def _consumer_depths(self, a: Group, b: Group, kind: str) -> dict[str, int]:
        """New reduction depths of b's nodes if a (a producer with reductions) joins them; {} when none change."""
        if kind != "vertical" or not a.has_reduction:
            return {}
        depths: dict[str, int] = {}
        for node in sorted(b.nodes, key=lambda n: self.order[n.name]):
            inside = [depths.get(r, self.depth[r]) for r in self.reads[node.name]
                      if r in self.group_of and self.group_of[r] in (a, b)]
            depths[node.name] = max(inside, default=0) + int(isinstance(node, Reduction))
        return depths

    def _reads_a_reduction(self, node: Buffer, depths: dict[str, int]) -> bool:
        return depths.get(node.name, self.depth[node.name]) > int(isinstance(node, Reduction))

    def _loop_nest_problem(self, a: Group, b: Group, kind: str, inlined: bool, depths: dict[str, int]) -> str | None:
        """None when the merged nodes share one loop nest (Note [Fused loop shape]); otherwise why not."""
        if a.template is not None or b.template is not None:  # Note [GEMM templates]
            return templates.check_epilogue(sorted(a.nodes + b.nodes, key=lambda n: self.order[n.name]),
                                            self.buffers)
        if a.scan is not None or b.scan is not None:
            return self._scan_nest_problem(a, b, kind)
        if not (a.has_reduction or b.has_reduction):
            return None  # elementwise nodes of any shapes inline into each other at any index
        reduction = min((g.reduction for g in (a, b) if g.has_reduction), key=lambda n: self.order[n.name])
        rows, red = reduction.numel, reduction.reduction_numel
        for side in (a, b):  # nodes that get a role in a reduction's loop for the first time
            if side.has_reduction or (inlined and side is a):
                continue
            for numel in side.numels:
                if not same_size(numel, rows) and not same_size(numel, rows * red):
                    node = next(n for n in side.nodes if isinstance(n, Pointwise) and n.name not in self.private
                                and same_size(n.numel, numel))
                    return f"{node.name} has {node.numel} elements, neither {rows} rows nor {rows * red} elements"
        if kind != "vertical" or not a.has_reduction:
            return None  # no node of b can read a reduction of a
        # Note [Checked once]: a's nodes were checked when they joined a, at their own index in this loop shape.
        # Only b's nodes that read a reduction run; a load of one of a's nodes at its own index is known valid,
        # at another index its body runs again there.
        unchecked = [n for n in b.nodes if self._reads_a_reduction(n, depths)] + [
            self.buffers[name] for name in self.private & a.names if self._reads_a_reduction(self.buffers[name], depths)]
        plan = KernelPlan(a.reductions + b.reductions + [n for n in unchecked if not isinstance(n, Reduction)], rows, red)

        def external(name, index):
            node = self.buffers[name]
            if self.group_of.get(name) is a and isinstance(node, Pointwise) and self.depth[name] > 0:
                index = [plan.simplify(e) for e in index]
                if index != plan.index(node):
                    return node.inner_fn(index)  # its loads go through the inliner again
            return Var("load", node.dtype)

        inliner = Inliner(plan, external=external, accumulator=lambda name: Var("acc", self.buffers[name].dtype))
        recorder = AccessRecorder(self.buffers, on_load=inliner.load)
        try:
            with use_handler(recorder):
                for node in b.nodes:
                    if node.name in self.private or not self._reads_a_reduction(node, depths):
                        continue
                    if isinstance(node, Reduction):
                        node.inner_fn(plan.index(node), plan.rindex(node))
                    elif isinstance(node, Pointwise):
                        node.inner_fn(plan.index(node))
        except NotFusable as reason:
            return str(reason)
        return None

    def _scan_nest_problem(self, a: Group, b: Group, kind: str) -> str | None:
        """A scan's epilogue reads it at the element being walked only (Note [Scan kernels] in policy.py): each
        of b's nodes runs once at its index in the merged loop shape; a read of the scan elsewhere refuses."""
        if kind != "vertical" or a.scan is None:
            return None  # a prologue's nodes are inlined into the scan's body at any index
        rows, red = a.shape
        plan = KernelPlan(a.nodes + b.nodes, rows, red)
        inliner = Inliner(plan, external=lambda name, index: Var("load", self.buffers[name].dtype),
                          accumulator=lambda name: Var("acc", self.buffers[name].dtype))
        try:
            with use_handler(AccessRecorder(self.buffers, on_load=inliner.load)):
                for node in b.nodes:
                    if isinstance(node, Pointwise) and node.name not in self.private:
                        node.inner_fn(plan.index(node))
        except NotFusable as reason:
            return str(reason)
        return None

    def _persistent_row(self, a: Group, b: Group) -> str | None:
        """Why the merged kernel's rows are held whole in one block, or None when they are looped or strided
        (Note [Persistent chains] in policy.py). Each node's own reads are probed once per loop shape (its
        producers read as memory, where it reads them), so a long chain costs O(nodes) probes in all; a row
        is strided when any reduction or full-size node of the kernel reads along the row with a stride."""
        reducing = [g for g in (a, b) if g.has_reduction]
        if not reducing:
            return None
        rows, red = reducing[0].shape
        if not (sympy.sympify(red).is_Integer and int(red) <= PERSISTENT_ROW):
            return None
        plan = KernelPlan([], rows, red)
        for node in a.nodes + b.nodes:
            if not isinstance(node, (Pointwise, Reduction)):
                continue
            if isinstance(node, Pointwise) and plan.role(node) != "full":
                continue  # a per-row value does not move along the row
            key = (node.name, rows, red)
            if key not in self._strided_rows:
                own = KernelPlan([node], rows, red)
                accesses = kernel_accesses([node], own, self.buffers, [node.name])
                self._strided_rows[key] = column_access(own, accesses) is not None
            if self._strided_rows[key]:
                return None  # read strided along the row: column tiles loop over it (Note [Column tiles in C++])
        return f"each row of {red} elements fits one block (at most {PERSISTENT_ROW}) and is read along its " \
               f"contiguous axis, so it is read once whatever the passes"

    def _splits_columns(self, a: Group, b: Group) -> bool:
        """Triton would split the pair's reduction by columns (Note [Column splits] in split.py): few outputs, each
        a long column its reduction reads with a stride; asked of the reduction the policy looks at."""
        group = a if a.has_reduction else b if b.has_reduction else None
        if self.template_options.backend != "triton" or group is None or group.reduction is None:
            return False
        rows, red = group.shape
        if not policy.wants_column_split(rows, red, 1):
            return False  # no element size would split it
        node = group.reduction
        key = (node.name, rows, red)
        if key not in self._column_itemsize:
            self._column_itemsize[key] = narrowest_column_read([node], KernelPlan([node], rows, red), self.buffers,
                                                               [node.name])
        return policy.wants_column_split(rows, red, self._column_itemsize[key])

    # -- candidates -------------------------------------------------------------------------------------------
    def consider(self, a: Group, b: Group, kind: str) -> bool:
        """One candidate: the policy's verdict, then legality; recorded, and merged when both agree."""
        depths = self._consumer_depths(a, b, kind)
        passes = max(a.passes, b.passes, max(depths.values(), default=0))
        only_feeds = kind == "vertical" and a.all_pointwise and not a.has_output and a.outside_readers <= b.names
        window, cross = self._window_reads(a, b) if kind == "vertical" else (1, 0)
        persistent = self._persistent_row(a, b) if passes > policy.MAX_REDUCTION_PASSES else None
        verdict = policy.decide(policy.Candidate(a, b, kind, passes, only_feeds, self.knobs, self._visible,
                                                 window=window, persistent_row=persistent,
                                                 splits_few_rows=self.template_options.backend == "triton",
                                                 splits_columns=self._splits_columns(a, b)))
        if kind == "horizontal" and (not verdict.fuse or self._path_through_others(a, b)
                                     or b in a.consumers or a in b.consumers):
            return False  # siblings are only candidates when the policy would fuse them and neither reads the other
        fused, reason, rule = verdict.fuse, verdict.reason, verdict.rule
        if fused and kind == "vertical" and self._path_through_others(a, b):
            fused, reason, rule = False, "fusing would create a cycle: another kernel sits between them", LEGAL_ORDER
        if fused:
            problem = self._copies_problem(a, b, kind) or self._loop_nest_problem(a, b, kind, verdict.inline, depths)
            if problem:
                fused, reason, rule = False, problem, LEGAL_LOOP_NEST
        self.decisions.append(FusionDecision(a.label(self.nodes, self.order), b.label(self.nodes, self.order), kind,
                                             fused, reason, rule))
        if fused:
            loads = b.loads - cross + cross * a.loads if kind == "vertical" else a.loads + b.loads
            self._merge(a, b, verdict.inline, passes, depths).loads = loads
        elif kind == "vertical":
            self._consider_recompute(a, b)
        return fused

    # -- recomputed in each reader (Note [Recomputed in each reader] in policy.py) ------------------------------
    def _consider_recompute(self, a: Group, b: Group) -> None:
        """After a refused vertical candidate: should b recompute what it reads of a instead? Recorded when b
        reads only elementwise values of its own elements from a, and done when the policy agrees."""
        found = recompute.find(self, a, b)
        if found is None:
            return
        facts, loads = found
        verdict = policy.recompute_in_reader(facts)
        if verdict is None:
            return
        self.decisions.append(FusionDecision(self._nodes_label(facts.nodes), b.label(self.nodes, self.order),
                                             "vertical", verdict.fuse, verdict.reason, verdict.rule))
        if not verdict.recompute:
            return
        anchors = a.outside_readers & b.names  # b's nodes that read a, directly or through copies
        a.outside_readers -= anchors
        a.consumers.discard(b)
        b.producers.discard(a)
        b.copies.update((n.name, n) for n in facts.nodes)
        for node in facts.nodes:  # b now reads what the copies read, from the kernels that produce it
            for read in self.reads[node.name]:
                producer = self.group_of.get(read)
                if producer is None or producer is b or read in b.copies:
                    continue
                producer.consumers.add(b)
                b.producers.add(producer)
                producer.outside_readers |= anchors
        b.loads += loads

    def _copies_problem(self, a: Group, b: Group, kind: str) -> str | None:
        """A group's copies (Note [Recomputed in each reader]) are recomputed at any index: they must not come
        to read a value of a reduction in their own kernel, nor join a GEMM template's epilogue."""
        for group, other in ((a, b), (b, a)):
            if group.copies and other.template is not None:
                copies = self._nodes_label(group.copies.values())
                return f"{copies} are recomputed in that kernel: a template's epilogue recomputes nothing"
        if kind != "vertical" or not b.copies or not a.has_reduction:
            return None
        for copy in b.copies.values():
            for read in self.reads[copy.name]:
                if read in a.names and self.depth[read] > 0:
                    return f"{copy.name}, recomputed in the consumer at any index, reads {read}, which needs a " \
                           f"reduction of the producer"
        return None

    def _nodes_label(self, nodes) -> str:
        ordered = sorted(nodes, key=lambda n: self.order[n.name])
        if len(ordered) <= 8:
            return "+".join(n.name for n in ordered)
        return f"{ordered[0].name}+...+{ordered[-1].name} ({len(ordered)} nodes)"

    def _window_reads(self, a: Group, b: Group) -> tuple[int, int]:
        """(the most positions at which one of b's nodes reads one of a's, all of b's loads of a's nodes): Note
        [Window reads] in bodies.py."""
        window, cross = 1, 0
        for name in a.outside_readers & b.names:
            positions = load_positions(self.buffers[name], self.buffers)
            for produced in a.names & positions.keys():
                window, cross = max(window, positions[produced]), cross + positions[produced]
        return window, cross

    def _siblings(self) -> None:
        """Horizontal candidates: each group (in program order) with the later groups that read what it reads."""
        groups = self._unique_groups()
        index_of = {name: i for i, g in enumerate(groups) for name in g.names}
        done: set[int] = set()
        for i, start in enumerate(groups):
            group = self.group_of[start.nodes[0].name]
            if id(group) in done:
                continue
            done.add(id(group))
            queue, queued = [], set()

            def enqueue(nodes, after):
                for node in nodes:
                    for read in self.reads[node.name]:
                        for reader in self.readers.get(read, ()):
                            j = index_of[reader]
                            if j > after and j not in queued:
                                queued.add(j)
                                heapq.heappush(queue, j)

            enqueue(group.nodes, i)
            while queue:
                j = heapq.heappop(queue)
                other = self.group_of[groups[j].nodes[0].name]
                if other is group:
                    continue
                absorbed = list(other.nodes)
                if self.consider(group, other, "horizontal"):
                    group = self.group_of[start.nodes[0].name]
                    done.add(id(group))
                    enqueue(absorbed, j)

    def run(self) -> Schedule:
        for node in self.nodes:  # vertical: producer -> consumer, in program order
            for read in self.reads[node.name]:
                if read not in self.group_of:
                    continue
                producer, consumer = self.group_of[read], self.group_of[node.name]
                if producer is not consumer and read not in consumer.copies:
                    self.consider(producer, consumer, "vertical")
        self._siblings()
        return Schedule(self._kernels(), self.decisions, self.unused, self.template_choices)

    # -- the result -------------------------------------------------------------------------------------------
    def _unique_groups(self) -> list[Group]:
        seen, groups = set(), []
        for node in self.nodes:
            group = self.group_of[node.name]
            if id(group) not in seen:
                seen.add(id(group))
                groups.append(group)
        return groups

    def _topological(self, groups: list[Group]) -> list[Group]:
        """Kernels in an order that respects every edge, as close to program order as it allows."""
        waiting = {id(g): len(g.producers) for g in groups}
        ready = [(g.first, id(g), g) for g in groups if not g.producers]
        heapq.heapify(ready)
        result = []
        while ready:
            _, _, group = heapq.heappop(ready)
            result.append(group)
            for consumer in group.consumers:
                waiting[id(consumer)] -= 1
                if waiting[id(consumer)] == 0:
                    heapq.heappush(ready, (consumer.first, id(consumer), consumer))
        return result

    def _kernels(self) -> list[Kernel]:
        kernels = []
        groups = self._topological(self._unique_groups())
        # what copies read from other kernels (Note [Recomputed in each reader]): stored by its own kernel
        for_copies = {read for group in groups for copy in group.copies for read in self.reads[copy]
                      if read not in group.names and read not in group.copies}
        for index, group in enumerate(groups):
            nodes = sorted(group.nodes + list(group.copies.values()), key=lambda n: self.order[n.name])
            if group.template is not None:  # Note [Template first]
                nodes = [group.template] + [n for n in nodes if n is not group.template]
            stored = [n.name for n in nodes if n.name not in group.copies and (
                n.name in self.output_names or n.name in for_copies or any(
                    reader not in group.names and n.name not in self.group_of[reader].copies
                    for reader in self.readers.get(n.name, ())))]
            if group.template is not None:
                kept = self._template_kernel(nodes, index, stored)
                if kept is not None:
                    kernels.append(kept)
                    continue
                nodes = [self.buffers[nodes[0].name]]  # back to the library call (its Extern node)
            if isinstance(nodes[0], (Extern, MultiOutput)):  # a library or eager call (and its pieces)
                head = nodes[0]
                kind = "fallback" if isinstance(head, Fallback) or (
                    isinstance(head, MultiOutput) and isinstance(self.buffers[head.parent], Fallback)) else "extern"
                kernels.append(Kernel(f"{kind}_{index}", kind, nodes, [n.name for n in nodes],
                                      [r for n in nodes for r in self.reads[n.name]], self._reads_of(nodes)))
                continue
            if not stored:  # every reader recomputes its nodes (Note [Recomputed in each reader]): no kernel
                continue
            rows, red = group.shape
            kind = "reduction" if group.has_reduction or group.scan is not None else "pointwise"
            reads = list(dict.fromkeys(r for n in nodes for r in self.reads[n.name]
                                       if r not in group.names and r not in group.copies))
            kernels.append(Kernel(f"kernel_{index}", kind, nodes, stored, reads, self._reads_of(nodes), rows, red))
        return kernels

    def _reads_of(self, nodes: list[Buffer]) -> dict[str, tuple[str, ...]]:
        return {n.name: tuple(self.reads[n.name]) for n in nodes}

    def _template_kernel(self, nodes: list[Buffer], index: int, stored: list[str]) -> Kernel | None:
        template, epilogue = nodes[0], nodes[1:]
        keep, reason = templates.keep_template(template, epilogue, self.template_options, template.name in stored)
        pair = templates.gemm_pair(template, epilogue, self.reads, self.buffers) if keep else None
        for choice in self.template_choices:
            if choice["node"] == template.name:
                choice.update(template=keep, reason=reason, epilogue=[n.name for n in epilogue])
                choice.update({"pair": pair} if pair else {})
        if not keep:
            return None
        names = {n.name for n in nodes}
        reads = list(dict.fromkeys(r for n in nodes for r in self.reads[n.name] if r not in names))
        spec = template.spec
        return Kernel(f"template_{index}", "template", nodes, stored, reads, self._reads_of(nodes),
                      sympy.Integer(spec.rows), sympy.Integer(spec.n))


def schedule(graph: LoweredGraph, knobs: policy.FusionKnobs = policy.FusionKnobs(),
             template_options: templates.TemplateOptions | None = None) -> Schedule:
    return Scheduler(graph, knobs, template_options).run()
