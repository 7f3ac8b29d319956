"""Memory plan: when each intermediate buffer lives, which dead buffer it can reuse, and the peak."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

import torch

from engine.ir.handlers import AccessRecorder, Var
from engine.ir.nodes import Buffer, Extern, TensorArg, TensorValue
from engine.ir.graph import LoweredGraph
from engine.ir.ops import use_handler
from engine.ir.indexing import simplify_index
from engine.schedule.fusion import Kernel, node_reads
from engine.schedule.kernel_plan import Inliner, store_node


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


# Note [In-place epilogues]
# The kernel after a library call (a convolution's batch norm and ReLU, a matmul's bias and GELU) often reads
# the call's output only where it writes its own result, and that output dies there: the kernel can write into
# it, as Inductor does, and the wrapper allocates nothing for it (ResNet-50's wrapper allocated 37 buffers a
# call, Inductor's 10; on a host-bound GPU model each allocation and free is host time). Taken only when it is
# safe for any tiling: a pointwise kernel, the source a fresh library output (a matmul or convolution: never a
# view of an input) of the same dtype and element count, not a graph output, last read by this kernel, and every
# load of it in the kernel, for any of the kernel's outputs, at exactly the address the kernel stores the result
# to, so each element is read and then overwritten by the one program that owns it (a second output reading the
# source transposed would read elements other programs already overwrote). Triton kernels only, and not in max-autotune (`in_place`):
# our C++ kernels declare their pointers __restrict__, which an input that is also the output would break, and
# autotuning runs a kernel several times on its real arguments, which must leave its inputs as they were.
FRESH_OUTPUTS = {torch.ops.aten.convolution.default, torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
                 torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default}


def _in_place_source(kernel: Kernel, output: Buffer, candidates: list[Buffer], graph: LoweredGraph) -> str | None:
    """The dying library output `output` can be written into (Note [In-place epilogues]), or None."""
    # (size-1 dims excluded: a library picks their strides as it pleases, and the result handed on by name must
    # have the strides the wrapper holds for it: Note [Buffers as the wrapper holds them])
    fitting = [c for c in candidates if c.dtype == output.dtype and sympy.expand(c.numel - output.numel) == 0
               and not any(sympy.sympify(n) == 1 for n in c.size)]
    if not fitting:
        return None
    plan = kernel.plan
    loads: list[tuple[str, tuple]] = []

    def external(name, index):
        loads.append((name, tuple(index)))
        return Var("load", graph.buffers[name].dtype)

    inliner = Inliner(plan, external=external, accumulator=lambda name: Var("acc", graph.buffers[name].dtype))
    recorder = AccessRecorder(graph.buffers, on_load=inliner.load)
    with use_handler(recorder):  # every output's loads: another output may read the source elsewhere
        for name in kernel.stored:
            store_node(plan, graph.buffers[name])
    stored = [index for name, index in recorder.stores if name == output.name]
    if len(stored) != 1:
        return None
    target = simplify_index(output.storage_offset(stored[0]), plan.ranges)
    for candidate in fitting:
        offsets = {simplify_index(candidate.storage_offset(index), plan.ranges)
                   for name, index in loads if name == candidate.name}
        if offsets and all(sympy.expand(o - target) == 0 for o in offsets):
            return candidate.name
    return None


# Note [A view keeps its base alive]
# A library or eager call whose result is a view of its first argument (a view op run eagerly, the as_strided
# of Note [Outputs that are views]) shares that buffer's memory: the base must not die, nor its memory go to
# another buffer, while the view is read or returned. So the view's last reader counts as the base's, and a
# returned view makes its base a graph output.


def _viewed_buffers(graph: LoweredGraph) -> list[tuple[str, str]]:
    """(view, base) for each call whose result aliases its first argument (torch's is_view), in graph order."""
    return [(node.name, node.args[0].name) for node in graph.nodes
            if isinstance(node, Extern) and getattr(node.target, "is_view", False) and node.args
            and isinstance(node.args[0], TensorArg)]


def plan_memory(kernels: list[Kernel], graph: LoweredGraph, hints: dict, in_place: bool = False) -> MemoryPlan:
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
    for view, base in reversed(_viewed_buffers(graph)):  # Note [A view keeps its base alive]
        if view in outputs:
            outputs.add(base)
        if view in last_use:
            last_use[base] = max(last_use.get(base, 0), last_use[view])
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
        # Note [In-place epilogues]: library outputs this pointwise kernel reads for the last time
        dying_here = [graph.buffers[n] for n in kernel.reads if last_use.get(n) == index and n not in outputs
                      and isinstance(graph.buffers[n], Extern) and graph.buffers[n].target in FRESH_OUTPUTS] \
            if in_place and kernel.kind == "pointwise" and not kernel.accumulates else []
        for name in kernel.stored:
            node = graph.buffers[name]
            life = BufferLife(name, _bytes(node, hints), index, end if name in outputs else last_use.get(name, index))
            key = (tuple(node.size), node.dtype)
            source = _in_place_source(kernel, node, dying_here, graph) if dying_here and name not in outputs \
                else None
            if source:
                owner = life.reuses = source
                dying_here = [d for d in dying_here if d.name != source]
                storage_start.setdefault(owner, index)
                storage_bytes.setdefault(owner, life.bytes)
            elif kernel.kind in ("pointwise", "reduction") and pool.get(key):
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
