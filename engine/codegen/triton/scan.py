"""Triton scan kernels (Note [Scans] in engine/ir/nodes.py, Note [Scan kernels] in engine/schedule/policy.py).

Note [Scans in Triton]
A program takes XBLOCK rows. Each scan's values fill an [XBLOCK, RBLOCK] tile (lanes past the row hold the
scan's identity) and tl.associative_scan runs along the row with the prelude's combine function (gb_scan_*,
eager's meaning for NaN, ties and infinities). A row of at most PERSISTENT_LIMIT elements (static) is one
tile ("scan" form). A longer or symbolic row is walked in steps of RBLOCK ("scan_looped"): each step's scan is
combined with the running value of the row so far (`carry_<node>`), which becomes the step's value at its last
element. Either way the epilogue is computed and stored on the scanned tile, so a cumsum and what follows it
are one kernel. The running value's type is eager's on the kernel's device (Note [Scan accumulation] in
kernel_core.py); each element a reader sees is rounded to the result's type, as stored.
"""
from __future__ import annotations

import torch

from engine.codegen.kernel_core import emit_stores, scan_accumulation
from engine.codegen.provenance import LineTag
from engine.codegen.triton.printer import XR, TritonPrinter, TVar, literal, tl_type, triton_index
from engine.ir.nodes import Scan
from engine.ir.ops import reduction_identity
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import KernelPlan

PAIRED = ("argmax", "argmin")  # scans of (value, index) pairs


def _identity(node: Scan) -> object:
    if node.scan_type == "logsumexp":
        return float("-inf")
    kind = {"argmax": "max", "argmin": "min"}.get(node.scan_type, node.scan_type)
    return reduction_identity(kind, scan_accumulation(node))


def _tile(printer: TritonPrinter, node: Scan, value: TVar) -> TVar:
    """The scan's values as a full [XBLOCK, RBLOCK] tile in its compute type, the identity past the row."""
    dtype = scan_accumulation(node)
    text = printer.tensor(value) if value.literal else str(value)
    if value.literal or value.dtype != dtype:
        text = f"({text}).to({tl_type(dtype)})"
    mask = printer.block_mask(XR)
    if mask:
        text = f"tl.where({mask}, {text}, {literal(_identity(node), dtype)})"
    return printer.emit(f"{text} + tl.full([XBLOCK, RBLOCK], 0, {tl_type(dtype)})", dtype, XR)


def scan_body(kernel: Kernel, plan: KernelPlan, printer: TritonPrinter, body, masks: dict, int64: bool, form: str,
              rows_header, r_header, r_loop) -> None:
    """The body of a scan kernel (Note [Scans in Triton]); the row and r headers and the r loop are triton/kernel.py's."""
    rows_header(body, plan, masks, int64, two_d=True)
    looped = form == "scan_looped"
    if not looped:
        r_header(body, plan, masks, int64, "")
    index_type = "tl.int64" if int64 else "tl.int32"
    inits = []
    for node in kernel.scans:
        printer.tag = tag = LineTag(node.name)
        value = node.inner_fn(plan.index(node))
        tile = _tile(printer, node, value)
        combine = _combine(node)
        dtype = scan_accumulation(node)
        carry = f"carry_{node.name}"
        if node.scan_type in PAIRED:
            lanes = printer.emit(f"(r0 + tl.full([XBLOCK, RBLOCK], 0, {index_type})).to(tl.int64)", torch.int64, XR)
            pair = printer.emit(f"tl.associative_scan(({tile}, {lanes}), 1, {combine})", dtype, XR)
            scanned = printer.emit(f"{pair}[0]", dtype, XR)
            indices = printer.emit(f"{pair}[1]", torch.int64, XR)
            if looped:
                inits.append((f"{carry} = tl.full([XBLOCK, 1], {literal(_identity(node), dtype)}, {tl_type(dtype)})", tag))
                inits.append((f"{carry}_index = tl.full([XBLOCK, 1], 0, tl.int64)", tag))
                pair = printer.emit(f"{combine}({carry}, {carry}_index, {scanned}, {indices})", dtype, XR)
                scanned = printer.emit(f"{pair}[0]", dtype, XR)
                indices = printer.emit(f"{pair}[1]", torch.int64, XR)
                _carry(printer, plan, f"{carry}", scanned, dtype)
                _carry(printer, plan, f"{carry}_index", indices, torch.int64)
            visible = indices
        else:
            scanned = printer.emit(f"tl.associative_scan({tile}, 1, {combine})", dtype, XR)
            if looped:
                inits.append((f"{carry} = tl.full([XBLOCK, 1], {literal(_identity(node), dtype)}, {tl_type(dtype)})", tag))
                scanned = printer.emit(_step(node, carry, scanned), dtype, XR)
                _carry(printer, plan, carry, scanned, dtype)
            visible = scanned
            if node.dtype != dtype:  # what a reader of the stored element sees: rounded to its type
                visible = printer.to_dtype(TVar(scanned.name, dtype, True, XR), node.dtype)
        printer.accumulators[node.name] = visible
    printer.store_dims, printer.store_shape = XR, "[XBLOCK, RBLOCK]"
    stores = emit_stores(printer, plan, kernel.stored_nodes)
    if not looped:
        body.extend(*printer.take())
        body.extend(*stores)
        return
    body.extend(*printer.take_hoisted())
    for line, tag in inits:
        body.add(line, tag)
    r_loop(body, plan, masks, int64, printer.lines + stores[0], printer.line_tags + stores[1])
    printer.lines, printer.line_tags = [], []


def _combine(node: Scan) -> str:
    """The prelude's combine function of a scan: a sum or a product combines as its reduction does."""
    return {"sum": "gb_add", "prod": "gb_mul"}.get(node.scan_type, f"gb_scan_{node.scan_type}")


def _step(node: Scan, carry: str, scanned: TVar) -> str:
    """The running value folded into a step's scan: the scan's own combine function."""
    return f"{_combine(node)}({carry}, {scanned})"


def _carry(printer: TritonPrinter, plan: KernelPlan, carry: str, scanned: TVar, dtype: torch.dtype) -> None:
    """The running value after this step: the step's scan at the row's last element in it."""
    last = f"tl.minimum(roffset + RBLOCK, {triton_index(plan.red)}) - 1"
    printer.add_line(f"{carry} = gb_reduce_row(tl.where(r0 == {last}, {scanned}, tl.full([XBLOCK, RBLOCK], 0, "
                     f"{tl_type(dtype)})), \"sum\", XBLOCK, RBLOCK)", True)
