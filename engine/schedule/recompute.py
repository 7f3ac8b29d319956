"""What a kernel would recompute of a producer's kernel instead of reading it back: the facts that the
policy's recompute_in_reader judges (Note [Recomputed in each reader] in policy.py). The scheduler (fusion.py)
asks after a refused vertical candidate and, when the policy agrees, copies the nodes into the consumer."""
from __future__ import annotations

from typing import Any, Protocol

import sympy

from engine.ir.nodes import Buffer, Fallback, Pointwise
from engine.schedule import policy
from engine.schedule.bodies import body_ops, load_positions
from engine.schedule.groups import Group, same_size


class Scheduler(Protocol):
    """What this module reads of fusion.py's Scheduler (named here, not imported: fusion imports this module,
    and the layers have no cycles, not even for type checking)."""
    buffers: dict[str, Buffer]
    reads: dict[str, tuple[str, ...]]
    readers: dict[str, Any]
    order: dict[str, int]
    group_of: dict[str, Group]
    output_names: set[str]
    knobs: Any


def find(s: Scheduler, a: Group, b: Group) -> tuple[policy.Recomputation, int] | None:
    """The facts of b recomputing every node of a it reads (its roots), and the loads per element that
    recomputing adds to b; None when a root is not an elementwise node of b's own element count, read at
    one position per element (nothing to recompute once per element)."""
    if a.library is not None or a.template is not None or b.library is not None or b.template is not None:
        return None
    rows, red = b.shape
    elements = rows * red
    roots: dict[str, Buffer] = {}
    replaced = 0  # b's loads of the roots, per element: the recomputation's loads take their place
    readers = [s.buffers[name] for name in a.outside_readers & b.names] + list(b.copies.values())
    for reader in readers:
        positions = load_positions(reader, s.buffers)
        for name in s.reads[reader.name]:
            if name not in a.names:
                continue
            node = s.buffers[name]
            if not isinstance(node, Pointwise) or not same_size(node.numel, elements) or positions[name] > 1:
                return None
            roots[name] = node
            replaced += 1
    if not roots:
        return None
    nodes, blocker, stack = {}, None, sorted(roots, key=s.order.get)
    while stack and blocker is None and len(nodes) <= policy.MAX_RECOMPUTED_NODES:
        name = stack.pop()
        if name in nodes:
            continue
        node = s.buffers[name]
        if not isinstance(node, Pointwise):
            blocker = f"they read {name}, a reduction of their kernel (its value exists only in that kernel)"
            break
        nodes[name] = node
        stack += [r for r in s.reads[name] if r in a.names or r in a.copies]
    # per element of a root: how often each node runs, what it loads from memory, its ops
    runs = dict.fromkeys(nodes, 0) | dict.fromkeys(roots, 1)
    inputs, loaded_bytes, loads, ops = {}, 0.0, 0, 0
    for name in sorted(nodes, key=s.order.get, reverse=True):  # readers before what they read
        positions = load_positions(nodes[name], s.buffers)
        ops += runs[name] * body_ops(nodes[name], s.buffers)
        for read, count in positions.items():
            if read in nodes:
                runs[read] += runs[name] * count
                continue
            source = s.buffers[read]
            inputs[read] = None
            loads += runs[name] * count
            loaded_bytes += runs[name] * count * source.dtype.itemsize * _share(source.numel, elements)
    stored_for = _stored_anyway(s, roots)
    facts = policy.Recomputation(a, b, sorted(roots.values(), key=lambda n: s.order[n.name]),
                                 sorted(nodes.values(), key=lambda n: s.order[n.name]), list(inputs),
                                 blocker, stored_for, loaded_bytes, sum(n.dtype.itemsize for n in roots.values()),
                                 ops, s.knobs)
    return facts, loads - replaced


def _stored_anyway(s: Scheduler, roots: dict[str, Buffer]) -> str | None:
    for name in roots:
        if name in s.output_names:
            return f"{name} is an output, stored anyway"
        for reader in s.readers.get(name, ()):
            group = s.group_of[reader]
            if group.library is not None or group.template is not None:
                what = "a GEMM template" if group.template is not None else _library_kind(group.library)
                return f"{name} is stored anyway for {reader} ({what})"
    return None


def _share(numel: sympy.Expr, elements: sympy.Expr) -> float:
    """The part of a buffer of `numel` elements that one of `elements` elements loads: 1, or less for a
    smaller buffer broadcast over them (a per-row statistic); 1 when sizes do not say."""
    ratio = sympy.cancel(sympy.sympify(numel) / elements)
    return min(1.0, float(ratio)) if ratio.is_number else 1.0


def _library_kind(node: Buffer) -> str:
    return "an eager call" if isinstance(node, Fallback) else "a library call"
