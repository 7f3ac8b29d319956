"""What a fusion group (a kernel in the making) knows about itself, kept up to date as groups merge.

The policy's rules read these facts; the mechanism (fusion.py) maintains them. Every fact is merged from the
two groups' facts in time independent of the groups' sizes (sets merge small into large), so fusing n nodes
costs O(n) facts work in all, never a rescan of a group per candidate (Note [Incremental group graph]).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from engine.ir.indexing import product
from engine.ir.nodes import Buffer, Extern, Fallback, MultiOutput, Pointwise, Reduction, Scan, Scatter, Template, loop_size
from engine.schedule.kernel_plan import describe_size


def canonical(expr: sympy.Expr) -> sympy.Expr:
    """One spelling per value for sizes (expanded polynomials), so equal sizes compare equal in a set."""
    return expr if expr.is_Integer else sympy.expand(expr)


def same_size(a: sympy.Expr, b: sympy.Expr) -> bool:
    return a == b or sympy.expand(a - b) == 0


def is_library_node(node: Buffer) -> bool:
    return isinstance(node, (Extern, Fallback, MultiOutput))


@dataclass(eq=False)
class Group:
    nodes: list[Buffer]  # in no particular order while fusing; program order once the schedule is built
    names: set[str]
    first: int  # smallest program position of its nodes
    last: int
    library: Buffer | None = None  # an Extern/Fallback call (and its MultiOutput pieces) is a group of its own
    template: Template | None = None  # a library call generated as a kernel, with its epilogue (templates.py)
    reduction: Reduction | None = None  # the earliest reduction: it sets the kernel's loop shape
    reduction_at: int = -1
    reductions: list[Reduction] = field(default_factory=list)
    scatter: Scatter | None = None  # an accumulating store (Note [Accumulating stores]): no reader joins it
    scan: Scan | None = None  # a scan (Note [Scans]): its rows set the loop shape, like a reduction's
    last_visible: Buffer | None = None  # the latest node that is stored or computed for itself (not inlined)
    last_visible_at: int = -1
    numels: frozenset = frozenset()  # element counts (expanded) of its visible pointwise nodes
    passes: int = 0  # passes over each row: the longest chain of reductions feeding each other
    all_pointwise: bool = True
    has_output: bool = False
    loads: int = 0  # loads per element, recomputed producers' included (Note [Window reads] in bodies.py)
    # other groups' nodes this one recomputes wherever it reads them, never stores (Note [Recomputed in each
    # reader] in policy.py); they stay their own group's nodes too
    copies: dict[str, Buffer] = field(default_factory=dict)
    # -- the group graph (mechanism) --
    position: int = 0  # a topological label: every edge goes from a lower to a higher position
    producers: set["Group"] = field(default_factory=set)
    consumers: set["Group"] = field(default_factory=set)
    outside_readers: set[str] = field(default_factory=set)  # names of nodes outside that read its nodes

    @classmethod
    def of(cls, node: Buffer, at: int, is_output: bool) -> "Group":
        group = cls([node], {node.name}, at, at, has_output=is_output, position=at,
                    all_pointwise=isinstance(node, Pointwise), passes=int(isinstance(node, Reduction)))
        if isinstance(node, Template):
            group.template = node
        elif is_library_node(node):
            group.library = node
        if isinstance(node, Reduction):
            group.reduction, group.reduction_at, group.reductions = node, at, [node]
        group.last_visible, group.last_visible_at = node, at
        if isinstance(node, Pointwise):
            group.numels = frozenset([canonical(node.numel)])
        if isinstance(node, Scan):
            group.scan, group.numels = node, frozenset([canonical(node.numel)])
        if isinstance(node, Scatter):  # its loop walks its source's elements
            group.scatter, group.numels = node, frozenset([canonical(product(node.ranges))])
        return group

    @property
    def has_reduction(self) -> bool:
        return self.reduction is not None

    @property
    def shape(self) -> tuple[sympy.Expr, sympy.Expr]:
        """(rows, red) of the loop nest: the first reduction's, else the elements of the last visible node."""
        if self.reduction is not None:
            return self.reduction.numel, self.reduction.reduction_numel
        if self.scan is not None:  # rows of the scanned (last) dim
            return product(self.scan.size[:-1]), self.scan.length
        return product(loop_size(self.last_visible)), sympy.Integer(1)

    def shape_text(self) -> str:
        rows, red = self.shape
        if self.reduction is not None:
            return f"{rows} rows x reduction {red}"
        if self.scan is not None:
            return f"{rows} rows x scan {red}"
        return describe_size(loop_size(self.last_visible))

    def label(self, program: list[Buffer], order: dict[str, int]) -> str:
        """The group's node names for the record; a long group is abbreviated to its ends and its count."""
        if len(self.nodes) <= 8:
            return "+".join(n.name for n in sorted(self.nodes, key=lambda n: order[n.name]))
        return f"{program[self.first].name}+...+{program[self.last].name} ({len(self.nodes)} nodes)"

    def absorb(self, other: "Group", inlined: "Group | None", passes: int) -> None:
        """Take `other`'s nodes and facts (not the graph edges: the mechanism rewires those). `inlined` (self,
        other or None) is the side whose nodes are only ever recomputed inside the other's: not visible."""
        self.nodes.extend(other.nodes)
        self.names |= other.names
        if self.copies or other.copies:
            self.copies.update(other.copies)
            for name in [n for n in self.copies if n in self.names]:
                del self.copies[name]  # the merged group computes that node anyway
        self.first, self.last = min(self.first, other.first), max(self.last, other.last)
        self.library = self.library or other.library
        self.template = self.template or other.template
        self.scatter = self.scatter or other.scatter
        self.scan = self.scan or other.scan
        if other.reduction is not None and (self.reduction is None or other.reduction_at < self.reduction_at):
            self.reduction, self.reduction_at = other.reduction, other.reduction_at
        self.reductions = self.reductions + other.reductions
        if inlined is self:
            self.last_visible, self.last_visible_at, self.numels = \
                other.last_visible, other.last_visible_at, other.numels
        elif inlined is None:
            if other.last_visible_at > self.last_visible_at:
                self.last_visible, self.last_visible_at = other.last_visible, other.last_visible_at
            self.numels = self.numels | other.numels
        self.passes = passes
        self.all_pointwise = self.all_pointwise and other.all_pointwise
        self.has_output = self.has_output or other.has_output
