"""The roofs of a roofline: a device's peak memory bandwidth and arithmetic throughput, from a small datasheet
table keyed by the device's name, or this machine's measured roofs where the table has no entry; and each
profiled kernel's place under them (its % of the roof at its arithmetic intensity).

Note [Roofs from the datasheet]
A roofline's roof is what the hardware can do at best: bandwidth x intensity, capped by the arithmetic peak.
For the GPUs we know, those are the vendor's datasheet figures (dense, no sparsity), keyed by the name CUDA
reports; the arithmetic roof depends on the kernel: a matmul in fp16/bf16 runs on tensor cores (the tensor
peak), an fp32 matmul and every generated pointwise or reduction kernel on the fp32 units (the fp32 peak;
half-precision elementwise code computes in fp32). A GPU the table lacks, and every CPU (whose peak depends on
clocks, vector width and how many cores the job may use), takes the roofs this machine measured instead (a
large copy and a large fp32 matmul, engine/runtime/profile.py's machine_roofs): a lower bound of the peak, so
a kernel's % reads "of what this machine reaches", and the record says which (`machine.peaks.source`). Over
100% is possible there and says the kernel's bytes stayed in a cache the large copy went past.
A kernel without a FLOP estimate (a library call other than a matmul, an eager fallback) is placed against the
bandwidth roof alone.
"""
from __future__ import annotations

import re

import torch

from engine.record import KernelRecord, PeaksRecord, RooflineRecord

# name pattern (lowercase) -> (GB/s, fp32 GFLOP/s, fp16/bf16 tensor-core GFLOP/s dense, the datasheet's part)
DATASHEET: list[tuple[str, tuple[float, float, float, str]]] = [
    (r"h200", (4800.0, 66900.0, 989400.0, "NVIDIA H200 SXM")),
    (r"h100.*(pcie)", (2000.0, 51200.0, 756000.0, "NVIDIA H100 PCIe")),
    (r"h100.*nvl", (3900.0, 60000.0, 835000.0, "NVIDIA H100 NVL")),
    (r"h100", (3350.0, 66900.0, 989400.0, "NVIDIA H100 SXM")),
    (r"a100.*80gb", (2039.0, 19500.0, 312000.0, "NVIDIA A100 80GB SXM")),
    (r"a100", (1555.0, 19500.0, 312000.0, "NVIDIA A100 40GB")),
    (r"\bl4\b", (300.0, 30300.0, 121000.0, "NVIDIA L4")),
    (r"rtx 4090", (1008.0, 82600.0, 165200.0, "NVIDIA GeForce RTX 4090")),
]
HALF = ("float16", "bfloat16")


def device_name(device: str) -> str:
    """CUDA's name for a GPU; the CPU's model name from /proc/cpuinfo (or "cpu")."""
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "cpu")
    except OSError:
        return "cpu"


def datasheet(name: str) -> dict | None:
    """The table's entry for a device name, or None."""
    for pattern, (gbps, fp32, tensor, part) in DATASHEET:
        if re.search(pattern, name.lower()):
            return {"gbps": gbps, "fp32_gflops": fp32, "tensor_gflops": tensor, "part": part}
    return None


def device_peaks(name: str, measured: dict, cuda: bool) -> PeaksRecord:
    """machine.peaks (Note [Roofs from the datasheet]): the roofs a kernel's % is of, and where they came from."""
    entry = datasheet(name) if cuda else None
    if entry is not None:
        return PeaksRecord(name=name, **entry, source=f"datasheet: {entry['part']} (dense)")
    why = "a CPU's peak depends on clocks, vector width and the cores the job gets" if not cuda else \
        "no datasheet entry for this GPU"
    return PeaksRecord(name=name, gbps=measured.get("copy_gbps"), fp32_gflops=measured.get("matmul_gflops"),
                       tensor_gflops=measured.get("matmul_gflops"), part=None,
                       source=f"measured on this machine ({why}): a large copy and a large fp32 matmul")


def kernel_roof(kernel: KernelRecord, peaks: PeaksRecord, dtype: str | None) -> RooflineRecord | None:
    """A profiled kernel's place under the roofs, from its time_ms, bytes, flops and kind."""
    ms, data, flops = kernel.time_ms, kernel.bytes or 0, kernel.flops
    bandwidth = peaks.gbps
    if not ms or ms <= 0 or not bandwidth:
        return None
    if not flops:  # Note [Roofs from the datasheet]: the bandwidth roof alone
        if not data:
            return None
        return RooflineRecord(pct=100.0 * (data / ms / 1e6) / bandwidth, bound="memory", roof_gbps=bandwidth)
    matmul = kernel.kind in ("template", "extern")
    compute = (peaks.tensor_gflops if matmul and dtype in HALF else peaks.fp32_gflops) or None
    memory_roof = bandwidth * flops / data if data else None
    roofs = [r for r in (memory_roof, compute) if r]
    if not roofs:
        return None
    attainable = min(roofs)
    return RooflineRecord(pct=100.0 * (flops / ms / 1e6) / attainable, roof_gflops=attainable,
                          bound="memory" if memory_roof is not None and attainable == memory_roof else "compute")
