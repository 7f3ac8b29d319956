"""The C++ GEMM template: a blocked, vectorizable GEMM whose epilogue is printed from the IR by CppPrinter
(the printer of the pointwise kernels), with the tile's accumulator as the value of the matmul's buffer.

Note [C++ GEMM template]
The output is cut into tiles of tile_m x tile_n (runtime arguments, so max-autotune can try several with one
build); OpenMP threads take whole tiles. Each tile is accumulated in float32 in a stack array, by one of two
inner loops chosen from the operands' strides, so that the innermost loop walks contiguous memory and
vectorizes:
  dot   B is contiguous along K (a Linear's weight, x @ w.t()): out[i, j] = dot(A row i, B column j), in
        blocks of 2 rows x 4 columns (eight independent accumulators; each loaded value feeds 2 or 4 of them)
  axpy  otherwise (B contiguous along N: x @ w, bmm, a 1x1 convolution): out[i, :] += A[i, k] * B[k, :]
  stream  a skinny dot (at most STREAM_MAX_ROWS rows): Note [Streaming skinny GEMM]
Then the epilogue loop walks the tile's rows (row-invariant values hoisted) and columns (simd).
acc_from_memory runs only the epilogue, on the tile the library call wrote (Note [Template or library at run
time] in gemm_launch.py). Sizes and strides are literals: the template is generated per shape.
"""
from __future__ import annotations

import torch

from engine.codegen.cpp.printer import STORAGE_TYPES, THREADS, CppPrinter
from engine.codegen.kernel_core import Source
from engine.ir.artifacts import TemplateKernel
from engine.codegen.provenance import LineTag
from engine.ir.handlers import Var
from engine.ir.nodes import Template
from engine.ir.ops import ops, use_handler
from engine.record import TemplateRecord
from engine.schedule.fusion import Kernel
from engine.schedule.templates import (GemmSpec, TemplatePlan, accumulator_read, default_takes_template,
                                      epilogue_plan)

MAX_TILE = 64  # the stack tile is MAX_TILE x MAX_TILE floats (16 KiB per thread)
PARALLEL_MIN_FLOPS = 1 << 18
LOAD = {torch.float32: "{}", torch.float16: "gb_half_to_float({})", torch.bfloat16: "gb_bf16_to_float({})"}
ROUND = {torch.float32: "{}", torch.float16: "gb_round_half({})", torch.bfloat16: "gb_round_bf16({})"}


STREAM_MAX_ROWS = 64  # Note [Streaming skinny GEMM]: every row of a tile is in one block of the weight's stream


def inner_form(spec: GemmSpec) -> str:
    if spec.b.strides[1] == 1 and spec.k > 1 and spec.b.strides[2] != 1:
        return "stream" if spec.rows <= STREAM_MAX_ROWS else "dot"
    return "axpy"


# Note [Streaming skinny GEMM]
# A Linear at batch 1-32 (x @ W.T, W [N, K] contiguous along K) is a stream of the weight: each weight element
# is used by only M rows, so the GEMM runs at the speed the weight is read (memory-bound at M of 1-8) or at the
# FMA units' (M = 32), and a loop that reloads or reconverts operands per multiply loses both. The stream form:
#   - A (the few rows of activations) is converted to float32 once per call into a buffer of the calling thread,
#     shared by the module's stream kernels, when it is not already float32 and contiguous along K (fp16, bf16
#     without vdpbf16ps, strided views); M x K floats
#   - each tile walks its columns in blocks of GB_NR weight rows (GB_NR_WIDE at M = 1: more streams in flight)
#     and K in chunks of STREAM_KC; a bf16/fp16 weight chunk is converted once into a small float buffer in L1
#     and then used by every row of the tile; a float32 chunk is read in place (it stays in L1 across the rows)
#   - the register block is GB_MR rows x GB_NR columns of vector accumulators along K (explicit AVX-512 or
#     AVX2 FMAs; 4x4 on AVX-512's 32 registers, 2x4 on AVX2's 16), then 2 and 1 rows; each loaded vector feeds
#     GB_NR or GB_MR FMAs; the accumulators persist across K chunks in a stack array (one load and store per
#     chunk of 512 products a lane) and are summed across lanes once, at the end
#   - the K % vector-width tail is a scalar loop on the original operands
# The older dot form (2x4 blocks of `omp simd` reductions) converted every bf16 operand at each use: at 8-32 rows
# it ran at half the float32 speed, and its working set of two A and four B rows of the whole K (64-96 KB in
# float32) came from L2 at every step.
STREAM_KC = 512  # a chunk of K: 4 weight rows x 512 floats = 8 KB, in L1 while every row block uses it
STREAM_HELPERS = r"""#ifndef GB_STREAM_GEMM
#define GB_STREAM_GEMM
// Note [Streaming skinny GEMM] (engine/codegen/cpp/gemm.py): vector accumulators along K, explicit FMAs.
#include <algorithm>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#define GB_VW 16
typedef __m512 gb_vf;
static inline gb_vf gb_vload(const float* p) { return _mm512_loadu_ps(p); }
static inline void gb_vstore(float* p, gb_vf v) { _mm512_storeu_ps(p, v); }
static inline gb_vf gb_vfma(gb_vf a, gb_vf b, gb_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float gb_vsum(const float* p) { return _mm512_reduce_add_ps(_mm512_loadu_ps(p)); }
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GB_VW 8
typedef __m256 gb_vf;
static inline gb_vf gb_vload(const float* p) { return _mm256_loadu_ps(p); }
static inline void gb_vstore(float* p, gb_vf v) { _mm256_storeu_ps(p, v); }
static inline gb_vf gb_vfma(gb_vf a, gb_vf b, gb_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float gb_vsum(const float* p) {
    __m128 s = _mm_add_ps(_mm_loadu_ps(p), _mm_loadu_ps(p + 4));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
#else
#define GB_VW 1
typedef float gb_vf;
static inline gb_vf gb_vload(const float* p) { return *p; }
static inline void gb_vstore(float* p, gb_vf v) { *p = v; }
static inline gb_vf gb_vfma(gb_vf a, gb_vf b, gb_vf c) { return a * b + c; }
static inline float gb_vsum(const float* p) { return *p; }
#endif
// A's float32 rows (Note [Streaming skinny GEMM]): one buffer per calling thread for every stream kernel of the
// module, which run one after another on it (a buffer per kernel would hold M x K floats for each layer).
static float* gb_stream_scratch(size_t floats) {
    static thread_local std::vector<float> rows;
    if (rows.size() < floats) rows.resize(floats);
    return rows.data();
}
#define GB_MR (GB_VW >= 16 ? 4 : 2)
#define GB_NR 4
#define GB_NR_WIDE (GB_VW >= 16 ? 8 : 4)

// MR rows x NR columns over kn (a multiple of GB_VW) products: a rows lda apart, b columns ldb apart, the
// accumulators' lanes in part (row r, column c at (r * NR + c) * GB_VW).
template <int MR, int NR>
static inline void gb_stream_block(const float* __restrict__ a, int64_t lda, const float* __restrict__ b,
                                   int64_t ldb, int64_t kn, float* __restrict__ part) {
    gb_vf acc[MR][NR];
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) acc[r][c] = gb_vload(part + (r * NR + c) * GB_VW);
    for (int64_t k = 0; k < kn; k += GB_VW) {
        gb_vf bv[NR];
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) bv[c] = gb_vload(b + c * ldb + k);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            const gb_vf av = gb_vload(a + r * lda + k);
#pragma GCC unroll 8
            for (int c = 0; c < NR; ++c) acc[r][c] = gb_vfma(av, bv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) gb_vstore(part + (r * NR + c) * GB_VW, acc[r][c]);
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define GB_DPBF16 1
// bf16 operands as they are: vdpbf16ps multiplies 16 pairs of bf16 (32 along K) into 16 float lanes, the
// products exact in float32 and accumulated in float32 (the CPU BLAS's bf16 GEMM uses the same instruction);
// kn is a multiple of 32. The lanes' layout in part is gb_stream_block's.
template <int MR, int NR>
static inline void gb_stream_block(const uint16_t* __restrict__ a, int64_t lda, const uint16_t* __restrict__ b,
                                   int64_t ldb, int64_t kn, float* __restrict__ part) {
    __m512 acc[MR][NR];
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) acc[r][c] = _mm512_loadu_ps(part + (r * NR + c) * 16);
    for (int64_t k = 0; k < kn; k += 32) {
        __m512bh bv[NR];
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) bv[c] = (__m512bh)_mm512_loadu_si512(b + c * ldb + k);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            const __m512bh av = (__m512bh)_mm512_loadu_si512(a + r * lda + k);
#pragma GCC unroll 8
            for (int c = 0; c < NR; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], av, bv[c]);
        }
    }
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) _mm512_storeu_ps(part + (r * NR + c) * 16, acc[r][c]);
}
#endif

// Every row of a tile (mb rows) against NR columns: blocks of GB_MR rows, then 2, then 1.
template <int NR, typename T>
static inline void gb_stream_rows(const T* a, int64_t lda, const T* b, int64_t ldb, int64_t kn, int64_t mb,
                                  float* part) {
    int64_t i = 0;
    for (; i + GB_MR <= mb; i += GB_MR) gb_stream_block<GB_MR, NR>(a + i * lda, lda, b, ldb, kn, part + i * NR * GB_VW);
    for (; i + 2 <= mb; i += 2) gb_stream_block<2, NR>(a + i * lda, lda, b, ldb, kn, part + i * NR * GB_VW);
    for (; i < mb; ++i) gb_stream_block<1, NR>(a + i * lda, lda, b, ldb, kn, part + i * NR * GB_VW);
}
#endif
"""


def tile_configs(spec: GemmSpec) -> list[dict]:
    """The heuristic's tile first: stream and dot take every row of a skinny GEMM (each B column is read once),
    stream with 32 columns (8 blocks of its 4 weight rows: the tiles of a 4096-wide layer are 128, enough to
    balance 2-16 threads), dot 16; axpy 32 rows of 64 columns (a row of the tile is 4-8 vector registers)."""
    def fit(m, n):
        return {"tile_m": max(1, min(m, spec.m, MAX_TILE)), "tile_n": max(1, min(n, spec.n, MAX_TILE))}

    form = inner_form(spec)
    first = fit(MAX_TILE, 32) if form == "stream" else fit(MAX_TILE if spec.m <= MAX_TILE else 32, 16) \
        if form == "dot" else fit(32, 64)
    others = ((MAX_TILE, 16), (MAX_TILE, 64), (8, 64)) if form == "stream" else \
        ((8, 64), (32, 16), (64, 32), (16, 64))
    configs = [first]
    for m, n in others:
        if fit(m, n) not in configs:
            configs.append(fit(m, n))
    return configs


class CppTemplateKernel(TemplateKernel):
    def record_fields(self) -> dict:
        return {"template": TemplateRecord(
            name="cpp_gemm", spec=self.spec.record(), config=tile_configs(self.spec)[0],
            inner_loop=inner_form(self.spec), epilogue=list(self.epilogue), reason=self.template.reason,
            candidates=tile_configs(self.spec), autotune=self.tuning)}


class EpiloguePrinter(CppPrinter):
    def __init__(self, plan: TemplatePlan, buffers: dict, template: Template):
        super().__init__(plan, buffers, plan.r, {plan.x: plan.rows, plan.r: plan.red})
        self.template = template
        self.accumulator = Var("acc_value", template.dtype, True)

    def _load_memory(self, name, index):
        if name == self.template.name:
            accumulator_read(self.plan, self.template, index)
            return self.accumulator
        return super()._load_memory(name, index)


def _at(operand, b: str, i: str, j: str) -> str:
    s = operand.strides
    return f"{operand.name}[{operand.offset} + {b} * {s[0]} + ({i}) * {s[1]} + ({j}) * {s[2]}]"


def _load(dtype, text: str) -> str:
    return LOAD[dtype].format(text)


def _dot_block(spec: GemmSpec, out: Source, rows: int, cols: int):
    """rows x cols dot products at once: rows*cols independent accumulators, each A and B element loaded once
    per block (the register blocking that keeps the vector units busy instead of waiting on one add chain)."""
    a, b, dt = spec.a, spec.b, spec.dtype
    names = [f"s{r}_{c}" for r in range(rows) for c in range(cols)]
    out.add(f"float {', '.join(f'{n} = 0.0f' for n in names)};")
    with out.block(f"for (int64_t k = 0; k < {spec.k}; ++k)", f"#pragma omp simd reduction(+:{','.join(names)})"):
        for r in range(rows):
            out.add(f"const float a{r} = {_load(dt, _at(a, 'b', f'm0 + i + {r}', 'k'))};")
        for c in range(cols):
            out.add(f"const float b{c} = {_load(dt, _at(b, 'b', 'k', f'n0 + j + {c}'))};")
        for r in range(rows):
            out.add(" ".join(f"s{r}_{c} += a{r} * b{c};" for c in range(cols)))
    for r in range(rows):
        out.add(" ".join(f"acc[i + {r}][j + {c}] = s{r}_{c};" for c in range(cols)))


def _dot_loop(spec: GemmSpec, out: Source):
    """Note [C++ GEMM template]'s dot form: 2x4 blocks of the tile, then the ragged rows and columns."""
    out.add("int64_t i = 0;")
    for rows, condition in ((2, "i + 2 <= mb"), (1, "i < mb")):
        with out.block(f"for (; {condition}; i += {rows})"):
            out.add("int64_t j = 0;")
            for cols, column_condition in ((4, "j + 4 <= nb"), (1, "j < nb")):
                with out.block(f"for (; {column_condition}; j += {cols})"):
                    _dot_block(spec, out, rows, cols)


def _a_in_place(spec: GemmSpec) -> bool:
    """The stream form reads A where it is: float32, each row contiguous along K."""
    return spec.dtype == torch.float32 and (spec.a.strides[2] == 1 or spec.k == 1)


def _b_in_place(spec: GemmSpec) -> bool:
    return spec.dtype == torch.float32


def _stream_prologue(spec: GemmSpec, out: Source):
    """Before the tiles: A as float32 rows of K (Note [Streaming skinny GEMM]), unless it is already."""
    if _a_in_place(spec):
        return
    if _pairs(spec):
        out.add("#if !GB_DPBF16")
        _stream_prologue_convert(spec, out)
        out.add("#endif")
        return
    _stream_prologue_convert(spec, out)


def _stream_prologue_convert(spec: GemmSpec, out: Source):
    out.add("float* a_f32 = nullptr;  // the calling thread's buffer; its workers read it")
    with out.block("if (!acc_from_memory)"):
        out.add(f"a_f32 = gb_stream_scratch({spec.rows * spec.k});")
        with out.block(f"for (int64_t b = 0; b < {spec.batch}; ++b) for (int64_t i = 0; i < {spec.m}; ++i)"):
            with out.block(f"for (int64_t k = 0; k < {spec.k}; ++k)", "#pragma omp simd"):
                out.add(f"a_f32[(b * {spec.m} + i) * {spec.k} + k] = "
                        f"{_load(spec.dtype, _at(spec.a, 'b', 'i', 'k'))};")


def _pairs(spec: GemmSpec) -> bool:
    """bf16 with A contiguous along K: the stream form's vdpbf16ps variant, where the CPU has it."""
    return spec.dtype == torch.bfloat16 and spec.a.strides[2] == 1


def _stream_loop(spec: GemmSpec, out: Source):
    """Note [Streaming skinny GEMM]: bf16 pairs where the CPU multiplies them, float32 lanes otherwise."""
    if not _pairs(spec):
        return _stream_lanes(spec, out)
    out.add("#if GB_DPBF16")
    _stream_lanes(spec, out, pairs=True)
    out.add("#else")
    _stream_lanes(spec, out)
    out.add("#endif")


def _stream_lanes(spec: GemmSpec, out: Source, pairs: bool = False):
    """The tile's columns in blocks of nr weight rows, K in chunks; pairs: bf16 operands read in place."""
    a, b, dt = spec.a, spec.b, spec.dtype
    nr = "GB_NR_WIDE" if spec.m == 1 else "GB_NR"
    kmain = f"{spec.k} / 32 * 32" if pairs else f"{spec.k} / GB_VW * GB_VW"
    if pairs:
        out.add(f"const uint16_t* const a_tile = {a.name} + {a.offset} + b * {a.strides[0]} + m0 * {a.strides[1]};")
        lda = a.strides[1] if spec.m > 1 else 0
    elif _a_in_place(spec):
        out.add(f"const float* const a_tile = {a.name} + {a.offset} + b * {a.strides[0]} + m0 * {a.strides[1]};")
        lda = a.strides[1] if spec.m > 1 else 0
    else:
        out.add(f"const float* const a_tile = a_f32 + (b * {spec.m} + m0) * {spec.k};")
        lda = spec.k
    out.add(f"constexpr int NR = {nr};")
    out.add(f"alignas(64) float part[{MAX_TILE} * NR * GB_VW];")
    if not (_b_in_place(spec) or pairs):
        out.add(f"alignas(64) float b_chunk[NR * {STREAM_KC}];")
    with out.block("for (int64_t j = 0; j < nb;)"):
        out.add("const int64_t nr = j + NR <= nb ? NR : 1;")
        out.add("std::fill(part, part + mb * nr * GB_VW, 0.0f);")
        with out.block(f"for (int64_t kc = 0; kc < {kmain}; kc += {STREAM_KC})"):
            out.add(f"const int64_t kn = std::min<int64_t>({STREAM_KC}, {kmain} - kc);")
            if _b_in_place(spec) or pairs:
                out.add(f"const {'uint16_t' if pairs else 'float'}* const b_cols = {b.name} + {b.offset} + "
                        f"b * {b.strides[0]} + kc + (n0 + j) * {b.strides[2]};")
                ldb = b.strides[2]
            else:
                with out.block("for (int64_t c = 0; c < nr; ++c)"):
                    with out.block("for (int64_t k = 0; k < kn; ++k)", "#pragma omp simd"):
                        out.add(f"b_chunk[c * {STREAM_KC} + k] = {_load(dt, _at(b, 'b', 'kc + k', 'n0 + j + c'))};")
                out.add("const float* const b_cols = b_chunk;")
                ldb = STREAM_KC
            out.add(f"if (nr == NR) gb_stream_rows<NR>(a_tile + kc, {lda}, b_cols, {ldb}, kn, mb, part);")
            out.add(f"else gb_stream_rows<1>(a_tile + kc, {lda}, b_cols, {ldb}, kn, mb, part);")
        with out.block("for (int64_t i = 0; i < mb; ++i) for (int64_t c = 0; c < nr; ++c)"):
            out.add("float sum = gb_vsum(part + (i * nr + c) * GB_VW);")
            with out.block(f"for (int64_t k = {kmain}; k < {spec.k}; ++k)"):
                out.add(f"sum += {_load(dt, _at(a, 'b', 'm0 + i', 'k'))} * {_load(dt, _at(b, 'b', 'k', 'n0 + j + c'))};")
            out.add("acc[i][j + c] = sum;")
        out.add("j += nr;")


def _axpy_loop(spec: GemmSpec, out: Source):
    a, b, dt = spec.a, spec.b, spec.dtype
    out.add("for (int64_t i = 0; i < mb; ++i) for (int64_t j = 0; j < nb; ++j) acc[i][j] = 0.0f;")
    with out.block(f"for (int64_t k = 0; k < {spec.k}; ++k)"):
        with out.block("for (int64_t i = 0; i < mb; ++i)"):
            out.add(f"const float av = {_load(dt, _at(a, 'b', 'm0 + i', 'k'))};")
            with out.block("for (int64_t j = 0; j < nb; ++j)", "#pragma omp simd"):
                out.add(f"acc[i][j] += av * {_load(dt, _at(b, 'b', 'k', 'n0 + j'))};")


def generate_template(kernel: Kernel, buffers: dict) -> CppTemplateKernel:
    template, epilogue = kernel.nodes[0], kernel.nodes[1:]
    spec = template.spec
    plan = epilogue_plan(template, epilogue)
    printer = EpiloguePrinter(plan, buffers, template)
    with use_handler(printer):
        for node in [n for n in kernel.nodes if n.name in kernel.stored]:
            printer.tag = LineTag(node.name)
            index = plan.index(node)
            ops.store(node.name, index, printer.accumulator if node is template else node.inner_fn(index))
    stores, store_tags = [line for line, _ in printer.stores], [tag for _, tag in printer.stores]
    hoisted, hoisted_tags = printer.take_hoisted()
    operands = [spec.a.name, spec.b.name] + ([spec.bias.name] if spec.bias else [])
    body_text = "\n".join(printer.lines + hoisted)
    loaded = [r for r in kernel.reads if f"{r}[" in body_text]
    inputs = list(dict.fromkeys(operands + loaded))
    inputs = [n for n in inputs if n not in kernel.stored]
    args = inputs + list(kernel.stored)
    params = [f"const {STORAGE_TYPES[buffers[n].dtype]}* __restrict__ {n}" for n in inputs]
    params += [f"{STORAGE_TYPES[buffers[n].dtype]}* __restrict__ {n}" for n in kernel.stored]
    params += [f"const {STORAGE_TYPES[spec.dtype]}* __restrict__ acc_in", "const int64_t acc_from_memory",
               "const int64_t tile_m", "const int64_t tile_n"]
    tag = LineTag(template.name)
    out = Source()
    form = inner_form(spec)
    if form == "stream":
        for line in STREAM_HELPERS.splitlines():
            out.add(line, tag)
    out.add(f'extern "C" void {kernel.name}({", ".join(params)})', tag)
    with out.block():
        out.add(f"// GEMM template: {spec.op} {spec.shape_text()}, {form} inner loop, epilogue: "
                f"{', '.join(n.name for n in epilogue) or 'none'}", tag)
        if form == "stream":
            _stream_prologue(spec, out)
        out.add(f"const int64_t tiles_m = ({spec.m} + tile_m - 1) / tile_m;")
        out.add(f"const int64_t tiles_n = ({spec.n} + tile_n - 1) / tile_n;")
        parallel = f"#pragma omp parallel for {THREADS}" if spec.rows * spec.n * spec.k >= PARALLEL_MIN_FLOPS else ""
        with out.block(f"for (int64_t tile = 0; tile < {spec.batch} * tiles_m * tiles_n; ++tile)", parallel):
            out.add("const int64_t b = tile / (tiles_m * tiles_n);")
            out.add("const int64_t m0 = tile / tiles_n % tiles_m * tile_m;")
            out.add("const int64_t n0 = tile % tiles_n * tile_n;")
            out.add(f"const int64_t mb = std::min<int64_t>(tile_m, {spec.m} - m0);")
            out.add(f"const int64_t nb = std::min<int64_t>(tile_n, {spec.n} - n0);")
            out.add(f"alignas(64) float acc[{MAX_TILE}][{MAX_TILE}];")
            with out.block("if (acc_from_memory)"):
                out.add("for (int64_t i = 0; i < mb; ++i) for (int64_t j = 0; j < nb; ++j) "
                        f"acc[i][j] = {_load(spec.dtype, f'acc_in[(b * {spec.m} + m0 + i) * {spec.n} + n0 + j]')};")
            with out.block("else"):
                {"dot": _dot_loop, "stream": _stream_loop, "axpy": _axpy_loop}[form](spec, out)
                _scale_and_bias(spec, out)
            with out.block("for (int64_t i = 0; i < mb; ++i)"):
                out.add(f"const int64_t x0 = b * {spec.m} + m0 + i;")
                out.extend(hoisted, hoisted_tags)
                with out.block("for (int64_t j = 0; j < nb; ++j)", "#pragma omp simd"):
                    out.add("const int64_t r0 = n0 + j;")
                    out.add(f"const float acc_value = {ROUND[spec.dtype].format('acc[i][j]')};", tag)
                    out.extend(printer.lines, printer.line_tags)
                    out.extend(stores, store_tags)
    generated = CppTemplateKernel(kernel.name, "\n".join(out.lines), args, [], template,
                                  [n.name for n in epilogue], out.tags)
    # what the runtime needs, decided here (runtime/gemm_launch.py): default mode's pick and the tile configs
    generated.default_template = default_takes_template(spec, bool(epilogue), "cpp", str(template.device),
                                                        output_stored=template.name in args)
    generated.tile_configs = tile_configs(spec)
    return generated


def _scale_and_bias(spec: GemmSpec, out: Source):
    if spec.alpha == 1.0 and spec.bias is None:
        return
    value = "acc[i][j]" if spec.alpha == 1.0 else f"{spec.alpha!r}f * acc[i][j]"
    if spec.bias is not None:
        bias = _load(spec.dtype, _at(spec.bias, "b", "m0 + i", "n0 + j"))
        value += f" + {bias}" if spec.beta == 1.0 else f" + {spec.beta!r}f * {bias}"
    out.add(f"for (int64_t i = 0; i < mb; ++i) for (int64_t j = 0; j < nb; ++j) acc[i][j] = {value};")
