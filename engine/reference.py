"""Real Inductor on the same model, for the side-by-side views (CLI --inductor, the app's Inductor page, engine
compare): its generated code, its kernels (each with its source), its call() function, its compile time and
whether it matches eager. Every use of Inductor's private API, and the only parser of its output code, is here."""
from __future__ import annotations

import re
import statistics
import time

import torch

# Inductor declares each generated kernel once in its output module, its source in a triple-quoted string:
# C++ kernels as `cpp_fused_<ops> = async_compile.cpp_pybinding(..., '''<source>''')`, Triton kernels as
# `triton_<kind>_<ops> = async_compile.triton('<name>', '''<source>''', ...)`.
_KERNEL = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\((.*?)'''(.*?)'''", re.M | re.S)
# library calls Inductor's wrapper makes directly (mm, convolution, sdpa, its fallbacks)
_EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|aten\.\w+(?:\.\w+)?)\(")
_CALL = re.compile(r"^([ \t]*)def call\((self, )?args\):\n", re.M)


def inductor_reference(model, example_inputs, profile: bool = False, dynamic: bool | None = None) -> dict:
    """Compile `model` with torch.compile (Inductor), run it once, and describe what it generated:

    code          its output module per graph (Python source)
    calls         per graph, its call() function: what allocates and runs the kernels
    kernels       [{name, language (cpp | triton), graph, source}]: its generated kernels
    extern_calls  the library calls its wrappers make
    compile_s, verify, torch_version; with `profile`, kernel_times (Note [Inductor's kernel times])."""
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    from engine.run import verify

    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=dynamic)
    start = time.perf_counter()
    # Inductor wraps each C++ kernel in a profiler range only when asked, at compile time (Note [Inductor's
    # kernel times])
    with torch.no_grad(), inductor_config.patch({"cpp.enable_kernel_profile": profile}):
        outputs, sources = run_and_get_code(compiled, *example_inputs)
    compile_s = time.perf_counter() - start
    kernels = [{"name": match.group(1), "language": "triton" if match.group(2) == "triton" else "cpp",
                "graph": graph, "source": match.group(4).strip("\n")}
               for graph, source in enumerate(sources) for match in _KERNEL.finditer(source)]
    externs = sorted({call for source in sources for call in _EXTERN_CALL.findall(source)})
    return {
        "code": sources, "calls": [call_function(source) for source in sources], "kernels": kernels,
        "kernel_count": len(kernels), "extern_calls": externs, "compile_s": compile_s,
        "verify": verify(model, example_inputs, outputs), "torch_version": torch.__version__,
        **({"kernel_times": kernel_times(compiled, example_inputs, [k["name"] for k in kernels])} if profile else {}),
    }


def call_function(code: str) -> str:
    """The `call` function of Inductor's output module, dedented; "" if it has none."""
    match = _CALL.search(code or "")
    if not match:
        return ""
    indent = len(match.group(1))
    lines = [match.group(0).rstrip("\n")]
    for line in code[match.end():].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(line[indent:] for line in lines)


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
