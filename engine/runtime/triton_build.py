"""Build and run generated Triton: import a module's source (natively or under the interpreter) and autotune
block sizes on a GPU. (CUDA graph replay: cuda_graphs.py; TTIR..SASS for display:
engine/codegen/triton/assembly.py.)

Public Triton API is used (triton.jit, triton.compile with an explicit GPUTarget, triton.testing.do_bench),
plus the compiled kernel's launcher for the bound launch path, with JITFunction.run as the fallback where that
launcher differs (Note [Bound Triton launches]), so this works on Triton 3.6 through 3.9.

Note [Loading Triton source]
@triton.jit reads a kernel's source with `inspect`, so generated code must live in a real file: the module is
written under cache_dir()/triton/<hash>/ and imported from there. Whether the kernels run natively or under
the interpreter is decided when @triton.jit runs, that is while the module is imported: we import it with
TRITON_INTERPRET set to "1" (CPU) or "0" (CUDA), and restore the variable afterwards. The two flavours are two
module objects, so one process can hold both. (Triton's own jit functions, tl.sum and friends, were decorated
once when triton was imported; generated code does not call them: Note [Reductions without Triton's standard
library] in triton/prelude.py.)
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from engine.ir.artifacts import KernelLaunch, TunePlan
from engine.record import PrecompileRecord, TimedCandidate
from engine.runtime import spans
from engine.runtime.build import cache_dir

_LOADED: dict[tuple[str, bool], ModuleType] = {}
_IMPORT_LOCK = threading.Lock()


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def write_once(path: Path, text: str) -> bool:
    """Write `text` to `path` unless it is there already; True when it was (a cache hit)."""
    if path.exists():
        return True
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return False


def load_source(source: str, interpret: bool) -> tuple[ModuleType, bool]:
    """The generated module, imported from the cache (Note [Loading Triton source]); (module, cache_hit)."""
    key = source_key(source)
    with _IMPORT_LOCK:
        if (key, interpret) in _LOADED:
            return _LOADED[(key, interpret)], True
        path = cache_dir() / "triton" / key / f"kernels_{key}.py"
        cache_hit = write_once(path, source)
        name = f"glassbox_triton_{key}_{'interpreted' if interpret else 'native'}"
        previous = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # as a regular import would: inspect and the interpreter may look it up
            spec.loader.exec_module(module)
        finally:
            if previous is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = previous
        _LOADED[(key, interpret)] = module
        return module, cache_hit


# --- launching: each kernel bound once (Note [Bound Triton launches]) ----------------------------------------

# Note [Bound Triton launches]
# JITFunction.run, Triton's ordinary entry, re-derives everything on every call: it binds the arguments to the
# signature, computes each one's specialization (pointer alignment, integer value classes), hashes those into
# a cache key, looks the compiled kernel up, checks the globals it used and only then calls the compiled
# kernel's launcher: about 20 us a launch, where the GPU needs 2-5 us for a small kernel. TritonLaunch takes
# that path once, on the first launch, where Triton compiles the kernel for these arguments and hands back the
# CompiledKernel; from then on a call goes straight to that kernel's launcher (CompiledKernel.run, the
# driver's C function) with the grid, stream, function handle and packed metadata bound at that first launch,
# as Inductor's generated launchers do. Once bound, the launch is a small generated function (the first call's
# specialization checks and the block sizes written into its source) that replaces the object under the
# kernel's name in the wrapper's namespace, so a launch is one Python call into Triton's launcher.
# The bound kernel is only right for arguments that specialize the same way. Buffers the wrapper allocates
# itself always do (the caching allocator aligns every block to 512 bytes), so they are not checked; a graph
# input, a library call's output or a size argument may change between calls, so those positions (`checked`)
# are compared against the first call's classes on every launch, and a change takes the ordinary path again.
# Triton's launcher calling convention is (grid x, y, z, stream, function, packed metadata, launch metadata,
# enter hook, exit hook, *every kernel parameter in order, constexprs included): Triton 3.2 through 3.9.
# Where a CompiledKernel lacks it (older Triton, another backend), or a launch hook is installed (a profiler
# wants to see launches), or the direct call raises, the kernel keeps using JITFunction.run: slower, never wrong.
# Measured: a bound launch costs about half of JITFunction.run's host time, and torch's own C launcher gained
# nothing over it (reports/runtime_measurements.md, "Bound launches").


MAX_BINDS = 4  # specializations a kernel binds before it stays on the object's own path (no more exec)
DIRECT_LAUNCH = os.environ.get("GLASSBOX_TRITON_DIRECT_LAUNCH", "1") != "0"  # "0": every launch via JITFunction.run
# (the launch path before binding, kept switchable so `bench gpu` measures both in one run)


def _launch_hooks() -> tuple:
    """Triton's (enter, exit) launch hooks: None, or (Triton 3.5+) chains that may be empty."""
    try:
        from triton import knobs
        return knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    except (ImportError, AttributeError):
        from triton.compiler import CompiledKernel
        return getattr(CompiledKernel, "launch_enter_hook", None), getattr(CompiledKernel, "launch_exit_hook", None)


def _hook_active(hook) -> bool:
    calls = getattr(hook, "calls", None)  # a HookChain calls its `calls`; an empty one does nothing
    return hook is not None and (calls is None or bool(calls))


def specialization_class(value) -> tuple:
    """What Triton's specialization can see of one argument: pointer alignment, or an integer's value class."""
    if isinstance(value, torch.Tensor):
        return (value.data_ptr() % 16 == 0,)
    if isinstance(value, int) and not isinstance(value, bool):
        return (value == 1, value % 16 == 0, -2 ** 31 <= value < 2 ** 31)
    return (value,)


class TritonLaunch:
    """One kernel's launches: `launch(grid_x, stream, *args)` (Note [Bound Triton launches]).

    `constexprs` are the block sizes (the parameters after the arguments), `options` the launch options of
    JITFunction.run (num_warps), `checked` the positions of arguments whose specialization may vary. Under the
    interpreter every launch takes JITFunction.run, with numpy's floating-point warnings off: lanes outside
    the masks compute on the `other=` values of masked loads (log(0), 0/0, ...) and those values are never
    stored. With `tune` (mode="max-autotune"), the first launch times the candidate configs on the real
    arguments (a kernel only reads its inputs and writes its outputs, so running it several times is
    harmless), and every launch after it uses the fastest; tuning at the first launch, not at compile time,
    because compiling happens under Dynamo's fake tensors, which have no memory to run a kernel on."""

    def __init__(self, function, constexprs: dict, options: dict, checked: tuple[int, ...], interpret: bool,
                 tune: tuple | None = None):
        self.function, self.constexprs, self.options = function, constexprs, options
        self.checked, self.interpret, self.tune = checked, interpret, tune
        self.values = tuple(constexprs.values())
        self.grid_x = None  # set by autotuning: the tuned config's grid replaces the wrapper's
        self.runner = self.handle = self.metadata = self.classes = self.enter = self.exit = None
        self.direct = DIRECT_LAUNCH and not interpret  # False once binding failed or is not possible here
        self.install: Callable | None = None  # puts a generated launcher where the wrapper looks this one up
        self.binds = 0
        self.built = False  # its first native launch, which JIT-compiles it, has happened (a span of the trace)

    def __call__(self, grid_x, stream, *args):
        runner = self.runner
        if runner is not None and (not self.checked or self._classes(args) == self.classes):
            runner(self.grid_x or grid_x, 1, 1, stream, self.handle, self.metadata, None, self.enter, self.exit,
                   *args, *self.values)
            return
        self._launch_and_bind(grid_x, args)

    def warm_spec(self, args) -> tuple | None:
        """What a compile worker needs to compile this launch for `args` (Note [Parallel compiles])."""
        from engine.runtime.compile_pool import warm_spec

        return None if self.interpret else warm_spec(self.function, args, {**self.constexprs, **self.options})

    def _classes(self, args) -> tuple:
        return tuple(specialization_class(args[i]) for i in self.checked)

    def _launch_and_bind(self, grid_x, args) -> None:
        name = getattr(self.function, "__name__", "kernel")
        if self.tune is not None:
            (plan, device), self.tune = self.tune, None
            with spans.span("autotune", kernel=name, configs=len(plan.candidates)):  # Note [Compile trace]
                best, grid = autotune(plan, self.function, args, device)
            self.grid_x = grid[0]
            self.constexprs = {k: v for k, v in best.items() if k in self.constexprs}
            self.options = {"num_warps": best["num_warps"]}
            self.values = tuple(self.constexprs.values())
        grid = (self.grid_x or grid_x, 1, 1)
        if self.interpret:
            import numpy

            with numpy.errstate(all="ignore"):
                self.function.run(*args, grid=grid, warmup=False, **self.constexprs, **self.options)
            return
        if not self.built:  # its first native launch: Triton's JIT builds it
            self.built = True
            with spans.span("build kernel (Triton JIT)", kernel=name):
                compiled = self.function.run(*args, grid=grid, warmup=False, **self.constexprs, **self.options)
        else:
            compiled = self.function.run(*args, grid=grid, warmup=False, **self.constexprs, **self.options)
        if self.direct:
            self._bind(compiled, args)

    def _bind(self, compiled, args) -> None:
        try:
            hooks = _launch_hooks()
            if not hasattr(compiled, "launch_metadata") or any(_hook_active(h) for h in hooks):
                raise TypeError("no direct launcher in this Triton, or a launch hook is installed")
            runner, handle = compiled.run, compiled.function
            metadata = compiled.packed_metadata if hasattr(compiled, "packed_metadata") else compiled.metadata
        except Exception:  # noqa: BLE001 - Note [Bound Triton launches]: stay on JITFunction.run
            self.direct = False
            return
        self.enter, self.exit = hooks
        self.runner, self.handle, self.metadata, self.classes = runner, handle, metadata, self._classes(args)
        self.binds += 1
        if self.install is not None and self.binds <= MAX_BINDS:
            self.install(self._launcher(args))

    def _launcher(self, args) -> Callable:
        """The launch as a function of its own, the first call's specialization checks and the constexprs
        written into it (Note [Bound Triton launches]); an argument that specializes otherwise goes back to
        this object, which launches through JITFunction.run and binds again."""
        params = [f"a{i}" for i in range(len(args))]
        checks = []
        for i in self.checked:
            value = args[i]
            if isinstance(value, torch.Tensor):
                checks.append(f"(a{i}.data_ptr() % 16 == 0) is {value.data_ptr() % 16 == 0}")
            elif isinstance(value, int) and not isinstance(value, bool):  # specialization_class, spelled inline
                checks.append(f"(a{i} == 1, a{i} % 16 == 0, -2147483648 <= a{i} < 2147483648) == "
                              f"{specialization_class(value)!r}")
            else:
                checks.append(f"specialization_class(a{i}) == {specialization_class(value)!r}")
        arguments = ", ".join(params + [repr(v) for v in self.values])
        grid = repr(self.grid_x) if self.grid_x else "grid_x"
        lines = [f"def launch(grid_x, stream, {', '.join(params)}):"]
        if checks:
            lines += [f"    if not ({' and '.join(checks)}):",
                      f"        return again(grid_x, stream, {', '.join(params)})"]
        lines.append(f"    runner({grid}, 1, 1, stream, handle, metadata, None, enter, exit, {arguments})")
        scope = {"runner": self.runner, "handle": self.handle, "metadata": self.metadata, "enter": self.enter,
                 "exit": self.exit, "again": self, "specialization_class": specialization_class}
        exec(compile("\n".join(lines) + "\n", "<glassbox triton launch>", "exec"), scope)
        return scope["launch"]


class QuietInterpreted:
    """A jit function under the interpreter, run with numpy's floating-point warnings off (see TritonLaunch);
    for kernels launched through their own runner (GEMM templates, codegen/triton/gemm.py)."""

    def __init__(self, function):
        self.function = function

    def run(self, *args, **kwargs):
        import numpy

        with numpy.errstate(all="ignore"):
            return self.function.run(*args, **kwargs)


def bind_launch(kernel: KernelLaunch, function, interpret: bool, tune_device: str | None = None,
                namespace: dict | None = None):
    """The TritonLaunch for a generated kernel, under kernel.name in `namespace` (where, once bound, its
    generated launcher replaces it); autotuned at its first launch when it has a TunePlan and tune_device."""
    config = kernel.config
    constexprs = {k: config[k] for k in ("XBLOCK", "YBLOCK", "RBLOCK") if k in config}
    tune = (kernel.tune, tune_device) if kernel.tune is not None and tune_device else None
    launch = TritonLaunch(function, constexprs, {"num_warps": config["num_warps"]}, kernel.checked, interpret,
                          tune=tune)
    if namespace is not None:
        namespace[kernel.name] = launch
        launch.install = functools.partial(namespace.__setitem__, kernel.name)
    return launch


# --- autotuning (GPU) ----------------------------------------------------------------------------------------


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "cpu"


def autotune(plan: TunePlan, jit_function, args, device: str) -> tuple[dict, tuple]:
    """Time each candidate config (a median of triton.testing.do_bench); the fastest wins: (its config, its
    grid). Results are cached per kernel source, GPU and Triton version, and kept in plan.tuning, which the
    record shows."""
    import triton
    from triton.testing import do_bench

    configs = [config for config, _ in plan.candidates]
    grids = {json.dumps(config, sort_keys=True): grid for config, grid in plan.candidates}
    key = source_key(json.dumps([plan.source, configs, _device_name(device), triton.__version__]))
    path = cache_dir() / "triton" / "autotune" / f"{key}.json"
    cached = path.exists()
    if cached:
        results = json.loads(path.read_text())
    else:
        from engine.runtime.compile_pool import precompile, warm_spec

        results = []
        plan.tuning.precompile = PrecompileRecord(**precompile([warm_spec(jit_function, args, c) for c in configs]))
        for config, grid in plan.candidates:
            def launch(config=config, grid=grid):
                jit_function.run(*args, grid=grid, warmup=False, **config)
            try:
                launch()
                milliseconds = _median_ms(do_bench, launch)
            except Exception as error:  # noqa: BLE001 - a config that does not compile (registers) is skipped
                results.append({"config": config, "ms": None, "error": str(error)[:200]})
                continue
            results.append({"config": config, "ms": milliseconds})
        write_once(path, json.dumps(results))
    timed = [r for r in results if r.get("ms") is not None]
    best = min(timed, key=lambda r: r["ms"])["config"] if timed else configs[0]
    plan.tuning.results = [TimedCandidate.from_json(result) for result in results]
    plan.tuning.best, plan.tuning.cached, plan.tuning.device = best, cached, _device_name(device)
    return best, grids[json.dumps(best, sort_keys=True)]


def _median_ms(do_bench, fn) -> float:
    try:
        return float(do_bench(fn, return_mode="median"))
    except TypeError:  # a do_bench without return_mode: the median as its quantile
        return float(do_bench(fn, quantiles=[0.5])[0])
