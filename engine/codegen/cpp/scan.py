"""C++ scan kernels (Note [Scans] in engine/ir/nodes.py, Note [Scan kernels] in engine/schedule/policy.py):
the rows on the threads, each row walked in order with one running value per scan, the epilogue computed and
stored at each element as the walk reaches it.

The running value's type is eager's CPU kernel's (Note [Scan accumulation] in kernel_core.py). The walk cannot
vectorize (each element needs the previous one): gcc gets no simd pragma.
"""
from __future__ import annotations

import sympy
import torch

from engine.codegen.cpp.printer import CppKernel, CppPrinter, c_constant, c_type, finish_kernel, parallel_clause
from engine.codegen.kernel_core import Source, emit_stores, scan_accumulation as accumulation
from engine.codegen.provenance import LineTag
from engine.ir.handlers import Var
from engine.ir.indexing import c_index
from engine.ir.nodes import Scan
from engine.ir.ops import reduction_identity, use_handler
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import KernelPlan
from engine.schedule.tiling import Tiling

def _identity(node: Scan, dtype: torch.dtype):
    if node.scan_type == "logsumexp":
        return float("-inf")
    kind = {"argmax": "max", "argmin": "min"}.get(node.scan_type, node.scan_type)
    return reduction_identity(kind, dtype)


def _update(node: Scan, acc: str, value: str) -> str:
    kind = node.scan_type
    if kind == "sum":
        return f"{acc} = {acc} + {value};"
    if kind == "prod":
        return f"{acc} = {acc} * {value};"
    if kind == "logsumexp":
        return f"{acc} = gb_log_add_exp<{c_type(accumulation(node))}>({value}, {acc});"
    compare = ">=" if kind in ("max", "argmax") else "<="
    index = f" {acc}_index = r0;" if kind in ("argmax", "argmin") else ""
    return f"if ({value} != {value} || (!({acc} != {acc}) && {value} {compare} {acc})) {{ {acc} = {value};{index} }}"


def scan_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols, tiling: Tiling) -> CppKernel:
    x_symbol = sympy.Symbol("x0", integer=True, nonnegative=True)
    r_symbol = sympy.Symbol("r0", integer=True, nonnegative=True)
    printer = CppPrinter(plan, buffers, r_symbol, {x_symbol: plan.rows, r_symbol: plan.red})
    printer.substitution = {plan.x: x_symbol, plan.r: r_symbol}
    printer.varying_symbols = {r_symbol}
    declarations = []
    with use_handler(printer):
        for node in kernel.scans:
            printer.tag = tag = LineTag(node.name)
            value = node.inner_fn(plan.index(node))
            dtype = accumulation(node)
            acc = f"acc_{node.name}"
            declarations.append((f"{c_type(dtype)} {acc} = {c_constant(_identity(node, dtype), dtype)};", tag))
            if node.scan_type in ("argmax", "argmin"):
                declarations.append((f"int64_t {acc}_index = 0;", tag))
            printer.add_line(_update(node, acc, str(value)), True)
            if node.scan_type in ("argmax", "argmin"):
                visible = Var(f"{acc}_index", torch.int64, True)
            else:
                visible = Var(acc, dtype, True)
                if dtype != node.dtype:  # what a reader of the stored element sees: rounded to its type
                    visible = printer.to_dtype(visible, node.dtype)
            printer.accumulators[node.name] = visible
        stores, store_tags = emit_stores(printer, plan, kernel.stored_nodes)
    body = Source()
    with body.block(), body.block(f"for (int64_t x0 = 0; x0 < {c_index(plan.rows)}; ++x0)",
                                  parallel_clause(plan.rows * plan.red)):
        body.extend(*printer.take_hoisted())
        for line, tag in declarations:
            body.add(line, tag)
        with body.block(f"for (int64_t r0 = 0; r0 < {c_index(plan.red)}; ++r0)"):
            body.extend(printer.lines, printer.line_tags)
            body.extend(stores, store_tags)
    return finish_kernel(kernel, buffers, body, printer, size_symbols, tiling)
