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
the same way, its epilogue included: a first call (compiling), then on the GPU a do_bench median with one
warmup and repetition budget for all, on the CPU the fastest of interleaved calls (Note [CPU autotune
timing]). A challenger replaces the default's pick only when
it is faster by MIN_GAIN: a difference within the timing noise is no reason to leave the plan default mode
runs, and measured end to end that plan is what max-autotune is compared with.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from engine.build import cache_dir
from engine.ir.nodes import TensorArg, Template
from engine.schedule.templates import default_takes_template

# Note [CPU autotune timing]
# On a shared CPU a thread descheduled inside a parallel call stalls the whole call: a 4x63x20 torch.mm on
# torch's 2-thread pool measured 30-50 ms per call, not 0.01 ms, in bursts while other processes held the
# cores (load averages of 5-18 on 2 cores), and a median of calls in a row then measures the other tenants,
# and only for the candidates timed while they ran. The candidates are called in turn, one call
# each per round, and each keeps its fastest call: the run the machine did not disturb, taken at the same
# moments for every candidate (as scripts/gemm_bench.py measures). The budget must hold enough rounds for a
# quiet moment to come: at 0.05 s a candidate and at least 5 rounds, a 1x4096x4096 float32 GEMM (3-5 ms a
# call, about 10 rounds) was tuned to the library (4.40 ms vs the stream template's 5.25) in a run whose own
# 3-second interleaved timing had the template at 2.11 ms and the library at 3.47 (load ~4.5 on 2 cores).
CPU_TIMING_SECONDS = 0.15  # per candidate
CPU_MIN_ROUNDS, CPU_MAX_ROUNDS = 10, 200
GPU_WARMUP_MS, GPU_REP_MS = 25, 100  # do_bench's budget, the same for every candidate
MIN_GAIN = 0.02  # Note [Autotune against the default's pick]


@dataclass
class TemplateKernel:
    """What both backends' template kernels share: the source, the signature's buffers, the Template node
    and its epilogue, and the autotuning results (filled at the first launch in max-autotune)."""
    name: str
    source: str
    args: list[str]  # buffer names in signature order (the wrapper passes these tensors)
    size_args: list[str]  # always empty: a template is generated per shape (sizes are literals)
    template: Template
    epilogue: list[str]  # the IR nodes fused after the GEMM
    line_tags: list = field(default_factory=list)
    tuning: dict = field(default_factory=dict)

    @property
    def spec(self):
        return self.template.spec

    def launch_text(self) -> str:
        return f"{self.name}({', '.join(self.args)})"


class TemplateLaunch:
    """The wrapper calls this with the kernel's tensor arguments (in `kernel.args` order).

    `backend.run(tensors, config, acc)` launches the generated kernel (acc: the library result, or None to
    compute the tile); `backend.configs()` lists tile configs, the heuristic's first; `backend.name` is
    "cpp" or "triton"."""

    def __init__(self, kernel, backend, device: str, tune: bool):
        self.kernel, self.backend, self.device = kernel, backend, device
        self.template: Template = kernel.template
        self.position = {name: i for i, name in enumerate(kernel.args)}
        self.tune = tune
        self.epilogue_config = backend.configs()[0]  # the tiles of the epilogue-only mode
        self.library_call: Callable | None = None
        self.choice: Callable | None = None if tune else self._template_run(self.epilogue_config)

    def __call__(self, *tensors):
        if self.choice is None:
            self.choice = self._autotune(tensors)
        self.choice(tensors)

    # -- the modes -----------------------------------------------------------------------------------------
    def _template_run(self, config: dict) -> Callable:
        return lambda tensors: self.backend.run(tensors, config, None)

    def _library_run(self, tensors) -> None:
        """The library call, then the kernel as the epilogue only."""
        if self.library_call is None:
            self.library_call = self._bind_library_call(tensors, into_output=False)
        self.backend.run(tensors, self.epilogue_config, self._in_output_layout(self.library_call(tensors)))

    def _in_output_layout(self, result: torch.Tensor) -> torch.Tensor:
        """The library's result in the storage order the kernel reads it in: the template output's (row-major
        in the GEMM's frame; a channels-last convolution's NHWC, Note [1x1 convolutions as GEMMs])."""
        strides = [int(s) for s in self.template.out_stride]
        if all(size == 1 or a == b for size, a, b in zip(result.shape, result.stride(), strides)):
            return result
        return torch.empty_strided(result.shape, strides, dtype=result.dtype, device=result.device).copy_(result)

    def _library_alone_run(self, tensors) -> None:
        """The library call writing the template's output buffer: a template with no epilogue."""
        if self.library_call is None:
            self.library_call = self._bind_library_call(tensors, into_output=True)
        self.library_call(tensors)

    def _bind_library_call(self, tensors, into_output: bool) -> Callable:
        """The library call on a call's tensors, its arguments worked out once from the first call's (a
        per-call pytree walk or view is Python work a GPU launch waits for): a tensor argument that is its whole
        buffer is passed as it is, any other as its view. into_output: through the op's out= overload, into
        the template's output buffer. (The GEMM ops' tensors are top-level arguments: templates.gemm_spec.)"""
        values, slots = list(self.template.args), []
        for i, arg in enumerate(values):
            if isinstance(arg, TensorArg):
                position, tensor = self.position[arg.name], tensors[self.position[arg.name]]
                view = ([int(s) for s in arg.size], [int(s) for s in arg.stride], int(arg.offset))
                whole = list(tensor.shape) == view[0] and list(tensor.stride()) == view[1] and view[2] == 0
                slots.append((i, position, None if whole else view))
        kwargs = dict(self.template.kwargs)
        target = self.template.target.overloadpacket.out if into_output else self.template.target
        output = self.position[self.template.name] if into_output else None

        def call(tensors):
            args = list(values)
            for i, position, view in slots:
                tensor = tensors[position]
                args[i] = tensor if view is None else tensor.as_strided(view[0], view[1],
                                                                          tensor.storage_offset() + view[2])
            if output is None:
                return target(*args, **kwargs)
            return target(*args, **kwargs, out=tensors[output])
        return call

    # -- max-autotune --------------------------------------------------------------------------------------
    def candidates(self) -> list[tuple[str, Callable, dict | None]]:
        """(name, run, tile config or None for the library) for every candidate, the template's first config
        first (Note [Autotune against the default's pick])."""
        found = [(f"template {_config_text(c)}", self._template_run(c), c) for c in self.backend.configs()]
        if self.kernel.epilogue:
            found.append(("library + epilogue", self._library_run, None))
        else:  # nothing fused: the kernel's one output is the GEMM's
            found.append(("library", self._library_alone_run, None))
        return found

    def default_pick(self) -> str:
        """The candidate default mode would run for this GEMM."""
        candidates = self.candidates()
        takes = default_takes_template(self.template.spec, bool(self.kernel.epilogue), self.backend.name,
                                       str(self.device), output_stored=self.template.name in self.position)
        return candidates[0][0] if takes else candidates[-1][0]

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
            results = measure(candidates, tensors, self.device)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results))
        incumbent = self.default_pick()
        winner, why = pick_winner(results, incumbent)
        self.kernel.tuning.update(candidates=results, winner=winner, default_pick=incumbent, why=why,
                                  cached=cached, device=_device_name(self.device))
        return {name: run for name, run, _ in candidates}[winner]

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
        for result, run in runnable:
            result["ms"] = float(do_bench(lambda run=run: run(tensors), warmup=GPU_WARMUP_MS, rep=GPU_REP_MS,
                                          return_mode="median"))
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
