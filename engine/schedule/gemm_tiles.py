"""Tile configs of the Triton GEMM template, and which of them suit a shape (read by the default-mode choice
in templates.py and by the template's code generator, which times them all in max-autotune).

Note [Sane GEMM tiles]
A tile config is kept for a shape only when it is not much larger than the problem and its pipeline fits:
  BLOCK_M, BLOCK_N  at most M, N rounded up to a power of two (a 32-row GEMM gets no 128-row tiles)
  BLOCK_K           at most K rounded up to 16 (tl.dot's smallest side): a larger one only loads zeros
  tile area         at least 64x128 when M and N are both >= 512: a smaller tile reads A and B from L2 more
                    times per output than the tensor cores can hide, and only lengthens max-autotune
  num_stages        each stage holds one A tile and one B tile in shared memory, (BLOCK_M*BLOCK_K +
                    BLOCK_K*BLOCK_N) * element size; the stages are cut to what fits SHARED_MEMORY_BUDGET
                    (an H100/H200 block may use 227 KB; the budget leaves 35 KB for layout conversions;
                    the epilogue reuses the pipeline's buffers, which are dead after the K loop), and a
                    config that does not fit with 2 stages is dropped. Configs the cut makes equal are
                    listed once.
float32 without tf32 is an "ieee" tl.dot: it runs on the FMA units with every operand in registers, so its
tiles are small (FP32_IEEE_CONFIGS); a 128x128 float32 FMA tile spills registers.

Note [Hopper GEMM tiles]
An H100/H200 SM runs tl.dot as wgmma: a warp group (4 warps) multiplies a 64-row slice of the tile by the
whole BLOCK_N from shared memory, so 8 warps on a 128x256 tile keep two warp groups busy on 64x256 each,
the shape its tensor cores are fastest on, and a 64-deep K step per stage. Its pipeline is 48 KB a stage
in bf16: 3 stages need 144 KB and 4 need 192 KB, hence the budget (a 128 KB one cut them to 2 stages, which
cannot hide the loads' latency). The K loop uses plain pointer loads (cp.async): Triton 3.6's tensor
descriptors (TMA) need a device-side allocator set at run time, and the interpreter, where these kernels
are tested, does not check them, so they are left out rather than shipped untested.

Note [Persistent GEMM programs]
A PERSISTENT config launches one program per SM (at most one per tile), each walking the tiles
tile = program_id, program_id + programs, ... in the grouped order; the tile loop is flattened with the K loop
(tl.range(..., flatten=True)), so Triton's software pipeline loads the next tile's first K steps while this
tile's epilogue runs. A plain config launches one program per tile and the loop runs once. Why: the
template's 128x128 8-warp program needs 159-192 registers a thread (one 256-thread program per SM), so with
a short K (16 steps at K = 1024) each tile's pipeline fill and epilogue stand alone, where cuBLAS's persistent
kernels overlap them (Note [When a CUDA template pays in default mode] in templates.py). max-autotune times
both forms; the default's tile stays the plain one until an H200 measurement says otherwise.

Note [Two programs per SM]
The other way to overlap one tile's epilogue with another's main loop: two programs on each SM. Two 256-thread
programs fit the SM's 65536 registers only at 128 a thread, and two 3-stage 128x128x64 pipelines (96 KB
each) fit its shared memory; with the cap (maxnreg=128) Triton 3.6 compiles the bf16 template for sm_90 with a
few spills in the epilogue (8 loads/stores for bias + GELU, 27 when the pre-activation is stored too) and
none in the K loop. A max-autotune candidate; not measured yet.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

SHARED_MEMORY_BUDGET = 192 * 1024  # bytes of the K-loop pipeline per program (Note [Hopper GEMM tiles])
MIN_STAGES = 2
LARGE_SIDE, LARGE_MIN_TILE = 512, 64 * 128  # Note [Sane GEMM tiles]: no small tiles on a large GEMM


@dataclass(frozen=True)
class GemmConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int = 4
    num_stages: int = 3
    GROUP_M: int = 8
    PERSISTENT: bool = False  # Note [Persistent GEMM programs]
    maxnreg: int | None = None  # a register cap per thread (Note [Two programs per SM]); None: Triton's choice

    def kwargs(self) -> dict:
        return dict(vars(self))

    def stage_bytes(self, element_size: int) -> int:
        return (self.BLOCK_M * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N) * element_size


# Tensor-core configs (fp16/bf16, tf32). The first one that suits the shape is the heuristic's: 128x128x64 with
# 8 warps fits every budget (96 KB in 3 stages) and keeps the epilogue's registers low. max-autotune times
# them all. For the large bf16 GEMMs of LLM layers on Hopper (Note [Hopper GEMM tiles]) the wide tiles lead:
# 128x256 / 256x128 with 8 warps (two warp groups of wgmma, each 64 rows x 256 columns) and 3-4 stages, the
# set Triton's H100 tutorial and Inductor's max-autotune time; then 4-warp 128x128 and 64x256 with deeper
# pipelines; then the mid and small-M ones for decode-like shapes.
TENSOR_CORE_CONFIGS = [
    GemmConfig(128, 128, 64, 8, 3), GemmConfig(128, 128, 64, 8, 3, PERSISTENT=True),
    GemmConfig(128, 128, 64, 8, 4, PERSISTENT=True), GemmConfig(128, 128, 64, 8, 3, maxnreg=128),
    GemmConfig(128, 256, 64, 8, 3), GemmConfig(256, 128, 64, 8, 3),
    GemmConfig(128, 256, 64, 8, 4), GemmConfig(128, 128, 64, 8, 4), GemmConfig(128, 128, 64, 4, 4),
    GemmConfig(64, 256, 64, 4, 4), GemmConfig(128, 128, 128, 8, 3), GemmConfig(128, 128, 32, 4, 4),
    GemmConfig(64, 128, 64, 4, 4), GemmConfig(128, 64, 64, 4, 4), GemmConfig(64, 64, 64, 4, 3),
    GemmConfig(32, 128, 128, 4, 4), GemmConfig(16, 128, 128, 4, 5), GemmConfig(16, 64, 256, 4, 4),
    GemmConfig(32, 64, 64, 4, 3), GemmConfig(16, 32, 64, 4, 3)]
FP32_IEEE_CONFIGS = [GemmConfig(64, 64, 32, 4, 3), GemmConfig(32, 32, 32, 4, 2), GemmConfig(64, 32, 32, 4, 2),
                     GemmConfig(32, 64, 32, 4, 2), GemmConfig(16, 64, 32, 4, 2), GemmConfig(16, 32, 16, 2, 2)]
# max-autotune compiles every config it times (about a second each on the H200's host): a ResNet-50 has some
# twenty distinct 1x1-convolution GEMMs, so the table's first ten suited configs (its order puts the ones
# that won on LLM and convolution shapes first, and three variants of the leading tile) keep a
# model's tuning within a couple of minutes.
MAX_CONFIGS = 11
INTERPRETER_CONFIG = GemmConfig(64, 64, 32, 4, 1)  # the interpreter wants few, large programs


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def ieee_fp32(dtype: torch.dtype) -> bool:
    """float32 that tl.dot computes exactly (on FMA units): torch has tf32 off for matmuls (its default)."""
    return dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32


def fits(config: GemmConfig, m: int, n: int, k: int, element_size: int) -> GemmConfig | None:
    """`config` with its stages cut to the shared-memory budget, or None when it does not suit the shape
    (Note [Sane GEMM tiles])."""
    if config.BLOCK_M > max(16, next_power_of_2(m)) or config.BLOCK_N > max(16, next_power_of_2(n)):
        return None
    if config.BLOCK_K > -(-k // 16) * 16:
        return None
    if min(m, n) >= LARGE_SIDE and config.BLOCK_M * config.BLOCK_N < LARGE_MIN_TILE:
        return None
    stages = min(config.num_stages, SHARED_MEMORY_BUDGET // config.stage_bytes(element_size))
    return replace(config, num_stages=stages) if stages >= MIN_STAGES else None


def gpu_configs(m: int, n: int, k: int, dtype: torch.dtype) -> list[GemmConfig]:
    """The configs that suit an MxNxK GEMM of `dtype`, the heuristic's first, at most MAX_CONFIGS; never empty."""
    size = torch.empty((), dtype=dtype).element_size()
    table = FP32_IEEE_CONFIGS if ieee_fp32(dtype) else TENSOR_CORE_CONFIGS
    suited = list(dict.fromkeys(c for c in (fits(config, m, n, k, size) for config in table) if c is not None))
    if suited:
        return suited[:MAX_CONFIGS]
    cap = 32 if table is FP32_IEEE_CONFIGS else 64
    block_k = 1 << ((-(-k // 16) * 16).bit_length() - 1)  # the largest power of two within K rounded up to 16
    return [GemmConfig(min(max(16, next_power_of_2(m)), cap), min(max(16, next_power_of_2(n)), cap),
                       min(block_k, cap), 4, MIN_STAGES)]


def interpreter_config(m: int, n: int, k: int) -> GemmConfig:
    m, n, k = (next_power_of_2(v) for v in (m, n, k))
    return GemmConfig(min(m, INTERPRETER_CONFIG.BLOCK_M), min(n, INTERPRETER_CONFIG.BLOCK_N),
                      min(k, INTERPRETER_CONFIG.BLOCK_K), 4, 1, 1)
