"""GEMM templates as a scheduling decision: which library matmuls become generated kernels, and which of their
consumers run as the kernel's epilogue.

Note [GEMM templates]
A matmul (mm, addmm, bmm, baddbmm, a 1x1 convolution) is lowered to an Extern library call. Before fusion the
scheduler asks `choose` about each one; an eligible call becomes a Template node: the same call, now a kernel
of kind "template" whose output tile stays in registers while elementwise consumers of the same output shape
(bias, activation, scale, residual add, dtype cast) are computed on it — the epilogue. Fusion treats a
template like a reduction's row: a consumer joins when every read it makes of the template's output is the
element the tile holds (Note [Template epilogue loads]). After fusion, `keep_template` drops a template that
fused nothing when the heuristic chose it only for its epilogue: the library call alone is as fast.

Every GEMM is seen in one frame, out[b, m, n] = sum_k A[b, m, k] * B[b, k, n] (+ beta * bias[b, m, n]), with
each operand a strided view (batch stride 0 = broadcast), and the output row-major over (batch*M, N): the
template's rows are x = b*M + m and its columns r = n, so the epilogue is the `full` loop shape of Note [Fused
loop shape] with rows = batch*M and red = N.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import sympy
import torch

from engine.ir.handlers import AccessRecorder, Var
from engine.ir.indexing import FloorDiv, ModIndex, contiguous_strides, unflatten
from engine.ir.nodes import Buffer, Extern, Pointwise, TensorArg, Template
from engine.ir.ops import use_handler
from engine.record import GemmOperand, GemmSpecRecord
from engine.schedule import gemm_tiles
from engine.schedule.kernel_plan import Inliner, KernelPlan, NotFusable

aten = torch.ops.aten
MATMULS = {aten.mm.default: ("mm", 2), aten.addmm.default: ("addmm", 2), aten.bmm.default: ("bmm", 3),
           aten.baddbmm.default: ("baddbmm", 3)}  # op -> (name, dims of its operands)
GEMM_TARGETS = (*MATMULS, aten.convolution.default)
TEMPLATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TENSOR_CORE_MIN = 16  # tl.dot's smallest tile side: a GEMM with a smaller M, N or K stays a library call
CPU_SKINNY_ROWS = 32  # the C++ template beats the CPU BLAS only on few rows (batch 1-32 of an LLM layer)
# Note [When a C++ template pays]
# Default mode on the CPU takes the C++ template for a GEMM of at most CPU_SKINNY_ROWS rows when an epilogue
# fuses into it (the output is written once), and also with no epilogue at all when it is a weight stream
# (`streams`: x @ W.T with W contiguous along K, the stream form of Note [Streaming skinny GEMM] in
# codegen/cpp/gemm.py) of at least CPU_STREAM_MIN_WEIGHT elements. Why without an epilogue: on the machine
# this was measured on (AMD EPYC, 2 threads, torch 2.13's CPU BLAS), the library's skinny GEMMs were slower
# than the stream form: float32 x @ W.T for 4096x4096 ran 1.3x (M = 1) to 4x (M = 8) slower in the BLAS, and
# bf16's 1-row GEMV 2x slower; bf16 at 8-32 rows runs the same instruction (vdpbf16ps) in both and came out
# even (0.86-1.0). Small weights stay with the library: a call of tens of microseconds is mostly the parallel
# region's start, which both pay. A float32 GEMV (one row) also needs a weight of CPU_F32_GEMV_MIN_BYTES: the
# BLAS's sgemv reads a weight held in L3 faster (1024x1024: 0.078 ms vs the stream form's 0.095, 1.21x; at
# 1024x1024 and 8-32 rows the stream form took 0.47-0.88 of the BLAS's time, bf16 0.61-0.98), and from DRAM
# (4096x4096, 64 MB) slower (the stream form 0.50-0.91 of it). bf16 on a CPU without vdpbf16ps keeps the library beyond
# CPU_BF16_LANES_ROWS rows: converting to float32 costs the stream form half its speed there (the older form,
# which converted at each use, lost 1.2-2.9x at 8-32 rows). float16 is not streamed without an epilogue: its
# conversion is the branch-free one of the prelude, not measured against the BLAS.
# Float32 beyond CPU_F32_BLAS_ROWS rows needs a weight of CPU_F32_TEMPLATE_MIN_WEIGHT elements even with an
# epilogue: below it the BLAS plus our epilogue kernel was faster (2 threads, load 1.2, Linear + GELU, template on
# vs off in one run: 32x512x512 1.23x, 32x1024x1024 1.15x, 24x1024x1024 1.17x, 16x512x512 1.20x, 32x64x256
# 1.24x slower as the template; 32x2048x2048 0.93, 32x4096x1024 0.97, 8x1024x1024 0.60 and every bf16 shape
# from 32x256x64 to 32x2048x2048, 0.30-1.04, faster), so a training step's 32-row GEMMs stay with the BLAS.
CPU_STREAM_MIN_WEIGHT = 1 << 20
CPU_F32_BLAS_ROWS = 8
CPU_F32_TEMPLATE_MIN_WEIGHT = 1 << 22
CPU_F32_GEMV_MIN_BYTES = 32 << 20  # the L3 of the machine measured on (AMD EPYC, 32 MB)
CPU_BF16_LANES_ROWS = 1
# Note [When a CUDA template pays in default mode]
# Default mode does not time the template against cuBLAS, so it takes one only where a model of the two plans
# says the template wins:
#   library plan    cuBLAS's GEMM at CUBLAS_TFLOPS, then our epilogue kernel, which reads the GEMM's output
#                   back: one more pass over the output (written once, read once) at HBM speed, the saved pass
#   template plan   the same GEMM at TEMPLATE_SPEED times cuBLAS's rate, the epilogue on the tile in registers
# The template wins when the time its main loop loses, gemm_us * (1 / TEMPLATE_SPEED - 1), is less than the
# pass it saves. The saved pass is fixed per output element and the main loop grows with K, so the rule is a
# bound on K: in bf16 on an H200, K up to about 270. Measured (H200, Triton 3.6, bf16, torch.profiler,
# 2026-12-01), the four templates of the transformer block's training step (B*T = 8192, D = 1024), our
# 128x128x64 8-warp tile against cuBLAS's ~790 TFLOP/s:
#   forward fc1     8192x4096x1024 + bias + GELU, weight K-major     196 us (cuBLAS ~81)   speed 0.41
#   forward proj    8192x1024x1024 + bias + residual, K-major         41 us (cuBLAS ~24)   0.58
#   backward fc2    8192x4096x1024, weight N-major, + GELU gradient   138 us (cuBLAS ~81)  0.59
#   backward qkv    8192x1024x3072, N-major                           91 us (~65 at 790)   0.71
# (which kernel is which is read off the step's GEMM count: 2 library addmm and 6 mm a step, the rest
# templates), so every one lost to cuBLAS + the epilogue kernel, and the step took 1.22x Inductor's time with
# them, 1.09x without. TEMPLATE_SPEED is the slowest form's, so the rule errs toward cuBLAS (at 0.6 the bound
# would be K of about 550: still cuBLAS for all four). What the template's compiled code shows offline
# (triton.compile for sm_90): wgmma (HGMMA 64x128x16, asynchronous, one group in flight), a 3-stage cp.async
# pipeline, no spills, 96 KB of shared memory, 159-192 registers a thread, so one 256-thread program per SM:
# with K = 1024 a tile is only 16 K steps, and its pipeline fill and epilogue are not overlapped by another
# program's main loop, where cuBLAS's persistent, warp-specialized TMA kernel overlaps them.
# When the GEMM's own output is stored too (a training forward saves the pre-activation for the backward),
# the library plan's write of it is no extra: the template saves only the read, half the pass; fusion knows
# that only after it has placed the epilogue, so keep_template checks the rule again with it.
# The other refusals:
#   float32 without tf32  never: an "ieee" tl.dot runs on the FMA units; cuBLAS's sgemm is faster (an H200
#                         run measured 344 us for a 32x256x128 template vs 10 us for sgemm)
#   small outputs         the saved pass must take at least MIN_SAVED_US, or the GEMM is launch-bound and
#                         cuBLAS's small-shape kernels win
#   1x1 convolutions      never: cuDNN + the epilogue kernel ran ResNet-50 (fp16, channels-last) in 2.30 ms
#                         on the H200, the pixel-frame templates in 2.38
# max-autotune times the template's configs against the library call instead (gemm_launch.py).
HBM_BYTES_PER_S = 4.3e12  # an H200's device-to-device copy, bytes read + written (device KINDS.md)
CUBLAS_TFLOPS = {torch.float16: 790, torch.bfloat16: 790, torch.float32: 400}  # bf16: 8192^3 measured; tf32
TEMPLATE_SPEED = 0.45  # our template's main loop over cuBLAS's rate: the slowest measured (Note above)
MIN_SAVED_US = 2.0


@dataclass(frozen=True)
class Operand:
    """A matrix operand as a strided view of a buffer: element (b, i, j) is at offset + b*sb + i*si + j*sj."""
    name: str
    offset: int
    strides: tuple[int, int, int]  # (batch, row, column) in elements; 0 = broadcast


@dataclass(frozen=True)
class GemmSpec:
    op: str  # mm | addmm | bmm | baddbmm | conv1x1
    batch: int
    m: int
    n: int
    k: int
    a: Operand  # [batch, m, k]
    b: Operand  # [batch, k, n]
    bias: Operand | None  # [batch, m, n] broadcast view, or None
    alpha: float
    beta: float
    dtype: torch.dtype

    @property
    def rows(self) -> int:
        return self.batch * self.m

    def shape_text(self) -> str:
        batch = f"{self.batch} x " if self.batch > 1 else ""
        return f"{batch}{self.m}x{self.n}x{self.k} (MxNxK)"

    def record(self) -> GemmSpecRecord:
        def operand(o: Operand | None) -> GemmOperand | None:
            return GemmOperand(name=o.name, offset=o.offset, strides=list(o.strides)) if o is not None else None
        return GemmSpecRecord(op=self.op, batch=self.batch, M=self.m, N=self.n, K=self.k,
                              dtype=str(self.dtype).replace("torch.", ""), a=operand(self.a), b=operand(self.b),
                              bias=operand(self.bias), alpha=self.alpha, beta=self.beta)


class NotATemplate(Exception):
    """Why a library call is not a template (the reason is shown)."""


def _ints(values, what: str) -> tuple[int, ...]:
    result = []
    for value in values:
        value = sympy.sympify(value)
        if not value.is_Integer:
            raise NotATemplate(f"{what} {value} is symbolic (a template is generated for static shapes)")
        result.append(int(value))
    return tuple(result)


def _operand(arg: TensorArg, dims: tuple) -> Operand:
    """`arg` seen as [batch, rows, cols]: `dims` names which of its dims are batch/rows/cols (None: absent)."""
    sizes = _ints(arg.size, "size")
    strides = _ints(arg.stride, "stride")
    picked = []
    for dim in dims:
        picked.append(0 if dim is None or sizes[dim] == 1 else strides[dim])
    return Operand(arg.name, _ints([arg.offset], "offset")[0], tuple(picked))


def _broadcast(arg: TensorArg, out_ndim: int) -> Operand:
    """A bias broadcast to the output's [batch?, m, n] (aligned from the right, as torch broadcasts)."""
    missing = out_ndim - len(arg.size)
    dims = [None] * missing + list(range(len(arg.size)))
    if out_ndim == 2:
        dims = [None] + dims
    return _operand(arg, tuple(dims))


def _scalar(value, name: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise NotATemplate(f"{name}={value!r} is not a number known at compile time")


def gemm_spec(node: Extern) -> GemmSpec:
    """The call in the template's frame (Note [GEMM templates]); NotATemplate says why it does not fit."""
    target, args, kwargs = node.target, node.args, node.kwargs
    if node.dtype not in TEMPLATE_DTYPES:
        raise NotATemplate(f"{str(node.dtype).replace('torch.', '')} has no tiled tl.dot path here")
    bias, alpha, beta, pixel_frame = None, 1.0, 1.0, False
    if target in MATMULS:
        op, ndim = MATMULS[target]
        if op in ("addmm", "baddbmm"):  # (bias, a, b, *, beta, alpha)
            bias = _broadcast(args[0], ndim)
            args = args[1:]
            beta, alpha = _scalar(kwargs.get("beta", 1), "beta"), _scalar(kwargs.get("alpha", 1), "alpha")
        a, b = args[0], args[1]
        size_a, size_b = _ints(a.size, "size"), _ints(b.size, "size")
        batch, m, k, n = (size_a[0] if ndim == 3 else 1), size_a[-2], size_a[-1], size_b[-1]
        dims = (0, 1, 2) if ndim == 3 else (None, 0, 1)
        spec_a, spec_b = _operand(a, dims), _operand(b, dims)
    elif target == aten.convolution.default:
        spec_a, spec_b, bias, batch, m, n, k, pixel_frame = _conv1x1(node)
        op = "conv1x1"
    else:
        raise NotATemplate(f"{target} is not a matmul")
    if 0 in (batch, m, n, k):
        raise NotATemplate(f"empty GEMM {batch}x{m}x{n}x{k}: nothing to tile (the library call handles it)")
    out = _ints(node.size, "size")
    expected = contiguous_strides([sympy.Integer(s) for s in out])
    if op == "conv1x1" and pixel_frame:  # the output is (N, H*W, Cout) row-major: channels-last
        expected = (out[2] * out[3] * out[1], 1, out[3] * out[1], out[1])
    if any(s != 1 and int(st) != int(ex) for s, st, ex in zip(out, _ints(node.out_stride, "stride"), expected)):
        raise NotATemplate(f"output strides {list(_ints(node.out_stride, 'stride'))} are not the GEMM's "
                           f"row-major output")
    return GemmSpec(op, batch, m, n, k, spec_a, spec_b, bias, alpha, beta, node.dtype)


# Note [1x1 convolutions as GEMMs]
# A 1x1, stride-1, unpadded, ungrouped convolution is a GEMM in one of two frames, picked by the output's layout:
#   pixel frame    a channels-last output (NHWC, Note [Channels-last convolutions] in lowering/layout.py), or
#                  any when H*W is 1: out[(n, h, w), co] = sum_ci X[(n, h, w), ci] * W[co, ci]; the rows are
#                  the pixels, the columns the output channels, and the output is exactly the channels-last
#                  tensor, with the bias along the columns (as a Linear's); one GEMM over all N*H*W pixels
#                  when they flatten into one axis (an NHWC-dense input), else one per image (an NCHW input
#                  feeding a channels-last graph: the A tile is read along M)
#   image frame    NCHW: per image, W[Cout, Cin] @ X[Cin, H*W], a batched GEMM with the bias along the rows
# The epilogue's lanes follow the output's storage (Note [Template epilogue loads]): a channels-last consumer
# (its loop over N, H, W, C) reads the lane's element in both frames.


def _conv1x1(node: Extern):
    """The 1x1 convolution's GEMM (Note [1x1 convolutions as GEMMs]): a, b, bias, batch, m, n, k and whether
    it is the pixel frame."""
    x, w, bias = node.args[0], node.args[1], node.args[2]
    stride, padding, _, transposed, _, groups = node.args[3:9]
    if len(w.size) != 4 or _ints(w.size[2:], "size") != (1, 1):
        raise NotATemplate("only 1x1 convolutions are GEMMs")
    if transposed or groups != 1 or any(int(s) != 1 for s in stride) or any(int(p) != 0 for p in padding):
        raise NotATemplate("a 1x1 convolution with stride, padding, groups or transposition is not one GEMM")
    nb, cin, h, wd = _ints(x.size, "size")
    xs = _ints(x.stride, "stride")
    cout = _ints(w.size, "size")[0]
    ws = _ints(w.stride, "stride")
    x_offset, w_offset = _ints([x.offset], "offset")[0], _ints([w.offset], "offset")[0]
    bs = _ints(bias.stride, "stride") if isinstance(bias, TensorArg) else None
    bias_offset = _ints([bias.offset], "offset")[0] if bs else 0
    out = _ints(node.out_stride, "stride")
    if h * wd == 1 or out[1] == 1:  # the pixel frame
        b = Operand(w.name, w_offset, (0, ws[1] if cin > 1 else 0, ws[0] if cout > 1 else 0))
        spec_bias = Operand(bias.name, bias_offset, (0, 0, bs[0] if cout > 1 else 0)) if bs else None
        pixel_stride = _pixel_stride((nb, h, wd), (xs[0], xs[2], xs[3]))
        if pixel_stride is not None:  # all N*H*W pixels along one stride (NHWC-dense): one GEMM
            a = Operand(x.name, x_offset, (0, pixel_stride, xs[1] if cin > 1 else 0))
            return a, b, spec_bias, 1, nb * h * wd, cout, cin, True
        pixel_stride = _pixel_stride((h, wd), (xs[2], xs[3]))
        if pixel_stride is None:
            raise NotATemplate("the input's H and W do not flatten into one axis")
        a = Operand(x.name, x_offset, (xs[0] if nb > 1 else 0, pixel_stride, xs[1] if cin > 1 else 0))
        return a, b, spec_bias, nb, h * wd, cout, cin, True  # an NCHW input: one GEMM per image
    if h > 1 and wd > 1 and xs[2] != wd * xs[3]:
        raise NotATemplate("the input's H and W do not flatten into one axis (neither NCHW- nor NHWC-dense)")
    hw_stride = xs[3] if wd > 1 else xs[2]
    a = Operand(w.name, w_offset, (0, ws[0] if cout > 1 else 0, ws[1] if cin > 1 else 0))
    b = Operand(x.name, x_offset, (xs[0] if nb > 1 else 0, xs[1] if cin > 1 else 0, hw_stride if h * wd > 1 else 0))
    spec_bias = Operand(bias.name, bias_offset, (0, bs[0] if cout > 1 else 0, 0)) if bs else None
    return a, b, spec_bias, nb, cout, h * wd, cin, False


def _pixel_stride(sizes: tuple, strides: tuple) -> int | None:
    """The one stride that walks the pixels (n, h, w) in order, when they flatten into one axis; else None."""
    step, found = None, 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size == 1:
            continue
        if step is None:
            step = stride
        elif stride != found:
            return None
        found = stride * size
    return step if step is not None else 1


# --- the choice ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemplateOptions:
    """What the choice depends on: Options.templates (auto | on | off), the backend, the mode."""
    templates: str = "auto"
    backend: str = "cpp"
    mode: str = "default"
    device: str = "cpu"  # the Triton backend on "cpu" runs the interpreter

    @property
    def cuda(self) -> bool:
        return self.backend == "triton" and self.device.startswith("cuda")


def choose(node: Extern, options: TemplateOptions) -> tuple[Template | None, str]:
    """A Template node for this library call, or None; and the reason in words."""
    if options.templates == "off":
        return None, "templates are off (Options.templates='off'): library call"
    try:
        spec = gemm_spec(node)
    except NotATemplate as reason:
        return None, f"library call: {reason}"
    if options.templates == "on":
        reason = "template forced on (Options.templates='on')"
    elif options.backend == "triton" and min(spec.m, spec.n, spec.k) < TENSOR_CORE_MIN:
        return None, (f"library call: {spec.shape_text()} is too small for tensor-core tiles "
                      f"(tl.dot wants {TENSOR_CORE_MIN}x{TENSOR_CORE_MIN}x{TENSOR_CORE_MIN})")
    elif options.mode == "max-autotune":
        reason = "max-autotune: tile configs are timed against the library call at the first launch"
    elif refusal := heuristic_refusal(spec, options):
        return None, f"library call: {refusal}"
    else:
        reason = (f"{spec.shape_text()} fits a tiled template; kept if an epilogue fuses into it "
                  f"(then the output is written once instead of written and read again)")
        if options.cuda:
            config = gemm_tiles.gpu_configs(spec.m, spec.n, spec.k, spec.dtype)[0]
            reason += (f"; {_prediction(spec)}; tile {config.BLOCK_M}x{config.BLOCK_N}x{config.BLOCK_K}, "
                       f"{config.num_warps} warps, {config.num_stages} stages (Note [Sane GEMM tiles])")
    fields = {f.name: getattr(node, f.name) for f in dataclasses.fields(Extern)}
    return Template(**fields, spec=spec, reason=reason), reason


def heuristic_refusal(spec: GemmSpec, options: TemplateOptions) -> str | None:
    """Why default mode keeps the library call for a GEMM that fits the template, or None."""
    if options.cuda:
        return cuda_refusal(spec)
    if options.backend == "cpp" and spec.rows > CPU_SKINNY_ROWS:
        return (f"{spec.rows} rows; the CPU BLAS beats a generated GEMM beyond {CPU_SKINNY_ROWS} rows (the "
                f"C++ template is for skinny, batch 1-32 shapes)")
    if (options.backend == "cpp" and spec.dtype == torch.float32 and spec.rows > CPU_F32_BLAS_ROWS
            and spec.n * spec.k < CPU_F32_TEMPLATE_MIN_WEIGHT):
        return (f"float32 with {spec.rows} rows and a {spec.n}x{spec.k} weight: below "
                f"{CPU_F32_TEMPLATE_MIN_WEIGHT:,} weight elements the CPU BLAS and the epilogue as a kernel of "
                f"its own measured faster (Note [When a C++ template pays])")
    if (options.backend == "cpp" and spec.dtype == torch.bfloat16 and spec.rows > CPU_BF16_LANES_ROWS
            and not cpu_multiplies_bf16_pairs()):
        return (f"bf16 with {spec.rows} rows on a CPU without vdpbf16ps (AVX512_BF16): the template would "
                f"convert to float32 and run at half speed, the CPU BLAS does not (Note [When a C++ template "
                f"pays])")
    return None


def streams(spec: GemmSpec) -> bool:
    """A weight stream: x @ W.T with W contiguous along K, few rows (Note [When a C++ template pays])."""
    return (spec.b.strides[1] == 1 and spec.k > 1 and spec.b.strides[2] != 1 and spec.rows <= CPU_SKINNY_ROWS)


def cpu_alone_reason(spec: GemmSpec, options: TemplateOptions) -> str | None:
    """Why default mode runs this C++ template even with no epilogue (Note [When a C++ template pays]); None
    when the library call alone is as fast."""
    if options.backend != "cpp" or options.templates == "off" or heuristic_refusal(spec, options):
        return None
    if not streams(spec) or spec.n * spec.k < CPU_STREAM_MIN_WEIGHT or spec.dtype == torch.float16:
        return None
    if spec.dtype == torch.float32 and spec.rows == 1 and spec.n * spec.k * 4 < CPU_F32_GEMV_MIN_BYTES:
        return None
    return (f"no epilogue, but {spec.shape_text()} is a weight stream ({spec.n}x{spec.k} weight contiguous "
            f"along K, {spec.rows} rows): the stream form reads the weight once at memory speed, faster than "
            f"the CPU BLAS's skinny GEMM as measured (Note [When a C++ template pays])")


@functools.lru_cache(maxsize=None)
def cpu_multiplies_bf16_pairs() -> bool:
    """Does this CPU have vdpbf16ps (the stream form's bf16 path, Note [Streaming skinny GEMM])?"""
    try:
        with open("/proc/cpuinfo") as info:
            return any(line.startswith("flags") and " avx512_bf16" in line for line in info)
    except OSError:
        return False


def default_takes_template(spec: GemmSpec, has_epilogue: bool, backend: str, device: str,
                           output_stored: bool = False) -> bool:
    """Would default mode run this GEMM as the template (not the library call)? max-autotune's incumbent
    (Note [Autotune against the default's pick] in runtime/gemm_launch.py)."""
    options = TemplateOptions("auto", backend, "default", device)
    small = backend == "triton" and min(spec.m, spec.n, spec.k) < TENSOR_CORE_MIN
    wanted = has_epilogue or cpu_alone_reason(spec, options) is not None
    return (wanted and not small and heuristic_refusal(spec, options) is None
            and not (options.cuda and stored_output_refusal(spec, output_stored)))


def _element_size(spec: GemmSpec) -> int:
    return torch.empty((), dtype=spec.dtype).element_size()


def saved_us(spec: GemmSpec, output_stored: bool = False) -> float:
    """Microseconds of HBM traffic the epilogue saves: the output written once and read once less (only the
    read when the output is stored anyway)."""
    passes = 1 if output_stored else 2
    return passes * spec.rows * spec.n * _element_size(spec) / HBM_BYTES_PER_S * 1e6


def library_gemm_us(spec: GemmSpec) -> float:
    """The GEMM alone at cuBLAS's rate (Note [When a CUDA template pays in default mode])."""
    return 2 * spec.rows * spec.n * spec.k / (CUBLAS_TFLOPS[spec.dtype] * 1e12) * 1e6


def template_loss_us(spec: GemmSpec) -> float:
    """What the template's main loop loses against cuBLAS's, at TEMPLATE_SPEED."""
    return library_gemm_us(spec) * (1 / TEMPLATE_SPEED - 1)


def _prediction(spec: GemmSpec, output_stored: bool = False) -> str:
    gemm = library_gemm_us(spec)
    extra = "read of the stored output" if output_stored else "pass over the output"
    return (f"predicted: template {gemm + template_loss_us(spec):.1f} us (its main loop at {TEMPLATE_SPEED:.0%} "
            f"of cuBLAS's rate) vs cuBLAS {gemm:.1f} us + the epilogue's extra {extra} "
            f"{saved_us(spec, output_stored):.1f} us")


def stored_output_refusal(spec: GemmSpec, output_stored: bool) -> str | None:
    """Why a CUDA template whose own output is stored too loses after all, or None (Note [When a CUDA
    template pays in default mode])."""
    if output_stored and template_loss_us(spec) > saved_us(spec, output_stored=True):
        return (f"library call: the GEMM's output is stored too (another kernel reads it), so the template "
                f"saves only its read: {_prediction(spec, output_stored=True)}")
    return None


def cuda_refusal(spec: GemmSpec) -> str | None:
    """Why default mode keeps cuBLAS for this GEMM, or None (Note [When a CUDA template pays in default mode])."""
    if spec.op == "conv1x1":
        return ("a 1x1 convolution on CUDA: cuDNN + the fused epilogue kernel measured faster end to end on the "
                "H200 (ResNet-50 fp16, 16 images: 2.30 ms with 1x1 convs as cuDNN calls, 2.38 as templates); "
                "max-autotune times the template against it")
    if gemm_tiles.ieee_fp32(spec.dtype):
        return ("float32 without tf32 (torch.backends.cuda.matmul.allow_tf32 is off): tl.dot would run on the "
                "FMA units and cuBLAS's sgemm is faster; max-autotune times the template against it")
    if saved_us(spec) < MIN_SAVED_US:
        return (f"{spec.shape_text()} is launch-bound: fusing the epilogue saves {saved_us(spec):.2f} us of "
                f"memory traffic (< {MIN_SAVED_US} us), and cuBLAS's small-shape kernels are faster than one "
                f"fixed tile; max-autotune times the template against it")
    if template_loss_us(spec) > saved_us(spec):
        return (f"{spec.shape_text()} is compute-bound for our template (K={spec.k}): {_prediction(spec)}, so "
                f"cuBLAS + the epilogue kernel is faster; max-autotune times the template against it")
    return None


def keep_template(template: Template, epilogue: list[Buffer], options: TemplateOptions,
                  output_stored: bool = False) -> tuple[bool, str]:
    """After fusion: a template chosen only for its epilogue and given none goes back to the library call, and
    so does a CUDA one whose stored output leaves it too little to save (`output_stored`: the GEMM's own
    output is one of the kernel's stores)."""
    forced = options.templates == "on" or options.mode == "max-autotune"
    if epilogue and not forced and options.cuda and (refusal := stored_output_refusal(template.spec, output_stored)):
        return False, refusal
    if epilogue or forced:
        fused = ", ".join(n.name for n in epilogue) or "nothing"
        return True, f"{template.reason}; epilogue: {fused}"
    if alone := cpu_alone_reason(template.spec, options):
        return True, f"template: {alone}"
    return False, "library call: no elementwise consumer fused into the template, and the library GEMM alone is as fast"


# Note [SwiGLU pair]
# Llama's MLP computes silu(x @ W1.T) * (x @ W3.T): two GEMMs with the same input and output shape whose
# outputs meet in one elementwise product. There are two ways to fuse it:
#   concatenated weight   one GEMM of x with [W1; W3] (2N columns), the product in its epilogue: x is read
#                         once and one kernel runs; but the product pairs column n with column N + n, which
#                         another program computes unless the tile interleaves the two weights' rows, and
#                         the weights are two parameters: [W1; W3] is a copy of both (2*N*K elements) made at
#                         every call, or kept across calls by weight prepacking, which needs the weights frozen
#                         (constant folding of parameters) — neither is done here
#   fused consumer        (chosen) one GEMM (a library call) writes its output; the other's template computes
#                         the product in its epilogue, reading that output once at its own element (Note
#                         [Template epilogue loads]): one M x N write and read more than the concatenated form,
#                         against the 2*M*N*K flops of each GEMM (1/K of a byte per flop: small at LLM widths)
# Measured against (H200, bf16, M=2048, 4096 -> 11008, do_bench): cuBLAS ran the GEMM in 0.2425 ms and the best
# Triton tile (Inductor's max-autotune table) in 0.2875, while the M x N write and read the concatenated form
# saves is ~0.02 ms (90 MB at HBM speed). One kernel for both GEMMs puts both main loops in Triton (about
# 0.575 ms) where the fused consumer runs one in cuBLAS (about 0.53 + 0.02): the concatenated form loses until
# a generated main loop matches cuBLAS's, so it is not generated.
# On the CPU at batch 1-32 (the C++ stream form, Note [Streaming skinny GEMM]) the pair is two weight streams:
# the concatenated form would save the M x N write and read of one output (at most 1.4 MB at 32 x 11008 in
# float32) and one parallel region, against 2 x N x K weight elements read (360 MB for Llama-7B's gate and up
# in float32): under 0.5%, and x (M x K) is read from cache by both; so the CPU keeps the fused consumer too.
# `gemm_pair` finds such a pair for a template's epilogue and says which form was chosen and why.


def gemm_pair(template: Template, epilogue: list[Buffer], reads: dict, buffers: dict) -> dict | None:
    """The SwiGLU-style pair of `template` (another GEMM of the same input and shape whose output its epilogue
    reads), with the form chosen and why (Note [SwiGLU pair]); None when there is none."""
    spec = template.spec
    for name in dict.fromkeys(r for node in epilogue for r in reads.get(node.name, ())):
        other = buffers.get(name)
        if name == template.name or not isinstance(other, Extern):
            continue
        try:
            other_spec = other.spec if isinstance(other, Template) else gemm_spec(other)
        except NotATemplate:
            continue
        if (other_spec.a, other_spec.batch, other_spec.m, other_spec.n, other_spec.k) != (
                spec.a, spec.batch, spec.m, spec.n, spec.k):
            continue
        return {"gemms": [name, template.name], "input": spec.a.name, "form": "fused consumer",
                "reason": (f"{name} and {template.name} both multiply {spec.a.name} ({spec.shape_text()}); their "
                           f"product runs in {template.name}'s epilogue, which reads {name}'s output once at "
                           f"its own element; not one GEMM over the concatenated weight, which would "
                           f"copy both weights ({2 * spec.n * spec.k} elements) at every call without weight "
                           f"prepacking (Note [SwiGLU pair])")}
    return None


# --- the epilogue --------------------------------------------------------------------------------------------


@dataclass
class TemplatePlan(KernelPlan):
    """The epilogue's loop shape: rows x = b*M + m, columns r = n; every epilogue node is `full` (one value
    per output element). The lane (x, r) holds the output element at storage offset x*N + r; a node of the
    template's shape is computed at that element (its index read off the output's strides), any other at
    unflatten(x*N + r, its size) (a channels-last node runs over N, H, W, C: the same element)."""

    template: Template | None = None

    def role(self, node: Buffer) -> str:
        return "full"

    def index(self, node: Buffer) -> list:
        linear = self.x * self.red + self.r
        if self.template is not None and tuple(node.size) == tuple(self.template.size):
            return [self.simplify(e) for e in strided_unflatten(linear, self.template.size, self.template.out_stride)]
        return [self.simplify(e) for e in unflatten(linear, node.size)]

    def output_offset(self) -> sympy.Expr:
        return self.simplify(self.x * self.red + self.r)


def strided_unflatten(linear, sizes, strides) -> list:
    """The index of the element at storage offset `linear` of a dense tensor of these sizes and strides."""
    kept = [d for d, size in enumerate(sizes) if sympy.sympify(size) != 1]
    outer = max(kept, key=lambda d: int(strides[d])) if kept else None
    index = []
    for d, (size, stride) in enumerate(zip(sizes, strides)):
        if sympy.sympify(size) == 1:
            index.append(sympy.Integer(0))
            continue
        value = FloorDiv(linear, stride)
        index.append(value if d == outer else ModIndex(value, size))
    return index


def epilogue_plan(template: Template, epilogue: list[Buffer]) -> TemplatePlan:
    spec = template.spec
    return TemplatePlan(list(epilogue), sympy.Integer(spec.rows), sympy.Integer(spec.n), template=template)


# Note [Template epilogue loads]
# The template holds one output element per (x, r) lane: an epilogue may read the template's output only at
# that element (its storage offset, simplified over the tile's ranges, is x*N + r; with one row, x is 0 and
# a consumer's index that dropped it is the same element). A read anywhere else (a transpose, a neighbour,
# a broadcast of one row) would need a value another program computes: not fusable.


def accumulator_read(plan: TemplatePlan, template: Template, index) -> None:
    """Raise NotFusable unless `index` into the template's output is the element the lane holds."""
    offset = plan.simplify(sympy.expand(template.storage_offset(index)))
    single = {var: 0 for var, extent in plan.ranges.items() if extent == 1}  # M=1: x is always 0
    if sympy.expand((offset - plan.output_offset()).subs(single)) != 0:
        raise NotFusable(f"reads {template.name} at another element ({offset}), not the tile's own "
                         f"(Note [Template epilogue loads])")


def epilogue_verdict(template: Template, consumer: list[Buffer]) -> tuple[bool, str]:
    """May these nodes join the template as its epilogue? (policy's template rule)"""
    numel = template.spec.rows * template.spec.n
    for node in consumer:
        if not isinstance(node, Pointwise):
            return False, f"{node.name} is a {node.kind}: a template's epilogue is elementwise"
        if sympy.expand(node.numel - numel) != 0:
            return False, (f"{node.name} has {node.numel} elements; the template's epilogue runs over its "
                           f"{template.spec.rows}x{template.spec.n} output")
    return True, f"epilogue of the {template.spec.op} template: elementwise over its {template.spec.rows}x{template.spec.n} output tile"


def check_epilogue(nodes: list[Buffer], buffers: dict) -> str | None:
    """None when the group (one Template and its epilogue) is valid; otherwise why not."""
    templates = [n for n in nodes if isinstance(n, Template)]
    if len(templates) != 1:
        return "both are GEMMs (template candidates): two GEMMs never share a kernel"
    template = templates[0]
    epilogue = [n for n in nodes if n is not template]
    plan = epilogue_plan(template, epilogue)

    def external(name, index):
        if name == template.name:
            accumulator_read(plan, template, index)
        return Var("load", buffers[name].dtype)

    inliner = Inliner(plan, external=external, accumulator=lambda name: Var("acc", buffers[name].dtype))
    try:
        with use_handler(AccessRecorder(buffers, on_load=inliner.load)):
            for node in epilogue:
                node.inner_fn(plan.index(node))
    except NotFusable as reason:
        return str(reason)
    return None
