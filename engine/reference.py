"""Real Inductor on the same model, for the side-by-side pane: its generated code, its kernels, its compile
time and whether it matches eager. Every use of Inductor's private API lives here."""
from __future__ import annotations

import re
import time

import torch

# Inductor declares each generated kernel once in its output module: C++ kernels as
# `cpp_fused_<ops> = async_compile.cpp_pybinding(...)`, Triton kernels as `triton_<kind>_<ops> = async_compile.triton(`.
_KERNEL_DECLARATION = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)
_EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|aten\.\w+(?:\.\w+)?)\(")


def inductor_reference(model, example_inputs) -> dict:
    """Compile `model` with torch.compile (Inductor), run it once, and describe what it generated."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(model)
    start = time.perf_counter()
    with torch.no_grad():
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
    }
