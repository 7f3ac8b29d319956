// Glassbox C++ kernel prelude: helpers every generated kernel may call. Generated code is plain C++17.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>  // Note [Vector transposes], Note [Vector half conversions]
#endif

// Note [Vector math]: glibc's libmvec has vector versions of the float math functions. Declaring them
// simd lets `#pragma omp simd` loops call them (8 or 16 lanes at once) without -ffast-math, so NaN and
// infinity keep their IEEE meaning.
#if defined(__GLIBC__) && defined(__x86_64__) && __GLIBC_PREREQ(2, 35)
extern "C" {
#define GB_SIMD_DECLARE(name) __attribute__((__simd__("notinbranch"))) float name(float) noexcept;
GB_SIMD_DECLARE(expf) GB_SIMD_DECLARE(exp2f) GB_SIMD_DECLARE(expm1f) GB_SIMD_DECLARE(logf)
GB_SIMD_DECLARE(log2f) GB_SIMD_DECLARE(log10f) GB_SIMD_DECLARE(log1pf) GB_SIMD_DECLARE(sinf)
GB_SIMD_DECLARE(cosf) GB_SIMD_DECLARE(tanf) GB_SIMD_DECLARE(asinf) GB_SIMD_DECLARE(acosf)
GB_SIMD_DECLARE(atanf) GB_SIMD_DECLARE(sinhf) GB_SIMD_DECLARE(coshf) GB_SIMD_DECLARE(tanhf)
GB_SIMD_DECLARE(asinhf) GB_SIMD_DECLARE(acoshf) GB_SIMD_DECLARE(atanhf) GB_SIMD_DECLARE(erff)
GB_SIMD_DECLARE(erfcf)
#undef GB_SIMD_DECLARE
}
#endif

// Note [Kernel threads]: every parallel region of a kernel runs on gb_threads threads, which the wrapper sets
// from torch.get_num_threads() of the calling thread before each call (engine/runtime/load.py ThreadCount).
// OpenMP's own default is the caller's ICV, which torch.set_num_threads sets only in the thread that called
// it and only where torch shares our OpenMP runtime: a kernel called from another thread (or beside a torch
// built with another runtime) took OMP_NUM_THREADS threads instead, more than torch was asked for.
// Until the wrapper sets it (a kernel called on its own, as the profiler may), OpenMP's default stands.
static int gb_threads = 0;
extern "C" void gb_set_threads(int threads) { gb_threads = threads; }
static inline int gb_thread_count() { return gb_threads > 0 ? gb_threads : omp_get_max_threads(); }

// Half types live in memory as 16-bit patterns and are computed in float.
// Note [Branch-free half conversions]: every fp16 load and store of a kernel that is not a contiguous row of
// its inner loop (Note [Vector half conversions]), and every tail of one, goes through these two, so they
// must vectorize: each computes all of its cases (normal, subnormal, inf/NaN) and selects one with bit masks,
// without a loop, an early return or a ternary (gcc 12 left loops with nested ternaries of mixed widths scalar,
// and it does not vectorize _Float16 or F16C conversions by itself). Subnormals are rounded by float arithmetic: adding 0.5f (or subtracting 2^-14)
// lines the half's mantissa up with the float's, so the FPU rounds to nearest even. Checked bit for bit
// against the straightforward conversions over every half and every float bit pattern.
static inline float gb_bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t gb_float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

static inline float gb_half_to_float(uint16_t h) {
    const uint32_t shifted = (uint32_t)(h & 0x7fffu) << 13;  // exponent and mantissa in float position
    const uint32_t exponent = shifted & 0x0f800000u;
    const uint32_t normal = shifted + 0x38000000u;  // rebias the exponent: (127 - 15) << 23
    const uint32_t special = normal + 0x38000000u;  // inf and NaN: exponent 255
    const float subnormal = gb_bits_float(normal + 0x00800000u) - gb_bits_float(0x38800000u);  // m * 2^-24
    const uint32_t is_special = 0u - (uint32_t)(exponent == 0x0f800000u), is_subnormal = 0u - (uint32_t)(exponent == 0);
    const uint32_t magnitude = (special & is_special) | (gb_float_bits(subnormal) & is_subnormal)
                               | (normal & ~(is_special | is_subnormal));
    return gb_bits_float(magnitude | ((uint32_t)(h & 0x8000u) << 16));
}

static inline uint16_t gb_float_to_half(float f) {
    const uint32_t bits = gb_float_bits(f);
    const uint32_t magnitude = bits & 0x7fffffffu, sign = (bits >> 16) & 0x8000u;
    const uint32_t special = 0x7c00u | (0x200u & (0u - (uint32_t)(magnitude > 0x7f800000u)));  // NaN stays quiet
    const uint32_t subnormal = gb_float_bits(gb_bits_float(magnitude) + 0.5f) - 0x3f000000u;
    // rebias, then round to nearest even at bit 13 (a carry into the exponent is the right result, up to inf)
    const uint32_t normal = (magnitude - 0x38000000u + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
    const uint32_t is_special = 0u - (uint32_t)(magnitude >= 0x47800000u);
    const uint32_t is_subnormal = 0u - (uint32_t)(magnitude < 0x38800000u);
    const uint32_t result = (special & is_special) | (subnormal & is_subnormal) | (normal & ~(is_special | is_subnormal));
    return (uint16_t)(result | sign);
}

static inline float gb_bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t gb_float_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);  // quiet NaN
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static inline float gb_round_half(float f) { return gb_half_to_float(gb_float_to_half(f)); }
static inline float gb_round_bf16(float f) { return gb_bf16_to_float(gb_float_to_bf16(f)); }

// Note [Vector half conversions]: the branch-free conversions above vectorize, but as a dozen integer and
// float operations per lane, and gcc never turns scalar code into the CPU's own conversion instructions. A
// permuted fp16 add spent three quarters of its time in them (1.4 ms of 1.8 ms a call on one thread, where
// F16C conversions take 0.36 ms). So an fp16 row that the inner loop reads or writes contiguously is
// converted as a whole with F16C (8 lanes) or AVX-512 (16 lanes): before the loop into a float array that the
// loop reads, and after it from a float array that the loop wrote (cpp/printer.py, HalfRows). Both instructions
// round to nearest even and keep infinities, subnormals and NaN (quiet, payload truncated), so the values are
// those of the scalar functions, which still do the tail of a row and any CPU without F16C.
static inline void gb_half_to_float_n(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
    for (; i < n; ++i) dst[i] = gb_half_to_float(src[i]);
}

static inline void gb_float_to_half_n(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; ++i) dst[i] = gb_float_to_half(src[i]);
}

// torch semantics that C++ operators do not have
template <typename T> static inline T gb_maximum(T a, T b) { return (a != a || a > b) ? a : (b != b ? b : b); }
template <typename T> static inline T gb_minimum(T a, T b) { return (a != a || a < b) ? a : (b != b ? b : b); }
static inline int64_t gb_max_i(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t gb_min_i(int64_t a, int64_t b) { return a < b ? a : b; }
template <typename T> static inline T gb_floordiv(T a, T b) {
    T q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> static inline T gb_mod(T a, T b) {
    T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T gb_fmod_py(T a, T b) {
    T r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> static inline T gb_ipow(T base, T exponent) {
    if (exponent < 0) return base == 1 ? 1 : (base == -1 ? ((exponent & 1) ? -1 : 1) : 0);
    T result = 1;
    while (exponent) { if (exponent & 1) result *= base; base *= base; exponent >>= 1; }
    return result;
}
template <typename T> static inline T gb_sign(T a) { return (T)((T(0) < a) - (a < T(0))); }  // sign(NaN) is 0
// floor division of floats as torch computes it: from fmod, so that inf // b is NaN and x // 0 is x / 0
template <typename T> static inline T gb_floordiv_float(T a, T b) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    if (div == 0) return std::copysign(T(0), a / b);
    T floored = std::floor(div);
    return div - floored > T(0.5) ? floored + 1 : floored;
}
template <typename T> static inline T gb_erfinv(T y) {
    if (y <= -1) return y == -1 ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
    if (y >= 1) return y == 1 ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
    // initial guess from a logarithmic approximation, then Newton steps on erf(x) - y
    double w = -std::log((1.0 - (double)y) * (1.0 + (double)y));
    double t = 4.3307 - w / 2;  // 2 / (pi * 0.147) + log(1 - y*y) / 2
    double x = std::copysign(std::sqrt(std::sqrt(t * t + w / 0.147) - t), (double)y);
    for (int i = 0; i < 3; ++i) x -= (std::erf(x) - (double)y) / (1.1283791670955126 * std::exp(-x * x));
    return (T)x;
}

// Note [Vector transposes]: a staged read (Note [Staged reads] in cpp/printer.py) copies a tile of a transposed
// input into a small array along the other axis. Written as two loops, one side of the copy strides and gcc
// leaves it scalar (AVX2 has no scatter, and no gather of 16-bit values). A full tile is copied instead in
// 8x8 blocks transposed in registers, as Inductor's C++ kernels do: eight row loads, three rounds of
// unpack/shuffle, eight row stores. dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < 8.
static inline void gb_transpose8_f32(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
#if defined(__AVX__)
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // columns k, k+1 (k in 0, 2) of rows i..i+3, in each 128-bit half
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
        _mm256_storeu_ps(dst + j * dst_stride, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
        _mm256_storeu_ps(dst + (j + 4) * dst_stride, _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
    }
#else
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
#endif
}

// A 16x16 float block: with AVX-512, sixteen row loads, unpacks of pairs of floats and of pairs of pairs, and
// two rounds of 128-bit lane shuffles (the rows stay in registers: no second pass through memory); four 8x8
// blocks otherwise. x.t() + y over 1024x1024 fp32, one thread, the kernel alone: 0.58 ms in 8x8 blocks,
// 0.46 ms in 16x16, Inductor's (the same scheme) 0.46 ms.
static inline void gb_transpose16_f32(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
#if defined(__AVX512F__)
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
    for (int i = 0; i < 16; i += 2) {  // in each 128-bit lane: columns k, k+1 of rows i, i+1 interleaved
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // lane l of r[i + j]: column 4l + j of rows i..i+3
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int j = 0; j < 4; ++j) {  // column 4l + j gathers lane l of r[j], r[4 + j], r[8 + j], r[12 + j]
        const __m512 even = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), odd = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
        const __m512 even2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        const __m512 odd2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
        _mm512_storeu_ps(dst + j * dst_stride, _mm512_shuffle_f32x4(even, even2, 0x88));
        _mm512_storeu_ps(dst + (4 + j) * dst_stride, _mm512_shuffle_f32x4(odd, odd2, 0x88));
        _mm512_storeu_ps(dst + (8 + j) * dst_stride, _mm512_shuffle_f32x4(even, even2, 0xDD));
        _mm512_storeu_ps(dst + (12 + j) * dst_stride, _mm512_shuffle_f32x4(odd, odd2, 0xDD));
    }
#else
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 16; j += 8)
            gb_transpose8_f32(src + i * src_stride + j, src_stride, dst + j * dst_stride + i, dst_stride);
#endif
}

static inline void gb_transpose8_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
#if defined(__SSE2__)
    __m128i a[8], b[8], c[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_stride));
    for (int i = 0; i < 8; i += 2) {
        b[i] = _mm_unpacklo_epi16(a[i], a[i + 1]);
        b[i + 1] = _mm_unpackhi_epi16(a[i], a[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        c[i] = _mm_unpacklo_epi32(b[i], b[i + 2]);
        c[i + 1] = _mm_unpackhi_epi32(b[i], b[i + 2]);
        c[i + 2] = _mm_unpacklo_epi32(b[i + 1], b[i + 3]);
        c[i + 3] = _mm_unpackhi_epi32(b[i + 1], b[i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * j) * dst_stride), _mm_unpacklo_epi64(c[j], c[j + 4]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * j + 1) * dst_stride), _mm_unpackhi_epi64(c[j], c[j + 4]));
    }
#else
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
#endif
}

// logcumsumexp's step, as ATen's CPU kernel takes it (x the new value, y the running one): NaN propagates,
// and where both are the same infinity the result is x (Note [Scans] in engine/ir/nodes.py).
template <typename T>
static inline T gb_log_add_exp(T x, T y) {
    const T low = y != y ? y : (x != x ? x : (y < x ? y : x));
    const T high = y != y ? y : (x != x ? x : (y > x ? y : x));
    if (low != high || std::isfinite(low)) return std::log1p(std::exp(low - high)) + high;
    return x;
}
