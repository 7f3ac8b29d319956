"""What a loop node's body reads and costs, found once per node (one run of the body with a recorder): its
reads, the positions at which it reads each buffer, its arithmetic ops. The scheduler asks for each node
many times (fusion, memory plan, code generation); the body never changes after lowering."""
from __future__ import annotations

import weakref

import sympy

from engine.ir.handlers import AccessRecorder
from engine.ir.nodes import Buffer, Extern, Fallback, MultiOutput, Pointwise, Reduction, Scan, Scatter
from engine.ir.ops import ARITHMETIC, use_handler


# A node's loop body never changes after lowering, so neither do its reads: each body runs once to find them,
# however many passes (fusion, memory plan, code generation) ask.
_READS: "weakref.WeakKeyDictionary[Buffer, tuple[str, ...]]" = weakref.WeakKeyDictionary()


def node_reads(node: Buffer, buffers: dict) -> list[str]:
    """Names of the buffers a node reads (loop body loads, or a library call's tensor arguments)."""
    if node not in _READS:
        _READS[node] = tuple(_find_reads(node, buffers))
    return list(_READS[node])


def _find_reads(node: Buffer, buffers: dict) -> list[str]:
    if isinstance(node, (Extern, Fallback)):
        return list(dict.fromkeys(node.inputs))
    if isinstance(node, MultiOutput):
        return [node.parent]
    return list(dict.fromkeys(name for name, _ in _first_element_loads(node, buffers)))


# the loads of a loop node's first element, found once for both its reads and its load positions, and the
# arithmetic ops of that run (what recomputing the node costs, Note [Recomputed in each reader] in policy.py)
_FIRST_LOADS: "weakref.WeakKeyDictionary[Buffer, list[tuple[str, tuple]]]" = weakref.WeakKeyDictionary()
_OPS: "weakref.WeakKeyDictionary[Buffer, int]" = weakref.WeakKeyDictionary()


def _first_element_loads(node: Buffer, buffers: dict) -> list[tuple[str, tuple]]:
    if node not in _FIRST_LOADS:
        recorder = _run_body(node, buffers, middle=False)
        _FIRST_LOADS[node], _OPS[node] = recorder.loads, recorder.ops
    return _FIRST_LOADS[node]


def body_ops(node: Buffer, buffers: dict) -> int:
    """Arithmetic ops of one element of a loop node's body (loads, casts and selects not counted)."""
    _first_element_loads(node, buffers)
    return _OPS[node]


class _CountingRecorder(AccessRecorder):
    def __init__(self, buffers: dict):
        super().__init__(buffers)
        self.ops = 0

    def __getattr__(self, name):
        op = super().__getattr__(name)
        if name not in ARITHMETIC:
            return op

        def counted(*args):
            self.ops += 1
            return op(*args)
        return counted


def _run_body(node: Buffer, buffers: dict, middle: bool) -> _CountingRecorder:
    """One run of a loop node's body for one element, its (buffer, index) loads and ops recorded: the first
    element (index 0), or one in the middle of each axis, away from the edges where a window's positions
    clamp together."""
    def index(size):
        return [sympy.Integer(int(s) // 2 if middle and s.is_Integer else 3 if middle else 0) for s in size]

    recorder = _CountingRecorder(buffers)
    with use_handler(recorder):
        if isinstance(node, Reduction):
            node.inner_fn(index(node.size), index(node.reduction_size))
        elif isinstance(node, (Pointwise, Scan)):
            node.inner_fn(index(node.size))
        elif isinstance(node, Scatter):  # at one of its source's elements (Note [Accumulating stores])
            node.inner_fn(index(node.ranges))
    return recorder


# Note [Window reads]
# A consumer can read its producer at several positions per element: a pooling window (9 for 3x3), a padded
# shift, bilinear interpolation (4). Fused, the producer is recomputed at every one of them, with its own loads,
# and a producer that is itself such a group multiplies again: three stacked 3x3 max pools inlined into one
# kernel are 9^3 recomputations, 8000 lines of C++ and two minutes of code generation for one kernel. So each
# node's loads are counted by distinct position (`load_positions`: one more run of its body for an element in
# the middle, away from the clamped edges, done only when the run for element 0 shows a buffer read at two
# places), each group knows how many loads one element of it costs with everything it recomputes
# (`Group.loads`), and the policy's window_read rule stores a producer whose recomputation would cost more than
# MAX_RECOMPUTED_LOADS loads per element (policy.py).
_POSITIONS: "weakref.WeakKeyDictionary[Buffer, dict[str, int]]" = weakref.WeakKeyDictionary()


def load_positions(node: Buffer, buffers: dict) -> dict[str, int]:
    """For each buffer a loop node reads, at how many distinct positions one element of it reads that buffer."""
    if node not in _POSITIONS:
        positions: dict[str, int] = {}
        if isinstance(node, (Pointwise, Reduction, Scan, Scatter)):
            loads = _first_element_loads(node, buffers)
            if len(set(loads)) > len({name for name, _ in loads}):  # some buffer at two places: count them all
                loads = _run_body(node, buffers, middle=True).loads
            for name, index in dict.fromkeys(loads):
                positions[name] = positions.get(name, 0) + 1
        _POSITIONS[node] = positions
    return _POSITIONS[node]
