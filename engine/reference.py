"""Real Inductor on the same model, for the side-by-side pane: its generated code, its kernels, its compile
time and whether it matches eager. Every use of Inductor's private API lives here."""
from __future__ import annotations

import re
import statistics
import time

import torch

# Inductor declares each generated kernel once in its output module: C++ kernels as
# `cpp_fused_<ops> = async_compile.cpp_pybinding(...)`, Triton kernels as `triton_<kind>_<ops> = async_compile.triton(`.
_KERNEL_DECLARATION = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)
_EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|aten\.\w+(?:\.\w+)?)\(")


def inductor_reference(model, example_inputs, profile: bool = False) -> dict:
    """Compile `model` with torch.compile (Inductor), run it once, and describe what it generated; with
    `profile`, also each of its kernels' time (kernel_times)."""
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(model)
    start = time.perf_counter()
    # Inductor wraps each C++ kernel in a profiler range only when asked, at compile time (Note [Inductor's
    # kernel times])
    with torch.no_grad(), inductor_config.patch({"cpp.enable_kernel_profile": profile}):
        outputs, sources = run_and_get_code(compiled, *example_inputs)
    compile_s = time.perf_counter() - start
    kernels = []
    for source in sources:
        for name, kind in _KERNEL_DECLARATION.findall(source):
            kernels.append({"name": name, "language": "triton" if kind == "triton" else "cpp"})
    externs = sorted({call for source in sources for call in _EXTERN_CALL.findall(source)})
    from engine.run import verify
    return {
        "code": sources, "kernels": kernels, "kernel_count": len(kernels), "extern_calls": externs,
        "compile_s": compile_s, "verify": verify(model, example_inputs, outputs),
        "torch_version": torch.__version__,
        **({"kernel_times": kernel_times(compiled, example_inputs, [k["name"] for k in kernels])} if profile else {}),
    }


# Note [Inductor's kernel times]
# torch.profiler sees Inductor's kernels by name: Triton launches as GPU kernels, and C++ kernels as CPU ranges
# named `graph_<n>_<kernel>` when cpp.enable_kernel_profile was on while compiling. Times are per call, the
# median over the profiled calls; on the GPU they are device times. Library calls (extern_kernels.mm, ...)
# are left out: they are not Inductor's own kernels.
PROFILED_CALLS = 20


def kernel_times(compiled, example_inputs, names: list[str]) -> list[dict]:
    """[{name, time_ms, calls}] for each of Inductor's kernels seen by torch.profiler (Note [Inductor's kernel
    times])."""
    from torch.profiler import ProfilerActivity, profile

    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad():
        compiled(*example_inputs)
        with profile(activities=activities) as recorded:
            for _ in range(PROFILED_CALLS):
                compiled(*example_inputs)
    wanted = set(names)
    per_kernel: dict[str, list[float]] = {}
    for event in recorded.events():
        name = re.sub(r"^graph_\d+_", "", event.name)
        if name in wanted:
            per_kernel.setdefault(name, []).append(event.device_time_total if cuda else event.cpu_time_total)
    # the median occurrence: a profiled call now and then waits for the machine
    times = [{"name": name, "time_ms": statistics.median(us) / 1e3, "calls": len(us)} for name, us in per_kernel.items()]
    return times
