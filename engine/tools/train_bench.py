"""Time a training step side by side in one process: eager, Glassbox (engine.compile) and Inductor
(torch.compile). `python -m engine bench SAMPLE --train`, the app's bench of a training exploration, and
`python -m engine bench train` (the GPU cases) all measure through bench_train().

Note [Training-step bench]
A step is: gradients cleared, forward, loss (the model file's `loss_fn(output, *inputs)`, or the sum of the
floating outputs in float32: train_verify.default_loss), backward. It trains the parameters; a model without
trainable parameters (a plain function) gets its floating inputs differentiated instead, or there would be no
backward to time. Each compiler gets its own copy of the model, so every step starts from the same weights.
Before timing, each compiled step's loss and every parameter's gradient are compared with an eager step's:
the largest error relative to that tensor's largest eager value (`verify[who].max_rel_err`; ok below 1e-3 in
float32, 5e-2 in half precision, where a gradient summed over thousands of products differs by rounding;
judge_step in engine/tools/step_verdict.py, which judges a sandboxed bench's steps outside the job; a step
that fails it is judged again with eager's own spread: Note [Eager's own spread] in engine/eager_spread.py).
Activation memory (`saved_bytes`) is what the forward keeps for the backward: every tensor autograd saves
during the forward (torch.autograd.graph.saved_tensors_hooks sees what a compiled graph's partition saves as
well as eager's own saves), each storage once, parameters, buffers and inputs left out (they are alive
anyway). So eager's figure is autograd's own choice, ours is engine/partition.py's, Inductor's its min-cut's.
"""
from __future__ import annotations

import copy
import functools
import math
import tempfile
import time
from typing import Any, Callable

import torch
from torch import nn

from engine import shadow64
from engine.pipeline import compile as glassbox_compile
from engine.run import evidence_collectors
from engine.runtime.timing import load_summary, timed_in_rounds
from engine.tools.bench import choose_threads, environment, figures, on_device
from engine.tools.model_file import ModelSpec
from engine.eager_spread import nudge_
from engine.tools.step_verdict import StepEvidence, judge_step
from engine.train_verify import default_loss

Measure = Callable[[Callable[[], Any]], tuple[float, float]]  # a step -> (median ms, interquartile range ms)


def step(fn: Callable, model, inputs: tuple, loss_fn: Callable | None = None) -> torch.Tensor:
    """One training step of `fn` (Note [Training-step bench]); the loss, detached."""
    for tensor in _trained(model, inputs):
        tensor.grad = None
    output = fn(*inputs)
    loss = (loss_fn or default_loss)(output, *inputs)
    loss.backward()
    return loss.detach()


def _trained(model, inputs: tuple) -> list[torch.Tensor]:
    """The tensors a step differentiates: the trainable parameters, else the inputs that require grad."""
    params = [p for p in model.parameters() if p.requires_grad] if isinstance(model, nn.Module) else []
    return params or [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]


def prepare_inputs(model, inputs: tuple) -> tuple:
    """Inputs as a step gets them: differentiated only when the model has no trainable parameters."""
    if isinstance(model, nn.Module) and any(p.requires_grad for p in model.parameters()):
        return inputs
    return tuple(x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point()
                 else x for x in inputs)


def saved_activation_bytes(fn: Callable, model, inputs: tuple, loss_fn: Callable | None = None) -> int:
    """Note [Training-step bench]: bytes autograd keeps for the backward, each storage once."""
    alive = set()
    if isinstance(model, nn.Module):
        alive |= {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    alive |= {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in alive:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = fn(*inputs)
        loss = (loss_fn or default_loss)(output, *inputs)
    loss.backward()
    for tensor in _trained(model, inputs):
        tensor.grad = None
    return sum(storages.values())


def bench_train(spec: ModelSpec, backend: str = "cpp", threads: int | None = None, device: str = "cpu",
                with_inductor: bool = True, min_run_time: float = 0.5, inductor_cache_dir: str | None = None,
                progress: Callable[[str], None] | None = None, mode: str = "default",
                measure: Measure | None = None, templates: str = "auto", layout: str = "auto",
                profile: Callable[[str, Callable[[], Any]], None] | None = None) -> dict:
    """Time a training step of `spec`'s model under eager, Glassbox and Inductor. The report has bench()'s keys
    (eager_ms, glassbox_ms, inductor_ms and their *_iqr_ms, speedup_vs_eager = eager_ms / glassbox_ms,
    ratio_vs_inductor = glassbox_ms / inductor_ms, compile_s and inductor_compile_s: the first step's seconds,
    verify per compiler, the machine's load, templates, layout) and `train: true`, `saved_bytes` {eager, glassbox,
    inductor}.
    Steps are timed taking turns in rounds (Note [Fair timing] in engine/runtime/timing.py), or by `measure({who: step}) -> {who: (median ms, spread ms)}`
    if given (`bench train` passes its GPU timing: Note [Fair GPU timing] in engine/runtime/timing.py).
    After timing, `profile(who, step)` is called for each compiled step, while Inductor's cache directory still
    exists (`bench train --profile`)."""
    import torch._inductor.config as inductor_config

    say = progress or (lambda message: None)
    threads, why = choose_threads(threads, device)
    model, inputs = on_device(spec, device)
    if isinstance(model, nn.Module):
        model.train()
    inputs = prepare_inputs(model, inputs)
    report: dict[str, Any] = {
        "name": spec.name, "backend": backend, "device": device, "threads": threads, "mode": mode, "train": True,
        "templates": templates, "layout": layout, **why,
        "eager_ms": None, "glassbox_ms": None, "inductor_ms": None, "compile_s": None, "inductor_compile_s": None,
        "speedup_vs_eager": None, "ratio_vs_inductor": None, "verify": {}, "saved_bytes": {},
    }
    say("eager step")
    expected = _eager_step(model, inputs, spec)
    eager_runs = functools.cache(lambda: _eager_repeats(model, inputs, spec, device))  # taken when needed
    compilers = {"eager": lambda m: m,
                 "glassbox": lambda m: glassbox_compile(m, backend=backend, device=device, mode=mode,
                                                        templates=templates, layout=layout)}
    if with_inductor:
        compilers["inductor"] = lambda m: torch.compile(m, mode=None if mode == "default" else mode)
    steps = {}
    with tempfile.TemporaryDirectory(prefix="inductor-bench-", ignore_cleanup_errors=True) as own_dir, \
            environment("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir or own_dir), \
            inductor_config.patch(fx_graph_cache=False):
        # Dynamo keeps one cache entry per backend (its guards check the backend), so the three live side by side
        for who, make in compilers.items():
            try:
                steps[who] = _compiled_step(who, make, model, inputs, spec, report, say, expected, eager_runs)
            except Exception as error:  # noqa: BLE001 - Inductor failing must not discard our numbers
                if who != "inductor":
                    raise
                first_line = (str(error).strip().splitlines() or [""])[0][:300]
                report["inductor_error"] = f"{type(error).__name__}: {first_line}"
        say("timing the steps, taking turns" if measure is None else "timing the steps")
        if measure is None:  # Note [Fair timing]: rounds taking turns, with their spread and verdicts
            timings, load = timed_in_rounds({who: s[0] for who, s in steps.items()}, min_run_time, threads,
                                            device, why.get("others_cores_before"))
            report.update(figures(timings))
        else:
            load = load_summary(why.get("others_cores_before"), {}, threads)
            for who, (median, spread) in measure({who: s[0] for who, s in steps.items()}).items():
                report[f"{who}_ms"], report[f"{who}_iqr_ms"] = median, spread
        for who in steps:
            report["saved_bytes"][who] = steps[who][1]()
        for who, (fn, _) in steps.items():
            if profile is not None and who != "eager":
                profile(who, fn)
    torch._dynamo.reset()
    report["speedup_vs_eager"] = report["eager_ms"] / report["glassbox_ms"]
    if report.get("inductor_ms"):
        report["ratio_vs_inductor"] = report["glassbox_ms"] / report["inductor_ms"]
    report.update(load)  # load_avg_1m, cpus, others' cores before and during, load_warning
    return report


def _eager_step(model, inputs: tuple, spec: ModelSpec) -> tuple[list, torch.Tensor, list]:
    """An eager step on a copy, under the float64 shadow (Note [Float64 shadow] in engine/shadow64.py): its
    gradients, its loss, and their float64 values [(name, tensor)] for judge_step (none where the shadow
    failed: the check is then against eager alone)."""
    mode = shadow64.Float64Shadow()
    reference, ref_inputs = _own_copy(model, inputs)
    try:
        with mode:
            loss = step(reference, reference, ref_inputs, spec.loss_fn)
    except Exception:  # noqa: BLE001 - the model raised only under the shadow: eager alone
        mode = None
        reference, ref_inputs = _own_copy(model, inputs)
        loss = step(reference, reference, ref_inputs, spec.loss_fn)
    gradients = [t.grad for t in _trained(reference, ref_inputs)]
    fp64 = [] if mode is None else [(name, mode.shadow_of(t)) for name, t in _step_tensors(gradients, loss)
                                    if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return gradients, loss, fp64


def _eager_repeats(model, inputs: tuple, spec: ModelSpec, device: str) -> tuple[list, list]:
    """Note [Eager's own spread] (engine/eager_spread.py): eager's step rerun as it was, and repeated with
    every floating input and parameter one ulp up, then down, and on the CPU with one more thread; each its loss
    and gradients as the check names them."""
    rerun = _repeat(model, inputs, spec)
    repeats = [_repeat(model, inputs, spec, toward) for toward in (math.inf, -math.inf)]
    if device == "cpu":
        threads = torch.get_num_threads()
        torch.set_num_threads(threads + 1)  # another split of each parallel sum
        try:
            repeats.append(_repeat(model, inputs, spec))
        finally:
            torch.set_num_threads(threads)
    return rerun, repeats


def _repeat(model, inputs: tuple, spec: ModelSpec, toward: float | None = None) -> list:
    """An eager step on a copy, its floating inputs and parameters moved one ulp `toward` if given."""
    own, own_inputs = _own_copy(model, inputs)
    if toward is not None:
        floating = list(own.parameters()) if isinstance(own, nn.Module) else []
        floating += [x for x in own_inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
        nudge_(floating, toward)
    loss = step(own, own, own_inputs, spec.loss_fn)
    return _step_tensors([t.grad for t in _trained(own, own_inputs)], loss)


def _judged(evidence: StepEvidence, eager_runs: Callable[[], tuple[list, list]]) -> dict:
    """judge_step, and where the step fails it, again with eager's rerun and repeats (Note [Eager's own spread]:
    four eager steps, taken only then); the evidence goes to the collectors as judged."""
    result = judge_step(evidence)
    if not result["ok"]:
        evidence.rerun, evidence.repeats = eager_runs()
        result = judge_step(evidence)
    for collector in evidence_collectors():
        collector.append(evidence)
    return result


def _step_tensors(gradients: list, loss) -> list:
    """A step's loss and gradients by the names its check gives them."""
    return [("loss", loss)] + [(f"gradient[{n}]", g) for n, g in enumerate(gradients)]


def _own_copy(model, inputs: tuple) -> tuple[Any, tuple]:
    own = copy.deepcopy(model) if isinstance(model, nn.Module) else model
    return own, tuple(x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                      for x in inputs)


def _compiled_step(who: str, make: Callable, model, inputs: tuple, spec: ModelSpec, report: dict,
                   say: Callable[[str], None], expected: tuple,
                   eager_runs: Callable[[], tuple[list, list]]) -> tuple[Callable, Callable]:
    """Compile one compiler's copy (its first step) and check its gradients: (its step, its saved bytes)."""
    own, own_inputs = _own_copy(model, inputs)
    fn = make(own)
    if who != "eager":
        say(f"{who} compile (first step)")
    start = time.perf_counter()
    step(fn, own, own_inputs, spec.loss_fn)
    if who != "eager":
        report["compile_s" if who == "glassbox" else "inductor_compile_s"] = time.perf_counter() - start
        step(fn, own, own_inputs, spec.loss_fn)  # a second step: CUDA graphs record on a later call
        loss = step(fn, own, own_inputs, spec.loss_fn)
        # the check as data too, for a judge outside a sandboxed job (Note [Bench and compare judged outside the job])
        gradients, eager_loss, fp64 = expected
        evidence = StepEvidence(_step_tensors(gradients, eager_loss),
                                _step_tensors([t.grad for t in _trained(own, own_inputs)], loss), who, fp64)
        report["verify"][who] = _judged(evidence, eager_runs)
    return (lambda: step(fn, own, own_inputs, spec.loss_fn),
            lambda: saved_activation_bytes(fn, own, own_inputs, spec.loss_fn))
