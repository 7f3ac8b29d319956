"""The Exploration record: every stage's artifact as typed, versioned plain data.

The app, the CLI, the tests and reports read this record only; it crosses process boundaries as JSON
(`Exploration.to_json()` / `Exploration.from_json()`), and engine/record_schema.json is its JSON Schema
(generated from these dataclasses by `json_schema()`; tests/test_record.py checks the shipped file is current).
README.md ("The record") documents the keys. Keys that outside scripts rely on (docs/design.md, "The CLI"):
schema_version, graphs[].kernels[].name/kind/fx_origins/tiling, graph_breaks[].reason/filename/lineno,
verify.ok/max_abs_err, timings, errors[]. Keys are added, never renamed; adding one bumps SCHEMA_VERSION.

Note [Strict record]
Serialization knows exactly these types: the Record dataclasses below, str, int, float, bool, None, and lists
and string-keyed dicts of them. Anything else (a sympy expression, a torch.dtype, a tensor) raises TypeError
instead of silently becoming its str(): a value that reaches the record is converted where it is made (report.py),
where its meaning is known. Floats that JSON cannot hold (inf, nan: an error against a mismatched shape) are
written as the strings "inf", "-inf" and "nan". Reading is as strict: an unknown key raises.

Note [Optional keys]
Some objects carry a key only in some cases: a forward graph's partition lists its saved values, a backward
graph's names its forward graph, an inference graph's is empty. Such a field is declared `optional_key()`: it is
None when absent, None is not written, and a missing key reads back as None; the schema does not require it. So
the JSON of a typed object is key for key what the free-form dict it replaced wrote.

This module imports nothing beyond the standard library: the app's server and the visualizers read records
without importing torch.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 11
# The pipeline's stages, in order (engine/pipeline.py STAGES has the same names): the keys of `timings`,
# and the stage names the CLI, the charts and the app show.
STAGE_NAMES = ("capture", "decompose", "rewrite", "lower", "schedule", "codegen", "build", "run")
BACKENDS = ("cpp", "triton")
# torch.compile's modes: "reduce-overhead" replays each graph as a CUDA graph (CUDA only; Note [CUDA graph
# replay] in runtime/cuda_graphs.py), "max-autotune" times a few block sizes per Triton kernel and GEMM
# templates against the library, and on a GPU replays CUDA graphs too, as Inductor's max-autotune does
# (runtime/cuda_graphs.replays_cuda_graphs), except an inference graph that it times faster launched plainly (Note
# [Replay or launch, timed] in runtime/cuda_graphs.py).
MODES = ("default", "reduce-overhead", "max-autotune")


class Record:
    """Base of the record's dataclasses: strict JSON in and out (Note [Strict record]). Readers use attributes;
    the JSON's keys are the fields' names."""

    def to_json(self) -> dict:
        return {f.name: to_plain(getattr(self, f.name), f"{type(self).__name__}.{f.name}")
                for f in dataclasses.fields(self) if not (_omitted(f) and getattr(self, f.name) is None)}

    @classmethod
    def from_json(cls, data: dict):
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown key(s) {sorted(unknown)}")
        return cls(**{name: from_plain(value, hints[name], f"{cls.__name__}.{name}") for name, value in data.items()})


def optional_key(default=None):
    """A field whose key is written only when it is set (Note [Optional keys])."""
    return field(default=default, metadata={"optional_key": True})


def _omitted(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get("optional_key"))


# --- graphs: one dataclass per artifact ----------------------------------------------------------------------


@dataclass
class SourceLine(Record):
    """A line of the user's code."""
    filename: str
    lineno: int
    line: str = ""


@dataclass
class FxNode(Record):
    """A node of Dynamo's FX graph (and, with fx_origins, of the ATen graph)."""
    name: str
    op: str  # placeholder | call_function | call_method | call_module | get_attr | output
    target: str
    args: list[str] = field(default_factory=list)  # names of the nodes it reads
    shape: list[Any] = field(default_factory=list)  # sizes as text; a list of them for a tuple value
    dtype: str = ""
    source: SourceLine | None = None
    module_path: str = ""  # the nn.Module it ran in, e.g. "layers.0.attn"


@dataclass
class AtenNode(FxNode):
    fx_origins: list[str] = field(default_factory=list)  # the FX nodes it came from


@dataclass
class IRNode(Record):
    name: str
    kind: str  # pointwise | reduction | scatter | extern | fallback | multi_output | ...
    size: list[str]
    dtype: str
    aten_origins: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # the loop body, readable
    reduction_size: list[str] | None = None
    reduction_type: str | None = None
    reason: str | None = None  # a fallback's: why the op runs eagerly


@dataclass
class IRRecord(Record):
    nodes: list[IRNode] = field(default_factory=list)
    text: str = ""
    inputs: list[str] = field(default_factory=list)


@dataclass
class FusionDecision(Record):
    producer: str
    consumer: str
    kind: str  # vertical | horizontal
    fused: bool
    reason: str
    rule: str = ""  # the policy rule (schedule/policy.py) or the legality check that decided


@dataclass
class GemmPair(Record):
    """Two GEMMs of the same input whose product one epilogue computes (Note [SwiGLU pair])."""
    gemms: list[str]
    input: str
    form: str
    reason: str


@dataclass
class TemplateChoice(Record):
    """A matmul's fate: a GEMM template or the library call, and why (Note [GEMM templates])."""
    node: str  # the IR node
    template: bool
    reason: str
    epilogue: list[str] | None = optional_key()  # the IR nodes it would fuse, once its kernel was formed
    pair: GemmPair | None = optional_key()


@dataclass
class FusionRecord(Record):
    decisions: list[FusionDecision] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)  # IR nodes no kernel computes (Note [Unused nodes])
    templates: list[TemplateChoice] = field(default_factory=list)  # per matmul: template or library call, and why


@dataclass
class MemoryBuffer(Record):
    name: str
    bytes: int
    first: int  # kernel index that writes it
    last: int  # last kernel index that reads it
    reuses: str | None = None  # the dead buffer whose memory it takes


@dataclass
class MemoryRecord(Record):
    peak_bytes: int = 0
    unfused_peak_bytes: int = 0
    buffers: list[MemoryBuffer] = field(default_factory=list)
    # the 4D tensors' layout: format (channels_last | contiguous), reason, buffers stored channels-last
    # (Note [Channels-last convolutions])
    layout: dict[str, Any] = field(default_factory=dict)


@dataclass
class TileShape(Record):
    y: str  # the Y extent (the output's leading dims, flattened)
    x: str  # the X extent (the rest)


@dataclass
class CatPiece(Record):
    range: list[int]  # [start, end) along the cut dim
    reads: list[str] = field(default_factory=list)  # the buffers this piece's loop nest reads


@dataclass
class CatPieces(Record):
    """A cat's (or a pad's) loop nests, one per piece of its output (Note [Cat pieces] in codegen/cpp)."""
    dim: int
    pieces: list[CatPiece] = field(default_factory=list)
    reason: str = ""


@dataclass
class TilingRecord(Record):
    """How a kernel's loops are tiled, and why (engine/schedule/tiling.py; Note [Optional keys])."""
    choice: str  # 1d | 2d | row | column | split | scan ...
    reason: str
    tile: TileShape | None = optional_key()  # 2d
    run: str | None = optional_key()  # 2d: along Y, column: along the outputs (Note [Runs of an axis])
    columns: bool | None = optional_key()  # split: the stage is walked as column tiles (Note [Column splits])
    pieces: CatPieces | None = optional_key()  # C++: a cat's pieces


@dataclass
class PrecompileRecord(Record):
    """The candidates compiled in parallel before timing (Note [Parallel compiles] in runtime/compile_pool.py)."""
    compiled: int
    failed: int
    left: int
    error: str | None = optional_key()  # the first failure's


@dataclass
class TimedCandidate(Record):
    """One candidate max-autotune timed: a Triton kernel's config, or a GEMM template's plan (`candidate`)."""
    candidate: str | None = optional_key()  # a template's plan, by name
    config: dict[str, Any] | None = None
    ms: float | None = None  # None: it did not run, `error` says why
    error: str | None = optional_key()


@dataclass
class Tuning(Record):
    """What the runtime's autotuning found at the first launch (Note [Optional keys]: empty when it did not
    tune): whether the timings came from the cache, on which device, and the parallel compile before."""
    precompile: PrecompileRecord | None = optional_key()
    cached: bool | None = optional_key()
    device: str | None = optional_key()


@dataclass
class TritonTuning(Tuning):
    """A Triton kernel's configs timed (runtime/triton_build.autotune): the fastest is `best`."""
    results: list[TimedCandidate] | None = optional_key()
    best: dict[str, Any] | None = optional_key()


@dataclass
class TemplateTuning(Tuning):
    """A GEMM template's plans timed (runtime/gemm_launch.py, Note [Autotune against the default's pick])."""
    candidates: list[TimedCandidate] | None = optional_key()
    winner: str | None = optional_key()
    default_pick: str | None = optional_key()
    why: str | None = optional_key()


@dataclass
class TritonRecord(Record):
    """A Triton kernel's launch: its form, block configs, grid, signature and autotuning.

    From codegen/triton/kernel.py; `autotune` is the runtime's, filled in at the first launch
    (runtime/triton_build.py)."""
    form: str  # pointwise | tiled | persistent | looped | column | scan | scan_looped
    config: dict[str, Any]  # the block sizes and warps it launches with here
    grid: str
    int64_index: bool
    gpu_config: dict[str, Any]  # what it would launch with on a GPU
    signature: dict[str, str]  # argument -> Triton type
    rows: str
    red: str
    autotune: TritonTuning | None = None


@dataclass
class GemmOperand(Record):
    """A matrix operand as a strided view of a buffer: element (b, i, j) at offset + b*sb + i*si + j*sj."""
    name: str
    offset: int
    strides: list[int]  # (batch, row, column) in elements; 0: broadcast


@dataclass
class GemmSpecRecord(Record):
    """The GEMM a template computes (engine/schedule/templates.py GemmSpec)."""
    op: str  # mm | addmm | bmm | baddbmm | conv1x1
    batch: int
    M: int
    N: int
    K: int
    dtype: str
    a: GemmOperand
    b: GemmOperand
    bias: GemmOperand | None
    alpha: Any  # as the op was called: an int or a float
    beta: Any


@dataclass
class FusedOp(Record):
    """One op of a template's fused epilogue, with where it came from."""
    ir_node: str
    aten_origins: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    fx_origins: list[str] = field(default_factory=list)


@dataclass
class TemplateRecord(Record):
    """A GEMM template kernel: its GEMM, tile config, fused epilogue and why (Note [GEMM templates]).

    The C++ one has its inner loop, the Triton one its launch (Note [Optional keys]). `autotune` is the
    runtime's, filled in when max-autotune times the candidates."""
    name: str  # cpp_gemm | triton_gemm
    spec: GemmSpecRecord
    config: dict[str, Any]
    epilogue: list[str]  # the IR nodes fused after the GEMM
    reason: str
    candidates: list[dict[str, Any]]
    autotune: TemplateTuning | None = None
    fused_ops: list[FusedOp] | None = optional_key()  # the epilogue op by op (engine/report.py)
    inner_loop: str | None = optional_key()  # C++: stream | dot | axpy
    gpu_config: dict[str, Any] | None = optional_key()  # Triton
    grid: list[int] | None = optional_key()
    signature: dict[str, str] | None = optional_key()
    display: dict[str, Any] | None = optional_key()  # Triton: the constants its lowering is shown with


@dataclass
class AssemblyRecord(Record):
    """A Triton kernel lowered for a GPU target, on request (engine/tools/assembly.py): each stage's text, or
    the error that stopped it (Note [Optional keys])."""
    target: str  # e.g. "cuda sm_90"
    ttir: str | None = optional_key()
    ttgir: str | None = optional_key()
    llir: str | None = optional_key()
    ptx: str | None = optional_key()
    sass: str | None = optional_key()
    sass_note: str | None = optional_key()  # why there is no SASS
    error: str | None = optional_key()


@dataclass
class RooflineRecord(Record):
    """A profiled kernel's place under the roofs (Note [Roofs from the datasheet] in runtime/peaks.py): its % of
    the roof at its arithmetic intensity, and which roof bounds it; `roof_gbps` alone for a kernel without a FLOP
    estimate (Note [Optional keys])."""
    pct: float
    bound: str  # memory | compute
    roof_gbps: float | None = optional_key()
    roof_gflops: float | None = optional_key()


@dataclass
class KernelRecord(Record):
    name: str
    kind: str  # pointwise | reduction | extern | fallback | template
    ir_nodes: list[str] = field(default_factory=list)
    aten_origins: list[str] = field(default_factory=list)
    fx_origins: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the ATen ops it computes
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    bytes: int = 0  # estimated bytes moved
    source: str = ""  # its generated source (or, for a library call, its IR text)
    lines: list[int] = field(default_factory=list)  # [first, last] line of its source in the module, if generated
    reason: str | None = None  # a fallback's
    tiling: TilingRecord | None = None  # how its loops are tiled, with the reason
    triton: TritonRecord | None = None  # Triton's launch config, grid, signature, autotuning
    template: TemplateRecord | None = None  # a GEMM template's spec, config, epilogue (Note [GEMM templates])
    asm: AssemblyRecord | None = None  # Triton's TTIR..SASS, when asked for (engine/tools/assembly.add_assembly)
    # with --profile (engine/runtime/profile.py): median time, its interquartile range, share of the graph's call,
    # achieved rates and the FLOP estimate
    time_ms: float | None = None
    time_iqr_ms: float | None = None
    share: float | None = None
    gbps: float | None = None
    flops: int | None = None
    gflops: float | None = None
    roofline: RooflineRecord | None = None  # its place under the roofs (engine/runtime/peaks.py)
    # what a standalone reproducer of it needs: arguments' layouts, launch, the eager ATen slice (Note [Kernel
    # reproducers] in engine/reproducer.py); {"unsupported": why} for kernels it cannot take away
    repro: dict[str, Any] | None = None


@dataclass
class ProvenanceLine(Record):
    """A generated line and what it came from: IR node -> ATen nodes -> FX nodes -> user lines."""
    line: int
    kernel: str
    ir_node: str
    aten_nodes: list[str] = field(default_factory=list)
    fx_nodes: list[str] = field(default_factory=list)
    user_lines: list[int] = field(default_factory=list)


@dataclass
class CodeRecord(Record):
    language: str  # cpp | triton
    source: str  # the whole generated module
    wrapper: str  # the Python call()
    provenance: list[ProvenanceLine] = field(default_factory=list)
    prelude_lines: int = 0  # lines 1..prelude_lines are shared helpers; the kernels follow
    overhead: dict[str, Any] = field(default_factory=dict)  # the wrapper's own cost per call (Note [Wrapper overhead])


@dataclass
class FallbackRecord(Record):
    """Why a whole graph ran eagerly (Note [Internal failure falls back to eager] in pipeline.py)."""
    stage: str
    type: str
    message: str


@dataclass
class RewriteRecord(Record):
    """One match (applied) or near-miss (refused) of a graph rewrite (engine/rewrite/, Note [Rewrite stage])."""
    rewrite: str  # the pass's name
    applied: bool  # false: a near-miss, refused for `reason`
    nodes: list[str]  # the matched ATen nodes (in graphs[].aten_before when applied, else in graphs[].aten)
    reason: str
    replacement: list[str] = field(default_factory=list)  # the new ATen nodes (in graphs[].aten)
    replacement_text: str = ""
    fx_origins: list[str] = field(default_factory=list)  # the Dynamo FX nodes the matched nodes came from
    source: list[SourceLine] = field(default_factory=list)  # the user's lines
    where: str = "inference"  # the graph it ran on: inference, forward (before the joint graph), backward


@dataclass
class BisectOutput(Record):
    """One output of a kernel against eager's ATen value (Note [Numerics bisect] in engine/divergence.py)."""
    buffer: str
    node: str  # the ATen node whose value it is
    status: str  # exact | within tolerance | diverging
    max_abs_err: float
    max_rel_err: float


@dataclass
class BisectKernel(Record):
    kernel: str
    kind: str
    status: str  # the worst of its outputs', or "not compared"
    outputs: list[BisectOutput] = field(default_factory=list)
    input_status: str = "exact"  # the worst of what it reads
    input_max_abs_err: float = 0.0
    max_abs_err: float = 0.0


@dataclass
class BisectCulprit(Record):
    """The first kernel that diverges while its inputs do not."""
    kernel: str
    kind: str
    ops: list[str] = field(default_factory=list)
    max_abs_err: float = 0.0
    input_max_abs_err: float = 0.0
    nodes: list[str] = field(default_factory=list)  # its diverging ATen nodes
    user_line: SourceLine | None = None


@dataclass
class BisectRecord(Record):
    """A graph's numerics bisect (Note [Numerics bisect] in engine/divergence.py).

    Empty when it did not run, status and reason when it failed (Note [Optional keys]); a finished one always
    says its culprit, null when clean."""
    status: str | None = optional_key()  # diverges | clean | failed
    culprit: BisectCulprit | None = optional_key()
    kernels: list[BisectKernel] | None = optional_key()
    nodes: dict[str, str] | None = optional_key()  # ATen node -> status
    compared: int | None = optional_key()  # kernel outputs compared
    fp64: bool | None = optional_key()  # the float64 reference ran too
    reason: str | None = optional_key()  # why it failed
    seconds: float | None = optional_key()

    def to_json(self) -> dict:
        data = super().to_json()
        if self.status in ("diverges", "clean") and self.culprit is None:
            data = {key: data[key] for key in ("status",)} | {"culprit": None} | data
        return data


@dataclass
class TimelineEntry(Record):
    """A kernel (or the whole call, kernel "call") in one profiled call, from the call's start."""
    kernel: str
    start_ms: float
    dur_ms: float


@dataclass
class ProfileRecord(Record):
    """With --profile, one graph's call timed (engine/runtime/profile.py); empty otherwise (Note [Optional
    keys])."""
    call_ms: float | None = optional_key()  # median
    call_iqr_ms: float | None = optional_key()
    kernels_ms: float | None = optional_key()  # the kernels' medians, summed
    timed_call_ms: float | None = optional_key()  # the call the kernels were timed inside
    overhead_ms: float | None = optional_key()  # the wrapper's share of it
    repeats: int | None = optional_key()
    device: str | None = optional_key()
    interpreted: bool | None = optional_key()  # Triton on the CPU: its interpreter's times, not a GPU's
    timeline: list[TimelineEntry] | None = optional_key()  # one call, kernel by kernel


@dataclass
class JointValue(Record):
    """A value of the joint forward+backward graph (engine/partition.py): its op, shape and dtype."""
    name: str
    op: str  # the op's name; a placeholder's is its own name
    shape: list[str] = field(default_factory=list)
    dtype: str = ""


@dataclass
class SavedValue(JointValue):
    """A value the forward saves for the backward, and why."""
    bytes: int = 0  # activation memory it costs (0: an input or parameter, kept alive anyway)
    reason: str = ""


@dataclass
class RecomputedValue(JointValue):
    """A value the backward recomputes from `inputs` instead of having it saved."""
    bytes: int = 0
    inputs: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass
class JointNode(JointValue):
    """A node of the joint graph and the side it ended on: forward | backward | recomputed."""
    args: list[str] = field(default_factory=list)
    side: str = "forward"
    saved: bool = False
    ban: str | None = None  # why it must stay in the forward (never recomputed), if it must


@dataclass
class PartitionRecord(Record):
    """In training, how the joint graph was split (engine/partition.py).

    A forward graph's has every key but forward_graph, a backward graph's only forward_graph, an inference
    graph's none (Note [Optional keys])."""
    saved: list[SavedValue] | None = optional_key()
    recomputed: list[RecomputedValue] | None = optional_key()
    saved_bytes: int | None = optional_key()
    saved_all_bytes: int | None = optional_key()  # with nothing recomputed: every forward value the backward reads
    saved_all: list[str] | None = optional_key()
    note: str | None = optional_key()
    # storages handed to the backward in eager's layout (Note [Saved values keep eager's strides])
    eager_layout: list[str] | None = optional_key()
    joint: list[JointNode] | None = optional_key()
    forward_graph: int | None = optional_key()  # a backward graph's forward graph


@dataclass
class GraphRecord(Record):
    index: int
    phase: str = "inference"  # inference | forward | backward
    fx: list[FxNode] = field(default_factory=list)  # Dynamo's graph
    aten: list[AtenNode] = field(default_factory=list)  # the functional ATen graph
    ir: IRRecord | None = None
    fusion: FusionRecord | None = None
    memory: MemoryRecord | None = None
    kernels: list[KernelRecord] = field(default_factory=list)
    code: CodeRecord | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage for this graph
    cache_hit: bool = False
    fallback: FallbackRecord | None = None  # set when the whole graph ran eagerly
    profile: ProfileRecord = field(default_factory=ProfileRecord)  # with --profile: the call's time
    # in training (engine/partition.py): a forward graph's saved and recomputed values; a backward's forward graph
    partition: PartitionRecord = field(default_factory=PartitionRecord)
    # when the outputs are not exactly eager's: each kernel's outputs against eager's ATen values (exact, within
    # tolerance, diverging), the first culprit kernel and its user line (Note [Numerics bisect] in engine/divergence.py)
    bisect: BisectRecord = field(default_factory=BisectRecord)
    rewrites: list[RewriteRecord] = field(default_factory=list)  # every pass's matches and refusals, in order
    # the ATen graph before the rewrites, when one applied (graphs[].aten is the graph after, the one lowered)
    aten_before: list[AtenNode] = field(default_factory=list)
    # the graph's inputs it changes in place (batch norm's running statistics in training), by ATen input name:
    # written back after the graph in one call (Note [Input writes after the graph] in engine/decompose.py)
    input_writes: list[str] = field(default_factory=list)


# --- the model's run --------------------------------------------------------------------------------------------


@dataclass
class Suggestion(Record):
    """A rewrite of the line a graph break is on (engine/break_fixes.py, Note [Suggested rewrites])."""
    pattern: str  # what it recognised: "print", ".item()", "data-dependent if", ...
    why: str
    before: str  # the user's code it replaces
    after: str  # the rewrite; <...> marks blanks to fill in by hand


@dataclass
class GraphBreakRecord(Record):
    reason: str
    filename: str
    lineno: int | None
    line: str = ""
    gb_type: str = ""  # Dynamo's graph-break type (Note [Dynamo's explanations] in capture.py)
    gb_id: str = ""  # its entry in Dynamo's graph-break registry, e.g. "GB0170"
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    suggestion: Suggestion | None = None  # a rewrite of the user's line (engine/break_fixes.py)


@dataclass
class RecompileRecord(Record):
    reason: str
    inputs: str
    function: str = ""
    failed_guards: list[str] = field(default_factory=list)


@dataclass
class CallTime(Record):
    """The whole model's time per call, compiled and eager taking turns (Note [Call time] in engine/call_time.py):
    medians of rounds and their interquartile ranges in ms, and eager / compiled judged or "too noisy to judge"."""
    ms: float | None = None
    iqr_ms: float | None = None
    eager_ms: float | None = None
    eager_iqr_ms: float | None = None
    rounds: int = 0
    threads: int = 0
    speedup: dict[str, Any] = field(default_factory=dict)  # timing.ratio: ratio, low, high, judged, text
    error: str = ""  # why there is no time (a call raised)


@dataclass
class CheckRecord(Record):
    """One value compared with eager (engine/verdict.py, Note [Tolerance policy]): an output's leaf (`path`) or,
    in a training step, a named tensor (`name`: loss, output[i], param:..., input[i], buffer:...). Every key is
    written only when the verdict said it (Note [Optional keys])."""
    name: str | None = optional_key()
    path: str | None = optional_key()
    shape: list[int] | None = optional_key()
    dtype: str | None = optional_key()
    atol: float | None = optional_key()
    rtol: float | None = optional_key()
    ok: bool | None = optional_key()
    max_abs_err: float | None = optional_key()
    max_rel_err: float | None = optional_key()
    close_to_eager: bool | None = optional_key()  # rule 1 held
    judged_by: str | None = optional_key()  # eager | fp64 | eager and fp64 | spread: the reference that decided
    problem: str | None = optional_key()
    note: str | None = optional_key()  # e.g. a parameter no gradient reaches
    fp64: dict[str, Any] | None = optional_key()  # rule 2: ours' and eager's errors against float64, the worst one
    layout: dict[str, Any] | None = optional_key()  # strides that differ from eager's: {eager, ours}
    value: dict[str, Any] | None = optional_key()  # a Python number's: {eager, ours} as text


@dataclass
class VerifyRecord(Record):
    """The verdict: compiled outputs against eager's (engine/verdict.py, Note [Verdicts]); a training step's
    has its loss, gradients and buffers (engine/train_verdict.py). Empty when nothing ran (Note [Optional
    keys])."""
    ok: bool | None = optional_key()
    verdict: str | None = optional_key()  # ok | mismatch | layout differs | random | nothing compared
    max_abs_err: float | None = optional_key()
    max_rel_err: float | None = optional_key()
    outputs: list[CheckRecord] | None = optional_key()
    reference: str | None = optional_key()  # in words, which reference judged the outputs
    fp64: str | None = optional_key()  # why there was no float64 reference
    problem: str | None = optional_key()
    findings: list[dict[str, Any]] | None = optional_key()  # named findings, e.g. {kind: layout, path, ...}
    judged_in: str | None = optional_key()  # where it was judged (Note [Judged outside the job])
    loss: CheckRecord | None = optional_key()  # training
    gradients: list[CheckRecord] | None = optional_key()
    buffers: list[CheckRecord] | None = optional_key()
    skipped: list[str] | None = optional_key()
    notes: list[str] | None = optional_key()
    eager_spread: float | None = optional_key()  # training: eager's own spread (Note [Eager's own spread])


@dataclass
class RunRecord(Record):
    """One more input set (dynamic_inputs): its shapes, the graphs it compiled, its verify."""
    inputs: str
    new_graphs: int
    verify: VerifyRecord = field(default_factory=VerifyRecord)


@dataclass
class ErrorRecord(Record):
    """Something that went wrong without stopping the exploration.

    kind: fallback (our compile of a graph failed; it ran eagerly), inputs (an input set of dynamic_inputs
    raised), recompile_limit (Dynamo gave up recompiling and runs a function eagerly); and in what the CLI
    writes with --record-out when exploring or benching failed: model (the model file is at fault, at `lineno`),
    compile (Glassbox failed), usage (the command line is wrong); inductor (torch.compile failed: the app's
    Inductor job, app/inductor_worker.py). docs/record.md, "Failures as data"."""
    kind: str
    stage: str
    message: str
    type: str = ""  # the exception's type
    inputs: str = ""  # the input shapes it happened on
    graph: int | None = None
    filename: str = ""  # the user's line it points at, if any
    lineno: int | None = None
    traceback: str = ""


@dataclass
class InputSpec(Record):
    """One example input: a tensor's dtype and shape (dtype is the Python type's name for other values)."""
    dtype: str
    shape: list[int] = field(default_factory=list)


@dataclass
class SourceFile(Record):
    filename: str = ""
    text: str = ""


@dataclass
class TraceSpan(Record):
    """When one stage or pass ran (Note [Compile trace] in engine/runtime/spans.py)."""
    name: str
    cat: str  # stage | pass
    start_s: float  # since the exploration began
    dur_s: float
    args: dict[str, Any] = field(default_factory=dict)  # what the span says of itself, e.g. the build's cache hit
    graph: int | None = None  # the graph it worked on, by index


@dataclass
class PeaksRecord(Record):
    """The roofs a profiled kernel's % is of: a datasheet's entry for a known GPU (its `part`), else this
    machine's measured rates (Note [Roofs from the datasheet] in runtime/peaks.py); `source` says which."""
    name: str  # the device's
    gbps: float | None
    fp32_gflops: float | None
    tensor_gflops: float | None  # fp16/bf16 on tensor cores
    part: str | None  # the datasheet's part; None: measured
    source: str


@dataclass
class MachineRecord(Record):
    """With --profile, the machine the times were taken on (engine/runtime/profile.py): its measured copy and
    matmul rates, its load while measuring, and the roofs the kernels are placed under; empty otherwise."""
    device: str | None = optional_key()
    copy_gbps: float | None = optional_key()
    matmul_gflops: float | None = optional_key()
    threads: int | None = optional_key()
    how: str | None = optional_key()  # what was measured, in words
    load_avg_1m: float | None = optional_key()
    cpus: int | None = optional_key()
    load_warning: str | None = optional_key()  # "" when the machine was quiet
    peaks: PeaksRecord | None = optional_key()  # the roofs (engine/runtime/peaks.py)


@dataclass
class OptionsRecord(Record):
    dynamic: bool | None = None
    mode: str = "default"
    train: bool = False
    fusion: bool = True  # what-if knobs (engine compare): fusion off, at most max_fused_nodes IR nodes a kernel
    max_fused_nodes: int | None = None
    templates: str = "auto"  # GEMM templates (Note [GEMM templates]): auto | on | off
    layout: str = "auto"  # 4D tensors around convolutions (Note [Channels-last convolutions]): auto | channels_last | contiguous
    rewrites: list[str] | None = None  # the graph rewrites that ran, in order (engine/rewrite/); null: the record predates them
    freezing: bool = False  # parameters and buffers were constants, folded at compile time (Note [Freezing])
    # the training partition's policy (engine/partition.py, Note [Operands the backward stores]); null: the record
    # predates it
    partition: str | None = None


@dataclass
class InductorKernel(Record):
    """A kernel Inductor generated (engine/reference.py)."""
    name: str
    language: str  # cpp | triton
    graph: int
    source: str


@dataclass
class InductorTime(Record):
    """An Inductor kernel's median time per call, from torch's profiler (Note [Inductor's kernel times])."""
    name: str
    time_ms: float
    calls: int


@dataclass
class InductorRecord(Record):
    """With --inductor, what torch.compile (Inductor) generated for the same model, and its verify
    (engine/reference.py); only `error` when it failed (Note [Optional keys])."""
    code: list[str] | None = optional_key()  # its output module per graph
    calls: list[str] | None = optional_key()  # per graph, its call() function
    kernels: list[InductorKernel] | None = optional_key()
    kernel_count: int | None = optional_key()
    extern_calls: list[str] | None = optional_key()  # the library calls its wrappers make
    compile_s: float | None = optional_key()
    verify: VerifyRecord | None = optional_key()
    torch_version: str | None = optional_key()
    kernel_times: list[InductorTime] | None = optional_key()  # with --profile
    error: str | None = optional_key()


@dataclass
class Exploration(Record):
    model: str
    backend: str
    device: str
    schema_version: int = SCHEMA_VERSION
    source: SourceFile = field(default_factory=SourceFile)
    description: str = ""
    inputs: str = ""  # the example inputs, e.g. "float32[64, 1024], float32[1024]"
    input_specs: list[InputSpec] = field(default_factory=list)  # the same, as data (the app's shapes box)
    options: OptionsRecord = field(default_factory=OptionsRecord)
    graphs: list[GraphRecord] = field(default_factory=list)
    graph_breaks: list[GraphBreakRecord] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    recompiles: list[RecompileRecord] = field(default_factory=list)
    verify: VerifyRecord = field(default_factory=VerifyRecord)  # run.verify: ok, max_abs_err, max_rel_err, outputs
    runs: list[RunRecord] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage (STAGE_NAMES)
    errors: list[ErrorRecord] = field(default_factory=list)
    inductor: InductorRecord | None = None  # engine/reference.py's report, with --inductor
    machine: MachineRecord = field(default_factory=MachineRecord)  # with --profile: copy GB/s, matmul GFLOP/s, load
    # when each stage and pass ran (Note [Compile trace] in engine/runtime/spans.py); the build's args say whether the
    # cache had the kernels and what it saved
    trace: list[TraceSpan] = field(default_factory=list)
    call_time: CallTime | None = None  # the model's time per call (Note [Call time]); null for a training step

    def add_time(self, stage: str, seconds: float) -> None:
        """Add to a stage's seconds, keeping `timings` in pipeline order (stages finish nested, out of order)."""
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds
        order = {name: number for number, name in enumerate(STAGE_NAMES)}
        self.timings = dict(sorted(self.timings.items(), key=lambda item: order.get(item[0], len(order))))

    @property
    def kernels(self) -> list[KernelRecord]:
        return [k for g in self.graphs for k in g.kernels]

    def dumps(self, **kwargs) -> str:
        return json.dumps(self.to_json(), **kwargs)

    @classmethod
    def from_json(cls, data: dict) -> "Exploration":
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ValueError(f"record schema_version {version} is newer than this reader's {SCHEMA_VERSION}")
        return super().from_json(data)


# --- strict conversion (Note [Strict record]) ---------------------------------------------------------------


def to_plain(value: Any, where: str = "record") -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, (list, tuple)):
        return [to_plain(v, f"{where}[]") for v in value]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{where}: a key of type {type(key).__name__} ({key!r}); record keys are strings")
        return {k: to_plain(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"{where}: a {type(value).__module__}.{type(value).__qualname__} ({str(value)[:80]!r}) is not "
                    "record data; convert it where it is made (Note [Strict record])")


def _is_optional(hint) -> tuple[bool, Any]:
    args = typing.get_args(hint)
    if (typing.get_origin(hint) in (typing.Union, types.UnionType)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return True, rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    return False, hint


def from_plain(value: Any, hint: Any, where: str) -> Any:
    optional, inner = _is_optional(hint)
    if value is None:
        if optional or hint is Any:
            return None
        raise TypeError(f"{where}: null where a {hint} is needed")
    hint = inner
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json(value)
    if hint is Any:
        return value
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(hint) or (Any,)
        return [from_plain(v, item, f"{where}[]") for v in value]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {type(value).__name__}")
        item = (typing.get_args(hint) or (str, Any))[1]
        return {k: from_plain(v, item, f"{where}.{k}") for k, v in value.items()}
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if value in ("inf", "-inf", "nan"):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool):
        if isinstance(value, hint):
            return value
    raise TypeError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__} {value!r}")


# --- the JSON Schema --------------------------------------------------------------------------------------------


def json_schema() -> dict:
    """The record's JSON Schema (draft 2020-12), derived from the dataclasses: engine/record_schema.json."""
    definitions: dict[str, dict] = {}

    def schema_of(hint) -> dict:
        optional, inner = _is_optional(hint)
        if optional:
            return {"anyOf": [schema_of(inner), {"type": "null"}]}
        origin = typing.get_origin(hint)
        if isinstance(hint, type) and issubclass(hint, Record):
            define(hint)
            return {"$ref": f"#/$defs/{hint.__name__}"}
        if hint is Any:
            return {}
        if origin is list:
            (item,) = typing.get_args(hint) or (Any,)
            return {"type": "array", "items": schema_of(item)}
        if origin is dict or hint is dict:
            item = (typing.get_args(hint) or (str, Any))[1]
            return {"type": "object", "additionalProperties": schema_of(item)}
        simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
        return {"type": simple[hint]}

    def define(cls) -> None:
        if cls.__name__ in definitions:
            return
        definitions[cls.__name__] = {}  # placeholder against recursion
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        doc = (cls.__doc__ or "").strip()
        definitions[cls.__name__] = {
            "type": "object",
            "description": cls.__name__ if doc.startswith(cls.__name__ + "(") or not doc else doc.splitlines()[0],
            "properties": {f.name: schema_of(hints[f.name]) for f in fields},
            "required": [f.name for f in fields if not _omitted(f)],  # to_json writes these, null included
            "additionalProperties": False,
        }

    define(Exploration)
    root = dict(definitions["Exploration"])
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://glassbox.example/record_schema.json",
            "title": f"Glassbox Exploration record, schema_version {SCHEMA_VERSION}", **root,
            "$defs": {name: body for name, body in sorted(definitions.items()) if name != "Exploration"}}


if __name__ == "__main__":  # python -m engine.record > engine/record_schema.json
    print(json.dumps(json_schema(), indent=1))
