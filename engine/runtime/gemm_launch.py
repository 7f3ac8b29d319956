"""Launching a GEMM template kernel, for both backends: the template itself, or the library call followed by
the same kernel run as an epilogue only; in mode="max-autotune" the choice between them is measured.

Note [Template or library at run time]
Every template kernel has two modes, one source: it computes the tile itself (K loop, the tile config's
blocks), or it reads the tile from a buffer the library call (cuBLAS, the CPU BLAS) has just written
(ACC_FROM_MEMORY) and runs only the epilogue: exactly the unfused "library GEMM + one elementwise kernel"
plan. In max-autotune both are timed on the real arguments at the first launch, with a few tile configs
for the template, and the fastest wins. Tuning happens at the first launch, not at compile time, because
compiling runs under Dynamo's fake tensors, which hold no memory to run a kernel on. Results are cached on
disk by kernel source (which spells the shape, strides and dtype; the kernel's and its buffers' names left
out, so the same GEMM in every layer of a model is timed once), candidate list and device.

Note [Autotune against the default's pick]
max-autotune must never choose worse than default mode would, so its candidates include default's plan for
the same GEMM (templates.default_takes_template): the heuristic's tile config (the first), or the library
call — followed by the epilogue-only kernel when the template has an epilogue, or alone, writing the output
buffer through the op's out= overload, when it has none (default mode gives such a template back to the
library call; "library + epilogue" would add a copy pass that plan does not have). Every candidate is timed
the same way, its epilogue included: a first call (compiling), then on the GPU do_bench medians in
GPU_ROUNDS rounds, the candidates in turn in each, each keeping its best round (a burst of host load, such
as another compiler's worker processes starting, slows a host-bound candidate's launches for a while: timed
one after the other, only the candidates measured in that while would pay), on the CPU the fastest of
interleaved calls (Note [CPU autotune timing]). A challenger replaces the default's pick only when
it is faster by MIN_GAIN: a difference within the timing noise is no reason to leave the plan default mode
runs, and measured end to end that plan is what max-autotune is compared with.

Note [Library plan in place]
A template whose winner is the library call must cost what default mode's plan for it costs (the library
call, then the epilogue as a kernel writing in place into the call's output: Note [In-place epilogues] in
schedule/memory.py), or max-autotune loses where it chose exactly that plan. So:
  - no extra buffer: on Triton the library writes the kernel's `library_host` (a stored output of the GEMM's
    dtype whose lanes are the GEMM's row-major elements, found at code generation) through the op's out=
    overload, and the epilogue-only kernel reads its tile from there and overwrites it, each element read,
    then written, by the program that owns it. Re-running it (autotuning) is harmless: the library rewrites
    the whole buffer first. Not for the C++ template (its pointers are __restrict__) nor a 1x1 convolution
    (convolution.out is the functional call plus a copy).
  - no per-call Python beyond the launches: each mode is bound at its first call to a closure over the
    resolved launches (`_Bound`), and views are the wrapper's strided_view.
What remains different: the epilogue runs as the template's kernel in its ACC_FROM_MEMORY mode (Note
[Epilogue-only tiles] in codegen/triton/gemm.py). The H200 run that showed the cost: reports/
runtime_measurements.md, "Library plan in place".
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Callable

import torch

from engine.ir.nodes import TensorArg, Template
from engine.ir.artifacts import TemplateKernel
from engine.record import PrecompileRecord, TimedCandidate
from engine.runtime import spans
from engine.runtime.build import atomic_write, cache_dir, compiler
from engine.runtime.wrapper import raw_stream, strided_view

# Note [CPU autotune timing]
# On a shared CPU a thread descheduled inside a parallel call stalls the whole call, so a median of calls in a
# row measures the other tenants, and only for the candidates timed while they ran. The candidates are called
# in turn, one call each per round, and each keeps its fastest call: the run the machine did not disturb,
# taken at the same moments for every candidate. The budget must hold enough rounds for a quiet moment to
# come (CPU_TIMING_SECONDS, CPU_MIN_ROUNDS). The measurements: reports/runtime_measurements.md, "CPU autotune
# timing".
CPU_TIMING_SECONDS = 0.15  # per candidate
CPU_MIN_ROUNDS, CPU_MAX_ROUNDS = 10, 200
GPU_ROUNDS, GPU_WARMUP_MS, GPU_REP_MS = 3, 10, 40  # do_bench's budget a round, the same for every candidate
MIN_GAIN = 0.02  # Note [Autotune against the default's pick]


NATIVE_OUT_OPS = ("mm", "addmm", "bmm", "baddbmm")  # GemmSpec.op whose out= overload is a kernel, not a copy


class TemplateLaunch:
    """The wrapper calls this with the kernel's tensor arguments (in `kernel.args` order).

    `backend.launcher(config, from_memory)` gives `run(tensors, acc)`, which launches the generated kernel
    (acc: the tile the library wrote, or None to compute it); `backend.configs()` lists tile configs, the
    heuristic's first; `backend.name` is "cpp" or "triton"; `backend.in_place` says whether a kernel may read
    its tile from one of its own outputs (Note [Library plan in place])."""

    def __init__(self, kernel, backend, device: str, tune: bool):
        self.kernel, self.backend, self.device = kernel, backend, device
        self.template: Template = kernel.template
        self.position = {name: i for i, name in enumerate(kernel.args)}
        self.tune = tune
        self.epilogue_config = backend.configs()[0]  # the tiles of the epilogue-only mode
        self.choice: Callable | None = None if tune else self._template_run(self.epilogue_config)
        host = getattr(kernel, "library_host", None)
        self.host = host if (host in self.position and getattr(backend, "in_place", False)
                             and self.template.spec.op in NATIVE_OUT_OPS) else None

    def __call__(self, *tensors):
        if self.choice is None:
            with spans.span("autotune", kernel=self.kernel.name, template=True):  # Note [Compile trace]
                self.choice = self._autotune(tensors)
        self.choice(tensors)

    # -- the modes: each a function of the call's tensors, bound at its first call (Note [Library plan in place])
    def _template_run(self, config: dict) -> Callable:
        return _Bound(lambda tensors: self._bind_template(config))

    def _bind_template(self, config: dict) -> Callable:
        run = self.backend.launcher(config, False)
        return lambda tensors: run(tensors, None)

    def _library_run(self, config: dict | None = None) -> Callable:
        """The library call, then the kernel as the epilogue only (in place where it can be), with `config`'s
        tiles (default: the template's first config's)."""
        return _Bound(lambda tensors: self._bind_library_run(tensors, config or self.epilogue_config))

    def _bind_library_run(self, tensors, config: dict) -> Callable:
        epilogue = self.backend.launcher(config, True)
        if self.host is not None:
            library, host = self._bind_library_call(tensors, into=self.host), self.position[self.host]

            def in_place(tensors):
                library(tensors)
                epilogue(tensors, tensors[host])
            return in_place
        library, in_layout = self._bind_library_call(tensors, into=None), self._in_output_layout
        return lambda tensors: epilogue(tensors, in_layout(library(tensors)))

    def _in_output_layout(self, result: torch.Tensor) -> torch.Tensor:
        """The library's result in the storage order the kernel reads it in: the template output's (row-major
        in the GEMM's frame; a channels-last convolution's NHWC, Note [1x1 convolutions as GEMMs])."""
        strides = [int(s) for s in self.template.out_stride]
        if all(size == 1 or a == b for size, a, b in zip(result.shape, result.stride(), strides)):
            return result
        return torch.empty_strided(result.shape, strides, dtype=result.dtype, device=result.device).copy_(result)

    def _library_alone_run(self) -> Callable:
        """The library call writing the template's output buffer: a template with no epilogue."""
        return _Bound(lambda tensors: self._bind_library_call(tensors, into=self.template.name))

    def _bind_library_call(self, tensors, into: str | None) -> Callable:
        """The library call on a call's tensors, its arguments worked out once from the first call's (a
        per-call pytree walk or view is Python work a GPU launch waits for): a tensor argument that is its whole
        buffer is passed as it is, any other as its view. into: a buffer the call writes through the op's out=
        overload (viewed as the GEMM's output where it is held otherwise). (The GEMM ops' tensors are top-level
        arguments: templates.gemm_spec.)"""
        values, slots = list(self.template.args), []
        for i, arg in enumerate(values):
            if isinstance(arg, TensorArg):
                slots.append((i, self.position[arg.name], _view_unless_whole(arg.size, arg.stride, arg.offset,
                                                                             tensors[self.position[arg.name]])))
        kwargs = dict(self.template.kwargs)
        target = self.template.target.overloadpacket.out if into else self.template.target
        output = self.position[into] if into else None
        out_view = _view_unless_whole(self.template.size, self.template.out_stride, 0, tensors[output]) \
            if into else None

        def call(tensors):
            args = list(values)
            for i, position, view in slots:
                tensor = tensors[position]
                args[i] = tensor if view is None else strided_view(tensor, *view)
            if output is None:
                return target(*args, **kwargs)
            out = tensors[output]
            return target(*args, **kwargs, out=out if out_view is None else strided_view(out, *out_view))
        return call

    # -- max-autotune --------------------------------------------------------------------------------------
    def candidates(self) -> list[tuple[str, Callable, dict | None]]:
        """(name, run, tile config or None for the library) for every candidate, the template's first config
        first (Note [Autotune against the default's pick])."""
        found = [(f"template {_config_text(c)}", self._template_run(c), c) for c in self.backend.configs()]
        if self.kernel.epilogue:
            found.append(("library + epilogue", self._library_run(), None))
            for config in getattr(self.backend, "epilogue_configs", list)():  # Note [Epilogue-only tiles]
                found.append((f"library + epilogue {config['BLOCK_M']}x{config['BLOCK_N']}, "
                               f"{config['num_warps']} warps", self._library_run(config), None))
        else:  # nothing fused: the kernel's one output is the GEMM's
            found.append(("library", self._library_alone_run(), None))
        return found

    def _compiled_modes(self) -> list[tuple[dict, bool]]:
        """The (config, from_memory) launches the candidates compile: every tile config computing its tile,
        and with an epilogue, the epilogue-only configs reading it from memory."""
        modes = [(config, False) for config in self.backend.configs()]
        if self.kernel.epilogue:
            modes += [(config, True) for config in
                      [self.epilogue_config] + list(getattr(self.backend, "epilogue_configs", list)())]
        return modes

    def default_pick(self) -> str:
        """The candidate default mode would run for this GEMM (codegen's TemplateKernel.default_template)."""
        candidates = self.candidates()
        return candidates[0][0] if self.kernel.default_template else candidates[-1][0]

    def _autotune(self, tensors) -> Callable:
        candidates = self.candidates()
        source = _anonymous_source(self.kernel)
        key = hashlib.sha256(json.dumps([source, [(n, c) for n, _, c in candidates], _device_name(self.device),
                                         self.backend.version]).encode()).hexdigest()[:24]
        path = cache_dir() / "templates" / f"{key}.json"
        cached = path.exists()
        if cached:
            results = json.loads(path.read_text())
        else:
            if hasattr(self.backend, "precompile"):  # Note [Parallel compiles]
                self.kernel.tuning.precompile = PrecompileRecord(
                    **self.backend.precompile(self._compiled_modes(), tensors))
            results = measure(candidates, tensors, self.device)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(results))  # another process may read it meanwhile
        incumbent = self.default_pick()
        winner, why = pick_winner(results, incumbent)
        tuning = self.kernel.tuning
        tuning.candidates = [TimedCandidate.from_json(result) for result in results]
        tuning.winner, tuning.default_pick, tuning.why = winner, incumbent, why
        tuning.cached, tuning.device = cached, _device_name(self.device)
        return {name: run for name, run, _ in candidates}[winner]


class _Bound:
    """A mode bound at its first call: `bind(tensors)` gives the function that runs every call after (Note
    [Library plan in place]); the wrapper's tensors at that call fix the views and launches."""

    def __init__(self, bind: Callable):
        self.bind, self.run = bind, None

    def __call__(self, tensors) -> None:
        if self.run is None:
            self.run = self.bind(tensors)
        self.run(tensors)


def _view_unless_whole(size, stride, offset, tensor) -> tuple | None:
    """None when `tensor` is the whole (size, stride, offset) view already, else the view's arguments."""
    view = ([int(s) for s in size], [int(s) for s in stride], int(offset))
    whole = list(tensor.shape) == view[0] and list(tensor.stride()) == view[1] and view[2] == 0
    return None if whole else view


def pick_winner(results: list[dict], incumbent: str) -> tuple[str, str]:
    """The candidate to run and why: the fastest, unless it beats the default's pick by less than MIN_GAIN
    (Note [Autotune against the default's pick])."""
    timed = {r["candidate"]: r["ms"] for r in results if r.get("ms") is not None}
    if not timed:
        return incumbent, "no candidate ran; the default's pick"
    best = min(timed, key=timed.get)
    if incumbent not in timed or best == incumbent:
        return best, "the fastest"
    if timed[best] <= timed[incumbent] * (1 - MIN_GAIN):
        return best, f"the fastest, {1 - timed[best] / timed[incumbent]:.1%} faster than the default's pick"
    return incumbent, (f"the default's pick: {best} is faster by {1 - timed[best] / timed[incumbent]:.1%}, "
                       f"less than {MIN_GAIN:.0%} (within the timing noise)")


def _config_text(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _anonymous_source(kernel: TemplateKernel) -> str:
    """The kernel's source with its name and its arguments' names replaced by their positions: the same GEMM
    and epilogue on other buffers (the next layer's weights) is the same key."""
    names = {kernel.name: "KERNEL", **{name: f"ARG{i}" for i, name in enumerate(kernel.args)}}
    return re.sub(r"\b\w+\b", lambda word: names.get(word.group(0), word.group(0)), kernel.source)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "cpu"


def measure(candidates: list[tuple[str, Callable, dict | None]], tensors, device: str) -> list[dict]:
    """Each candidate's time on the call's tensors, measured the same way for all (Note [Autotune against the
    default's pick]): a first call that compiles (a candidate that fails there, e.g. out of registers, is
    skipped with its error), then on the GPU a do_bench median; on the CPU the fastest of interleaved calls
    (Note [CPU autotune timing])."""
    results, runnable = [], []
    for name, run, config in candidates:
        try:
            run(tensors)
        except Exception as error:  # noqa: BLE001 - a config that does not compile is skipped, with the reason
            results.append({"candidate": name, "config": config, "ms": None, "error": str(error)[:200]})
            continue
        results.append({"candidate": name, "config": config, "ms": None})
        runnable.append((results[-1], run))
    if str(device).startswith("cuda"):
        from triton.testing import do_bench
        best = [float("inf")] * len(runnable)
        for _ in range(GPU_ROUNDS):  # Note [Autotune against the default's pick]: interleaved rounds
            for i, (_, run) in enumerate(runnable):
                best[i] = min(best[i], float(do_bench(lambda run=run: run(tensors), warmup=GPU_WARMUP_MS,
                                                      rep=GPU_REP_MS, return_mode="median")))
        for (result, _), ms in zip(runnable, best):
            result["ms"] = ms
        return results
    best = [float("inf")] * len(runnable)
    deadline, rounds = time.perf_counter() + CPU_TIMING_SECONDS * len(runnable), 0
    while rounds < CPU_MIN_ROUNDS or time.perf_counter() < deadline and rounds < CPU_MAX_ROUNDS:
        for i, (_, run) in enumerate(runnable):
            start = time.perf_counter()
            run(tensors)
            best[i] = min(best[i], time.perf_counter() - start)
        rounds += 1
    for (result, _), seconds in zip(runnable, best):
        result["ms"] = seconds * 1e3
    return results


# --- the two backends' template kernels, as TemplateLaunch drives them ---------------------------------------


class CppTemplateRunner:
    """TemplateLaunch's backend for one C++ template kernel (a ctypes function)."""
    name = "cpp"
    in_place = False  # the kernel's pointers are __restrict__: its tile is never one of its outputs

    def __init__(self, kernel: TemplateKernel, function):
        self.kernel, self.function, self.version = kernel, function, compiler()

    def configs(self) -> list[dict]:
        return self.kernel.tile_configs

    def run(self, tensors, config: dict, acc) -> None:
        pointers = [t.data_ptr() for t in tensors]
        acc_pointer = acc.data_ptr() if acc is not None else pointers[0]
        self.function(*pointers, acc_pointer, int(acc is not None), config["tile_m"], config["tile_n"])

    def launcher(self, config: dict, from_memory: bool):
        return lambda tensors, acc: self.run(tensors, config, acc)


class TritonTemplateRunner:
    """TemplateLaunch's backend for one Triton template kernel. Each (config, mode) is a bound launch
    (Note [Bound Triton launches] in triton_build.py): after its first call, a launch is Triton's compiled
    launcher called directly, not JITFunction.run, whose per-call Python work (tens of microseconds) showed
    in the GPU time of a 0.3 ms GEMM once it outlasted the queued work before it. The constexprs, options and
    grid of each config come from codegen (TemplateKernel.launch_args)."""
    name = "triton"
    in_place = True  # a Triton program reads its tile before it stores it: Note [Library plan in place]

    def __init__(self, kernel: TemplateKernel, function):
        import triton

        self.kernel, self.function, self.version = kernel, function, triton.__version__
        self.launches: dict = {}

    def configs(self) -> list[dict]:
        return self.kernel.tile_configs

    def epilogue_configs(self) -> list[dict]:
        """Tiles for the epilogue-only mode besides the template's own (Note [Epilogue-only tiles] in
        codegen/triton/gemm.py); none under the interpreter."""
        return self.kernel.epilogue_configs

    def _launch(self, config: dict, from_memory: bool):
        from engine.runtime.triton_build import TritonLaunch

        key = (tuple(config.items()), from_memory)
        if key not in self.launches:
            constexprs, options, grid_x = self.kernel.launch_args[tuple(config.items())]
            launch = TritonLaunch(self.function, {**constexprs, "ACC_FROM_MEMORY": from_memory}, dict(options),
                                  tuple(range(len(self.kernel.args) + 1)), self.kernel.interpreter)
            self.launches[key] = (launch, grid_x)
        return self.launches[key]

    def run(self, tensors, config: dict, acc) -> None:
        self.launcher(config, acc is not None)(tensors, acc)

    def precompile(self, modes: list[tuple[dict, bool]], tensors) -> dict:
        """Compile these (config, from_memory) launches in the compile workers before they are timed (Note
        [Parallel compiles]): the arguments a launch passes, with the tile read from memory in the GEMM's
        dtype and otherwise the first tensor standing in for it, as the launcher passes them."""
        from engine.runtime.compile_pool import precompile

        tile = self.kernel.template.dtype  # warm specs take a tensor's dtype for the tensor
        return precompile([self._launch(config, from_memory)[0].warm_spec(
            [*tensors, tile if from_memory else tensors[0]]) for config, from_memory in modes])

    def first_launch_spec(self) -> tuple | None:
        """What a compile worker needs for the launch default mode makes: the first config, computing its tile
        (Note [Compiling a graph's kernels before its first call] in compile_pool.py)."""
        dtypes = list(self.kernel.arg_dtypes)
        return self._launch(self.configs()[0], False)[0].warm_spec([*dtypes, dtypes[0]]) if dtypes else None

    def launcher(self, config: dict, from_memory: bool):
        """`run(tensors, acc)` for one config and mode, its launch looked up once (Note [Library plan in
        place]); the stream is read at each call (a capture may run on another)."""
        launch, grid_x = self._launch(config, from_memory)
        if self.kernel.interpreter:
            return lambda tensors, acc: launch(grid_x, None, *tensors, tensors[0] if acc is None else acc)

        def run(tensors, acc):
            launch(grid_x, raw_stream(tensors[0].device.index or 0), *tensors, tensors[0] if acc is None else acc)
        return run
