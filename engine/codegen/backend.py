"""The code generators' protocol: what a backend takes (a graph's fused kernels) and what it hands back (a
module of printed source). Each backend registers itself here by name (engine/codegen/cpp/, triton/); the
pipeline asks `backend(options.backend)`.

Note [Backends print, the runtime runs]
A backend turns fused kernels into text and the data the runtime needs to run that text (how each kernel is
launched, which configs to tune): a GeneratedModule. It never builds, loads or launches anything; that is
engine/runtime/ (load.load_kernels reads the module as data). The shared wrapper (codegen/wrapper.py) calls
kernels by name through the module's `launch_text`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Protocol, Sequence


class GeneratedModule(Protocol):
    """One graph's generated kernels in one unit of source (a C++ translation unit, a Python module)."""
    language: str  # "cpp" | "triton": which runtime loader takes it
    source: str
    kernels: list  # each with name, args, size_args, source, line_tags (a GEMM template also with template)
    line_kernel: list  # per source line: (kernel name, LineTag) or None
    autotune: bool  # mode="max-autotune": the runtime tunes at the first launch
    call_prologue: Sequence[str]  # wrapper lines run once per call, before the kernels

    def launch_text(self, kernel) -> str:
        """The wrapper's line that launches `kernel`."""


class Backend(ABC):
    """A code generator: fused kernels -> a GeneratedModule. Subclasses register with @register_backend."""
    name: ClassVar[str]

    @abstractmethod
    def generate_module(self, kernels: list, buffers: dict, size_symbols: list,
                        mode: str = "default") -> GeneratedModule:
        """All of a graph's generated kernels (pointwise, reduction, scan, template) in one module."""


BACKENDS: dict[str, Backend] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    if cls.name in BACKENDS:
        raise ValueError(f"backend {cls.name!r} registered twice")
    BACKENDS[cls.name] = cls()
    return cls


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]
