"""Triton code generation: one @triton.jit kernel per fused kernel (triton/module.py puts all of a graph's
kernels, the GEMM templates of triton/gemm.py among them, in one module and loads it).

Kernel shapes (Note [Fused loop shape]; Note [Triton kernel shapes]):
  pointwise   x0 = pid*XBLOCK + arange(XBLOCK); values are 1-D blocks; loads and stores masked by x0 < numel
  persistent  a 2-D tile [XBLOCK rows, RBLOCK >= red]: the whole row sits in registers, every reduction pass
              and the epilogue reuse the values loaded once (softmax and layernorm read the row once)
  looped      the same tile, walked along r in steps of RBLOCK: one loop per reduction pass, accumulating
              elementwise into a [XBLOCK, RBLOCK] accumulator reduced to one value per row after the loop
Values are Triton tensors; the printer is the same TextHandler over the ops protocol as the C++ one, and loads
follow the same Inliner rule. float16/bfloat16 are loaded into float32, computed there, stored rounded.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy
import torch

from engine.codegen.kernel_core import (FLAG_REDUCTIONS, PythonSource, accumulator_type, buffer_arguments,
                                        emit_epilogue, emit_stores, float_sizes, run_pass, size_arguments,
                                        stores_by_role)
from engine.codegen.provenance import LineTag
from engine.codegen.triton.config import (PERSISTENT_LIMIT, LaunchConfig, static_int, candidate_configs,
                                          choose_config, looped_config_reason)
from engine.codegen.triton.scan import scan_body
from engine.codegen.triton.printer import (INT32_LIMIT, XR, R, TritonPrinter, TVar, X, literal, tl_type,
                                           triton_index)
from engine.ir.ops import compute_dtype, use_handler
from engine.record import TritonRecord, TritonTuning
from engine.schedule.fusion import Kernel
from engine.ir.indexing import loop_var
from engine.schedule.online_softmax import OnlinePasses, online_passes
from engine.schedule.policy import wants_column_split
from engine.schedule.split import column_itemsize, is_split_stage, split_refusal
from engine.schedule.tiling import Tiling, choose_tiling
from engine.schedule.kernel_plan import KernelPlan

SIGNATURE_TYPES = {  # triton.compile's names for pointer arguments (display extras)
    torch.float32: "*fp32", torch.float64: "*fp64", torch.float16: "*fp16", torch.bfloat16: "*bf16",
    torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8",
    torch.bool: "*i1",
}

# Note [Triton kernel shapes]
# A reduction of at most PERSISTENT_LIMIT elements per row runs persistent (RBLOCK = next power of two >= red,
# the row in registers: 8192 float32 over 16 warps is 16 registers a thread); longer or symbolic ones loop.
# Block sizes are launch-time constants (tl.constexpr), so the same source runs on a GPU and under the
# interpreter with different blocks. The interpreter runs one program at a time in Python with numpy, so it
# wants few, large programs; a GPU wants enough programs to fill its SMs and a few values per thread.
# mode="max-autotune" times a few configs around the heuristic's on the GPU (candidate_configs); a reduction
# over a leading dim (strided loads along r, e.g. x.sum(0)) is one place where it finds 2x.


# --- kernels -------------------------------------------------------------------------------------------------


@dataclass
class TritonKernel:
    name: str
    source: str
    args: list[str]  # buffer names in signature order
    size_args: list[str]
    form: str  # pointwise | tiled | persistent | looped | column (engine/codegen/triton/config.py)
    rows: sympy.Expr  # tiled: the Y extent
    red: sympy.Expr  # tiled: the X extent
    config: LaunchConfig
    int64: bool
    signature: dict  # argument name -> triton type ("*fp32", "i32", "constexpr") for triton.compile
    tiling: Tiling
    line_tags: list = field(default_factory=list)
    tuning: TritonTuning = field(default_factory=TritonTuning)  # max-autotune: filled in place at the first launch
    itemsize: int = 4  # the column form's narrowest column read, in bytes: its config counts bytes (triton/config.py)
    accumulates: bool = False  # adds into its output (Note [Accumulating stores]): a second run would add twice

    def grid(self, config: LaunchConfig | None = None) -> tuple | None:
        rows = static_int(self.rows)
        if rows is None:
            return None
        config = config or self.config
        if self.form == "tiled":  # one axis of programs: Note [Tiles on a 1-D grid]
            red = static_int(self.red)
            return (-(-rows // config.YBLOCK) * -(-red // config.XBLOCK), 1, 1) if red is not None else None
        block = config.XBLOCK
        return ((rows + block - 1) // block, 1, 1)

    def grid_text(self) -> str:
        return f"({self.grid_x_text()}, 1, 1)"

    def grid_x_text(self) -> str:
        """The number of programs, as wrapper source (sizes may be symbols)."""
        static = self.grid()
        if static is not None:
            return str(static[0])
        rows = triton_index(sympy.sympify(self.rows))
        if self.form == "tiled":
            columns = triton_index(sympy.sympify(self.red))
            y, x = self.config.YBLOCK, self.config.XBLOCK
            return f"((({rows}) + {y - 1}) // {y}) * ((({columns}) + {x - 1}) // {x})"
        return f"(({rows}) + {self.config.XBLOCK - 1}) // {self.config.XBLOCK}"

    def record_fields(self) -> dict:
        """What the record shows about this kernel beyond its source (report.py)."""
        return {"triton": TritonRecord(
            form=self.form, config=self.config.kwargs(), grid=self.grid_text(), int64_index=self.int64,
            gpu_config=choose_config(self.form, self.rows, self.red, False, self.itemsize).kwargs(),
            signature=self.signature, rows=str(self.rows), red=str(self.red),
            autotune=self.tuning), "tiling": self.tiling.record()}


def kernel_form(kernel: Kernel, tiling: Tiling) -> str:
    if kernel.scans:  # Note [Scans in Triton]
        red = static_int(kernel.red)
        return "scan" if red is not None and red <= PERSISTENT_LIMIT else "scan_looped"
    if kernel.kind != "reduction":
        return "tiled" if tiling.choice == "2d" else "pointwise"
    if tiling.choice == "column" or tiling.columns:  # a split stage that reads columns (Note [Column splits])
        return "column"
    red = static_int(kernel.red)
    return "persistent" if red is not None and red <= PERSISTENT_LIMIT else "looped"


def _plan(kernel: Kernel, tiling: Tiling, form: str) -> KernelPlan:
    """The tiled form walks the output as (y, x) with flat index y*X + x: the plan of a kernel of Y rows of X
    elements each, all of them stored per element (Note [Fused loop shape])."""
    if form == "tiled":
        return KernelPlan(kernel.nodes, tiling.y, tiling.x, x=loop_var("y", 0), r=loop_var("x", 0))
    return kernel.plan


def _tiling_note(tiling: Tiling, form: str, online: OnlinePasses | None, rows, red, full_stores: bool,
                 refusal: str | None) -> Tiling:
    """What this backend does with the choice: the form, the passes over each row, and where it differs."""
    reason = tiling.reason
    if refusal:
        walk = "column tiles of outputs" if form == "column" else "one program per output"
        reason += f"; Triton: not split ({refusal}), {walk} ({form})"
    if form == "looped":
        gpu = choose_config(form, rows, red, interpreter=False)
        reads = len(online.passes) + int(full_stores)
        reason += (f"; Triton: looped, {reads} read(s) of each row ({len(online.passes)} reduction pass(es)"
                   f"{' + the stores' if full_stores else ''}); on a GPU {gpu.text()}: {looped_config_reason(gpu)}")
        if online.pairs:
            reason += "; " + online.describe()
    if reason == tiling.reason:
        return tiling
    return replace(tiling, reason=reason)


def _needs_int64(kernel: Kernel, buffers: dict) -> bool:
    sizes = [kernel.rows * kernel.red] + [buffers[n].numel for n in kernel.reads + kernel.stored if n in buffers]
    return any(static_int(s) is None or static_int(s) >= INT32_LIMIT for s in sizes)


def generate_kernel(kernel: Kernel, buffers: dict, size_symbols: list, interpreter: bool) -> TritonKernel:
    tiling = choose_tiling(kernel.kind, kernel.nodes, kernel.rows, kernel.red, buffers, kernel.stored)
    form = kernel_form(kernel, tiling)
    plan = _plan(kernel, tiling, form)
    int64 = _needs_int64(kernel, buffers)
    itemsize = (column_itemsize(kernel, buffers) if form == "column" else None) or 4
    config = choose_config(form, plan.rows, plan.red, interpreter, itemsize)
    masks = _masks(form, plan, config, itemsize)
    printer = TritonPrinter(plan, buffers, "x" if form == "pointwise" else "r", masks)
    body = PythonSource(depth=1)  # the kernel's body, inside its def
    online = None
    with use_handler(printer):
        if form == "pointwise":
            _pointwise_body(kernel, plan, printer, body, masks, int64)
        elif form == "tiled":
            _tiled_body(kernel, plan, printer, body, masks, int64)
        elif form in ("scan", "scan_looped"):
            scan_body(kernel, plan, printer, body, masks, int64, form, _rows_header, _r_header, _r_loop)
        else:
            online = _passes(kernel, plan, buffers, form)
            _reduction_body(kernel, plan, printer, body, masks, int64, form, online)
    wanted = tiling.choice == "split" or tiling.choice == "column" and wants_column_split(kernel.rows, kernel.red,
                                                                                         itemsize)
    refusal = split_refusal(kernel, buffers) if wanted and not is_split_stage(kernel.nodes) else None
    tiling = _tiling_note(tiling, form, online, plan.rows, plan.red, _full_stores(kernel, plan), refusal)
    return _finish(kernel, plan, buffers, printer, body, size_symbols, form, config, int64, tiling, itemsize)


def _passes(kernel: Kernel, plan: KernelPlan, buffers: dict, form: str) -> OnlinePasses:
    """The kernel's reduction passes; the looped form merges max + sum(exp(x - max)) pairs (Note [Online
    softmax]): each pass it saves is one read of every row less. The persistent form reads the row once
    whatever the passes, so it keeps them as they are."""
    if form != "looped":
        return OnlinePasses(kernel.passes, {})
    return online_passes(plan, kernel.passes, {name: b.dtype for name, b in buffers.items()})


def _masks(form: str, plan: KernelPlan, config: LaunchConfig, itemsize: int) -> dict:
    """Which masks the kernel needs. A block that divides its axis needs none; the source must hold for every
    config it may launch with (the GPU's, the interpreter's, the autotuner's), so all of them must divide."""
    configs = [config, choose_config(form, plan.rows, plan.red, True),
               choose_config(form, plan.rows, plan.red, False, itemsize)]
    configs += candidate_configs(form, plan.rows, plan.red, itemsize)
    rows, red = static_int(plan.rows), static_int(plan.red)

    def needs_mask(n: int | None, blocks: list[int]) -> bool:  # every block divides 0, yet no lane is inside
        return n is None or n == 0 or any(n % block for block in blocks)

    if form == "tiled":  # Y rows (the plan's x axis) by X columns (its r axis)
        y_needed = needs_mask(rows, [c.YBLOCK for c in configs])
        x_needed = needs_mask(red, [c.XBLOCK for c in configs])
        both = "mask" if y_needed and x_needed else ("ymask" if y_needed else "xmask" if x_needed else None)
        return {"x": "ymask" if y_needed else None, "r": "xmask" if x_needed else None, "xr": both}
    x_needed = needs_mask(rows, [c.XBLOCK for c in configs])
    masks = {"x": "xmask" if x_needed else None}
    if form != "pointwise":
        r_needed = needs_mask(red, [c.RBLOCK for c in configs])
        masks["r"] = "rmask" if r_needed else None
        masks["xr"] = "xrmask" if x_needed and r_needed else masks["x"] or masks["r"]
    return masks


def _rows_header(body: PythonSource, plan: KernelPlan, masks: dict, int64: bool, two_d: bool):
    pid = "tl.program_id(0).to(tl.int64)" if int64 else "tl.program_id(0)"
    body.add(f"xoffset = {pid} * XBLOCK")
    body.add(f"x0 = xoffset + tl.arange(0, XBLOCK){'[:, None]' if two_d else ''}")
    if masks["x"]:
        body.add(f"xmask = x0 < {triton_index(plan.rows)}")


def _r_header(body: PythonSource, plan: KernelPlan, masks: dict, int64: bool, start: str):
    r = f"{start}tl.arange(0, RBLOCK)[None, :]"
    body.add(f"r0 = ({r}).to(tl.int64)" if int64 else f"r0 = {r}")
    if masks["r"]:
        body.add(f"rmask = r0 < {triton_index(plan.red)}")
    if masks["r"] and masks["x"]:
        body.add("xrmask = xmask & rmask")


def _store_every_output(kernel, plan, printer, body, dims, shape):
    """A pointwise kernel's body: each stored node computed at its index and stored over the block."""
    printer.store_dims, printer.store_shape = dims, shape
    stores = emit_stores(printer, plan, kernel.stored_nodes)
    body.extend(*printer.take())
    body.extend(*stores)


def _pointwise_body(kernel, plan, printer, body, masks, int64):
    _rows_header(body, plan, masks, int64, two_d=False)
    _store_every_output(kernel, plan, printer, body, X, "[XBLOCK]")


# Note [Tiles on a 1-D grid]
# The tiled form's programs are numbered along one grid axis, as every other form's (the bound launcher
# starts grid_x programs; a second CUDA grid axis would also cap the Y blocks at 65535): program p walks
# X block p % xblocks of Y block p // xblocks, so neighbouring programs share the Y rows of the read.


def _tiled_body(kernel, plan, printer, body, masks, int64):
    """[YBLOCK, XBLOCK] tiles over (y, x) (Note [Tiling from strides], Note [Tiles on a 1-D grid])."""
    pid = "tl.program_id(0).to(tl.int64)" if int64 else "tl.program_id(0)"
    body.add(f"xblocks = ({triton_index(plan.red)} + XBLOCK - 1) // XBLOCK")
    body.add(f"yoffset = ({pid} // xblocks) * YBLOCK")
    body.add("y0 = yoffset + tl.arange(0, YBLOCK)[:, None]")
    if masks["x"]:
        body.add(f"ymask = y0 < {triton_index(plan.rows)}")
    body.add(f"xoffset = ({pid} % xblocks) * XBLOCK")
    body.add("x0 = xoffset + tl.arange(0, XBLOCK)[None, :]")
    if masks["r"]:
        body.add(f"xmask = x0 < {triton_index(plan.red)}")
    if masks["x"] and masks["r"]:
        body.add("mask = ymask & xmask")
    _store_every_output(kernel, plan, printer, body, XR, "[YBLOCK, XBLOCK]")


# Reductions (Note [torch semantics in Triton] in triton/prelude.py): each value is first made a full
# [XBLOCK, RBLOCK] tile with masked-off lanes set to the reduction's identity, then reduced along axis 1 to
# [XBLOCK, 1] (Note [Reductions without Triton's standard library] in the prelude).
ROW_REDUCE = {**{kind: f'gb_reduce_row({{t}}, "{kind}", XBLOCK, RBLOCK)' for kind in ("sum", "prod", "max", "min")},
              "any": 'gb_reduce_row({t}, "max", XBLOCK, RBLOCK) > 0',
              "all": 'gb_reduce_row({t}, "min", XBLOCK, RBLOCK) > 0',
              "argmax": "gb_argmax_row({t}, {i}, XBLOCK, RBLOCK)", "argmin": "gb_argmin_row({t}, {i}, XBLOCK, RBLOCK)"}
# the looped form's accumulator update, elementwise
ELEMENTWISE = {"sum": "{acc} + {t}", "prod": "{acc} * {t}", "max": "gb_maximum({acc}, {t})",
               "min": "gb_minimum({acc}, {t})", "any": "gb_maximum({acc}, {t})", "all": "gb_minimum({acc}, {t})"}


def _kind(reduction_type: str, dtype: torch.dtype) -> str:
    """The reduction to run: the max/min of bools is any/all."""
    if dtype == torch.bool and reduction_type in ("max", "min"):
        return "any" if reduction_type == "max" else "all"
    return reduction_type


def _tile(printer: TritonPrinter, kind: str, dtype: torch.dtype, src_dtype: torch.dtype,
          value: TVar) -> tuple[TVar, torch.dtype, str]:
    dtype, identity = accumulator_type(kind, dtype, src_dtype)
    if kind in FLAG_REDUCTIONS:
        value = printer.emit(f"({printer.tensor(value)} != 0).to(tl.int32)", torch.int32, value.dims)
    elif value.literal or compute_dtype(value.dtype) != dtype:
        value = printer.emit(f"{printer.tensor(value)}.to({tl_type(dtype)})", dtype, value.dims)
    identity_text = literal(identity, dtype)
    mask = printer.block_mask(XR)
    text, dims = str(value), value.dims
    if mask:
        text = f"tl.where({mask}, {text}, {identity_text})"
        dims = dims | {"xmask": X, "rmask": R, "xrmask": XR}[mask]
    if dims != XR:
        text = f"{text} + tl.full([XBLOCK, RBLOCK], 0, {tl_type(dtype)})"
    if text == str(value):
        return value, dtype, identity_text
    return printer.emit(text, dtype, XR), dtype, identity_text


def _row_value(kind: str, tile: str, index: str | None) -> str:
    return ROW_REDUCE[kind].format(t=tile, i=index)


def _reduction_body(kernel, plan, printer, body, masks, int64, form, online: OnlinePasses):
    _rows_header(body, plan, masks, int64, two_d=True)
    index_type = "tl.int64" if int64 else "tl.int32"
    if form == "persistent":
        _r_header(body, plan, masks, int64, "")
    partners = {maximum: total for total, maximum in online.pairs.items()}
    loops = len(online.passes) + int(_full_stores(kernel, plan))
    for number, group in enumerate(online.passes):
        if form != "persistent":
            printer.start_inner_loop()
            printer.eviction = _eviction(number, loops)
        updates, finals, inits = [], [], []
        # a sum paired with its max is computed with it (Note [Online softmax])
        for name, out_dtype, src_dtype, reduction_type, value in run_pass(printer, plan, group, online.pairs):
            printer.tag = tag = LineTag(name)
            kind = _kind(reduction_type, out_dtype)
            tile, dtype, identity = _tile(printer, kind, out_dtype, src_dtype, value)
            arg = kind in ("argmax", "argmin")
            indices = printer.emit(f"r0 + tl.full([XBLOCK, RBLOCK], 0, {index_type})", torch.int64, XR) if arg else None
            row = f"row_{name}"
            if form == "persistent":
                finals.append((f"{row} = {_row_value(kind, tile.name, indices and indices.name)}", tag))
            else:
                acc = f"acc_{name}"
                inits.append((f"{acc} = tl.full([XBLOCK, RBLOCK], {identity}, {tl_type(dtype)})", tag))
                if name in partners:
                    _online_pair(printer, plan, name, partners[name], tile, dtype, inits, updates, finals)
                    continue
                if arg:
                    inits.append((f"{acc}_index = tl.full([XBLOCK, RBLOCK], 2147483647, {index_type})", tag))
                    update = f"gb_{kind}_combine({acc}, {acc}_index, {tile}, {indices})"
                    updates.append((f"{acc}, {acc}_index = {update}", tag))
                else:
                    step = ELEMENTWISE[kind].format(acc=acc, t=tile)
                    updates.append((f"{acc} = {step}", tag))
                finals.append((f"{row} = {_row_value(kind, acc, f'{acc}_index' if arg else None)}", tag))
        if form == "persistent":
            body.extend(*printer.take())
        else:
            body.extend(*printer.take_hoisted())
            for line, tag in inits:
                body.add(line, tag)
            _r_loop(body, plan, masks, int64, printer.lines + [line for line, _ in updates],
                    printer.line_tags + [tag for _, tag in updates])
            printer.lines, printer.line_tags = [], []
        for line, tag in finals:
            body.add(line, tag)
    _reduction_stores(kernel, plan, printer, body, masks, int64, form)


def _online_pair(printer, plan, maximum, total, tile, dtype, inits, updates, finals):
    """The running (max, rescaled sum) pair of Note [Online softmax]: one exp per element."""
    acc, acc_total = f"acc_{maximum}", f"acc_{total}"
    tag = LineTag(total)
    inits.append((f"{acc_total} = tl.full([XBLOCK, RBLOCK], 0.0, {tl_type(dtype)})", tag))
    updates.append((f"{acc}, {acc_total} = gb_online_softmax_combine({acc}, {acc_total}, {tile})", tag))
    finals.append((f"row_{maximum}, row_{total} = gb_online_softmax_row({acc}, {acc_total}, XBLOCK, RBLOCK)", tag))
    printer.accumulators[total] = TVar(f"row_{total}", plan.by_name[total].dtype, False, X)


def _full_stores(kernel: Kernel, plan: KernelPlan) -> bool:
    """Does the kernel store a full-size output (one more loop over each row after the passes)?"""
    return plan.is_reduction and bool(stores_by_role(kernel, plan)[1])


def _eviction(number: int, loops: int) -> str:
    """Loads of a looped kernel's passes over the row (Note [Eviction in looped rows])."""
    return "evict_last" if number < loops - 1 else "evict_first"


# Note [Eviction in looped rows]
# A looped kernel reads each row once per pass (a column kernel each tile of columns: both walk r in a loop).
# While a pass is not the row's last, its loads ask the cache to keep the lines (evict_last), so the next
# pass over the same row finds them in L2; the last pass marks them evict_first, so they make room for the
# rows still to come (Inductor marks a reduction's single read so too). Loads that do not move along the row
# (per-row values, broadcasts) keep the default.


def _r_loop(body, plan, masks, int64, lines, tags):
    """One walk of the row in steps of RBLOCK around `lines` (a looped kernel's pass or its stores)."""
    symbolic = static_int(plan.red) is None
    if symbolic:  # older Triton interpreters cannot take a tensor (a size argument) as range()'s bound
        body.add("roffset = 0")
        header = f"while roffset < {triton_index(plan.red)}"
    else:
        header = f"for roffset in range(0, {triton_index(plan.red)}, RBLOCK)"
    with body.block(header):
        _r_header(body, plan, masks, int64, "roffset + ")
        body.extend(lines, tags)
        if symbolic:
            body.add("roffset += RBLOCK")


def _reduction_stores(kernel, plan, printer, body, masks, int64, form):
    """The epilogue (kernel_core.emit_epilogue): per-row values as [XBLOCK, 1] blocks, then the full-size
    outputs over the row: in the tile already in registers (persistent), or in one more walk of it."""
    def begin(per_row: bool):
        if not per_row and form != "persistent":
            printer.start_inner_loop()
            printer.eviction = _eviction(0, 1)
        printer.store_dims, printer.store_shape = (X, "[XBLOCK, 1]") if per_row else (XR, "[XBLOCK, RBLOCK]")

    def row_loop(body, lines, tags):
        if form == "persistent":
            body.extend(lines, tags)
        else:
            _r_loop(body, plan, masks, int64, lines, tags)

    emit_epilogue(printer, kernel, plan, body, begin, row_loop)


def _finish(kernel, plan, buffers, printer, body, size_symbols, form, config, int64, tiling,
            itemsize: int) -> TritonKernel:
    args = buffer_arguments(kernel, printer)
    sizes = size_arguments(size_symbols, printer)
    constexprs = ["XBLOCK"] + ({"pointwise": [], "tiled": ["YBLOCK"]}.get(form, ["RBLOCK"]))
    params = args + sizes + [f"{c}: tl.constexpr" for c in constexprs]
    header = ["@triton.jit", f"def {kernel.name}({', '.join(params)}):"]
    floats = float_sizes(size_symbols)  # Note [Derived sizes]
    prologue = [f"    {s} = {s}.to(tl.int64)" for s in sizes if s not in floats] if int64 else []
    lines = header + prologue + body.lines
    tags = [None] * (len(header) + len(prologue)) + body.tags
    signature = {name: SIGNATURE_TYPES[buffers[name].dtype] for name in args}
    signature.update({s: "fp32" if s in floats else "i32" for s in sizes})
    signature.update({c: "constexpr" for c in constexprs})
    return TritonKernel(kernel.name, "\n".join(lines), args, sizes, form, plan.rows, plan.red, config, int64,
                        signature, tiling, tags, itemsize=itemsize,
                        accumulates=kernel.accumulates)
