"""Memory plan: when each intermediate buffer lives, which dead buffer it can reuse, and the peak."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from engine.ir.nodes import Buffer, TensorValue
from engine.ir.graph import LoweredGraph
from engine.schedule.fusion import Kernel, node_reads


@dataclass
class BufferLife:
    name: str
    bytes: int
    first: int  # kernel index that writes it
    last: int  # last kernel index that reads it (len(kernels) for graph outputs)
    reuses: str | None = None  # the dead buffer whose memory it takes


@dataclass
class MemoryPlan:
    lives: list[BufferLife]
    free_after: dict[int, list[str]] = field(default_factory=dict)
    peak_bytes: int = 0
    unfused_peak_bytes: int = 0

    def reuse_of(self, name: str) -> str | None:
        for life in self.lives:
            if life.name == name:
                return life.reuses
        return None


def _bytes(node: Buffer, hints: dict) -> int:
    numel = sympy.sympify(node.numel).subs(hints) if hints else sympy.sympify(node.numel)
    return int(numel) * node.dtype.itemsize if numel.is_Integer else 0


def _peak(intervals: list[tuple[int, int, int]]) -> int:
    """Largest sum of bytes over (start, end, bytes) intervals alive at once (both ends included)."""
    events: dict[int, int] = {}
    for start, end, size in intervals:
        events[start] = events.get(start, 0) + size
        events[end + 1] = events.get(end + 1, 0) - size
    live, peak = 0, 0
    for at in sorted(events):
        live += events[at]
        peak = max(peak, live)
    return peak


def plan_memory(kernels: list[Kernel], graph: LoweredGraph, hints: dict) -> MemoryPlan:
    """Greedy reuse: a buffer takes the memory of a buffer of the same size and dtype that just died.

    A buffer is dead after the last kernel that reads it; graph outputs never die. The wrapper drops a dead
    buffer unless the next kernel reuses its memory. Peak counts every storage from its allocation to the last
    read of the last buffer that shares it."""
    outputs = {v.node.name for v in graph.outputs if isinstance(v, TensorValue)}
    end = len(kernels)
    last_use: dict[str, int] = {}
    for index, kernel in enumerate(kernels):
        for name in kernel.reads:
            last_use[name] = index
    lives: list[BufferLife] = []
    dies_after: dict[int, list[BufferLife]] = {}
    # (size, dtype) -> storages whose last reader was the previous kernel. Only those are reused, right
    # away: holding a dead storage longer for a later reuse could raise the peak instead of lowering it.
    pool: dict[tuple, list[str]] = {}
    owner_of: dict[str, str] = {}
    storage_end: dict[str, int] = {}
    storage_start: dict[str, int] = {}
    storage_bytes: dict[str, int] = {}
    for index, kernel in enumerate(kernels):
        for name in kernel.stored:
            node = graph.buffers[name]
            life = BufferLife(name, _bytes(node, hints), index, end if name in outputs else last_use.get(name, index))
            key = (tuple(node.size), node.dtype)
            if kernel.kind in ("pointwise", "reduction") and pool.get(key):
                owner = pool[key].pop()
                life.reuses = owner
            else:
                owner = name
                storage_start[owner], storage_bytes[owner] = index, life.bytes
            owner_of[name] = owner
            storage_end[owner] = max(storage_end.get(owner, index), life.last)
            lives.append(life)
            dies_after.setdefault(life.last, []).append(life)
        dying: dict[tuple, list[str]] = {}
        for life in dies_after.get(index, ()):  # buffers whose last reader was this kernel: reusable storage
            if life.name not in outputs:
                node = graph.buffers[life.name]
                if isinstance(node, Buffer) and graph.buffers[owner_of[life.name]].kind in ("pointwise", "reduction"):
                    dying.setdefault((tuple(node.size), node.dtype), []).append(owner_of[life.name])
        pool = dying
    free_after: dict[int, list[str]] = {}
    for life in lives:
        if life.name not in outputs:
            free_after.setdefault(life.last, []).append(life.name)
    peak = _peak([(storage_start[o], min(storage_end[o], end - 1), storage_bytes[o]) for o in storage_bytes])
    return MemoryPlan(lives, free_after, peak, _unfused_peak(graph, hints, outputs))


def _unfused_peak(graph: LoweredGraph, hints: dict, outputs: set) -> int:
    """Peak bytes if every IR node wrote its own buffer and freed it after its last reader (no fusion)."""
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for name in node_reads(node, graph.buffers):  # found once per node, during fusion
            last_use[name] = index
    end = len(graph.nodes)  # outputs, and nodes nobody reads, are never freed
    return _peak([(index, end if node.name in outputs else last_use.get(node.name, end), _bytes(node, hints))
                  for index, node in enumerate(graph.nodes)])
