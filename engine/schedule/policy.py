"""Fusion policy: which groups should share a kernel, as a list of named rules. Mechanism lives in fusion.py.

Each candidate pair is put to `decide` once. The rules are asked in order; a rule either passes (None) or
gives the verdict, with its reason in words and its own name, and the first verdict stands. The app shows
the rule and the reason as "why (not) fused". The mechanism then only checks that a fusion the policy wants
is legal (no cycle between kernels, one valid loop nest); it never second-guesses the policy.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import sympy

from engine.ir.nodes import Buffer, Fallback
from engine.schedule.groups import Group, canonical, same_size
from engine.schedule.kernel_plan import describe_size
from engine.schedule.templates import epilogue_verdict

MAX_REDUCTION_PASSES = 4  # more passes over a row than this re-read it too often to pay off
SPLIT_MAX_OUTPUTS = 16  # Note [Split reductions on the GPU] in split.py: this few outputs of a reduction ...
SPLIT_MIN_REDUCTION = 1 << 16  # ... this long are tiled "split" (C++: over the threads) ...
GPU_SPLIT_MIN_REDUCTION = 1 << 14  # ... and from this long split in two kernels on Triton (Note [Few long rows])
# Column splits on Triton (Note [Column splits by bytes] in split.py):
COLUMN_ROW_BYTES = 8192 * 4  # a row of the measured-good 8192-column float32 sum
COLUMN_SPLIT_MIN_REDUCTION = 2048  # 8 steps of 256 a program and more
COLUMN_SPLIT_MIN_ELEMENTS = 1 << 18  # below, the whole reduction takes a few microseconds either way

# Note [Few long rows]
# On Triton a reduction of few outputs runs one program per output, on as many of the GPU's 132 SMs: a timm
# PoolFormer's GroupNorm(1, C) over 16 images reduces 62720 and 25088 elements a row in its later stages, under
# the C++ threads' 65536 floor, and those kernels (3 passes each, 16 of them a call) were most of its device
# time, 2.4x Inductor's in reduce-overhead mode where launches cost nothing (H100). From 16384 elements a row
# (64 KB of float32 a pass, microseconds on one SM) the split's second launch is the cheaper side, so Triton
# splits from there; C++ keeps 65536, where its threads, not SMs, are what a few rows leave idle.


def wants_split(rows, red, floor: int = SPLIT_MIN_REDUCTION) -> bool:
    """Few outputs, each a reduction of at least `floor` elements: split (Note [Split reductions on the GPU];
    Triton passes GPU_SPLIT_MIN_REDUCTION, Note [Few long rows])."""
    rows, red = sympy.sympify(rows), sympy.sympify(red)
    return bool(rows.is_Integer and red.is_Integer and int(rows) <= SPLIT_MAX_OUTPUTS and int(red) >= floor)


def wants_column_split(rows, red, itemsize: int | None) -> bool:
    """A column reduction whose column form would keep too few bytes of each row in flight: rows of `rows`
    values of `itemsize` bytes (its narrowest column read; None: it reads no columns) narrower than
    COLUMN_ROW_BYTES (Note [Column splits by bytes] in split.py)."""
    rows, red = sympy.sympify(rows), sympy.sympify(red)
    return bool(itemsize is not None and rows.is_Integer and red.is_Integer
                and int(rows) * itemsize < COLUMN_ROW_BYTES and int(red) >= COLUMN_SPLIT_MIN_REDUCTION
                and int(rows) * int(red) >= COLUMN_SPLIT_MIN_ELEMENTS)


@dataclass(frozen=True)
class FusionKnobs:
    """What-if switches (engine compare, the app's compare page): fusion off, or a cap on nodes per kernel."""
    enabled: bool = True
    max_nodes: int | None = None  # at most this many IR nodes in one kernel; None: no cap


@dataclass(frozen=True)
class Candidate:
    """Two groups that might become one kernel. Vertical: `first` produces what `second` reads; horizontal:
    siblings, `first` earlier in the program."""
    first: Group
    second: Group
    kind: str  # vertical | horizontal
    passes: int  # passes over each row the merged kernel would need
    first_only_feeds_second: bool  # every reader of first's nodes is in second (no output among them either)
    knobs: FusionKnobs = FusionKnobs()
    # the group's nodes that are stored or computed for themselves (not only inlined into a reader)
    visible: Callable[[Group], list[Buffer]] = field(default=lambda group: group.nodes)
    window: int = 1  # vertical: the most positions at which one of second's nodes reads one of first's
    # over MAX_REDUCTION_PASSES only: why the merged kernel's rows are held whole (Note [Persistent chains]),
    # or None when they are looped
    persistent_row: str | None = None
    splits_few_rows: bool = False  # the backend splits a few-rows reduction (Triton: Note [Few rows stay splittable])
    splits_columns: bool = False  # ... and this pair's reduction reads columns it would split (Note [Column splits])


@dataclass(frozen=True)
class Verdict:
    fuse: bool
    reason: str
    rule: str
    inline: bool = False  # fuse by recomputing `first` inside `second`, never storing it
    recompute: bool = False  # no fusion: the consumer recomputes what it reads of the producer (recompute_in_reader)


def _target_name(node) -> str:
    target = getattr(node, "target", None)
    return str(target).replace("aten.", "").replace(".default", "") if target is not None else node.kind


def _library_text(node) -> str:
    if isinstance(node, Fallback):
        return f"{node.name} runs eagerly ({_target_name(node)})"
    return f"{node.name} is a library call ({_target_name(node)})"


def _uniform_elements(group: Group):
    """The one element count of a group's visible elementwise nodes, or None when they mix sizes."""
    return next(iter(group.numels)) if len(group.numels) == 1 else None


# -- the rules ----------------------------------------------------------------------------------------------

def fusion_knobs(c: Candidate) -> Verdict | None:
    if not c.knobs.enabled:
        return Verdict(False, "fusion is switched off (fusion=off): every IR node is its own kernel", "fusion_knobs")
    total = len(c.first.nodes) + len(c.second.nodes)
    if c.knobs.max_nodes is not None and total > c.knobs.max_nodes:
        return Verdict(False, f"the kernel would hold {total} IR nodes, over the cap of {c.knobs.max_nodes} "
                              f"(max_nodes)", "fusion_knobs")
    return None


def accumulating_store(c: Candidate) -> Verdict | None:
    """A kernel that adds into data-dependent places (Note [Accumulating stores] in ir/nodes.py) is complete
    only when it ends: no reader of it and no sibling joins it; elementwise producers of its values may."""
    if c.first.scatter is not None:
        what = "a reader of it" if c.kind == "vertical" else "a sibling"
        return Verdict(False, f"{c.first.scatter.name} adds into data-dependent places: its value is complete "
                              f"only when its kernel ends, so {what} cannot share that kernel (Note "
                              f"[Accumulating stores])", "accumulating_store")
    if c.second.scatter is None:
        return None
    if c.kind != "vertical":
        return Verdict(False, f"{c.second.scatter.name} adds into data-dependent places: its kernel takes no "
                              f"siblings (Note [Accumulating stores])", "accumulating_store")
    if c.first.has_reduction or c.first.template is not None:
        producer = c.first.reduction.name if c.first.has_reduction else c.first.template.name
        return Verdict(False, f"{c.second.scatter.name} adds into data-dependent places over its source's "
                              f"elements, a loop without rows; {producer} reduces rows (its own kernel stores "
                              f"the values)", "accumulating_store")
    return None


def template_epilogue(c: Candidate) -> Verdict | None:
    """A GEMM template fuses elementwise consumers of its output as its epilogue (Note [GEMM templates])."""
    if c.first.template is None and c.second.template is None:
        return None
    if c.second.template is not None:
        if c.first.template is not None:
            return Verdict(False, "both are GEMMs (template candidates): two GEMMs never share a kernel",
                           "template_epilogue")
        return Verdict(False, "a template fuses consumers of its output (its epilogue), not producers of its inputs",
                       "template_epilogue")
    if c.kind != "vertical":
        return Verdict(False, "a template kernel fuses only its epilogue, no siblings", "template_epilogue")
    if c.second.library is not None:
        return Verdict(False, f"{_library_text(c.second.library)}: library and eager calls are not fused",
                       "template_epilogue")
    ok, reason = epilogue_verdict(c.first.template, c.visible(c.second))
    return Verdict(ok, reason, "template_epilogue")


def library_call(c: Candidate) -> Verdict | None:
    for side, group in (("producer" if c.kind == "vertical" else "first", c.first),
                        ("consumer" if c.kind == "vertical" else "second", c.second)):
        if group.library is not None:
            return Verdict(False, f"{side} {_library_text(group.library)}: library and eager calls are not fused",
                           "library_call")
    return None


# Note [Persistent chains]
# Each pass over a row re-reads it (Note [Reduction passes]), and a pass's producers are recomputed there: a
# looped row pays both per pass, so a kernel takes at most MAX_REDUCTION_PASSES. A row that fits one block
# (a static PERSISTENT_ROW elements or fewer, walked along its contiguous axis) is read once whatever the
# passes: Triton's persistent form keeps it in registers and computes every producer once for all passes, and
# a C++ thread walks it again in its own L1 cache (an expensive value two passes need is kept in the row cache,
# Note [Row cache] in codegen/cpp/reduction.py). So such rows have no pass limit: a chain of 32 softmaxes over
# rows of 64 is one kernel (Inductor keeps it in registers too), where the limit cut it into 16 kernels and
# 15 round trips through memory. A column reduction (strided along the row: Triton's column form loops over
# it) keeps the limit, as a looped row does. The mechanism finds the fact (fusion.py `_persistent_row`) only
# for candidates over the limit; the decision's reason says which rule let the passes through.


# Note [Scan kernels]
# A scan's kernel walks rows of its scanned (last) dim, one value per element (Note [Scans] in ir/nodes.py):
# its rows are a reduction's rows, but its value exists at the element being walked only. So it takes
# - elementwise producers over its elements (a prologue: computed inside the walk; x * 0.5 before a cumsum),
#   and any producer that only feeds it, recomputed where the scan reads it;
# - elementwise consumers over its elements that read it where they stand (an epilogue: cumsum(x) * 0.5 is
#   one kernel, as Inductor's), checked by the mechanism; a consumer reading it at another element (a shift,
#   or a scan over a dim other than the last, read back through its permutation) stays apart, stored;
# - no reduction, no second scan and no siblings: one running value per kernel keeps the loop one walk.


def scan_kernel(c: Candidate) -> Verdict | None:
    """A scan joins only elementwise work over its own elements (Note [Scan kernels])."""
    if c.first.scan is None and c.second.scan is None:
        return None
    rule = "scan_kernel"
    scan_side, other = (c.first, c.second) if c.first.scan is not None else (c.second, c.first)
    if c.kind != "vertical":
        return Verdict(False, f"{scan_side.scan.name} is a scan: its kernel takes no siblings (Note [Scan kernels])",
                       rule)
    if other.scan is not None or other.has_reduction or other.scatter is not None or other.template is not None:
        return Verdict(False, f"{scan_side.scan.name} is a scan: its kernel holds one running value and "
                              f"elementwise work over its elements, not {other.shape_text()} (Note [Scan kernels])",
                       rule)
    rows, red = scan_side.shape
    if other is c.first and c.first_only_feeds_second:
        return Verdict(True, f"inlined: the producer only feeds the scan {scan_side.scan.name}, so it is computed "
                             f"where the scan reads it (Note [Scan kernels])", rule, inline=True)
    numel = _uniform_elements(other)
    if numel is not None and same_size(numel, rows * red):
        role = "prologue" if other is c.first else "epilogue"
        return Verdict(True, f"{role} of the scan {scan_side.scan.name} over its {rows} rows x {red} elements, "
                             f"computed as the row is walked (Note [Scan kernels])", rule)
    return Verdict(False, f"different iteration space {other.shape_text()} vs the scan's {scan_side.shape_text()}",
                   rule)


def too_many_passes(c: Candidate) -> Verdict | None:
    if c.passes > MAX_REDUCTION_PASSES and c.persistent_row is None:
        return Verdict(False, f"would need {c.passes} passes over each row (limit {MAX_REDUCTION_PASSES}: each "
                              f"pass re-reads a looped row)", "too_many_passes")
    return None


# Note [Few rows stay splittable]
# Triton splits a reduction with few outputs and long rows over the GPU's SMs (Note [Split reductions on the
# GPU]), but only a kernel of one pass whose epilogue works per output: a second reduction reading the first
# (var after mean) or an elementwise epilogue over the whole input (group norm's normalize) keeps it one
# program per output. A timm PoolFormer's GroupNorm(1, C) over 16 images of 64 x 56 x 56 fused that way ran
# on 16 of 132 SMs at ~55 GB/s, 0.25-0.46 ms a kernel (3.7 ms of device time a call against Inductor's 1.0).
# So on Triton such a reduction takes neither: each pass is a kernel that splits, and the normalize is an
# elementwise kernel over every element, at the price of reading the input once per kernel. The same holds for
# a column reduction that splits (Note [Column splits] in split.py): a training batch norm's mean and variance
# over channels-last activations (64-2048 outputs, 401408 rows in ResNet-50's stem at batch 32) fused into one
# kernel of two passes ran as one program for every 64 columns, 1 ms a kernel on an H100.
def few_rows_stay_splittable(c: Candidate) -> Verdict | None:
    if not c.splits_few_rows:
        return None
    reduction = c.first if c.first.has_reduction else c.second if c.second.has_reduction else None
    if reduction is None or not (wants_split(*reduction.shape, GPU_SPLIT_MIN_REDUCTION) or c.splits_columns):
        return None
    rows, red = reduction.shape
    few = f"{rows} outputs each reducing {red} elements are split over the GPU's SMs"
    if c.first.has_reduction and c.second.has_reduction and c.passes > 1:
        return Verdict(False, f"{few}; a second reduction reading the first in the same kernel would leave one "
                              f"program per output (Note [Few rows stay splittable])", "few_rows_stay_splittable")
    found = _fit_around_reduction(c, reduction_first=True) if c.kind == "vertical" else None
    if found is not None and found[0] == "full":
        return Verdict(False, f"{few}; elementwise work over all {found[1]} elements after the reduction would "
                              f"leave one program per output (Note [Few rows stay splittable])",
                       "few_rows_stay_splittable")
    return None


def two_reductions(c: Candidate) -> Verdict | None:
    if not (c.first.has_reduction and c.second.has_reduction):
        return None
    (rows_a, red_a), (rows_b, red_b) = c.first.shape, c.second.shape
    if same_size(rows_a, rows_b) and same_size(red_a, red_b):
        return Verdict(True, f"both reduce {red_a} elements over the same {rows_a} rows", "two_reductions")
    return Verdict(False, f"different reductions: {c.first.shape_text()} vs {c.second.shape_text()}",
                   "two_reductions")


def _same_elements(c: Candidate):
    if c.first.has_reduction or c.second.has_reduction:
        return None
    rows_a, rows_b = c.first.shape[0], c.second.shape[0]
    return rows_a if same_size(rows_a, rows_b) else None


def elementwise(c: Candidate) -> Verdict | None:
    """A chain of elementwise ops over one iteration space is one loop."""
    numel = _same_elements(c) if c.kind == "vertical" else None
    return None if numel is None else Verdict(True, f"elementwise over the same {numel} elements", "elementwise")


def horizontal_siblings(c: Candidate) -> Verdict | None:
    """Independent elementwise groups over one iteration space that read a common buffer share one loop (and
    one read of that buffer)."""
    numel = _same_elements(c) if c.kind == "horizontal" else None
    return None if numel is None else Verdict(True, f"siblings over the same {numel} elements", "horizontal_siblings")


def _reduction_and_elementwise(c: Candidate):
    if c.first.has_reduction == c.second.has_reduction:
        return None
    return (c.first, c.second) if c.first.has_reduction else (c.second, c.first)


def _fits_rows(reduction: Group, pointwise: Group) -> str | None:
    """'full' when the elementwise side covers every (row, reduced) element, 'row' when one per row."""
    numel = _uniform_elements(pointwise)
    if numel is None:
        return None
    rows, red = reduction.shape
    if same_size(numel, rows * red):
        return "full"
    if same_size(numel, rows):
        return "row"
    return None


def _fit_around_reduction(c: Candidate, reduction_first: bool):
    """(fit, elements text, rows, red) when one side reduces and the other's elements fit its loop."""
    sides = _reduction_and_elementwise(c)
    if sides is None or (sides[0] is c.first) != reduction_first:
        return None
    reduction, pointwise = sides
    fit = _fits_rows(reduction, pointwise)
    return None if fit is None else (fit, describe_size(pointwise.last_visible.size), *reduction.shape)


# Note [Stored prologues of column reductions]
# An elementwise producer fused before a reduction is computed inside the reduction's loop at the elements the
# reduction reads. If the producer must also be stored (a library call or another kernel reads it too: the
# gradient of a bias is summed over the rows of a tensor that the weight's GEMM also reads), its stores run in
# a pass of their own over its elements in its own order (Note [Fused loop shape]: a full node's index is
# unflatten(x*red + r)). When the reduction walks the producer in that same order (it reduces the trailing dims:
# a softmax row), the pass is one more walk along the rows. When it reduces leading dims instead (a column
# reduction: x.sum(0) over the rows of a (tokens, features) tensor), each program of the kernel owns a few
# columns, the reduction's reads stride along memory, and the producer is computed twice, once per pass, at
# twice the reads. On an H200 the qkv gradient of a transformer block (the concatenation of dq, dk and dv,
# 8192 x 3072) fused with its bias gradient that way took 0.97 ms of a 2.6 ms training step. Apart, the
# producer is an elementwise kernel over all its elements and the reduction reads the stored result, a plain
# strided column: both coalesced, and the same bytes as the fused kernel's two passes.


def _trailing_reduction(reduction, node: Buffer) -> bool:
    """Does `reduction` reduce the trailing dims of `node`'s shape (its outputs, then its reduced dims, are
    node's dims in order)? Dims of size 1 do not count."""
    def dims(sizes):
        return [canonical(sympy.sympify(s)) for s in sizes if not same_size(sympy.sympify(s), sympy.Integer(1))]
    return dims(reduction.ranges) + dims(reduction.reduction_size) == dims(node.size)


def stored_prologue_of_column(c: Candidate) -> Verdict | None:
    """A producer that is also stored stays out of a reduction over its leading dims (Note [Stored prologues
    of column reductions])."""
    if c.kind != "vertical" or c.first_only_feeds_second or c.first.has_reduction or not c.second.has_reduction:
        return None
    found = _fit_around_reduction(c, reduction_first=False)
    if found is None or found[0] != "full":
        return None
    crossing = [n for n in c.visible(c.first) if not _trailing_reduction(c.second.reduction, n)]
    if not crossing:
        return None
    return Verdict(False, f"{crossing[0].name} is stored for other readers and {c.second.reduction.name} reduces "
                          f"its leading dims: fused, its stores would be a second pass over it in another order; "
                          f"apart, both kernels read coalesced (Note [Stored prologues of column reductions])",
                   "stored_prologue_of_column")


def reduction_prologue(c: Candidate) -> Verdict | None:
    """Elementwise work before a reduction runs inside the reduction's loop."""
    found = _fit_around_reduction(c, reduction_first=False)
    if found is None:
        return None
    fit, elements, rows, red = found
    if fit == "full":
        return Verdict(True, f"prologue (computed inside the reduction loop): {elements} = {rows} rows x {red}",
                       "reduction_prologue")
    return Verdict(True, f"per-row input over the same {rows} rows", "reduction_prologue")


# Note [Prologues of column reductions go with them]
# Layer norm's backward computes, per row, the input's gradient (row reductions over the features), and, per
# feature, the weight's and the bias's gradients: sum over the rows of dy * xhat and of dy, two column
# reductions over the same rows. dy * xhat is elementwise over the row kernel's elements, so the
# reduction_epilogue rule put it into the row kernel, stored, and its column sum became a kernel of its own,
# reading it back; the bias's sum of dy had no read in common with either and was a third kernel, a second
# walk over dy's columns. Kept out of the row kernel, the product is the prologue of its column reduction
# (computed inside that loop, never stored), the bias's sum shares that kernel's read of dy
# (horizontal_siblings over the same rows: two_reductions), and the backward is two kernels, Inductor's count
# on a GPU (on the CPU Inductor's one function holds the same two loop nests). The row kernel stores xhat
# instead of the product: the same bytes, one kernel and one column walk fewer. So an elementwise group that
# only feeds reductions over its leading dims (none over its trailing dims, which is the row kernel's own
# order) stays out of another reduction's kernel and waits for them.


def _column_reductions_only(group: Group) -> bool:
    """Does `group` (elementwise, not an output) feed only reductions that each reduce leading dims of all its
    elements (column reductions of it, none sharing its row order)?"""
    if group.has_output or not group.all_pointwise or not group.consumers:
        return False
    node = group.last_visible
    for reader in group.consumers:
        if not reader.has_reduction or reader.library is not None or reader.template is not None:
            return False
        rows, red = reader.shape
        if not same_size(node.numel, rows * red) or _trailing_reduction(reader.reduction, node):
            return False
    return True


def column_reduction_prologue(c: Candidate) -> Verdict | None:
    """An elementwise group that only feeds column reductions of another shape joins them as their prologue,
    not this reduction as its stored epilogue (Note [Prologues of column reductions go with them])."""
    if c.kind != "vertical" or not c.first.has_reduction or c.second.has_reduction:
        return None
    if not _column_reductions_only(c.second):
        return None
    if any(same_size(r.shape[0], c.first.shape[0]) and same_size(r.shape[1], c.first.shape[1])
           for r in c.second.consumers):
        return None  # one of its reductions could share this kernel: the ordinary rules decide
    reader = min(c.second.consumers, key=lambda g: g.first)
    return Verdict(False, f"{c.second.last_visible.name} only feeds reductions over its leading dims "
                          f"({reader.reduction.name}: {reader.shape_text()}): it is computed inside that loop "
                          f"instead of stored by this one (Note [Prologues of column reductions go with them])",
                   "column_reduction_prologue")


def reduction_epilogue(c: Candidate) -> Verdict | None:
    """Elementwise work after a reduction, over its rows or its full input, joins the reduction's kernel
    (softmax and layernorm become one kernel)."""
    found = _fit_around_reduction(c, reduction_first=True)
    if found is None:
        return None
    fit, elements, rows, red = found
    if fit == "full":
        return Verdict(True, f"epilogue over the same rows: {elements} = {rows} rows x {red}", "reduction_epilogue")
    return Verdict(True, f"per-row epilogue over the same {rows} rows", "reduction_epilogue")


def _mismatch_text(c: Candidate) -> str:
    sides = _reduction_and_elementwise(c)
    if sides is not None and _uniform_elements(sides[1]) is None:
        return "the elementwise group mixes sizes"
    pointwise, other = (sides[1], sides[0]) if sides else (c.first, c.second)
    return f"different iteration space {pointwise.shape_text()} vs {other.shape_text()}"


MAX_RECOMPUTED_LOADS = 64  # a 3x3 window over a batch norm + ReLU (5 loads) is 45: fused, as Inductor does


def window_read(c: Candidate) -> Verdict | None:
    """A consumer that reads its producer at several positions per element (a pooling window) recomputes the
    producer at each; past MAX_RECOMPUTED_LOADS loads per element the producer is stored once instead (Note
    [Window reads] in bodies.py: stacked windows multiply)."""
    if c.kind != "vertical" or c.window <= 1 or c.window * c.first.loads <= MAX_RECOMPUTED_LOADS:
        return None
    return Verdict(False, f"the consumer reads the producer at {c.window} positions per element; recomputing it "
                          f"there would cost {c.window} x {c.first.loads} loads per element (more than "
                          f"{MAX_RECOMPUTED_LOADS}), so the producer is stored once", "window_read")


def inline_producer(c: Candidate) -> Verdict | None:
    """An elementwise producer of another shape that nothing else reads is recomputed where it is read (a
    broadcast scale or bias computed from parameters, say) instead of being a kernel and a buffer of its own."""
    if c.kind != "vertical" or not c.first_only_feeds_second:
        return None
    return Verdict(True, f"inlined: the producer only feeds this kernel, so it is recomputed where "
                         f"it is read instead of stored ({_mismatch_text(c)})", "inline_producer", inline=True)


def different_iteration_space(c: Candidate) -> Verdict | None:
    return Verdict(False, _mismatch_text(c), "different_iteration_space")


# Note [Recomputed in each reader]
# Layer norm's backward is a row kernel (the input's gradient: reductions over each row's features) and a
# column kernel (the weight's and the bias's gradients: sums over the rows of dy * xhat and of dy). Both read
# dy cast up to float32 and xhat = (x - mean) * rstd, elementwise over the row kernel's elements. Computed in
# the row kernel, they were stored by it for the column kernel to read back: on an H200, a bf16 transformer
# block's training step (B=8, T=1024, D=1024) wrote two float32 tensors of 32 MB in each layer norm's row
# kernel and read them back in its column kernel, 64 MB written and 64 MB read where recomputing them reads dy
# and x (bf16, 16 MB each) and a mean and an rstd per row: about 50 us of a 1.6 ms step, two layer norms, half
# of our gap to Inductor (reduce-overhead: 1.605 vs 1.504 ms). Inductor inlines a cheap pointwise node into
# each of its readers. So a kernel that does not fuse with a producer's kernel (the candidate's decision says
# why) recomputes the producer's elementwise nodes it reads from their inputs, instead of reading them from
# memory: they are copied into it (Group.copies, still their own kernel's nodes too), and the producer's
# kernel stores them only for a reader that does not recompute them. recompute_in_reader takes it when
# - all it would recompute is elementwise: a reduction's value exists only in the row of its own kernel;
# - the nodes it reads (the roots) are read at one position per element of the reader, which has as many
#   elements: each is recomputed once per element, not once per position of a window;
# - no root is an output or read by a library call or a GEMM template: those store it anyway, and reading it
#   back costs no more than recomputing it (the qkv gradient of Note [Stored prologues of column reductions]
#   is such a node: stored once for its GEMM, its bias gradient reads it back);
# - recomputing loads no more bytes per element than it saves, the roots' store there and their read here
#   (a smaller buffer broadcast over the elements counts at its share). The cast up from bf16 loads 2 bytes
#   and saves 8; xhat in bf16 loads 2 + 8/D (x, then the float32 mean and rstd of each row of D) and saves 8,
#   in float32 4 + 8/D. Should another reader still read a root from memory, this one loads at most twice
#   what reading it back would have;
# - within MAX_RECOMPUTED_NODES nodes and MAX_RECOMPUTED_OPS arithmetic ops per element: what is copied into
#   every reader stays small (Inductor, too, keeps a node that is expensive or read too often stored).

MAX_RECOMPUTED_NODES = 16  # xhat is 3 nodes (a view of x, minus the mean, times rstd), the cast 1
MAX_RECOMPUTED_OPS = 16  # arithmetic ops per element, in all that one reader recomputes


@dataclass(frozen=True)
class Recomputation:
    """What `consumer` would recompute of `producer`, a kernel it does not fuse with, instead of reading it
    back (Note [Recomputed in each reader]). The mechanism finds the facts."""
    producer: Group
    consumer: Group
    roots: list[Buffer]  # the producer's nodes that the consumer reads
    nodes: list[Buffer]  # the roots and the producer's nodes they read, transitively: what would be copied
    inputs: list[str]  # the buffers that recomputing them loads
    blocker: str | None  # why they cannot be computed outside their kernel, or None
    stored_for: str | None  # a root that is stored anyway, and for what; or None
    loaded_bytes: float  # bytes per element that recomputing them loads
    read_bytes: int  # bytes per element of the roots: what the producer would store and the consumer read back
    ops: int  # arithmetic ops per element
    knobs: FusionKnobs = FusionKnobs()


def recompute_in_reader(r: Recomputation) -> Verdict | None:
    """A kernel recomputes the cheap elementwise nodes it reads of a producer's kernel instead of reading them
    from memory (Note [Recomputed in each reader])."""
    if not r.knobs.enabled:
        return None
    roots = ", ".join(n.name for n in r.roots)
    rule = "recompute_in_reader"
    if r.blocker:
        return Verdict(False, f"{roots} read back, not recomputed: {r.blocker}", rule)
    if r.stored_for:
        return Verdict(False, f"{roots} read back, not recomputed: {r.stored_for}, so reading it costs no more "
                              f"than recomputing it", rule)
    if len(r.nodes) > MAX_RECOMPUTED_NODES:
        return Verdict(False, f"{roots} read back, not recomputed: recomputing would copy more than "
                              f"{MAX_RECOMPUTED_NODES} nodes into this kernel", rule)
    if r.ops > MAX_RECOMPUTED_OPS:
        return Verdict(False, f"{roots} read back, not recomputed: {r.ops} arithmetic ops per element (more "
                              f"than {MAX_RECOMPUTED_OPS})", rule)
    saved = 2 * r.read_bytes  # the producer's store and this kernel's read
    if r.loaded_bytes > saved:
        return Verdict(False, f"{roots} read back, not recomputed: recomputing would load "
                              f"{r.loaded_bytes:.3g} bytes per element, more than the {saved} it saves (stored "
                              f"there, read back here)", rule)
    total = len(r.consumer.nodes) + len(r.consumer.copies) + len(r.nodes)
    if r.knobs.max_nodes is not None and total > r.knobs.max_nodes:
        return Verdict(False, f"{roots} read back, not recomputed: the kernel would hold {total} IR nodes, over "
                              f"the cap of {r.knobs.max_nodes} (max_nodes)", rule)
    return Verdict(True, f"{roots} recomputed here from {', '.join(r.inputs) or 'constants'}: "
                         f"{r.loaded_bytes:.3g} bytes loaded per element instead of {r.read_bytes} stored there "
                         f"and read back here; stored only for a reader that does not recompute them (Note "
                         f"[Recomputed in each reader])", rule, recompute=True)


RULES: list[Callable[[Candidate], Verdict | None]] = [
    fusion_knobs, accumulating_store, template_epilogue, library_call, scan_kernel, window_read, too_many_passes,
    few_rows_stay_splittable, two_reductions, elementwise, horizontal_siblings, stored_prologue_of_column, reduction_prologue,
    column_reduction_prologue, reduction_epilogue, inline_producer, different_iteration_space,
]


def decide(candidate: Candidate) -> Verdict:
    for rule in RULES:
        verdict = rule(candidate)
        if verdict is not None:
            if verdict.fuse and candidate.passes > MAX_REDUCTION_PASSES:  # Note [Persistent chains]
                verdict = replace(verdict, reason=f"{verdict.reason}; {candidate.passes} passes over each row, "
                                                  f"past the limit of {MAX_REDUCTION_PASSES} for looped rows: "
                                                  f"{candidate.persistent_row} (Note [Persistent chains])")
            return verdict
    raise AssertionError("the last rule always decides")
