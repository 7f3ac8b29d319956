"""Compiling a kernel's candidate configs in parallel, in worker processes, before they are timed.

Note [Parallel compiles]
max-autotune times every candidate config of a kernel, and each must be compiled first: on the H200 a
GEMM template's config took about 2 s (Triton's MLIR passes, then ptxas), so a Llama prefill's first call in
max-autotune spent 327 s compiling one config after another, where Inductor's took 61 s. Threads do not
help: Triton holds the GIL through its passes (on this machine, 6 GEMM configs compiled in 7.4 s in one
thread and in 6.4 s in two). So the configs compile in worker processes, as Inductor's do: each worker
imports the generated module from its file (under the name it was imported as here, so Triton hashes the
same function) and calls JITFunction.warmup with the launch's argument dtypes and the config's constexprs
and options, which compiles the kernel into Triton's on-disk cache without launching it. The timing loop
that follows then finds each config there (same source, specialization and options: the same cache key)
instead of compiling it.
It is only ever a head start: a worker that fails (no GPU, a config out of registers, a Triton without
warmup) or a key that comes out different (an argument misaligned where the mock is aligned) leaves that
config to compile where it is timed, as before, where its error is recorded. The pool starts at the first
max-autotune compile on a GPU (spawned processes: a forked child of a process holding a CUDA context cannot
use CUDA), with at most MAX_WORKERS workers, each holding a CUDA context while it lives.

Note [Compiling a graph's kernels before its first call]
Triton compiles a kernel at its first launch, so a graph's first call compiled its kernels one after another:
MaxViT-T's 218 kernels took 60.5 s of Triton compiling on the 2-core CPU for sm_90 (reports/compile_time.md),
most of its first call. A kernel with static sizes needs nothing of the call to be compiled: its arguments'
dtypes and its block sizes are known when its module is loaded (KernelLaunch.arg_dtypes). So loading a native
module that is new to the cache (its source file was just written) hands every such kernel to the workers
above and waits for them; each first launch then finds its kernel in Triton's cache. The pool costs a few
seconds to start (each worker imports torch and makes a CUDA context), so a graph starts it only with at least
GRAPH_MIN_KERNELS kernels to compile; once it runs, any graph with two or more uses it. Kernels with symbolic
sizes (their values are the call's) and autotuned ones (Note [Parallel compiles] above) compile as before.
`GLASSBOX_COMPILE_WORKERS` sets the pool's size (0: no pool); the model sweep gives each of its parallel
children its share of the machine's cores.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

import torch

MAX_WORKERS = 8
WAIT_S = 300.0  # for one batch; a compile still running after it is left to the kernel's first launch
GRAPH_MIN_KERNELS = 12  # a graph's kernels that are worth starting the pool for (the Note above)

_pool: ProcessPoolExecutor | None = None
_SPAWN_LOCK = threading.Lock()


def warm_spec(function, args, kwargs: dict) -> tuple | None:
    """What a worker needs to compile `function` (a JITFunction) for these launch arguments: its module's file
    and name, the function's name, the arguments as dtypes (a tensor's, or a dtype given for one) or values,
    and the constexprs and options; None if the function has no module file."""
    fn = getattr(function, "fn", None)
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if fn is None or path is None:
        return None
    spec = [a.dtype if isinstance(a, torch.Tensor) else a for a in args]
    return path, module.__name__, fn.__name__, spec, dict(kwargs)


def _warm(path: str, module_name: str, name: str, args: list, kwargs: dict) -> bool:
    """In a worker: compile one config into Triton's cache (Note [Parallel compiles])."""
    os.environ["TRITON_INTERPRET"] = "0"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    getattr(module, name).warmup(*args, grid=(1,), **kwargs)
    return True


def workers() -> int:
    """The pool's size: GLASSBOX_COMPILE_WORKERS where set, else one fewer than the cores this process may
    use, at most MAX_WORKERS."""
    asked = os.environ.get("GLASSBOX_COMPILE_WORKERS", "").strip()
    if asked:
        if not asked.isdigit():
            raise ValueError(f"GLASSBOX_COMPILE_WORKERS must be a whole number of processes, not {asked!r}")
        return int(asked)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(MAX_WORKERS, cores - 1))


def worth_starting(kernels: int) -> bool:
    """Whether a graph with this many kernels to compile goes to the workers (Note [Compiling a graph's
    kernels before its first call]): two or more once the pool runs, GRAPH_MIN_KERNELS to start it."""
    return kernels >= (2 if _pool is not None else GRAPH_MIN_KERNELS) and workers() >= 2


def _start() -> ProcessPoolExecutor | None:
    global _pool
    if _pool is None and workers() >= 2:
        import multiprocessing

        _pool = ProcessPoolExecutor(workers(), mp_context=multiprocessing.get_context("spawn"))
    return _pool


@contextmanager
def _without_the_main_script():
    """Spawned workers that do not run the user's script: a spawned child imports the parent's __main__ (as
    __mp_main__) before it works, and a script that compiles a model at its top level, without an `if __name__
    == "__main__"` guard, would build and run that model again in every worker. Our workers need only their
    task's module, which they import by name, so while the pool starts its processes the data handed to them
    names no main module."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def preparation_data(name):
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _SPAWN_LOCK:
        spawn.get_preparation_data = preparation_data
        try:
            yield
        finally:
            spawn.get_preparation_data = original


def precompile(specs: list) -> dict:
    """Compile these warm specs in the worker processes and wait for them (Note [Parallel compiles]). Returns
    counts for the record: compiled, failed (with the first reason) and left to the first launches."""
    global _pool
    specs = [s for s in specs if s is not None]
    if len(specs) < 2 or not all(_pickles(s) for s in specs):
        return {"compiled": 0, "failed": 0, "left": len(specs)}
    try:
        with _without_the_main_script():  # a spawn pool starts its processes as tasks are submitted
            pool = _start()
            if pool is None:
                return {"compiled": 0, "failed": 0, "left": len(specs)}
            futures = [pool.submit(_warm, *spec) for spec in specs]
    except Exception as error:  # noqa: BLE001 - Note [Parallel compiles]: only ever a head start
        _pool = None  # a broken pool is not used again; the next batch starts a new one
        return {"compiled": 0, "failed": len(specs), "left": len(specs), "error": f"{type(error).__name__}: {error}"}
    done, pending = wait(futures, timeout=WAIT_S)
    errors = [f.exception() for f in done if f.exception() is not None]
    if any(isinstance(e, BrokenProcessPool) for e in errors):
        _pool = None
    result = {"compiled": len(done) - len(errors), "failed": len(errors), "left": len(pending)}
    if errors:
        result["error"] = f"{type(errors[0]).__name__}: {str(errors[0])[:200]}"
    return result


def _pickles(spec) -> bool:
    import pickle

    try:
        pickle.dumps(spec)
        return True
    except Exception:  # noqa: BLE001 - an argument a worker cannot receive: no head start for this kernel
        return False
