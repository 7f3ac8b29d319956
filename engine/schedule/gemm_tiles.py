"""Tile configs of the Triton GEMM template, and which of them suit a shape (read by the default-mode choice
in templates.py and by the template's code generator, which times them all in max-autotune).

Note [Sane GEMM tiles]
A tile config is kept for a shape only when it is not much larger than the problem and its pipeline fits:
  BLOCK_M, BLOCK_N  at most M, N rounded up to a power of two (a 32-row GEMM gets no 128-row tiles)
  BLOCK_K           at most K rounded up to 16 (tl.dot's smallest side): a larger one only loads zeros
  num_stages        each stage holds one A tile and one B tile in shared memory, (BLOCK_M*BLOCK_K +
                    BLOCK_K*BLOCK_N) * element size; the stages are cut to what fits SHARED_MEMORY_BUDGET
                    (an H100/H200 block may use 227 KB; the budget leaves room for the epilogue and layout
                    conversions), and a config that does not fit with 2 stages is dropped.
float32 without tf32 is an "ieee" tl.dot: it runs on the FMA units with every operand in registers, so its
tiles are small (FP32_IEEE_CONFIGS); a 128x128 float32 FMA tile spills registers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

SHARED_MEMORY_BUDGET = 128 * 1024  # bytes of the K-loop pipeline per program
MIN_STAGES = 2


@dataclass(frozen=True)
class GemmConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int = 4
    num_stages: int = 3
    GROUP_M: int = 8

    def kwargs(self) -> dict:
        return dict(vars(self))

    def stage_bytes(self, element_size: int) -> int:
        return (self.BLOCK_M * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N) * element_size


# Tensor-core configs (fp16/bf16, tf32; the set Inductor and Triton's tutorial time for large GEMMs, plus
# small-M ones for decode-like shapes). The first one that suits the shape is the heuristic's.
TENSOR_CORE_CONFIGS = [
    GemmConfig(128, 128, 64, 8, 3), GemmConfig(128, 256, 64, 8, 3), GemmConfig(256, 128, 64, 8, 3),
    GemmConfig(128, 128, 32, 4, 4), GemmConfig(64, 128, 64, 4, 4), GemmConfig(128, 64, 64, 4, 4),
    GemmConfig(64, 64, 64, 4, 3), GemmConfig(32, 128, 128, 4, 4), GemmConfig(16, 128, 128, 4, 5),
    GemmConfig(16, 64, 256, 4, 4), GemmConfig(32, 64, 64, 4, 3), GemmConfig(16, 32, 64, 4, 3)]
FP32_IEEE_CONFIGS = [GemmConfig(64, 64, 32, 4, 3), GemmConfig(32, 32, 32, 4, 2), GemmConfig(64, 32, 32, 4, 2),
                     GemmConfig(32, 64, 32, 4, 2), GemmConfig(16, 64, 32, 4, 2), GemmConfig(16, 32, 16, 2, 2)]
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
    stages = min(config.num_stages, SHARED_MEMORY_BUDGET // config.stage_bytes(element_size))
    return replace(config, num_stages=stages) if stages >= MIN_STAGES else None


def gpu_configs(m: int, n: int, k: int, dtype: torch.dtype) -> list[GemmConfig]:
    """The configs that suit an MxNxK GEMM of `dtype`, the heuristic's first; never empty."""
    size = torch.empty((), dtype=dtype).element_size()
    table = FP32_IEEE_CONFIGS if ieee_fp32(dtype) else TENSOR_CORE_CONFIGS
    suited = [c for c in (fits(config, m, n, k, size) for config in table) if c is not None]
    if suited:
        return suited
    cap = 32 if table is FP32_IEEE_CONFIGS else 64
    block_k = 1 << ((-(-k // 16) * 16).bit_length() - 1)  # the largest power of two within K rounded up to 16
    return [GemmConfig(min(max(16, next_power_of_2(m)), cap), min(max(16, next_power_of_2(n)), cap),
                       min(block_k, cap), 4, MIN_STAGES)]


def interpreter_config(m: int, n: int, k: int) -> GemmConfig:
    m, n, k = (next_power_of_2(v) for v in (m, n, k))
    return GemmConfig(min(m, INTERPRETER_CONFIG.BLOCK_M), min(n, INTERPRETER_CONFIG.BLOCK_N),
                      min(k, INTERPRETER_CONFIG.BLOCK_K), 4, 1, 1)
