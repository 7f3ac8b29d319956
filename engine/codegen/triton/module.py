"""The Triton backend's module: all generated kernels of one graph (pointwise and reduction kernels from
kernel.py, GEMM templates from gemm.py) with the prelude helpers they call, in one Python module that is
imported once per graph.

This is what the "triton" backend (triton/__init__.py) generates. It sits above both kernel generators, so neither imports the other's assembly (they used to import each other). How each kernel
launches (its config, the arguments to check, the configs to tune) goes to the runtime as data: `launches`
(engine/runtime/load.py loads the module).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.codegen.kernel_core import assemble_module
from engine.codegen.triton.kernel import TritonKernel, generate_kernel
from engine.codegen.triton.config import candidate_configs
from engine.codegen.triton.gemm import generate_template
from engine.ir.artifacts import KernelLaunch, TunePlan
from engine.schedule.fusion import Kernel


# --- the prelude of helper functions -------------------------------------------------------------------------

_PRELUDE_PATH = Path(__file__).with_name("prelude.py")


def _parse_prelude() -> tuple[str, dict[str, str], dict[str, set[str]]]:
    text = _PRELUDE_PATH.read_text()
    start = text.index("import os")
    header = text[start:text.index("# --- end of header")].rstrip() + "\n"
    lines = text.splitlines()
    helpers, calls = {}, {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            helpers[node.name] = "\n".join(lines[first - 1:node.end_lineno])
            calls[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id.startswith("gb_")}
    return header, helpers, calls


PRELUDE_HEADER, HELPERS, HELPER_CALLS = _parse_prelude()


def _with_dependencies(names: set[str]) -> list[str]:
    """The helpers, each after the helpers it calls (Triton resolves names at compile time, so order is for
    the reader)."""
    ordered: list[str] = []

    def visit(name):
        if name in ordered:
            return
        for called in sorted(HELPER_CALLS[name] - {name}):
            visit(called)
        ordered.append(name)

    for name in sorted(names):
        visit(name)
    return ordered


# --- the module ----------------------------------------------------------------------------------------------


@dataclass
class TritonModule:
    source: str
    kernels: list[TritonKernel]
    line_kernel: list  # per source line: (kernel name, LineTag) or None
    interpreter: bool  # kernels meant for the interpreter (the graph is on the CPU)
    autotune: bool = False  # mode="max-autotune": autotune on the GPU
    produced: frozenset = frozenset()  # buffers that generated kernels store (allocated by the wrapper)
    launches: dict = field(default_factory=dict)  # kernel name -> ir.artifacts.KernelLaunch (not templates)
    language = "triton"
    call_prologue = ()  # nothing to set up per call

    def tunable(self, kernel: TritonKernel) -> bool:
        """Autotuned: asked for (mode="max-autotune"), on a GPU, and with static sizes (one grid per config); never
        a kernel that adds into its output (tuning runs it several times on the real buffers)."""
        return self.autotune and not self.interpreter and kernel.grid() is not None and \
            not kernel.accumulates

    def launch_text(self, kernel: TritonKernel) -> str:
        """The wrapper's call: the kernel's bound launch (runtime/triton_build.TritonLaunch) with the grid worked out
        here and the wrapper's stream, so a launch does no work beyond the compiled kernel's own launcher."""
        if hasattr(kernel, "template"):  # a GEMM template: called through gemm_launch.TemplateLaunch
            return kernel.launch_text()
        args = ", ".join(["None" if self.interpreter else "stream"] + kernel.args + kernel.size_args)
        if self.tunable(kernel):  # the launch picks its grid and blocks at the first launch
            return f"{kernel.name}(None, {args})  # autotuned"
        return f"{kernel.name}({kernel.grid_x_text()}, {args})"

    def checked_arguments(self, kernel: TritonKernel) -> tuple[int, ...]:
        """Positions of the launch arguments whose specialization may change between calls: every argument
        but the buffers the wrapper allocates for generated kernels (Note [Bound Triton launches])."""
        return tuple(i for i, name in enumerate(kernel.args + kernel.size_args) if name not in self.produced)

    def launch(self, kernel: TritonKernel, buffers: dict) -> KernelLaunch:
        """How the runtime launches `kernel`: its config, the arguments it checks, and, when tunable, the
        candidate configs with their grids (the heuristic's first); with static sizes, its arguments' dtypes,
        from which it can be compiled before the first call."""
        tune = None
        if self.tunable(kernel):
            configs = candidate_configs(kernel.form, kernel.rows, kernel.red, kernel.itemsize)
            tune = TunePlan(kernel.source, [(c.kwargs(), kernel.grid(c)) for c in configs], kernel.tuning)
        dtypes = None if kernel.size_args else tuple(buffers[name].dtype for name in kernel.args)
        return KernelLaunch(kernel.name, kernel.config.kwargs(), self.checked_arguments(kernel), tune, dtypes)


def generate_module(kernels: list[Kernel], buffers: dict, size_symbols: list,
                    mode: str = "default") -> TritonModule:
    """All generated kernels of one graph in one Python module (imported once per graph)."""
    devices = {n.device for k in kernels for n in k.nodes if k.kind in ("pointwise", "reduction", "template")}
    interpreter = not any(str(d).startswith("cuda") for d in devices)
    generated = [generate_template(k, buffers, interpreter) if k.kind == "template" else
                 generate_kernel(k, buffers, size_symbols, interpreter) for k in kernels
                 if k.kind in ("pointwise", "reduction", "template")]
    helpers = set()
    for kernel in generated:
        helpers |= {name for name in HELPERS if re.search(rf"\b{name}\b", kernel.source)}
    header = ['"""Triton kernels generated by Glassbox."""'] + PRELUDE_HEADER.splitlines()
    for name in _with_dependencies(helpers):
        header += ["", ""] + HELPERS[name].splitlines()
    source, line_kernel = assemble_module(header, generated, gap=2)
    produced = frozenset(n for k in kernels if k.kind in ("pointwise", "reduction", "template") for n in k.stored)
    module = TritonModule(source, generated, line_kernel, interpreter, produced=produced,
                          autotune=mode == "max-autotune")
    module.launches = {k.name: module.launch(k, buffers) for k in generated if not hasattr(k, "template")}
    return module
