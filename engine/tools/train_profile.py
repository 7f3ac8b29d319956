"""Where a training step's time goes: torch.profiler over a few steps of each compiler, as tables and as a short
summary a reader can compare at a glance (`python -m engine bench train --profile`).

Note [Training-step profile]
A ratio says that a step is slower; the profile says which part. For each compiled step (after bench_train has
checked its gradients) a few steps run under torch.profiler, and the summary gives, per step:
- `wall_ms`: the host's time for a step, synchronized: what the bench measures;
- `device_ms`: the sum of the device's kernel times (kernels, copies, memsets): what the GPU had to do. A step
  whose wall time is well above its device time is held up by the host (launches, Python, re-recording a CUDA
  graph), one whose device time is high by its kernels;
- `kernels`: device activities a step launches, and that time split by kind: library GEMMs, attention, generated
  kernels (Triton's, ours or Inductor's), copies and memsets, other ATen kernels;
- host events that should be rare in a steady step (CUDA-graph capture and instantiation, device
  synchronizations, tensor copies) with their counts per step;
- `copies`: each tensor copy of a step (aten::copy_ and the foreach copy) by who asked for it and what it
  moved: the nearest enclosing event that is not an ATen op (torch::autograd::AccumulateGrad cloning a
  gradient it could not take over, CompiledFunctionBackward making a tangent contiguous, a replay copying an
  input into its recording) and the shapes, counted per step. Counts alone ("30 aten::copy_ a step") do not
  say which of these to remove;
- `recordings` (ours in reduce-overhead): each live CUDA-graph recording's inputs read in place, the shapes
  of those it copies in on every replay, its plain calls and whether it hands its outputs over
  (Note [Gradients a replay hands over] in runtime/cuda_graphs.py).
The full tables (device time per kernel name, host time per op) go to files beside the summary.
"""
from __future__ import annotations

from pathlib import Path
import re
import time
from typing import Any, Callable

import torch

# kernel name patterns, first match wins; the rest are ATen's own kernels ("void at::native::...")
KINDS = (
    ("copy/memset", re.compile(r"Memcpy|Memset|copy_kernel|CatArrayBatched", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|cudnn_generated_fort_native_sdpa", re.I)),
    ("library GEMM", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|sm\d\d_", re.I)),
    ("generated", re.compile(r"^(?!void )[A-Za-z_][A-Za-z0-9_]*$")),  # a Triton kernel is a plain function name
)
HOST_EVENTS = ("cudaStreamBeginCapture", "cudaGraphInstantiate", "cudaGraphLaunch", "cudaDeviceSynchronize",
               "cudaStreamSynchronize", "aten::copy_", "aten::clone", "aten::empty_strided", "cudaLaunchKernel",
               "cuLaunchKernel", "cuLaunchKernelEx")


def kernel_kind(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other ATen")


def _device_us(event) -> float:
    return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0))


def profile_step(step: Callable[[], Any], device: str = "cuda", steps: int = 5, warmup: int = 3) -> dict:
    """Note [Training-step profile]: the summary of `steps` profiled steps and the two tables as text. On the
    CPU (a dry run of the script) there are host events only."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
                 record_shapes=True) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = time.perf_counter() - start
    averages = prof.key_averages()
    device = [e for e in averages if _device_us(e) > 0 and e.device_type == torch.autograd.DeviceType.CUDA
              and not getattr(e, "is_user_annotation", False)]  # an annotation spans kernels: not one
    by_kind: dict[str, float] = {}
    for event in device:
        kind = kernel_kind(event.key)
        by_kind[kind] = by_kind.get(kind, 0.0) + _device_us(event) / steps / 1e3
    host = {e.key: e.count / steps for e in averages if e.key in HOST_EVENTS}
    sort = "self_device_time_total" if hasattr(averages[0], "self_device_time_total") else "self_cuda_time_total"
    if not cuda:
        sort = "self_cpu_time_total"
    return {
        "wall_ms": wall / steps * 1e3,
        "device_ms": sum(_device_us(e) for e in device) / steps / 1e3,
        "kernels": sum(e.count for e in device) / steps,
        "device_ms_by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "host_events_per_step": host,
        "copies": copies_per_step(prof.events(), steps),
        "device_table": averages.table(sort_by=sort, row_limit=60, max_name_column_width=110),
        "host_table": averages.table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=80),
    }


COPY_OPS = ("aten::copy_", "aten::_foreach_copy_")


def copies_per_step(events, steps: int) -> list[dict]:
    """Note [Training-step profile]: copies grouped by (caller, op, shape), most frequent first. A copy_ inside
    a foreach copy (its slow path: one copy_ per tensor) is listed with its own shape, its op saying so; the
    foreach copy itself is listed too (on its fast path, one kernel for all its tensors, it has no copy_
    inside)."""
    counts: dict[tuple, int] = {}
    for event in events:
        if event.name not in COPY_OPS:
            continue
        parent, caller, op = event.cpu_parent, None, event.name
        while parent is not None and caller is None:
            if parent.name in COPY_OPS:
                op = f"{event.name} in {parent.name}"
            elif not parent.name.startswith("aten::"):
                caller = parent.name
            parent = parent.cpu_parent
        shape = str(list((event.input_shapes or [[]])[0])) if event.name == "aten::copy_" else ""
        key = (caller or "(top level)", op, shape)
        counts[key] = counts.get(key, 0) + 1
    rows = [{"caller": caller, "op": op, "shape": shape, "per_step": count / steps}
            for (caller, op, shape), count in counts.items()]
    return sorted(rows, key=lambda row: (-row["per_step"], row["caller"], row["op"]))


def recordings(recorders=None) -> list[dict]:
    """Note [Training-step profile]: what each CudaGraphCall's recordings (default: every live one's) read in
    place and copy."""
    from engine.runtime import cuda_graphs

    rows = []
    for recorder in list(cuda_graphs._recorders if recorders is None else recorders):
        for entry in recorder.graphs.values():
            rows.append({"inputs": len(entry.inputs), "in_place": len(entry.fixed),
                         "copied": [list(entry.inputs[i].shape) for i in entry.copied],
                         "plain_calls": recorder.plain_calls, "hands_over": bool(entry.handed_over)})
    return rows


def summary_text(name: str, mode: str, profiles: dict[str, dict]) -> str:
    """The compilers' summaries side by side, one line each."""
    lines = [f"profile of {name}, {mode} (per step)"]
    for who, p in profiles.items():
        kinds = ", ".join(f"{kind} {ms:.3f}" for kind, ms in p["device_ms_by_kind"].items())
        host = ", ".join(f"{key} {count:g}" for key, count in sorted(p["host_events_per_step"].items()))
        lines.append(f"  {who:<9} wall {p['wall_ms']:.3f} ms, device {p['device_ms']:.3f} ms in "
                     f"{p['kernels']:g} kernels ({kinds})")
        lines.append(f"  {'':<9} host: {host}")
        for row in p.get("recordings", []):
            lines.append(f"  {'':<9} recording: {row['in_place']} of {row['inputs']} inputs in place, copies "
                         f"{row['copied']} a replay, {row['plain_calls']} plain calls"
                         + (", hands its outputs over" if row["hands_over"] else ""))
        for row in p.get("copies", []):
            lines.append(f"  {'':<9} copy {row['per_step']:g}/step {row['op']} {row['shape']} under {row['caller']}")
    return "\n".join(lines)


def write_tables(folder: Path, stem: str, profiles: dict[str, dict]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for who, p in profiles.items():
        path = folder / f"{stem}.{who}.profile.txt"
        path.write_text(f"DEVICE (self time per kernel, {who})\n{p['device_table']}\n\n"
                        f"HOST (self CPU time per op, {who})\n{p['host_table']}\n")
        written.append(path)
    return written
