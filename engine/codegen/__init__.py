"""Code generators: fused kernels -> printed source (engine/codegen/backend.py, Note [Backends print, the
runtime runs]). Shared by both backends: kernel_core.py (a kernel's passes, stores, signature),
kernel_printer.py (the ops protocol's printer base), provenance.py (line tags) and wrapper.py (the per-graph
Python wrapper). Each backend is a folder that registers itself: cpp/ (C++/OpenMP) and triton/ (Triton, and
the TTIR-to-SASS display of its kernels).
"""
from __future__ import annotations

from engine.codegen import cpp, triton  # noqa: F401 - each registers its backend
from engine.codegen.backend import BACKENDS, Backend, GeneratedModule, backend

__all__ = ["BACKENDS", "Backend", "GeneratedModule", "backend"]
