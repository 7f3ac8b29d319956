"""Loading what codegen printed, for both backends: one callable per kernel name in the wrapper's namespace.

A backend's module (engine/codegen: cpp/module.CppModule, triton/module.TritonModule) is data here: its `language`,
`source`, `kernels` (each with `name`, `args`, `size_args`; a GEMM template also with `template` and the launch
data of runtime/gemm_launch.TemplateKernel) and `autotune`; a C++ module also has its `prelude` (Note
[Precompiled prelude] in build.py), a Triton module its `launches`, the KernelLaunch of each generated kernel.
Nothing here asks codegen or the scheduler a question.
"""
from __future__ import annotations

import ctypes

import torch

from engine.runtime import compile_pool, spans, triton_build
from engine.runtime.build import build_library, load_library
from engine.runtime.gemm_launch import CppTemplateRunner, TemplateLaunch, TritonTemplateRunner


def load_kernels(module, namespace: dict, device: str = "cpu") -> bool:
    """Build or import `module` and put one callable per kernel in `namespace`; True on a cache hit."""
    if module.language == "cpp":
        return _load_cpp(module, namespace, device)
    if module.language == "triton":
        return _load_triton(module, namespace, device)
    raise ValueError(f"no loader for generated {module.language!r} code")


class ThreadCount:
    """Hands torch.get_num_threads() of the calling thread to a library's kernels when it changed (Note [Kernel
    threads] in engine/codegen/cpp/prelude.h): about 0.1 us a call, once per graph call."""

    def __init__(self, setter):
        setter.argtypes, setter.restype = [ctypes.c_int], None
        self.setter, self.get_num_threads, self.threads = setter, torch.get_num_threads, 0

    def __call__(self) -> None:
        threads = self.get_num_threads()
        if threads != self.threads:
            self.setter(threads)
            self.threads = threads


def _load_cpp(module, namespace: dict, device: str) -> bool:
    """Compile the module (or take it from the cache) and put one ctypes function per kernel in namespace."""
    path, cache_hit = build_library(module.source, prelude=module.prelude)
    library = load_library(path)
    namespace["_library"] = library  # keeps the shared library loaded as long as the wrapper lives
    namespace["gb_threads"] = ThreadCount(library.gb_set_threads)
    for kernel in module.kernels:
        function = getattr(library, kernel.name)
        function.restype = None
        function.argtypes = [ctypes.c_void_p] * len(kernel.args) + [
            ctypes.c_double if size in kernel.float_sizes else ctypes.c_int64 for size in kernel.size_args]
        if hasattr(kernel, "template"):
            function.argtypes = [ctypes.c_void_p] * (len(kernel.args) + 1) + [ctypes.c_int64] * 3
            function = TemplateLaunch(kernel, CppTemplateRunner(kernel, function), device, tune=module.autotune)
        namespace[kernel.name] = function
    return cache_hit


def _load_triton(module, namespace: dict, device: str) -> bool:
    """Import the module's kernels (under the interpreter on the CPU, Note [Math under the interpreter]) and
    put one bound launch per kernel name in namespace (Note [Bound Triton launches]; autotuned at its first
    launch where codegen planned it)."""
    interpret = not str(device).startswith("cuda")
    loaded, cache_hit = triton_build.load_source(module.source, interpret=interpret)
    namespace["_triton_module"] = loaded  # keeps the module alive as long as the wrapper
    for kernel in module.kernels:
        function = getattr(loaded, kernel.name)
        if hasattr(kernel, "template"):
            if interpret:
                function = triton_build.QuietInterpreted(function)
            namespace[kernel.name] = TemplateLaunch(kernel, TritonTemplateRunner(kernel, function), device,
                                                    tune=module.autotune and not interpret)
        else:
            triton_build.bind_launch(module.launches[kernel.name], function, interpret, device, namespace)
    if not interpret and not cache_hit:
        _precompile(module, namespace)
    return cache_hit


def _precompile(module, namespace: dict) -> None:
    """Compile the module's statically sized kernels in the compile workers now, not one by one at their first
    launches (Note [Compiling a graph's kernels before its first call] in compile_pool.py)."""
    specs = [namespace[name].warm_spec(list(launch.arg_dtypes)) for name, launch in module.launches.items()
             if launch.arg_dtypes is not None and launch.tune is None]
    if not module.autotune:  # a template's default launch (max-autotune compiles its candidates itself)
        specs += [namespace[k.name].backend.first_launch_spec() for k in module.kernels if hasattr(k, "template")]
    specs = [spec for spec in specs if spec is not None]
    if compile_pool.worth_starting(len(specs)):
        with spans.span("precompile Triton kernels", kernels=len(specs), workers=compile_pool.workers()) as span:
            span["args"].update(compile_pool.precompile(specs))
