"""Code generators. A backend module provides

    generate_module(kernels, buffers, size_symbols, mode) -> module   (.source, .kernels, .line_kernel, .language,
                                                                      .launch_text(kernel))

The wrapper (wrapper.py) is shared: it calls kernels by name through `launch_text`. Codegen prints text and never
runs it: engine/runtime/load.py builds or imports a module and binds its kernels (load_kernels).
"""
from __future__ import annotations

import importlib

BACKEND_MODULES = {"cpp": "engine.codegen.cpp", "triton": "engine.codegen.triton_module"}


def backend_module(name: str):
    if name not in BACKEND_MODULES:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name])
