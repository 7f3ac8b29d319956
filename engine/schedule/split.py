"""Split reductions on Triton: few outputs, a long reduction -> two kernels, partial results between them.

Note [Split reductions on the GPU]
A full sum of a large tensor (or a column sum of a few columns) has one or a few outputs; one program per
output would run the whole reduction on one SM of 132. The schedule splits such a kernel in two, as plain
IR, so code generation, the memory plan and the wrapper need nothing new:
  stage 1  `<name>_partials`: a Reduction of size (*outputs, parts) over `chunk` elements each: part p of
           output o reduces elements p*chunk .. p*chunk+chunk-1 of o's reduction (the kernel's prologue fused
           in as before). Lanes past the end (when parts*chunk exceeds the reduction) read a clamped index
           and contribute the reduction's identity.
  stage 2  the original kernel with each reduction replaced by one over its `parts` partial results (the same
           kind: a sum of sums, a max of maxima), followed by the kernel's epilogue and stores.
The partials are a workspace buffer the schedule adds to the graph (in the reduction's compute dtype: a
half-precision sum keeps its float32 partials), laid out part-major, (parts, *outputs): partial p of every
output is contiguous, as the input's rows are in a column reduction (Note [Column splits]). C++ splits inside
one kernel over its threads instead (Note [Split reductions in C++]). A kernel with several passes (a
reduction reading another), an argmax/argmin, or an epilogue reading the reduction's input is not split; the
tiling reason says why.

Note [Per-output values of a split]
A per-output value that neither reads a reduction nor feeds one belongs to stage 2, which runs over the
outputs: batch norm's running-mean update (running_mean * 0.9, added to the batch mean * 0.1) is one. Counted
as stage 1's, it made the epilogue "read the reduction's input" and kept every training batch norm of a
channels-last ResNet-50 unsplit: a 64-column mean over 401408 rows ran on one program for 1 ms on an H100.

Note [Column splits]
A reduction over a non-innermost axis with few outputs (x.sum(0) of a 2^22 x 8 tensor; after channels-last
convolutions, a squeeze-excitation mean of batch 8 x 128 channels over H*W) reads its input as rows of
`outputs` contiguous values. Stage 1 then numbers its programs part-major, x = part * outputs + output, so a
tile of consecutive x reads whole rows of one part's chunk, coalesced (output-major partials put consecutive
lanes a chunk apart: the 2^22 x 8 sum ran 3x slower than Inductor's), and the stage is a column kernel (Triton's
column form). Such kernels also split below SPLIT_MIN_REDUCTION when the column form would keep too few bytes
of each row in flight (Note [Column splits by bytes]) while each output reduces a long column. A full-size
output computed from the reduction's input (the batch-norm output stored beside its mean) rides along in stage
1 when the parts divide the reduction exactly: stage 1 then covers every element once, x * chunk + r, and
stores it there.

Note [Column splits by bytes]
What the column form needs is bytes of each row in flight, not outputs: a program reads XBLOCK contiguous
values of every row it steps over, and the programs together read whole rows. Measured on an H200 (session 7,
torch.profiler of the bf16 transformer block's training step, B=8 T=1024 D=1024, one run):
  good  x.sum(0) of 8192 x 8192 float32 (32 KB a row): 256 programs of 32 outputs (a 128-byte line of each
        row) x 64 steps over 8 warps, 0.98 of Inductor's speed (session 6: 1.02);
  bad   the bias gradients, x.sum(0) of 8192 x 4096 and 8192 x 3072 bfloat16 (8 KB and 6 KB a row), which the
        old rule (split below 2048 outputs) left whole: the column form narrowed its tiles to 16 outputs (32
        bytes, one sector, of each row) to keep 256 and 192 programs, and ran 60 and 57 us (1.1 and 0.88 TB/s)
        where Inductor's split kernels took 16 + 2.5 and 13 + 1.6 us;
  good  a bias gradient over 1024 bfloat16 outputs split into 8 parts (stage 1: 8192 outputs, 64 bytes of
        each row a program, 256 programs): 4.6 us, Inductor's 4.8.
So a column reduction splits when the rows of its narrowest column read (column_itemsize) are narrower than
COLUMN_ROW_BYTES, the good case's 32 KB, and stage 1 takes at least COLUMN_ROW_BYTES / (row bytes) parts, so
that its rows (parts x outputs values) are as wide in bytes as the good case's, and launches the good case's
config (the config counts bytes too, Note [Column config]): 4 parts for 4096 bfloat16 outputs, 8 for 3072
(6 would do; 8 is the first count from there that divides 8192 rows), 16 for 1024 bfloat16 (8 before), 8 for
1024 float32 (a layernorm's weight gradient, as before: each of its two reads is its own stream of rows).
A few-outputs split that reads columns (wants_split) takes its parts the same way. For float32 this is the old
rule in other units (stage 1 took about 8192 / outputs parts: 32 KB rows), except that 2048-8191 outputs now
split too (rows of 8-32 KB, which the column form walked in narrower tiles or on fewer programs than the good
case; measured in neither form). Inductor splits these sums as well (outer reductions of fewer than 2 * 32 *
132 outputs: 32 parts of 256 rows for 4096 columns, 64 of 128 for 3072 and for 1024, stage 1 at 64 outputs x 8
steps over 4 warps); our parts are fewer and longer, each program walking its tile as the good case does. The
floor on the reduction's size (COLUMN_SPLIT_MIN_ELEMENTS) stays in elements: no measurement asks to move it,
and a half-precision tensor under it in bytes (the avgpool of 2 x 64 x 48 x 48 float16: 576 KB) keeps
its split.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy
import torch

from engine.ir.graph import LoweredGraph
from engine.ir.indexing import unflatten
from engine.ir.nodes import Buffer, Pointwise, Reduction
from engine.ir.ops import compute_dtype, ops, reduction_identity
from engine.schedule.fusion import Kernel, Schedule
from engine.schedule import policy
from engine.schedule.policy import GPU_SPLIT_MIN_REDUCTION, wants_column_split, wants_split
from engine.schedule.strides import narrowest_column_read

PARTIALS = 1024  # partial results in all: ~8 programs for each of an H200's 132 SMs
MIN_CHUNK = 4096  # a part reduces at least this many elements (two looped steps of 2048)
COLUMN_MIN_CHUNK = 256  # a part of a column split reduces at least this many rows (4 steps of 64)
COMBINABLE = ("sum", "prod", "max", "min", "any", "all")  # partial results combine with the same reduction


@dataclass(eq=False)
class SplitPartials(Reduction):
    """Stage 1 of a split reduction (Note [Split reductions on the GPU])."""
    split_of: str = ""
    parts: int = 1
    chunk: int = 1


@dataclass(eq=False)
class SplitCombine(Reduction):
    """Stage 2: the split reduction's own buffer, reduced from its partial results."""
    split_of: str = ""
    parts: int = 1


def is_split_stage(nodes: list[Buffer]) -> bool:
    return any(isinstance(n, (SplitPartials, SplitCombine)) for n in nodes)


def column_itemsize(kernel: Kernel, buffers: dict) -> int | None:
    """The element size in bytes of the kernel's narrowest read along the outputs, strided along the reduction
    (Note [Column splits]); None when it reads no columns. The narrowest, because each read is its own stream
    of rows: the tile that gives it enough bytes gives the wider ones more (Note [Column splits by bytes])."""
    return narrowest_column_read(kernel.nodes, kernel.plan, buffers, kernel.stored)


def split_reductions(schedule: Schedule, graph: LoweredGraph, backend: str) -> tuple[Schedule, LoweredGraph]:
    """Triton: each reduction kernel with few outputs and a long reduction as two kernels (Note [Split
    reductions on the GPU], Note [Column splits]); the graph gains the workspace buffers. Other backends: both
    unchanged."""
    if backend != "triton":
        return schedule, graph
    kernels, workspace = [], {}
    for kernel in schedule.kernels:
        if kernel.scans:  # a scan walks its whole row in order: nothing to split
            kernels.append(kernel)
            continue
        few = kernel.kind == "reduction" and wants_split(kernel.rows, kernel.red, GPU_SPLIT_MIN_REDUCTION)
        # the reads are probed only where some element size would split (1 byte: the widest bound)
        probe = few or kernel.kind == "reduction" and wants_column_split(kernel.rows, kernel.red, 1)
        itemsize = column_itemsize(kernel, graph.buffers) if probe else None
        splits = few or wants_column_split(kernel.rows, kernel.red, itemsize)
        if splits and split_refusal(kernel, graph.buffers) is None:
            first, second = _split(kernel, itemsize)
            kernels += [first, second]
            workspace.update({n.name: n for n in first.nodes if isinstance(n, SplitPartials)})
        else:
            kernels.append(kernel)
    if not workspace:
        return schedule, graph
    return (dataclasses.replace(schedule, kernels=kernels),
            dataclasses.replace(graph, buffers={**graph.buffers, **workspace}))


def split_refusal(kernel: Kernel, buffers: dict) -> str | None:
    """Why this few-outputs kernel is not split, or None when it can be."""
    if len(kernel.passes) != 1:
        return f"{len(kernel.passes)} passes over each output (a reduction reads another)"
    kinds = sorted({n.reduction_type for n in kernel.passes[0]} - set(COMBINABLE))
    if kinds:
        return f"an {kinds[0]} (partial results would need their indices)"
    prologue, epilogue = _prologue_and_epilogue(kernel)
    stored = [n for n in prologue if n.name in kernel.stored]
    if any(kernel.plan.role(n) != "full" for n in stored):
        return "it stores a per-output value computed before the reduction"
    if stored:
        parts, chunk = split_parts(int(kernel.red), int(kernel.rows), column_itemsize(kernel, buffers), exact=True)
        if parts * chunk != int(kernel.red):
            return (f"it stores a full-size value of the reduction's input, which stage 1 can store only when "
                    f"the parts divide the reduction ({parts} parts of {chunk} do not divide {kernel.red})")
    prologue_names = {n.name for n in prologue}
    if any(set(kernel.node_reads[n.name]) & prologue_names for n in epilogue):
        return "its epilogue reads the reduction's input"
    return None


def _prologue_and_epilogue(kernel: Kernel) -> tuple[list[Buffer], list[Buffer]]:
    """Pointwise nodes of stage 1 (what the reductions read, full-size values of their input, and what those
    read) and of stage 2 (what reads a reduction, and per-output values that neither read nor feed one)
    (Note [Per-output values of a split])."""
    after: set[str] = set()
    for node in kernel.nodes:  # program order: producers first
        if isinstance(node, Reduction) or set(kernel.node_reads[node.name]) & after:
            after.add(node.name)
    pointwise = [n for n in kernel.nodes if isinstance(n, Pointwise)]
    first = {n.name for n in kernel.nodes if isinstance(n, Reduction)} | {
        n.name for n in pointwise if n.name not in after and kernel.plan.role(n) == "full"}
    for node in reversed(kernel.nodes):  # consumers first: what stage 1 reads is computed in stage 1
        if node.name in first:
            first.update(kernel.node_reads[node.name])
    return [n for n in pointwise if n.name in first], [n for n in pointwise if n.name not in first]


def split_parts(red: int, outputs: int, itemsize: int | None, exact: bool = False) -> tuple[int, int]:
    """(parts, chunk) of a split reduction over `red` elements for each of `outputs`.
    Row reads (itemsize None): about PARTIALS partial results in all, each of at least MIN_CHUNK elements, a
    count of parts that divides the reduction when one is close below (no lane past the end, no clamp).
    Column reads of `itemsize` bytes: at least COLUMN_ROW_BYTES a row of stage 1, parts * outputs * itemsize
    (Note [Column splits by bytes]), each part at least COLUMN_MIN_CHUNK rows; a count that divides is looked
    for above that floor, as fewer parts would narrow the rows again. With `exact` (stage 1 stores a full-size
    value, Note [Column splits]) a count that divides is then looked for below it too, down to half."""
    if itemsize is None:
        target = max(2, min(PARTIALS // outputs, red // MIN_CHUNK))
        candidates = range(target, max(1, target // 2), -1)
    else:
        most = red // COLUMN_MIN_CHUNK
        target = max(2, min(-(-policy.COLUMN_ROW_BYTES // (outputs * itemsize)), most))
        candidates = range(target, max(target, min(2 * target, most)) + 1)
    below = range(target - 1, max(1, target // 2) - 1, -1) if exact and itemsize is not None else ()
    for parts in (*candidates, *below):
        if red % parts == 0:
            return parts, red // parts
    return target, -(-red // target)


def _split(kernel: Kernel, itemsize: int | None) -> tuple[Kernel, Kernel]:
    prologue, epilogue = _prologue_and_epilogue(kernel)
    outputs, red = int(kernel.rows), int(kernel.red)
    full = [n.name for n in prologue if n.name in kernel.stored]  # stored by stage 1 (Note [Column splits])
    parts, chunk = split_parts(red, outputs, itemsize, exact=bool(full))
    partials = [_partials(node, parts, chunk) for node in kernel.passes[0]]
    combined = [_combined(node, part) for node, part in zip(kernel.passes[0], partials)]
    # a part reads what its reduction read, a combine reads its partial results (Note [Reads on the kernel])
    node_reads = {**kernel.node_reads, **{p.name: kernel.node_reads[p.split_of] for p in partials},
                  **{c.name: (p.name,) for c, p in zip(combined, partials)}}
    first_nodes = prologue + partials
    second_nodes = combined + epilogue
    first = Kernel(f"{kernel.name}_partials", "reduction", first_nodes, [p.name for p in partials] + full,
                   _external_reads(first_nodes, node_reads), _reads_of(first_nodes, node_reads),
                   sympy.Integer(outputs * parts), sympy.Integer(chunk))
    reads = [p.name for p in partials] + [r for r in _external_reads(epilogue, node_reads)
                                          if r not in {c.name for c in combined}]
    second = Kernel(kernel.name, "reduction", second_nodes, [n for n in kernel.stored if n not in full],
                    list(dict.fromkeys(reads)), _reads_of(second_nodes, node_reads), kernel.rows,
                    sympy.Integer(parts))
    return first, second


def _reads_of(nodes: list[Buffer], node_reads: dict) -> dict[str, tuple[str, ...]]:
    return {n.name: node_reads[n.name] for n in nodes}


def _external_reads(nodes: list[Buffer], node_reads: dict) -> list[str]:
    inside = {n.name for n in nodes}
    return list(dict.fromkeys(r for n in nodes for r in node_reads[n.name] if r not in inside))


def _partials(node: Reduction, parts: int, chunk: int) -> SplitPartials:
    red = int(node.reduction_numel)
    exact = parts * chunk == red
    identity = _typed(reduction_identity(node.reduction_type, node.src_dtype), node.src_dtype)

    def inner_fn(index, rindex):
        part, *outputs = index  # part-major (Note [Column splits])
        linear = part * chunk + rindex[0]
        position = linear if exact else sympy.Min(linear, red - 1)
        value = node.inner_fn(list(outputs), unflatten(position, node.reduction_size))
        if exact:
            return value
        inside = ops.lt(ops.index_expr(linear, torch.int64), ops.constant(red, torch.int64))
        return ops.where(inside, value, ops.constant(identity, node.src_dtype))

    return SplitPartials(f"{node.name}_partials", (sympy.Integer(parts),) + tuple(node.size),
                         compute_dtype(node.dtype), node.device, node.origins, (sympy.Integer(chunk),),
                         node.reduction_type, node.src_dtype, inner_fn, split_of=node.name, parts=parts, chunk=chunk)


def _combined(node: Reduction, partials: SplitPartials) -> SplitCombine:
    def inner_fn(index, rindex):
        return ops.load(partials.name, [rindex[0]] + list(index))

    return SplitCombine(node.name, node.size, node.dtype, node.device, node.origins, (sympy.Integer(partials.parts),),
                        node.reduction_type, partials.dtype, inner_fn, split_of=node.name, parts=partials.parts)


def _typed(value, dtype: torch.dtype):
    if dtype == torch.bool:
        return bool(value)
    return float(value) if dtype.is_floating_point else int(value)
