"""The Triton backend: one @triton.jit kernel per fused kernel (kernel.py; block sizes in config.py, scans in
scan.py, GEMM templates in gemm.py, the printer in printer.py), all of a graph's in one Python module with the
prelude helpers they call (module.py, prelude.py), and the TTIR-to-SASS display of a kernel (assembly.py)."""
from __future__ import annotations

from engine.codegen.backend import Backend, register_backend
from engine.codegen.triton.module import TritonModule, generate_module


@register_backend
class TritonBackend(Backend):
    name = "triton"

    def generate_module(self, kernels, buffers, size_symbols, mode="default") -> TritonModule:
        return generate_module(kernels, buffers, size_symbols, mode)
