"""The compiler, top to bottom. Reading this file is reading Glassbox.

    capture    Dynamo traces the model and calls our backend once per graph      (capture.py)
    decompose  AOTAutograd: FX graph -> functional ATen graph                    (decompose.py)
    lower      ATen graph -> loop IR                                             (lowering/)
    schedule   fusion into kernels + memory plan                                 (schedule/)
    codegen    C++ (or Triton) kernels + a Python wrapper                        (codegen/)
    build      compile and load                                                  (build.py)
    run        outputs vs eager; bench: eager vs ours vs Inductor                (run.py)

`compile(model)` is torch.compile with our backend. `explore(model, inputs)` runs the same pipeline once
while recording every stage into an Exploration (record.py).
"""
from __future__ import annotations

import builtins
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import torch

from engine import capture
from engine import codegen
from engine.codegen.wrapper import MeasuredFirstCall, generate_wrapper, strided_view, with_layout
from engine.decompose import aot_compile
from engine.lowering.graph import LoweredGraph, lower
from engine.partition import make_partition_fn
from engine.record import Exploration, GraphRecord
from engine.schedule.fusion import Schedule, schedule
from engine.schedule.memory import MemoryPlan, plan_memory
from engine.schedule.policy import FusionKnobs
from engine.schedule.templates import MODES as TEMPLATE_MODES, TemplateOptions

BACKENDS = ("cpp", "triton")
# torch.compile's modes: "reduce-overhead" replays each graph as a CUDA graph (CUDA only; Note [CUDA graph
# replay] in codegen/triton_build.py), "max-autotune" times a few block sizes per Triton kernel on the GPU.
MODES = ("default", "reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class Options:
    backend: str = "cpp"
    device: str = "cpu"
    dynamic: bool | None = None
    mode: str = "default"
    fusion: bool = True  # what-if knobs (engine compare): fusion off, at most max_fused_nodes IR nodes a kernel
    max_fused_nodes: int | None = None
    templates: str = "auto"  # GEMM templates (Note [GEMM templates]): auto = a heuristic decides, on = forced, off
    train: bool = False  # explore: run a training step (engine/train_verify.py); compile always trains

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.templates not in TEMPLATE_MODES:
            raise ValueError(f"unknown templates {self.templates!r}; choose one of {', '.join(TEMPLATE_MODES)}")
        if self.mode == "reduce-overhead" and not self.device.startswith("cuda"):
            raise ValueError('mode="reduce-overhead" records CUDA graphs: it needs device="cuda"')


@contextmanager
def stage(timings: dict, name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


@dataclass
class CompiledGraph:
    """Everything one graph went through; `call` runs it."""
    lowered: LoweredGraph
    schedule: Schedule
    memory: MemoryPlan
    module: Any
    wrapper: Any
    call: Callable
    cache_hit: bool


def compile_graph(aten_gm: torch.fx.GraphModule, example_inputs, options: Options, timings: dict) -> CompiledGraph:
    backend = codegen.backend_module(options.backend)
    with stage(timings, "lower"):
        lowered = lower(aten_gm, example_inputs, options.device)
    with stage(timings, "schedule"):
        scheduled = schedule(lowered, FusionKnobs(options.fusion, options.max_fused_nodes),
                             TemplateOptions(options.templates, options.backend, options.mode, options.device))
        memory = plan_memory(scheduled.kernels, lowered, size_hints(lowered, example_inputs))
    with stage(timings, "codegen"):
        module = backend.generate_module(scheduled.kernels, lowered.buffers, list(lowered.size_vars))
        if options.mode == "max-autotune":
            module.autotune = True  # read by the Triton backend's launch_text and load_kernels
        launches = {k.name: module.launch_text(k) for k in module.kernels}
        wrapper = generate_wrapper(lowered, scheduled.kernels, memory, launches)
    with stage(timings, "build"):
        namespace = wrapper_namespace(wrapper)
        cache_hit = backend.load_kernels(module, namespace, options.device)
        call = load_wrapper(wrapper, namespace)
        if options.mode == "reduce-overhead":
            from engine.codegen.triton_build import CudaGraphCall
            call = CudaGraphCall(call)
    return CompiledGraph(lowered, scheduled, memory, module, wrapper, call, cache_hit)


def wrapper_namespace(wrapper) -> dict[str, Any]:
    namespace: dict[str, Any] = {"torch": torch, "empty_strided": torch.empty_strided,
                                 "with_layout": with_layout, "strided_view": strided_view}
    namespace.update(wrapper.constants)
    return namespace


def load_wrapper(wrapper, namespace: dict) -> Callable:
    exec(builtins.compile(wrapper.source, "<glassbox wrapper>", "exec"), namespace)
    call = namespace["call"]
    call._boxed_call = True  # AOTAutograd passes a list and lets us free its items early
    return call


def size_hints(lowered: LoweredGraph, example_inputs) -> dict:
    """Concrete values of the size symbols for the example inputs (for byte counts and the memory plan)."""
    hints = {}
    for symbol, (position, dim) in lowered.size_vars.items():
        value = example_inputs[position]
        value = value.shape[dim] if dim is not None else value
        node = getattr(value, "node", None)
        hint = getattr(node, "hint", None) if node is not None else value
        if hint is None and node is not None:
            hint = node.shape_env.size_hint(node.expr)
        if hint is not None:
            hints[symbol] = int(hint)
    return hints


def make_backend(options: Options, exploration: Exploration | None = None, profiler=None) -> Callable:
    """A Dynamo backend: FX graph -> (AOTAutograd) -> our compiler. Records into `exploration` if given;
    a `profiler` (engine/profile.py) keeps each graph to time its kernels after the run."""

    def backend(gm: torch.fx.GraphModule, example_inputs):
        graph_record = None
        if exploration is not None:
            graph_record = GraphRecord(index=-1)  # numbered when it joins the record
            graph_record.fx = records_fx(gm)

        def compiler(phase: str) -> Callable:
            def compile_phase(aten_gm: torch.fx.GraphModule, aten_inputs):
                record = graph_record
                if record is not None and phase == "backward":  # its own graph, compiled on first backward
                    record = GraphRecord(index=-1, fx=graph_record.fx)
                timings = record.timings if record is not None else {}
                compiled = compile_graph(aten_gm, aten_inputs, options, timings)
                if record is not None:
                    from engine.report import fill_graph_record
                    record.phase = phase
                    hints = size_hints(compiled.lowered, aten_inputs)
                    fill_graph_record(record, gm, aten_gm, compiled, hints)
                    if phase == "backward":
                        backward_records.append(record)
                        if graph_record.index >= 0:  # else (dynamic shapes: compiled at once) after the forward
                            add_backward_records()
                    call = profiler.watch(record, compiled, hints) if profiler is not None else compiled.call
                    overhead = record.code.setdefault("overhead", {})  # Note [Wrapper overhead]
                    return MeasuredFirstCall(call, compiled.call, [k.name for k in compiled.module.kernels], overhead)
                return compiled.call

            return compile_phase

        backward_records: list[GraphRecord] = []

        def add_backward_records() -> None:
            while backward_records:
                record = backward_records.pop(0)
                record.index, record.partition = len(exploration.graphs), {"forward_graph": graph_record.index}
                exploration.graphs.append(record)

        def on_partition(partition: dict) -> None:
            if graph_record is not None:
                graph_record.partition = partition

        start = time.perf_counter()
        compiled_fn = aot_compile(gm, example_inputs, compiler("forward"), compiler("backward"),
                                  make_partition_fn(on_partition), compiler("inference"))
        if graph_record is not None:
            inner = sum(graph_record.timings.values())
            graph_record.timings["decompose"] = time.perf_counter() - start - inner
            # Note [Restarted analysis]: Dynamo may abandon a graph by raising from inside its backend
            # (RestartAnalysis: AOTAutograd turned a float input into a tensor, say) and trace the frame again,
            # which calls the backend anew. Only a graph that compiled joins the record; time spent on an
            # abandoned one counts as capture.
            graph_record.index = len(exploration.graphs)
            exploration.graphs.append(graph_record)
            add_backward_records()
        return compiled_fn

    return backend


def records_fx(gm: torch.fx.GraphModule) -> list[dict]:
    from engine.report import fx_nodes
    return fx_nodes(gm)


def compile(model: Callable, backend: str = "cpp", device: str = "cpu", dynamic: bool | None = None,
            mode: str = "default", templates: str = "auto") -> Callable:
    """Like torch.compile(model, mode=mode), with Glassbox as the backend."""
    return capture.dynamo_compile(model, make_backend(Options(backend, device, dynamic, mode, templates=templates)), None,
                                  dynamic)


def explore(model: Callable, example_inputs, backend: str = "cpp", device: str = "cpu",
            dynamic: bool | None = None, dynamic_inputs=(), name: str = "model", source: dict | None = None,
            description: str = "", tolerance: dict | None = None, profile: bool = False, mode: str = "default",
            fusion: bool = True, max_fused_nodes: int | None = None, templates: str = "auto", train: bool = False,
            loss_fn: Callable | None = None) -> Exploration:
    """Run the whole pipeline once on `example_inputs`, recording every stage. With `profile`, each kernel is
    then timed (engine/profile.py: time_ms, gbps, flops per kernel). With `train`, the run is a training step:
    loss (`loss_fn(output, *inputs)` or the sum of the floating outputs) and backward, and the record holds
    forward and backward graphs and the partition (Note [Training step] in train_verify.py)."""
    from engine import run
    from engine.profile import Profiler

    options = Options(backend, device, dynamic, mode, fusion, max_fused_nodes, templates, train=train)
    exploration = Exploration(model=name, backend=backend, device=device, source=source or {},
                              description=description, options={"dynamic": dynamic, "mode": mode, "fusion": fusion,
                                                                "max_fused_nodes": max_fused_nodes,
                                                                "templates": templates, "train": train})
    capture.reset()
    unimplemented_before = torch._dynamo.utils.counters["unimplemented"].copy()  # frames Dynamo will skip
    log = capture.CaptureLog()
    profiler = Profiler(device) if profile else None
    inputs = tuple(example_inputs)
    step = None
    if train:
        from engine.train_verify import TrainingStep
        step = TrainingStep(model, inputs, loss_fn)  # compiles a copy: the eager reference starts where it did
    compiled = capture.dynamo_compile(step.model if step else model, make_backend(options, exploration, profiler), log,
                                      dynamic)
    exploration.inputs = capture.describe_inputs(inputs)
    log.begin_call(exploration.inputs)
    start = time.perf_counter()
    if step is not None:
        step.run(compiled)  # forward, loss, backward: the backward graphs compile on their first use
    else:
        with torch.no_grad():
            outputs = compiled(*run.fresh(inputs))  # a model may mutate its inputs: keep the originals for eager
    total = time.perf_counter() - start
    for graph in exploration.graphs:
        for stage_name, seconds in graph.timings.items():
            exploration.add_time(stage_name, seconds)
    exploration.timings = {"capture": max(total - sum(exploration.timings.values()), 0.0), **exploration.timings}
    with stage(exploration.timings, "run"):
        exploration.verify = step.verify(tolerance) if step else run.verify(model, inputs, outputs, tolerance)
    if profiler is not None:
        with stage(exploration.timings, "profile"):
            profiler.measure(exploration)
    for extra in dynamic_inputs:
        extra = tuple(extra)
        log.begin_call(capture.describe_inputs(extra))
        graphs_before = len(exploration.graphs)
        try:
            with torch.no_grad():
                extra_outputs = compiled(*run.fresh(extra))
            result = run.verify(model, extra, extra_outputs, tolerance)
        except Exception as error:  # one failing input set is reported; the exploration stands
            exploration.errors.append({"stage": "run", "inputs": log.current_inputs,
                                       "message": f"{type(error).__name__}: {root_cause(error)}"})
            continue
        exploration.runs.append({"inputs": log.current_inputs,
                                 "new_graphs": len(exploration.graphs) - graphs_before, "verify": result})
    log.finish()
    exploration.graph_breaks = [vars(b) for b in log.graph_breaks]
    exploration.guards = list(log.guards)
    exploration.recompiles = [vars(r) for r in log.recompiles]
    for skipped in log.gave_up:
        exploration.errors.append({
            "stage": "capture", "inputs": skipped.inputs,
            "message": f"Dynamo reached its recompile limit (torch._dynamo.config.recompile_limit) with "
                       f"{len(skipped.failed_guards)} compiled versions of {skipped.function}: it runs it "
                       f"eagerly from now on, without a graph. It would have recompiled because: {skipped.reason}"})
    if not exploration.graphs and not exploration.graph_breaks:
        skipped_frames = torch._dynamo.utils.counters["unimplemented"] - unimplemented_before
        why = "; ".join(reason.splitlines()[0] for reason in skipped_frames) or "it found no tensor work to compile"
        exploration.errors.append({"stage": "capture", "inputs": exploration.inputs,
                                   "message": f"Dynamo captured no graph, so the model ran eagerly: {why}"})
    return exploration


def compile_reference(model: Callable, dynamic: bool | None = None) -> Callable:
    """torch.compile with every graph executed by the IR reference evaluator: checks lowering alone."""
    from engine.ir.evaluator import evaluate_graph

    def backend(gm, example_inputs):
        def fw_compiler(aten_gm, aten_inputs):
            lowered = lower(aten_gm, aten_inputs, "cpu")

            def call(args):
                outputs = evaluate_graph(lowered, list(args))
                args.clear()
                return outputs

            call._boxed_call = True
            return call

        return aot_compile(gm, example_inputs, fw_compiler)

    return capture.dynamo_compile(model, backend, None, dynamic)


def root_cause(error: BaseException) -> BaseException:
    """The innermost cause: Dynamo wraps a backend's exception in BackendCompilerFailed."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error
