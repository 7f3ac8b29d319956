"""Benchmark a model side by side in one process: eager, Glassbox (engine.compile) and torch.compile (Inductor).

Every number in a report comes from the same process, the same inputs and the same thread count, so the ratios
are meaningful even where the absolute times are not (on a shared CPU, absolute times drift; ratios measured
back to back drift much less). Steady-state times are medians from torch.utils.benchmark's blocked_autorange,
all under torch.no_grad(). Before any timing, both compiled outputs are checked against eager (run.verify).

Note [Cold and warm compiles]
`compile_s` is Glassbox's cold compile: Dynamo capture through g++ to the first result, with a fresh, empty
GLASSBOX_CACHE_DIR, so every C++ library is really built. `compile_warm_s` compiles the same model again after
torch._dynamo.reset(): Dynamo, AOTAutograd, lowering and codegen run again, but g++ is skipped because the
library is found in the (now filled) on-disk cache. `inductor_compile_s` is Inductor's cold compile: its FX graph
cache is switched off and TORCHINDUCTOR_CACHE_DIR points at an empty directory for the session, so its C++
kernels are built too. Python-level warm-up (imports of Dynamo's and Inductor's modules) is paid by whichever
case runs first; run a throwaway case first when that matters.

Note [Threads]
Glassbox's C++ kernels use OpenMP. The OpenMP runtime is shared with torch (torch's libgomp is already loaded,
and our libraries bind to it), so `torch.set_num_threads(n)` sets the thread count our kernels use from the
calling thread, and OMP_NUM_THREADS is read once, when the runtime starts. set_threads() therefore does both,
and callers (the CLI) should call it before the first compile of the process: that is why the CLI applies
--threads before loading any model. torch.utils.benchmark.Timer runs with one thread unless told otherwise,
so every Timer here gets `num_threads` explicitly; otherwise eager and our kernels would be timed on one core.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.benchmark import Timer

from engine.tools.model_file import ModelSpec, load_model_file, run_eager
from engine.pipeline import compile as glassbox_compile
from engine.profile import machine_load
from engine.run import verify

SUITE = "suite"  # the CLI's name for the CPU benchmark suite below


def in_fresh_process(case_name: str, timeout_s: float = 300) -> dict:
    """engine/tools/fresh_compile.py's measure(case_name) in a child Python process (same environment: the caller's
    compile cache; Note [Fresh-process warm compile])."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # in a sandboxed worker, builds go over the socket GLASSBOX_BUILDER_FD to the trusted builder (engine/build.py):
    # the child needs that descriptor too (subprocess closes every other one by default)
    builder = os.environ.get("GLASSBOX_BUILDER_FD")
    result = subprocess.run([sys.executable, "-m", "engine.tools.fresh_compile", case_name], capture_output=True,
                            text=True, timeout=timeout_s, env=env, pass_fds=(int(builder),) if builder else ())
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh-process compile failed: {last}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def set_threads(threads: int) -> None:
    """Use `threads` threads for torch's own ops and for our OpenMP kernels (see Note [Threads])."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)


@contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """Set one environment variable for the duration of a block; restore it (or its absence) after."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def median_ms(fn: Callable, inputs: tuple, threads: int, min_run_time: float, label: str) -> tuple[float, float]:
    """Steady-state milliseconds per call: the median over blocked_autorange's blocks, and their interquartile
    range (the spread a reader needs to trust a ratio on a shared machine)."""
    timer = Timer(stmt="fn(*inputs)", globals={"fn": fn, "inputs": inputs}, num_threads=threads, label=label)
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return measurement.median * 1e3, measurement.iqr * 1e3


def first_call_seconds(compiled: Callable, inputs: tuple) -> tuple[float, Any]:
    """Seconds from a fresh compiled callable to its first result (that is, the compile), and the result."""
    start = time.perf_counter()
    outputs = compiled(*inputs)
    return time.perf_counter() - start, outputs


def verify_summary(result: dict) -> dict:
    summary = {"ok": result["ok"], "max_abs_err": result["max_abs_err"], "max_rel_err": result["max_rel_err"]}
    if "problem" in result:
        summary["problem"] = result["problem"]
    return summary


def on_device(spec: ModelSpec, device: str) -> tuple[Any, tuple]:
    model, inputs = spec.model, tuple(spec.example_inputs)
    if device == "cpu":
        return model, inputs
    if isinstance(model, nn.Module):
        model = model.to(device)
    return model, tuple(x.to(device) for x in inputs)


def bench(spec: ModelSpec, backend: str = "cpp", threads: int | None = None, device: str = "cpu",
          with_inductor: bool = True, min_run_time: float = 0.5, inductor_cache_dir: str | None = None,
          progress: Callable[[str], None] | None = None, mode: str = "default", templates: str = "auto") -> dict:
    """Time `spec`'s model under eager, Glassbox and Inductor. The report:

    name, backend, device, threads      what was measured, with how many threads
    mode                                torch.compile's mode, the same for Glassbox and Inductor
    templates                           Glassbox's GEMM templates: auto, on or off (Options.templates)
    eager_ms, glassbox_ms, inductor_ms  steady-state median milliseconds per call
    eager_iqr_ms, glassbox_iqr_ms, ...  their spread: the interquartile range over the timed blocks
    load_avg_1m, cpus, load_warning     the machine's load while measuring (a warning when it skews them)
    compile_s, compile_warm_s           Glassbox's cold and warm compile-to-first-result seconds
    compile_fresh                       a warm compile in a new process (Note [Fresh-process warm compile]):
                                        {imports_s, first_call_s, ours_s, stages_s}; cpp on the CPU only
    inductor_compile_s                  Inductor's cold compile-to-first-result seconds
    speedup_vs_eager                    eager_ms / glassbox_ms
    ratio_vs_inductor                   glassbox_ms / inductor_ms (below 1: Glassbox is faster)
    verify                              {"glassbox": {ok, max_abs_err, max_rel_err}, "inductor": {...}}
    inductor_error                      only when torch.compile failed: its exception, in one line

    with_inductor=False skips torch.compile (its keys are then None): Inductor's cold compile takes tens of
    seconds on a small CPU. inductor_cache_dir: a directory to use as TORCHINDUCTOR_CACHE_DIR; default, a fresh
    temporary one. A caller timing several models passes one empty directory for all of them: Inductor's compile
    workers keep the cache directory they started with, so it must outlive the whole session. A model that
    raises when run eagerly raises ModelFileError (pointing at the user's line) before anything is compiled.
    """
    say = progress or (lambda message: None)
    if threads is not None:
        set_threads(threads)
    threads = torch.get_num_threads()
    model, inputs = on_device(spec, device)
    report: dict[str, Any] = {
        "name": spec.name, "backend": backend, "device": device, "threads": threads, "mode": mode,
        "templates": templates,
        "eager_ms": None, "glassbox_ms": None, "inductor_ms": None,
        "compile_s": None, "compile_warm_s": None, "compile_fresh": None, "inductor_compile_s": None,
        "speedup_vs_eager": None, "ratio_vs_inductor": None, "verify": {},
    }
    with torch.no_grad():
        run_eager(dataclasses.replace(spec, model=model, example_inputs=inputs))
        say("eager")
        report["eager_ms"], report["eager_iqr_ms"] = median_ms(model, inputs, threads, min_run_time, f"{spec.name} eager")

        # Glassbox: cold, then warm (Note [Cold and warm compiles]); the warm-compiled callable is the one timed.
        with tempfile.TemporaryDirectory(prefix="glassbox-bench-") as cache, \
                environment("GLASSBOX_CACHE_DIR", cache):
            say("glassbox compile (cold)")
            torch._dynamo.reset()
            cold = glassbox_compile(model, backend=backend, device=device, mode=mode, templates=templates)
            report["compile_s"], cold_outputs = first_call_seconds(cold, inputs)
            say("glassbox compile (warm)")
            torch._dynamo.reset()
            compiled = glassbox_compile(model, backend=backend, device=device, mode=mode, templates=templates)
            report["compile_warm_s"], outputs = first_call_seconds(compiled, inputs)
            checks = [verify(model, inputs, out, spec.tolerance) for out in (cold_outputs, outputs)]
            report["verify"]["glassbox"] = verify_summary(min(checks, key=lambda c: (c["ok"], -c["max_abs_err"])))
            if backend == "cpp" and device == "cpu":
                say("glassbox compile (warm, fresh process)")
                report["compile_fresh"] = in_fresh_process(case_key(spec))
            say("glassbox")
            report["glassbox_ms"], report["glassbox_iqr_ms"] = median_ms(compiled, inputs, threads, min_run_time, f"{spec.name} glassbox")
        torch._dynamo.reset()

        if with_inductor:
            try:
                compile_s, check, milliseconds = bench_inductor(spec, model, inputs, threads, min_run_time,
                                                                inductor_cache_dir, say, mode)  # ms: (median, iqr)
            except Exception as error:  # noqa: BLE001 - the reference failing must not discard our numbers
                first_line = (str(error).strip().splitlines() or [""])[0][:300]
                report["inductor_error"] = f"{type(error).__name__}: {first_line}"
            else:
                report.update(inductor_compile_s=compile_s, inductor_ms=milliseconds[0],
                              inductor_iqr_ms=milliseconds[1])
                report["verify"]["inductor"] = check
                report["ratio_vs_inductor"] = report["glassbox_ms"] / report["inductor_ms"]
    report["speedup_vs_eager"] = report["eager_ms"] / report["glassbox_ms"]
    report.update(machine_load())  # load_avg_1m, cpus, load_warning: what skews these figures
    return report


def share_inductor(report: dict, measured: dict) -> None:
    """A case that skipped torch.compile takes the figures of `measured`, the same model and mode timed in
    this run (bench --templates on,off: one Inductor, several Glassbox rows)."""
    for key in ("inductor_ms", "inductor_iqr_ms", "inductor_compile_s", "inductor_error"):
        if key in measured:
            report[key] = measured[key]
    if "inductor" in measured.get("verify", {}):
        report["verify"]["inductor"] = measured["verify"]["inductor"]
    if report.get("glassbox_ms") and report.get("inductor_ms"):
        report["ratio_vs_inductor"] = report["glassbox_ms"] / report["inductor_ms"]


def bench_inductor(spec: ModelSpec, model, inputs: tuple, threads: int, min_run_time: float,
                   cache_dir: str | None, say: Callable[[str], None],
                   mode: str = "default") -> tuple[float, dict, tuple[float, float]]:
    """Inductor's cold compile seconds (no FX graph cache, an empty cache directory), its verify summary and
    its steady-state milliseconds, in the same torch.compile mode as ours."""
    import torch._inductor.config as inductor_config

    with tempfile.TemporaryDirectory(prefix="inductor-bench-", ignore_cleanup_errors=True) as own_dir:
        with environment("TORCHINDUCTOR_CACHE_DIR", cache_dir or own_dir), \
                inductor_config.patch(fx_graph_cache=False):
            say("inductor compile (cold)")
            torch._dynamo.reset()
            compiled = torch.compile(model, mode=None if mode == "default" else mode)
            compile_s, outputs = first_call_seconds(compiled, inputs)
            check = verify_summary(verify(model, inputs, outputs, spec.tolerance))
            say("inductor")
            milliseconds = median_ms(compiled, inputs, threads, min_run_time, f"{spec.name} inductor")
        torch._dynamo.reset()
    return compile_s, check, milliseconds


# --- the CPU benchmark suite ---------------------------------------------------------------------------------
# Sizes are chosen so each case moves tens of megabytes: big enough that memory traffic, which fusion saves,
# dominates the per-call overhead of the wrappers (which the small samples in samples/ measure instead).


def sample_class(sample: str) -> type:
    """The model class a sample defines (the suite runs the samples' own models at benchmark sizes)."""
    return type(load_model_file(sample).model)


def softmax_last_dim(x):
    return torch.softmax(x, dim=-1)


def gelu_chain(x):
    return F.gelu(x) * torch.sigmoid(x) + x


def _layernorm(features: int) -> nn.Module:
    norm = nn.LayerNorm(features).eval()
    with torch.no_grad():  # non-trivial affine weights, as in the sample
        norm.weight.copy_(torch.randn(features))
        norm.bias.copy_(torch.randn(features))
    return norm


def _case(name: str, model, inputs: tuple, description: str) -> ModelSpec:
    return ModelSpec(name=name, filename=__file__, source="", model=model, example_inputs=inputs,
                     description=description)


def suite_cases() -> list[ModelSpec]:
    """The CPU suite: the fusion samples at benchmark sizes, plus the mlp sample as it is."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cases = [
            _case("scale_bias_relu", sample_class("scale_bias_relu")(1024).eval(), (torch.randn(4096, 1024),),
                  "relu(x * scale + bias), x 4096x1024"),
            _case("softmax", softmax_last_dim, (torch.randn(2048, 2048),), "softmax over the last dim, 2048x2048"),
            _case("layernorm", _layernorm(2048), (torch.randn(2048, 2048),), "nn.LayerNorm(2048) on 2048x2048"),
            _case("rmsnorm", sample_class("rmsnorm")(2048).eval(), (torch.randn(2048, 2048),),
                  "RMSNorm(2048) on 2048x2048"),
            _case("gelu_chain", gelu_chain, (torch.randn(4096, 1024),), "gelu(x) * sigmoid(x) + x, 4096x1024"),
        ]
    return cases + [load_model_file("mlp")]


def case_key(spec: ModelSpec) -> str:
    """What load_case takes to build `spec` again in another process: a case built in code (the suite's, the
    zoo's) by its name, a model file by its path."""
    from engine.tools import zoo

    return spec.name if spec.filename in (__file__, zoo.__file__) else spec.filename


def load_case(name: str, device: str = "cpu") -> ModelSpec:
    """One suite case by its name, else a zoo case (at its size for `device`), else a sample name or a model
    file path."""
    from engine.tools.zoo import zoo_cases, zoo_specs

    for case in suite_cases():
        if case.name == name:
            return case
    if any(case.name == name for case in zoo_cases()):
        specs, skipped = zoo_specs(device, wanted={name})
        if skipped:
            raise RuntimeError(f"zoo case {name}: {skipped[0]['skipped']}")
        return specs[0]
    return load_model_file(name)


def load_cases(target: str, device: str = "cpu") -> list[ModelSpec]:
    """`suite`, `zoo` (Note [Zoo] in engine/tools/zoo.py: its sizes depend on the device), one zoo case by name,
    a sample name or a model file path, or several of them separated by commas. Zoo cases whose library is
    missing are skipped (and named on stderr)."""
    from engine.tools.zoo import ZOO, zoo_specs

    cases: list[ModelSpec] = []
    for item in (part.strip() for part in target.split(",")):
        if item == ZOO:
            specs, skipped = zoo_specs(device)
            for case in skipped:
                print(f"zoo: skipping {case['name']}: {case['skipped']}", file=sys.stderr)
            cases.extend(specs)
        elif item:
            cases.extend(suite_cases() if item == SUITE else [load_case(item, device)])
    return cases
