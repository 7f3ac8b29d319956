"""The compiler, top to bottom. Reading STAGES is reading Glassbox.

`compile(model)` is torch.compile with our backend. `explore(model, inputs)` runs the same stages once while
recording every artifact into an Exploration (record.py; report.py turns artifacts into record entries).

Note [Stages and the runner]
Each stage is `fn(artifact, options) -> artifact`, listed once, in order, in STAGES. Dynamo and AOTAutograd
drive the first two by callbacks: the capture stage runs the model's first call, during which Dynamo calls our
backend once per graph it captured (that backend runs the decompose stage), and AOTAutograd calls its forward
compiler once per graph (which runs lower, schedule, codegen and build). So an artifact that leads to nested
stages carries the callback for them (Program.compile_fx, FxGraph.compile_aten), and one runner (Compilation.run)
runs every stage the same way: it times the stage's own wall time, excluding the stages it called (measured
directly, a stack of clocks, not a total minus the others), adds it to the record and to `on_stage`.

Note [Compiling outside the fake mode]
AOTAutograd calls its compilers while its FakeTensorMode is still the active dispatch mode, so any tensor our
compile makes (a constant moved to the kernels' device, a workspace, a padded weight) would come out fake and
the first call would die on "Cannot access data pointer of Tensor (e.g. FakeTensor)": every CPU constant a GPU
kernel read sent the whole graph to eager (torchvision Swin-T, Hugging Face DeBERTa-v2). Our compile needs the
fake inputs' metadata, never the mode, so lower..build run with the mode unset, as real code.

Note [Internal failure falls back to eager]
An exception inside our own compile of a graph (AOTAutograd's trace with our decompositions, rewrite, lower,
schedule, codegen, build, or writing its record), or in our compiled call on its first run, is our bug, never
the user's: the graph runs its ATen graph eagerly instead (Dynamo's graph, when the trace itself failed), the
record says so (GraphRecord.fallback, and an error of kind "fallback" with the stage, the exception type and its
message) and the model still returns eager's results. Errors in the model itself surface before any of that (the
CLI runs it eagerly first), and Dynamo's own failures stay Dynamo's.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from engine import call_time, capture, codegen, fallbacks, report, rewrite
from engine.runtime import spans
from engine import run as run_module
from engine.codegen.wrapper import WrapperSource, generate_wrapper
from engine.decompose import aot_compile, lift_input_writes, static_inputs, trace_forward, will_train
from engine.ir import derived
from engine.ir.graph import LoweredGraph
from engine.lowering.graph import lower
from engine.lowering.layout import handed_over_strides
from engine.partition import make_partition_fn, partition_policy, report_saved_strides, restride_saved_inputs
from engine.reproducer import fill_repro
from engine.verdict import verify_record
from engine.options import BACKENDS, MODES, TEMPLATE_MODES, Options  # noqa: F401 - the public names
from engine.record import (STAGE_NAMES, ErrorRecord, Exploration, FallbackRecord, GraphBreakRecord,
                           GraphRecord, InputSpec, PartitionRecord, RecompileRecord, RewriteRecord, RunRecord,
                           SourceFile)
from engine.runtime.cuda_graphs import CudaGraphCall, replay_policy, replays_cuda_graphs
from engine.runtime.load import load_kernels
from engine.runtime.wrapper import (FirstRunGuard, MeasuredFirstCall, WriteBack, eager_call, load_wrapper,
                                    wrapper_namespace)
from engine.schedule.fusion import Schedule, schedule
from engine.schedule.memory import MemoryPlan, plan_memory
from engine.schedule.policy import FusionKnobs
from engine.schedule.split import split_reductions
from engine.schedule.templates import TemplateOptions


# --- the artifacts, in stage order --------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """What the user gave: the model and one set of inputs. compile_fx is our Dynamo backend."""
    model: Callable
    inputs: tuple
    log: capture.CaptureLog
    compile_fx: Callable  # (fx GraphModule, example inputs) -> callable: runs "decompose" on each graph
    tolerance: dict | None = None
    step: Any = None  # train_verify.TrainingStep: the run is a training step of its copy of the model


@dataclass(frozen=True)
class Captured:
    """The model wrapped by Dynamo, after its first call (every graph of that call compiled)."""
    program: Program
    compiled: Callable
    outputs: Any


@dataclass(frozen=True)
class FxGraph:
    """One graph Dynamo captured. compile_aten(phase) is AOTAutograd's compiler for that phase (inference,
    forward, backward): it runs lower..build; partition_fn splits a joint graph (partition.py)."""
    gm: torch.fx.GraphModule
    example_inputs: list
    compile_aten: Callable[[str], Callable]  # phase -> ((ATen GraphModule, fake inputs) -> callable)
    partition_fn: Callable
    # a training graph's before-joint rewrites (Note [Where rewrites run]): forward ATen graph -> the graph
    # AOTAutograd traces the joint from
    rewrite_forward: Callable[[torch.fx.GraphModule, list], torch.fx.GraphModule] | None = None
    # told when AOTAutograd could not trace the joint graph from the rewritten forward, so the graph was traced
    # from Dynamo's graph instead (Note [Where rewrites run])
    unrewritten: Callable[[Exception], None] | None = None


@dataclass(frozen=True)
class AtenGraph:
    gm: torch.fx.GraphModule
    example_inputs: list
    phase: str = "inference"  # inference | forward | backward
    static_inputs: frozenset[int] | None = None  # parameters and buffers (decompose.static_inputs)
    fx_names: frozenset[str] = frozenset()  # Dynamo's graph's node names (the rewrites' fx_origins)
    before_joint: bool = False  # a training graph's forward, rewritten before AOTAutograd traces the joint
    rewrites: tuple = ()  # what the rewrite stage did: rewrite.Outcome per match and refusal
    before: torch.fx.GraphModule | None = None  # the graph before the rewrites, when one applied
    real_inputs: list | None = None  # Dynamo's example inputs (real tensors): the values freezing bakes in


@dataclass(frozen=True)
class Lowered:
    aten: AtenGraph
    graph: LoweredGraph


@dataclass(frozen=True)
class Scheduled:
    lowered: Lowered
    schedule: Schedule
    memory: MemoryPlan


@dataclass(frozen=True)
class Generated:
    scheduled: Scheduled
    module: Any  # the backend's module: .source, .kernels, .line_kernel, .language, .launch_text(kernel)
    wrapper: WrapperSource


@dataclass
class CompiledGraph:
    """Everything one graph went through; `call` runs it."""
    lowered: LoweredGraph
    schedule: Schedule
    memory: MemoryPlan
    module: Any
    wrapper: WrapperSource
    call: Callable
    cache_hit: bool


# --- the stages -----------------------------------------------------------------------------------------------


def capture_stage(program: Program, options: Options) -> Captured:
    """Dynamo traces the model's first call (in training: forward, loss and backward, whose graphs compile on
    their first use); every graph it captures goes to program.compile_fx."""
    step = program.step
    compiled = capture.dynamo_compile(step.model if step else program.model, program.compile_fx, program.log,
                                      options.dynamic)
    if step is not None:
        step.run(compiled)
        return Captured(program, compiled, None)
    with torch.no_grad():
        outputs = compiled(*run_module.fresh(program.inputs))  # a model may mutate its inputs: eager needs them
    return Captured(program, compiled, outputs)


def rewrite_passes(options: Options) -> tuple[str, ...]:
    """The graph rewrites that run under `options` (engine.rewrite.resolve; a ValueError names the passes)."""
    return rewrite.resolve(options.rewrites, options.freezing)


def decompose_stage(fx: FxGraph, options: Options) -> Callable:
    """AOTAutograd: FX graph -> functional ATen graph(s), handed to fx.compile_aten; returns the graph's callable.
    A graph that will train gets its before-joint rewrites first (Note [Where rewrites run])."""
    def traced(gm: torch.fx.GraphModule) -> Callable:
        return aot_compile(gm, fx.example_inputs, fx.compile_aten("forward"), fx.compile_aten("backward"),
                           fx.partition_fn, fx.compile_aten("inference"))

    if fx.rewrite_forward is not None and will_train(fx.example_inputs) and \
            any(rewrite.REWRITES[name].before_joint for name in rewrite_passes(options)):
        rewritten = fx.rewrite_forward(fx.gm, fx.example_inputs)
        if rewritten is not fx.gm:
            try:
                return traced(rewritten)
            except torch._dynamo.exc.TorchDynamoException:
                raise
            except Exception as error:  # an op of the functional forward autograd cannot differentiate
                if fx.unrewritten is not None:
                    fx.unrewritten(error)
    return traced(fx.gm)


def rewrite_stage(aten: AtenGraph, options: Options) -> AtenGraph:
    """The graph rewrites (engine/rewrite/, Note [Rewrite stage]) on a copy of the ATen graph: an inference graph
    gets every pass; a training graph's before-joint passes ran on its forward before AOTAutograd traced the
    joint (Note [Where rewrites run]), so its forward and backward get the others."""
    passes = rewrite_passes(options)
    if aten.before_joint:
        chosen = [name for name in passes if rewrite.REWRITES[name].before_joint]
    elif aten.phase == "inference":
        chosen = list(passes)
    else:
        chosen = [name for name in passes if not rewrite.REWRITES[name].before_joint]
    if not chosen:
        return aten
    gm = copy_graph_module(aten.gm)
    if aten.phase != "inference":  # Note [Freezing]: inference only (a training graph's weights move)
        chosen = [name for name in chosen if not rewrite.REWRITES[name].needs_freezing]
    graph = rewrite.run_rewrites(rewrite.RewriteGraph(gm, aten.phase, options.device, aten.phase != "inference",
                                                      set(aten.fx_names), aten.real_inputs, aten.static_inputs),
                                 chosen)
    applied = any(outcome.applied for outcome in graph.outcomes)
    return replace(aten, gm=gm if applied else aten.gm, rewrites=tuple(graph.outcomes),
                   before=aten.gm if applied else None)


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy a pass may edit: new nodes (their meta dicts copied, the values in them shared), same attributes."""
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    return torch.fx.GraphModule(gm, graph)


def lower_stage(aten: AtenGraph, options: Options) -> Lowered:
    return Lowered(aten, lower(aten.gm, options.device, options.layout, aten.phase))


def schedule_stage(lowered: Lowered, options: Options) -> Scheduled:
    graph = lowered.graph
    with spans.span("fusion"):  # Note [Compile trace]: the passes of a stage, timed
        scheduled = schedule(graph, FusionKnobs(options.fusion, options.max_fused_nodes),
                             TemplateOptions(options.templates, options.backend, options.mode, options.device))
    with spans.span("split reductions"):
        scheduled, graph = split_reductions(scheduled, graph, options.backend)  # may add workspace buffers
    with spans.span("memory plan"):
        memory = plan_memory(scheduled.kernels, graph, size_hints(graph, lowered.aten.example_inputs),
                             in_place=options.backend == "triton" and options.mode != "max-autotune")
    # (Note [In-place epilogues]; max-autotune times a kernel by running it repeatedly on its real arguments)
    return Scheduled(Lowered(lowered.aten, graph), scheduled, memory)


def codegen_stage(scheduled: Scheduled, options: Options) -> Generated:
    graph = scheduled.lowered.graph
    backend = codegen.backend(options.backend)
    with spans.span("kernels") as kernels_span:
        module = backend.generate_module(scheduled.schedule.kernels, graph.buffers, graph.size_symbols(),
                                         mode=options.mode)
        kernels_span["args"]["kernels"] = len(module.kernels)
    with spans.span("wrapper"):
        launches = {k.name: module.launch_text(k) for k in module.kernels}
        wrapper = generate_wrapper(graph, scheduled.schedule.kernels, scheduled.memory, launches,
                                   prologue=list(module.call_prologue))
    return Generated(scheduled, module, wrapper)


def build_stage(generated: Generated, options: Options) -> CompiledGraph:
    scheduled = generated.scheduled
    namespace = wrapper_namespace(generated.wrapper)
    module = generated.module
    with spans.span("compile and load kernels", language=module.language, kernels=len(module.kernels)) as built:
        cache_hit = load_kernels(module, namespace, options.device)
    built["args"].update(spans.build_cost(module.language, module.source, cache_hit, built.get("dur_s", 0.0)))
    with spans.span("load wrapper"):
        call = load_wrapper(generated.wrapper, namespace)
    lowered = scheduled.lowered.graph
    host = lowered.host_nodes()
    if replays_cuda_graphs(options.mode, options.backend, options.device) and host and lowered.host_reads_inputs:
        # a replay would not rerun the CPU work (Note [Host work under CUDA graphs]): launched plainly
        built["args"]["no replay"] = (f"computes {', '.join(host)} on the CPU from the inputs, which a CUDA graph "
                                      "does not replay")
    elif replays_cuda_graphs(options.mode, options.backend, options.device):  # Note [CUDA graph replay]
        aten = scheduled.lowered.aten
        call = CudaGraphCall(call, lowered.key_positions(),
                             replay_policy(aten.phase, options.mode), static_inputs=aten.static_inputs,
                             host_outputs=bool(host))
    return CompiledGraph(scheduled.lowered.graph, scheduled.schedule, scheduled.memory, generated.module,
                         generated.wrapper, call, cache_hit)


def run_stage(captured: Captured, options: Options) -> dict:
    """Outputs (in training: loss, gradients, buffers) vs eager (run.py, Note [Tolerance policy])."""
    program = captured.program
    if program.step is not None:
        return program.step.verify(program.tolerance)
    return run_module.verify(program.model, program.inputs, captured.outputs, program.tolerance)


@dataclass(frozen=True)
class Stage:
    name: str
    fn: Callable[[Any, Options], Any]


STAGES = [
    Stage("capture", capture_stage),      # Program -> Captured         Dynamo; each graph -> decompose
    Stage("decompose", decompose_stage),  # FxGraph -> callable         AOTAutograd; the forward graph -> rewrite
    Stage("rewrite", rewrite_stage),      # AtenGraph -> AtenGraph      named passes: attention, ... (rewrite/)
    Stage("lower", lower_stage),          # AtenGraph -> Lowered        loop IR (lowering/)
    Stage("schedule", schedule_stage),    # Lowered -> Scheduled        fusion + memory plan (schedule/)
    Stage("codegen", codegen_stage),      # Scheduled -> Generated      kernels + wrapper (codegen/)
    Stage("build", build_stage),          # Generated -> CompiledGraph  compile and load (runtime/)
    Stage("run", run_stage),              # Captured -> verify          outputs vs eager (run.py)
]
GRAPH_STAGES = ("rewrite", "lower", "schedule", "codegen", "build")  # one graph's own compile: what may fall back
assert tuple(s.name for s in STAGES) == STAGE_NAMES, "record.STAGE_NAMES lists the stages for the readers"


def stage_named(name: str) -> Stage:
    return next(s for s in STAGES if s.name == name)  # looked up per call: a test may replace a stage


# --- the runner -------------------------------------------------------------------------------------------------


@dataclass
class Compilation:
    """One compile() or explore(): runs the stages (Note [Stages and the runner]), records them when
    `exploration` is given, and reports each stage's seconds to `on_stage(name, seconds)` (a timing hook)."""
    options: Options
    exploration: Exploration | None = None
    on_stage: Callable[[str, float], None] | None = None
    profiler: Any = None  # engine/runtime/profile.py's Profiler: keeps each graph to time its kernels after the run
    bisector: Any = None  # engine/divergence.py's Bisector: keeps each graph to bisect its numerics after the run
    _clocks: list = field(default_factory=list)  # per running stage: seconds spent in the stages it called
    _graph: GraphRecord | None = None  # the graph being compiled

    def run(self, name: str, artifact):
        self._clocks.append(0.0)
        start = time.perf_counter()
        try:
            with spans.span(name, "stage") as entry:
                entry["graph"] = self._graph  # its index once it joins the record (Note [Compile trace])
                return stage_named(name).fn(artifact, self.options)
        finally:
            wall = time.perf_counter() - start
            own = wall - self._clocks.pop()
            if self._clocks:
                self._clocks[-1] += wall
            self._record_time(name, own)

    def _record_time(self, name: str, seconds: float) -> None:
        if self.on_stage is not None:
            self.on_stage(name, seconds)
        if self.exploration is not None:
            self.exploration.add_time(name, seconds)
            if self._graph is not None and name != "capture":
                self._graph.timings[name] = self._graph.timings.get(name, 0.0) + seconds

    # Dynamo calls this once per captured graph (it is Program.compile_fx: the Dynamo backend)
    def compile_fx(self, gm: torch.fx.GraphModule, example_inputs) -> Callable:
        graph = GraphRecord(index=-1) if self.exploration is not None else None  # numbered when it joins
        if graph is not None:
            graph.fx = report.fx_nodes(gm)
        backward: list[GraphRecord] = []  # a backward graph joins the record after its forward

        def join_backward() -> None:
            while backward:
                record = backward.pop(0)
                record.index, record.partition = len(self.exploration.graphs), PartitionRecord(forward_graph=graph.index)
                self.exploration.graphs.append(record)

        def on_partition(partition: PartitionRecord) -> None:
            if graph is not None:
                graph.partition = partition

        def compiler(phase: str) -> Callable:
            def compile_phase(aten_gm: torch.fx.GraphModule, aten_inputs) -> Callable:
                record = graph
                if graph is not None and phase == "backward":  # its own graph, compiled on first backward
                    record = GraphRecord(index=-1, fx=graph.fx)
                call = self.compile_aten(gm, aten_gm, aten_inputs, record, phase, example_inputs)
                if record is not None and phase == "backward":
                    backward.append(record)
                    if graph.index >= 0:  # else (dynamic shapes: compiled at once) after the forward joins
                        join_backward()
                return call

            return compile_phase

        def rewrite_forward(fx_gm: torch.fx.GraphModule, inputs: list) -> torch.fx.GraphModule:
            """Note [Where rewrites run]: the before-joint passes on the graph's forward, traced without autograd."""
            fx_names = frozenset(n.name for n in gm.graph.nodes)
            try:
                forward = trace_forward(fx_gm, inputs)
            except ValueError as why:
                if graph is not None:
                    graph.rewrites.append(RewriteRecord(
                        rewrite="(before the joint graph)", applied=False, nodes=[], where="forward",
                        reason=f"the training graph was not rewritten before AOTAutograd traced it: {why}"))
                return fx_gm
            done = self.run("rewrite", AtenGraph(forward, list(inputs), "forward", None, fx_names, before_joint=True))
            if graph is not None:
                report.add_rewrites(graph, done, gm)
            return done.gm if done.before is not None else fx_gm

        def unrewritten(error: Exception) -> None:
            """Note [Where rewrites run]: the joint graph was traced from Dynamo's graph after all."""
            if graph is None:
                return
            graph.rewrites = [r for r in graph.rewrites if r.where != "forward"]
            graph.aten_before = []
            graph.rewrites.append(RewriteRecord(
                rewrite="(before the joint graph)", applied=False, nodes=[], where="forward",
                reason=f"the training graph was not rewritten: AOTAutograd could not trace the backward of the "
                       f"rewritten forward ({type(error).__name__}: {str(error).strip()[:300]}), so it traced "
                       "the graph as Dynamo captured it"))

        outer, self._graph = self._graph, graph
        try:
            compiled = self.run("decompose", FxGraph(gm, example_inputs, compiler,
                                                     make_partition_fn(on_partition, self.options.partition),
                                                     rewrite_forward, unrewritten))
        except torch._dynamo.exc.TorchDynamoException:
            raise  # Dynamo's own signals (a restarted analysis) and failures stay Dynamo's
        except Exception as error:  # Note [Internal failure falls back to eager]: our decompositions' trace
            self._fall_back(graph, "decompose", error, gm)
            compiled = gm  # Dynamo's graph, run as eager code (with autograd where it trains)
        finally:
            self._graph = outer
        if graph is not None:
            # Note [Restarted analysis]: Dynamo may abandon a graph by raising from inside its backend
            # (RestartAnalysis: AOTAutograd turned a float input into a tensor, say) and trace the frame again,
            # which calls the backend anew. Only a graph that compiled joins the record.
            graph.index = len(self.exploration.graphs)
            self.exploration.graphs.append(graph)
            join_backward()
        return compiled

    # AOTAutograd calls this once per graph and phase, with the functional ATen graph (FxGraph.compile_aten)
    def compile_aten(self, fx_gm: torch.fx.GraphModule, aten_gm: torch.fx.GraphModule, aten_inputs,
                     graph: GraphRecord | None, phase: str, real_inputs=None) -> Callable:
        if graph is not None:
            graph.phase = phase
        outer, self._graph = self._graph, graph  # a backward compiles later, outside compile_fx
        try:
            with unset_fake_temporarily():  # Note [Compiling outside the fake mode]
                return self._compile_phase(fx_gm, aten_gm, aten_inputs, graph, phase, real_inputs)
        finally:
            self._graph = outer

    def _compile_phase(self, fx_gm, aten_gm, aten_inputs, graph: GraphRecord | None, phase: str,
                       real_inputs=None) -> Callable:
        aten_gm, written, names = lift_input_writes(aten_gm)  # Note [Input writes after the graph]
        if graph is not None:
            graph.input_writes = names
        call = self._compile_graph(fx_gm, aten_gm, aten_inputs, graph, phase, real_inputs)
        return WriteBack(call, written) if written else call

    def _compile_graph(self, fx_gm, aten_gm, aten_inputs, graph: GraphRecord | None, phase: str,
                       real_inputs=None) -> Callable:
        if phase == "backward":  # Note [Saved values in the forward's strides] in partition.py
            restride_saved_inputs(aten_gm, aten_inputs)
        artifact: Any = AtenGraph(aten_gm, list(aten_inputs), phase, static_inputs(phase),
                                  frozenset(n.name for n in fx_gm.graph.nodes),
                                  real_inputs=list(real_inputs) if real_inputs is not None and phase == "inference"
                                  else None)
        rewritten = artifact
        stage_name = GRAPH_STAGES[0]
        try:
            for stage_name in GRAPH_STAGES:
                artifact = self.run(stage_name, artifact)
                if stage_name == "rewrite":
                    rewritten = artifact
                    if graph is not None:
                        report.add_rewrites(graph, rewritten, fx_gm)
        except Exception as error:  # Note [Internal failure falls back to eager]
            self._fall_back(graph, stage_name, error, fx_gm, aten_gm)
            return eager_call(aten_gm)
        compiled: CompiledGraph = artifact
        call = compiled.call
        strides = handed_over_strides(rewritten.gm, compiled.lowered.outputs) if phase == "forward" else []
        report_saved_strides(strides)  # Note [Saved values in the forward's strides] in partition.py
        if graph is None:  # compile(): no record to list the ops we run eagerly (Note [A fallback is loud])
            for eager_ops in fallbacks.op_fallbacks(compiled.lowered.nodes, rewritten.gm):
                fallbacks.warn(eager_ops)
        else:
            hints = size_hints(compiled.lowered, aten_inputs)
            try:
                report.fill_graph_record(graph, fx_gm, rewritten.gm, compiled, hints)
                fill_repro(graph, compiled, rewritten.gm, hints)
            except Exception as error:  # a record we cannot write is our bug too (Note [Strict record])
                self._fall_back(graph, "report", error, fx_gm, aten_gm)
                return eager_call(aten_gm)
            if self.profiler is not None:
                call = self.profiler.watch(graph, compiled, hints)
            if self.bisector is not None:  # Note [Numerics bisect]: keeps the first arguments
                call = self.bisector.watch(graph, compiled, rewritten.gm, hints, call)
            # Note [Wrapper overhead]: the first call measures the wrapper's own cost into the record
            call = MeasuredFirstCall(call, compiled.call, [k.name for k in compiled.module.kernels], graph.code.overhead)
        return FirstRunGuard(call, aten_gm, lambda error: self._fall_back(graph, "run", error, fx_gm), strides)

    def _fall_back(self, graph: GraphRecord | None, stage_name: str, error: BaseException, fx_gm=None,
                   aten_gm=None) -> None:
        message = (f"our {stage_name} stage raised {type(error).__name__}: {str(error).strip()[:2000]}; the graph "
                   "ran eagerly instead (its ATen graph, op by op)")
        if graph is None or self.exploration is None:  # compile(): no record to say it in
            fallbacks.warn(fallbacks.graph_fallback(stage_name, error, fx_gm))
            return
        if aten_gm is not None and not graph.aten:
            graph.aten = report.aten_nodes(aten_gm, fx_gm)
        graph.fallback = FallbackRecord(stage=stage_name, type=type(error).__name__, message=str(error))
        self.exploration.errors.append(ErrorRecord(
            kind="fallback", stage=stage_name, type=type(error).__name__, message=message,
            graph=graph.index if graph.index >= 0 else len(self.exploration.graphs),
            traceback="".join(traceback.format_exception(error))[-6000:]))


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
    if len(hints) == len(lowered.size_vars):  # Note [Derived sizes]: from the input sizes, as the wrapper does
        values = {str(symbol): hint for symbol, hint in hints.items()}
        for symbol, expr in lowered.derived_sizes.items():
            if not isinstance(expr, derived.InputItem):  # an input's value is no size (fake here besides)
                values[str(symbol)] = hints[symbol] = derived.evaluate(expr, values)
    return hints


# --- entry points ---------------------------------------------------------------------------------------------


def make_backend(options: Options, exploration: Exploration | None = None, profiler=None,
                 on_stage: Callable[[str, float], None] | None = None) -> Callable:
    """A Dynamo backend: FX graph -> (AOTAutograd) -> our compiler. Records into `exploration` if given; a
    `profiler` (engine/runtime/profile.py) keeps each graph to time its kernels after the run."""
    return Compilation(options, exploration, on_stage, profiler).compile_fx


def compile_graph(aten_gm: torch.fx.GraphModule, example_inputs, options: Options) -> CompiledGraph:
    """One ATen graph through lower..build, without recording or falling back (for tests of those stages)."""
    artifact: Any = AtenGraph(aten_gm, list(example_inputs))
    for name in GRAPH_STAGES:
        artifact = stage_named(name).fn(artifact, options)
    return artifact


def compile(model: Callable, backend: str = "cpp", device: str = "cpu", dynamic: bool | None = None,
            mode: str = "default", templates: str = "auto", layout: str = "auto",
            on_stage: Callable[[str, float], None] | None = None, rewrites=None, freezing: bool = False,
            partition: str | None = None) -> Callable:
    """Like torch.compile(model, mode=mode), with Glassbox as the backend. on_stage(name, seconds) hears every
    stage's time (the fresh-process measure of engine/tools/fresh_compile.py). rewrites: the graph rewrites
    (None: the default passes; "none"; "attention,..."; "-attention": Note [Rewrite stage]). freezing: parameters
    and buffers become constants, folded at compile time (inference only; Note [Freezing]). partition: the
    training partition's policy (engine/options.py; unset: GLASSBOX_PARTITION, else min-memory)."""
    options = Options(backend, device, dynamic, mode, templates=templates, layout=layout, rewrites=rewrites,
                      freezing=freezing, partition=partition)
    rewrite_passes(options)  # an unknown pass is the caller's error, now
    return capture.dynamo_compile(model, make_backend(options, on_stage=on_stage), None, dynamic)


def explore(model: Callable, example_inputs, backend: str = "cpp", device: str = "cpu",
            dynamic: bool | None = None, dynamic_inputs=(), name: str = "model", source: dict | None = None,
            description: str = "", tolerance: dict | None = None, profile: bool = False, mode: str = "default",
            fusion: bool = True, max_fused_nodes: int | None = None, templates: str = "auto", train: bool = False,
            loss_fn: Callable | None = None, layout: str = "auto", rewrites=None,
            freezing: bool = False, before_inputs: Callable[[tuple], None] | None = None,
            partition: str | None = None, time_call: bool = False) -> Exploration:
    """Run the whole pipeline once on `example_inputs`, recording every stage. With `profile`, each kernel is
    then timed (engine/runtime/profile.py: time_ms, gbps, flops per kernel). With `train`, the run is a training step:
    loss (`loss_fn(output, *inputs)` or the sum of the floating outputs) and backward, and the record holds
    forward and backward graphs and the partition (Note [Training step] in train_verify.py). With `time_call`,
    the whole call is timed against eager (`call_time`, Note [Call time])."""
    from engine.divergence import Bisector, should_bisect
    from engine.runtime.profile import Profiler

    options = Options(backend, device, dynamic, mode, fusion, max_fused_nodes, templates, train=train, layout=layout,
                      rewrites=rewrites, freezing=freezing, partition=partition)
    exploration = Exploration(model=name, backend=backend, device=device, source=SourceFile(**(source or {})),
                              description=description,
                              options=options.record(rewrite_passes(options), partition_policy(options.partition)))
    profiler = Profiler(device) if profile else None
    bisector = None if train else Bisector()
    compilation = Compilation(options, exploration, profiler=profiler, bisector=bisector)
    capture.reset()
    unimplemented_before = torch._dynamo.utils.counters["unimplemented"].copy()  # frames Dynamo will skip
    log = capture.CaptureLog()
    inputs = tuple(example_inputs)
    step = None
    if train:
        from engine.train_verify import TrainingStep
        step = TrainingStep(model, inputs, loss_fn)  # compiles a copy: the eager reference starts where it did
    exploration.inputs = capture.describe_inputs(inputs)
    exploration.input_specs = [InputSpec(str(x.dtype).replace("torch.", ""), list(x.shape))
                               if isinstance(x, torch.Tensor) else InputSpec(type(x).__name__) for x in inputs]
    log.begin_call(exploration.inputs)
    program = Program(model, inputs, log, compilation.compile_fx, tolerance, step)
    with spans.collecting() as trace:
        captured = compilation.run("capture", program)
        exploration.verify = verify_record(compilation.run("run", captured))
    exploration.trace = spans.finished(trace, lambda graph: graph_number(graph, exploration))
    if bisector is not None and should_bisect(exploration.verify):  # Note [Numerics bisect]
        bisector.run(exploration)
    bisector = compilation.bisector = None  # let the kept arguments go
    if profiler is not None:  # after the run: not a stage of the compiler, timed under its own name
        start = time.perf_counter()
        profiler.measure(exploration)
        exploration.add_time("profile", time.perf_counter() - start)
    if time_call and not train:  # Note [Call time]
        exploration.call_time = call_time.measure(model, captured.compiled, inputs, device)
    for extra in dynamic_inputs:
        extra = tuple(extra)
        if before_inputs is not None:  # a what-if asks Dynamo's guards first (engine/tools/whatif.py)
            before_inputs(extra)
        log.begin_call(capture.describe_inputs(extra))
        graphs_before = len(exploration.graphs)
        try:
            with torch.no_grad():
                extra_outputs = captured.compiled(*run_module.fresh(extra))
            result = run_module.verify(model, extra, extra_outputs, tolerance)
        except Exception as error:  # one failing input set is reported; the exploration stands
            exploration.errors.append(ErrorRecord(kind="inputs", stage="run", type=type(error).__name__,
                                                  message=f"{type(error).__name__}: {root_cause(error)}",
                                                  inputs=log.current_inputs))
            continue
        exploration.runs.append(RunRecord(inputs=log.current_inputs,
                                          new_graphs=len(exploration.graphs) - graphs_before,
                                          verify=verify_record(result)))
    log.finish()
    exploration.graph_breaks = [GraphBreakRecord(**vars(b)) for b in log.graph_breaks]
    exploration.guards = list(log.guards)
    exploration.recompiles = [RecompileRecord(**vars(r)) for r in log.recompiles]
    for skipped in log.gave_up:
        exploration.errors.append(ErrorRecord(
            kind="recompile_limit", stage="capture", inputs=skipped.inputs,
            message=f"Dynamo reached its recompile limit (torch._dynamo.config.recompile_limit) with "
                    f"{len(skipped.failed_guards)} compiled versions of {skipped.function}: it runs it "
                    f"eagerly from now on, without a graph. It would have recompiled because: {skipped.reason}"))
    if not exploration.graphs and not exploration.graph_breaks:
        skipped_frames = torch._dynamo.utils.counters["unimplemented"] - unimplemented_before
        why = "; ".join(reason.splitlines()[0] for reason in skipped_frames) or "it found no tensor work to compile"
        exploration.errors.append(ErrorRecord(kind="no_graph", stage="capture", inputs=exploration.inputs,
                                              message=f"Dynamo captured no graph, so the model ran eagerly: {why}"))
    return exploration


def graph_number(graph: GraphRecord | None, exploration: Exploration) -> int | None:
    """A span's graph as its index in the record (None: not a graph's, or a graph Dynamo abandoned)."""
    return graph.index if graph is not None and any(g is graph for g in exploration.graphs) else None


def compile_reference(model: Callable, dynamic: bool | None = None) -> Callable:
    """torch.compile with every graph executed by the IR reference evaluator: checks lowering alone."""
    from engine.ir.evaluator import evaluate_graph

    def backend(gm, example_inputs):
        def fw_compiler(aten_gm, aten_inputs):
            lowered = lower_stage(AtenGraph(aten_gm, list(aten_inputs)), Options()).graph

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
