"""What every kernel printer shares: two scopes (the innermost loop and the code hoisted above it),
provenance tags per line, and the inlining rule of Note [Fused loop shape]."""
from __future__ import annotations

from typing import Callable

from engine.codegen.provenance import LineTag
from engine.ir.handlers import TextHandler
from engine.ir.nodes import Buffer
from engine.schedule.kernel_plan import Inliner, KernelPlan


class KernelPrinter(TextHandler):
    """Lines that vary along the innermost loop go to `lines`; the rest to `hoisted`, emitted above the loop
    (loop-invariant code motion). Loads of the kernel's own nodes go through `self.inliner`."""

    def __init__(self, plan: KernelPlan, buffers: dict, compute: Callable | None = None):
        super().__init__()
        self.plan = plan
        self.buffers = buffers
        self.hoisted: list[str] = []
        self.hoisted_tags: list = []
        self.accumulators: dict = {}
        self.inliner = Inliner(plan, external=self._load_memory, accumulator=lambda name: self.accumulators[name],
                               on_inline=self._enter_node, compute=compute)

    def _load_memory(self, name, index):
        raise NotImplementedError

    def load(self, name, index):
        return self.inliner.load(name, index)

    def add_line(self, line: str, varying: bool) -> None:
        (self.lines if varying else self.hoisted).append(line)
        (self.line_tags if varying else self.hoisted_tags).append(self.tag)

    def start_inner_loop(self) -> None:
        """Forget values computed inside the previous inner loop (they are out of scope now)."""
        self._cache = {k: v for k, v in self._cache.items() if not v.varying}
        self._indirect_cache = {k: v for k, v in self._indirect_cache.items() if not v[1]}
        self.inliner.memo = {k: v for k, v in self.inliner.memo.items() if not getattr(v, "varying", True)}
        self.lines, self.line_tags = [], []

    def take_hoisted(self) -> tuple[list[str], list]:
        lines, tags = self.hoisted, self.hoisted_tags
        self.hoisted, self.hoisted_tags = [], []
        return lines, tags

    def _enter_node(self, node: Buffer):
        previous = self.tag
        self.tag = LineTag(node.name)
        return lambda: setattr(self, "tag", previous)
