"""The kernel structure both code generators share (Note [One kernel skeleton]); each backend keeps only its
spelling (printer tables) and the loop templates of its forms.

Note [One kernel skeleton]
Every generated kernel is built from the same pieces, whatever the language:
  source      lines with indentation and one provenance tag each, in the language's block syntax (`Source`)
  passes      a reduction kernel's passes over each row, each reduction's loop body run through the printer
              at (row, r), the pass's ops.reduction calls collected for the backend to accumulate
              (`run_pass`, Note [Kernel body] in engine/schedule/kernel_plan.py)
  stores      each stored node's body at its index, then ops.store (`emit_stores`): per-row values once per
              row after the passes, full-size values in one more loop over the row (`stores_by_role`,
              `emit_epilogue`, the row loop a backend's template)
  signature   the buffers it reads (those the body really loads) then those it stores, then the size
              symbols the body names (`buffer_arguments`, `size_arguments`, Note [Signature from the printer])
C++ (engine/codegen/cpp/) and Triton (engine/codegen/triton/kernel.py) put these into their own loop shapes:
OpenMP loops with simd accumulators, or blocks of a program with masks.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import sympy
import torch

from engine.codegen.provenance import LineTag
from engine.ir import derived
from engine.ir.nodes import Buffer, Reduction
from engine.ir.ops import compute_dtype, reduction_identity
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import KernelPlan, reduce_node, store_node, store_row_value


class Source:
    """Lines with indentation and one provenance tag each. `block` opens a scope in the language's syntax:
    C++ `header {` ... `}` (the default), Python `header:` and an indented suite (PYTHON)."""

    OPEN, CLOSE = " {", "}"

    def __init__(self, depth: int = 0):
        self.lines: list[str] = []
        self.tags: list = []
        self.depth = depth

    def add(self, line: str, tag=None):
        self.lines.append("    " * self.depth + line)
        self.tags.append(tag)

    def extend(self, lines, tags):
        for line, tag in zip(lines, tags):
            self.add(line, tag)

    @contextlib.contextmanager
    def block(self, header: str = "", pragma: str = ""):
        """`pragma`, the header opening the scope, the indented body, the closing line (if the language has one)."""
        if pragma:
            self.add(pragma)
        self.add(f"{header}{self.OPEN}".lstrip())
        self.depth += 1
        yield
        self.depth -= 1
        if self.CLOSE:
            self.add(self.CLOSE)


class PythonSource(Source):
    OPEN, CLOSE = ":", None


def run_pass(printer, plan: KernelPlan, group: list[Reduction], skip=frozenset()) -> list[tuple]:
    """One reduction pass through `printer`: each node's loop body at (row, r), then ops.reduction, whose
    row value becomes the node's accumulator for later passes and the epilogue. Returns the pass's
    reductions as the printer declared them: (node name, dtype, src_dtype, reduction type, value). Nodes in
    `skip` are computed with another one (Note [Online softmax])."""
    printer.pass_reductions = []
    for node in group:
        if node.name in skip:
            continue
        printer.tag = LineTag(node.name)
        printer.accumulators[node.name] = reduce_node(plan, node)
    return printer.pass_reductions


FLAG_REDUCTIONS = ("any", "all")


def accumulator_type(kind: str, dtype: torch.dtype, src_dtype: torch.dtype) -> tuple[torch.dtype, object]:
    """(dtype, identity value) of a reduction's accumulator, for both backends: flags (any/all) count 0/1 in
    an int32 (a bool accumulator keeps C++ loops from vectorizing, Note [Reductions in C++]; Triton's
    reductions of int1 are not portable), argmax/argmin keep the best value in the source's compute type,
    the others accumulate in the result's compute type (half precision in float32)."""
    if kind in FLAG_REDUCTIONS:
        return torch.int32, int(kind == "all")
    if kind in ("argmax", "argmin"):
        return compute_dtype(src_dtype), reduction_identity(kind, src_dtype)
    return compute_dtype(dtype), reduction_identity(kind, dtype)


def emit_stores(printer, plan: KernelPlan, nodes: list[Buffer], per_row: bool = False) -> tuple[list[str], list]:
    """Each node computed where the kernel stores it, then ops.store (`per_row`: once per row, a reduction's
    row value or a per-row node). The bodies' lines stay in the printer (its loop and hoisted scopes); the
    store lines and their tags are returned, to go after them."""
    printer.stores = []
    for node in nodes:
        printer.tag = LineTag(node.name)
        if per_row:
            store_row_value(plan, node, printer.accumulators)
        else:
            store_node(plan, node)
    stores, printer.stores = printer.stores, []
    return [line for line, _ in stores], [tag for _, tag in stores]


def stores_by_role(kernel: Kernel, plan: KernelPlan) -> tuple[list[Buffer], list[Buffer]]:
    """The kernel's stored nodes as (per-row values, full-size values) (Note [Fused loop shape])."""
    stored = kernel.stored_nodes
    return [n for n in stored if plan.role(n) != "full"], [n for n in stored if plan.role(n) == "full"]


def emit_epilogue(printer, kernel: Kernel, plan: KernelPlan, body: Source, begin: Callable[[bool], None],
                  row_loop: Callable[[Source, list, list], None]) -> None:
    """What a reduction kernel does after its passes: the per-row values stored once per row, then the
    full-size outputs in one more walk of the row. `begin(per_row)` readies the printer for each of the two
    (the store's block, a fresh inner loop); `row_loop(body, lines, tags)` is the backend's loop over r
    around the walk's lines: the body computed along the row, then its stores."""
    per_row, full = stores_by_role(kernel, plan)
    begin(True)
    stores = emit_stores(printer, plan, per_row, per_row=True)
    body.extend(*printer.take_hoisted())  # a per-row value does not move along the row
    body.extend(*stores)
    if not full:
        return
    begin(False)
    stores = emit_stores(printer, plan, full)
    body.extend(*printer.take_hoisted())
    row_loop(body, printer.lines + stores[0], printer.line_tags + stores[1])
    printer.lines, printer.line_tags = [], []


# Note [Scan accumulation]
# A scan accumulates as eager does on the kernel's device (at::acc_type<T, is_cuda>): on the CPU, cumsum,
# cumprod and logcumsumexp of float32 run in double, of float16/bfloat16 in float, of integers in int64; on a
# GPU float32 stays float32. Each stored element is the running value rounded to the result's type; the
# running value itself is never rounded. A float32 cumsum of 2^24 + 64 ones on the CPU is then exact, as eager's
# is (a float running sum stops growing at 2^24), and a 20000-long cumsum of randn matches CPU eager's to its
# last bits, where a float32 running value was off by 7e-4 (15% of the smallest sums). cummax/cummin compare
# the input's own values. Triton kernels follow the same rule by the kernel's device (under the interpreter,
# the CPU's).
WIDENED_SCANS = ("sum", "prod", "logsumexp")


def scan_accumulation(node) -> torch.dtype:
    """The running value's type of a Scan node (Note [Scan accumulation])."""
    if node.scan_type not in WIDENED_SCANS:
        return node.acc_dtype
    if not node.dtype.is_floating_point:
        return torch.int64
    if str(node.device).startswith("cuda"):
        return node.acc_dtype
    return torch.float64 if node.dtype in (torch.float32, torch.float64) else torch.float32


# Note [Signature from the printer]
# A kernel's arguments are what its body uses, known while it is printed, never found again in its text:
# the printer records every buffer it loads from memory (a read of the kernel's own nodes is inlined, Note
# [Fused loop shape], so it is no argument) and the symbols of every index it prints; the loops' bounds are
# the printer's index ranges. The stored buffers come from the kernel. So the signature holds exactly the
# buffers the body loads, then those it stores, then the size symbols any index or loop bound names.


def buffer_arguments(kernel: Kernel, printer) -> list[str]:
    """Pointer arguments in signature order: the buffers the body loads, then the ones it stores."""
    return [name for name in kernel.reads if name in printer.loaded] + list(kernel.stored)


def float_sizes(size_symbols) -> set[str]:
    """The size arguments that are float scalars, not integers (Note [Derived sizes])."""
    return {str(s) for s in size_symbols if derived.is_float(s)}


def size_arguments(size_symbols, printer) -> list[str]:
    """The graph's size symbols that the body's indexes or loop bounds name, in the graph's order."""
    symbols = set(printer.index_symbols).union(*(sympy.sympify(e).free_symbols for e in printer.index_ranges.values()))
    used = {str(s) for s in symbols}  # by name, as the source spells them
    return [str(s) for s in size_symbols if str(s) in used]


def assemble_module(header: list[str], kernels: list, gap: int) -> tuple[str, list]:
    """One unit of source for a graph, as both backends lay it out: the header (prelude), then each kernel's
    source after `gap` blank lines; with, per line, the (kernel name, LineTag) it computes or None."""
    lines = list(header)
    line_kernel: list = [None] * len(lines)
    for kernel in kernels:
        lines += [""] * gap
        line_kernel += [None] * gap
        for line, tag in zip(kernel.source.splitlines(), kernel.line_tags):
            lines.append(line)
            line_kernel.append((kernel.name, tag))
    return "\n".join(lines) + "\n", line_kernel
