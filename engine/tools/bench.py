"""Benchmark a model side by side in one process: eager, Glassbox (engine.compile) and torch.compile (Inductor).

Every number in a report comes from the same process, the same inputs and the same thread count. The three
runners are compiled and checked against eager first (run.verify), then timed taking turns in rounds, under
torch.no_grad(), with the thread count the machine has free: engine/runtime/timing.py, Note [Fair timing]
(the app's bench is this one, run in a worker). A ratio whose runners' spreads are too wide is reported as
"too noisy to judge" (`verdicts`).

Note [Cold and warm compiles]
`compile_s` is Glassbox's cold compile: Dynamo capture through g++ to the first result, with a fresh, empty
GLASSBOX_CACHE_DIR, so every C++ library is really built. `compile_warm_s` compiles the same model again after
torch._dynamo.reset(): Dynamo, AOTAutograd, lowering and codegen run again, but g++ is skipped because the
library is found in the (now filled) on-disk cache. `inductor_compile_s` is Inductor's cold compile: its FX graph
cache is switched off and TORCHINDUCTOR_CACHE_DIR points at an empty directory for the session, so its C++
kernels are built too. Python-level warm-up (imports of Dynamo's and Inductor's modules) is paid by whichever
case runs first; run a throwaway case first when that matters.

Note [Threads]
Glassbox's C++ kernels use OpenMP, on torch.get_num_threads() threads of the calling thread, handed to them
by the wrapper at each call (Note [Kernel threads] in engine/codegen/cpp/prelude.h); OMP_NUM_THREADS is read
once, when the runtime starts, and sets torch's default. set_threads() therefore does both,
and callers (the CLI) should call it before the first compile of the process: that is why the CLI applies
--threads before loading any model. Without --threads, each case takes the cores the machine has free just
before it (timing.free_threads): a thread on a core another process keeps busy stalls the parallel loops.
"""
from __future__ import annotations

import contextlib
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

from engine import fallbacks
from engine.tools.model_file import ModelSpec, load_model_file, run_eager
from engine.pipeline import compile as glassbox_compile
from engine.run import collect_evidence, verify
from engine.tools.judged_commands import brief
from engine.runtime.timing import Timing, free_threads, interleaved, ratio, timed_in_rounds

SUITE = "suite"  # the CLI's name for the CPU benchmark suite below


def in_fresh_process(case_name: str, timeout_s: float = 300) -> dict:
    """engine/tools/fresh_compile.py's measure(case_name) in a child Python process (same environment: the caller's
    compile cache; Note [Fresh-process warm compile])."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # in a sandboxed worker, builds go over the socket GLASSBOX_BUILDER_FD to the trusted builder
    # (engine/runtime/build.py): the child needs that descriptor too (subprocess closes every other one by default)
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
    """Steady-state milliseconds per call of one runner alone, and its spread: interleaved() with one runner
    (Note [Fair timing] in engine/runtime/timing.py); `threads` must already be set (set_threads)."""
    timing = interleaved({label: lambda: fn(*inputs)}, min_run_time)[label]
    return timing.median_ms, timing.spread_ms


def first_call_seconds(compiled: Callable, inputs: tuple) -> tuple[float, Any]:
    """Seconds from a fresh compiled callable to its first result (that is, the compile), and the result."""
    start = time.perf_counter()
    outputs = compiled(*inputs)
    return time.perf_counter() - start, outputs


def checked(model, inputs: tuple, outputs, tolerance: dict | None, who: str) -> dict:
    """run.verify of one compiler's outputs, its evidence marked as `who`'s (glassbox or inductor), so that a
    sandboxed bench's checks are judged outside the job (Note [Bench and compare judged outside the job] in
    engine/tools/judged_commands.py)."""
    with collect_evidence() as found:
        result = verify(model, inputs, outputs, tolerance)
    for evidence in found:
        evidence.role = who
    return result


def on_device(spec: ModelSpec, device: str) -> tuple[Any, tuple]:
    model, inputs = spec.model, tuple(spec.example_inputs)
    if device == "cpu":
        return model, inputs
    if isinstance(model, nn.Module):
        model = model.to(device)
    return model, tuple(x.to(device) for x in inputs)


def bench(spec: ModelSpec, backend: str = "cpp", threads: int | None = None, device: str = "cpu",
          with_inductor: bool = True, min_run_time: float = 0.5, inductor_cache_dir: str | None = None,
          progress: Callable[[str], None] | None = None, mode: str = "default", templates: str = "auto",
          fresh: bool = True) -> dict:
    """Time `spec`'s model under eager, Glassbox and Inductor. The report:

    name, backend, device, threads      what was measured, with how many threads
    threads_reason, others_cores_before why that many (the cores other processes used before timing)
    mode                                torch.compile's mode, the same for Glassbox and Inductor
    templates                           Glassbox's GEMM templates: auto, on or off (Options.templates)
    eager_ms, glassbox_ms, inductor_ms  steady-state median milliseconds per call
    eager_iqr_ms, glassbox_iqr_ms, ...  their spread: the interquartile range of the rounds
    eager_rounds_ms, ...                every round's ms per call (Note [Fair timing])
    verdicts                            {speedup_vs_eager, inductor_speedup_vs_eager, ratio_vs_inductor:
                                        {ratio, low, high, judged, text}}: judged, or too noisy to judge
    load_avg_1m, cpus, load_warning     the machine's load while measuring (a warning when it skews them)
    others_cores_during                 cores other processes kept busy while timing (steal_cores_during)
    compile_s, compile_warm_s           Glassbox's cold and warm compile-to-first-result seconds
    compile_fresh                       a warm compile in a new process (Note [Fresh-process warm compile]):
                                        {imports_s, first_call_s, ours_s, stages_s}; cpp on the CPU only
    inductor_compile_s                  Inductor's cold compile-to-first-result seconds
    inductor_isa_probe                  whether that compile probed the vector ISAs (Note [Quick bench])
    speedup_vs_eager                    eager_ms / glassbox_ms
    ratio_vs_inductor                   glassbox_ms / inductor_ms (below 1: Glassbox is faster)
    verify                              {"glassbox": {ok, max_abs_err, max_rel_err}, "inductor": {...}}
    inductor_error                      only when torch.compile failed: its exception, in one line
    fallbacks                           graphs that ran eagerly because our compile or first run failed,
                                        "fell back: <stage> stage, <reason>"; then glassbox_ms is eager's
                                        own time and the two ratios are None (Note [A fallback is loud])
    eager_ops                           ops we ran eagerly in compiled graphs, "ran eagerly: <ops> (<reason>)"

    fresh=False skips the fresh-process compile and Inductor's ISA probe (the app's quick bench, Note [Quick
    bench]). with_inductor=False skips
    torch.compile (its keys are then None): Inductor's cold compile takes tens of
    seconds on a small CPU. inductor_cache_dir: a directory to use as TORCHINDUCTOR_CACHE_DIR; default, a fresh
    temporary one. A caller timing several models passes one empty directory for all of them: Inductor's compile
    workers keep the cache directory they started with, so it must outlive the whole session. A model that
    raises when run eagerly raises ModelFileError (pointing at the user's line) before anything is compiled.
    """
    say = progress or (lambda message: None)
    threads, why = choose_threads(threads, device)
    model, inputs = on_device(spec, device)
    report: dict[str, Any] = {
        "name": spec.name, "backend": backend, "device": device, "threads": threads, "mode": mode,
        "templates": templates, **why,
        "eager_ms": None, "glassbox_ms": None, "inductor_ms": None,
        "compile_s": None, "compile_warm_s": None, "compile_fresh": None, "inductor_compile_s": None,
        "speedup_vs_eager": None, "ratio_vs_inductor": None, "verify": {},
    }
    with torch.no_grad(), contextlib.ExitStack() as stack:
        run_eager(dataclasses.replace(spec, model=model, example_inputs=inputs))
        runners: dict[str, Callable[[], Any]] = {"eager": lambda: model(*inputs)}

        # Glassbox: cold, then warm (Note [Cold and warm compiles]); the warm-compiled callable is the one timed.
        cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="glassbox-bench-"))
        stack.enter_context(environment("GLASSBOX_CACHE_DIR", cache))
        say("glassbox compile (cold)")
        torch._dynamo.reset()
        with fallbacks.collected() as eager_runs:  # Note [A fallback is loud]: the row says so
            cold = glassbox_compile(model, backend=backend, device=device, mode=mode, templates=templates)
            report["compile_s"], cold_outputs = first_call_seconds(cold, inputs)
            say("glassbox compile (warm)")
            torch._dynamo.reset()
            compiled = glassbox_compile(model, backend=backend, device=device, mode=mode, templates=templates)
            report["compile_warm_s"], outputs = first_call_seconds(compiled, inputs)
        report["fallbacks"] = list(dict.fromkeys(run.row_text() for run in eager_runs if run.scope == "graph"))
        report["eager_ops"] = list(dict.fromkeys(run.row_text() for run in eager_runs if run.scope == "op"))
        checks = [checked(model, inputs, out, spec.tolerance, "glassbox") for out in (cold_outputs, outputs)]
        report["verify"]["glassbox"] = brief(min(checks, key=lambda c: (c["ok"], -c["max_abs_err"])))
        if fresh and backend == "cpp" and device == "cpu":
            say("glassbox compile (warm, fresh process)")
            report["compile_fresh"] = in_fresh_process(case_key(spec))
        runners["glassbox"] = lambda: compiled(*inputs)

        if with_inductor:  # Dynamo keeps one cache entry per backend: ours and Inductor's live side by side
            try:
                report["inductor_compile_s"], report["verify"]["inductor"], inductor = compile_inductor(
                    spec, model, inputs, stack, inductor_cache_dir, say, mode, probe_isa=fresh)
                report["inductor_isa_probe"] = fresh
                runners["inductor"] = lambda: inductor(*inputs)
            except Exception as error:  # noqa: BLE001 - the reference failing must not discard our numbers
                first_line = (str(error).strip().splitlines() or [""])[0][:300]
                report["inductor_error"] = f"{type(error).__name__}: {first_line}"
        say("timing " + ", ".join(runners) + ", taking turns")
        timings, load = timed_in_rounds(runners, min_run_time, threads, device, why.get("others_cores_before"))
    torch._dynamo.reset()
    report.update(figures(timings))
    if report["fallbacks"]:  # eager's time is not ours: no ratio of ours stands
        report["speedup_vs_eager"] = report["ratio_vs_inductor"] = None
        for key in ("speedup_vs_eager", "ratio_vs_inductor"):
            report["verdicts"].pop(key, None)
    report.update(load)  # load_avg_1m, cpus, others' cores before and during, load_warning
    return report


def choose_threads(threads: int | None, device: str) -> tuple[int, dict]:
    """The thread count to time with, and why: the caller's, else on the CPU the cores the machine has free
    (free_threads, Note [Fair timing]); applied with set_threads."""
    if threads is not None:
        set_threads(threads)
        return threads, {"threads_reason": f"{threads} thread{'s' if threads != 1 else ''}, as asked"}
    if device != "cpu":
        return torch.get_num_threads(), {"threads_reason": "the host's threads launch GPU work"}
    threads, why = free_threads()
    torch.set_num_threads(threads)  # our OpenMP kernels follow the calling thread's count (Note [Threads])
    return threads, why


def figures(timings: dict[str, Timing]) -> dict:
    """A bench report's figures from interleaved timings: each runner's median, spread and rounds, and the two
    ratios with their verdicts (`verdicts`: judged, or too noisy to judge)."""
    out: dict[str, Any] = {"timing_method": "interleaved rounds (Note [Fair timing])"}
    for who, timing in timings.items():
        out[f"{who}_ms"], out[f"{who}_iqr_ms"] = timing.median_ms, timing.spread_ms
        out[f"{who}_rounds_ms"] = timing.rounds_ms
    eager, ours, theirs = (timings.get(who) for who in ("eager", "glassbox", "inductor"))
    out["speedup_vs_eager"] = eager.median_ms / ours.median_ms if eager and ours else None
    out["ratio_vs_inductor"] = ours.median_ms / theirs.median_ms if ours and theirs else None
    out["verdicts"] = {key: verdict for key, verdict in (
        ("speedup_vs_eager", ratio(eager, ours)), ("inductor_speedup_vs_eager", ratio(eager, theirs)),
        ("ratio_vs_inductor", ratio(ours, theirs))) if verdict is not None}
    return out


def share_inductor(report: dict, measured: dict) -> None:
    """A case that skipped torch.compile takes the figures of `measured`, the same model and mode timed in
    this run (bench --templates on,off: one Inductor, several Glassbox rows)."""
    for key in ("inductor_ms", "inductor_iqr_ms", "inductor_compile_s", "inductor_error"):
        if key in measured:
            report[key] = measured[key]
    if "inductor" in measured.get("verify", {}):
        report["verify"]["inductor"] = measured["verify"]["inductor"]
    if report.get("glassbox_ms") and report.get("inductor_ms") and not report.get("fallbacks"):
        report["ratio_vs_inductor"] = report["glassbox_ms"] / report["inductor_ms"]


def compile_inductor(spec: ModelSpec, model, inputs: tuple, stack: contextlib.ExitStack, cache_dir: str | None,
                     say: Callable[[str], None], mode: str = "default",
                     probe_isa: bool = True) -> tuple[float, dict, Callable]:
    """Inductor's cold compile seconds (no FX graph cache, an empty cache directory, both kept for the rest of
    `stack`), its verify summary and its compiled callable, in the same torch.compile mode as ours; without
    `probe_isa`, Inductor takes the CPU's best vector ISA without building a test library per ISA (Note [Quick
    bench])."""
    import torch._inductor.config as inductor_config

    own_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="inductor-bench-", ignore_cleanup_errors=True))
    stack.enter_context(environment("TORCHINDUCTOR_CACHE_DIR", cache_dir or own_dir))
    stack.enter_context(inductor_config.patch(fx_graph_cache=False))
    if not probe_isa:
        stack.enter_context(inductor_config.patch({"cpp.vec_isa_ok": True}))
    say("inductor compile (cold)")
    compiled = torch.compile(model, mode=None if mode == "default" else mode)
    compile_s, outputs = first_call_seconds(compiled, inputs)
    return compile_s, brief(checked(model, inputs, outputs, spec.tolerance, "inductor")), compiled


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
