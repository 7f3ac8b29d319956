"""The C++/OpenMP backend: one `extern "C"` function per fused kernel, all of a graph's in one translation
unit (module.py; reductions in reduction.py, scans in scan.py, GEMM templates in gemm.py, the printer in
printer.py, the helpers every unit starts with in prelude.h)."""
from __future__ import annotations

from engine.codegen.backend import Backend, register_backend
from engine.codegen.cpp.module import CppModule, generate_module


@register_backend
class CppBackend(Backend):
    name = "cpp"

    def generate_module(self, kernels, buffers, size_symbols, mode="default") -> CppModule:
        return generate_module(kernels, buffers, size_symbols, mode)
