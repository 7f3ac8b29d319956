"""Launching a GEMM template kernel, for both backends: the template itself, or the library call followed by
the same kernel run as an epilogue only; in mode="max-autotune" the choice between them is measured.

Note [Template or library at run time]
Every template kernel has two modes, one source: it computes the tile itself (K loop, the tile config's
blocks), or it reads the tile from a buffer the library call (cuBLAS, the CPU BLAS) has just written
(ACC_FROM_MEMORY) and runs only the epilogue: exactly the unfused "library GEMM + one elementwise kernel"
plan. In max-autotune both are timed on the real arguments at the first launch, with a few tile configs
for the template, and the fastest wins. Tuning happens at the first launch, not at compile time, because
compiling runs under Dynamo's fake tensors, which hold no memory to run a kernel on. Results are cached on
disk by kernel source (which spells the shape, strides and dtype), candidate list and device.
"""
from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine.build import cache_dir
from engine.ir.nodes import TensorArg, Template

CPU_TIMING_SECONDS = 0.05  # per candidate: enough repeats of a skinny GEMM for a stable median


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
    compute the tile); `backend.configs()` lists tile configs, the heuristic's first."""

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

    # -- the two modes -------------------------------------------------------------------------------------
    def _template_run(self, config: dict) -> Callable:
        return lambda tensors: self.backend.run(tensors, config, None)

    def _library_run(self, tensors) -> None:
        if self.library_call is None:
            self.library_call = self._bind_library_call()
        self.backend.run(tensors, self.epilogue_config, self.library_call(tensors).contiguous())

    def _bind_library_call(self) -> Callable:
        """The library call on a call's tensors: its arguments' views worked out once (a per-call pytree walk
        is Python work a GPU launch waits for)."""
        leaves, tree = torch.utils._pytree.tree_flatten((self.template.args, self.template.kwargs),
                                                        is_leaf=lambda a: isinstance(a, TensorArg))
        views = {i: (self.position[a.name], [int(s) for s in a.size], [int(s) for s in a.stride], int(a.offset))
                 for i, a in enumerate(leaves) if isinstance(a, TensorArg)}
        target = self.template.target

        def call(tensors):
            values = list(leaves)
            for i, (position, size, stride, offset) in views.items():
                tensor = tensors[position]
                values[i] = tensor.as_strided(size, stride, tensor.storage_offset() + offset)
            args, kwargs = torch.utils._pytree.tree_unflatten(values, tree)
            return target(*args, **kwargs)
        return call

    # -- max-autotune --------------------------------------------------------------------------------------
    def _autotune(self, tensors) -> Callable:
        configs = self.backend.configs()
        key = hashlib.sha256(json.dumps([self.kernel.source, configs, _device_name(self.device),
                                         self.backend.version]).encode()).hexdigest()[:24]
        path = cache_dir() / "templates" / f"{key}.json"
        cached = path.exists()
        if cached:
            results = json.loads(path.read_text())
        else:
            results = [self._time(f"template {_config_text(c)}", lambda t, c=c: self.backend.run(t, c, None),
                                  tensors, config=c) for c in configs]
            results.append(self._time("library + epilogue", self._library_run, tensors, config=None))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results))
        timed = [r for r in results if r.get("ms") is not None]
        best = min(timed, key=lambda r: r["ms"]) if timed else results[0]
        self.kernel.tuning.update(candidates=results, winner=best["candidate"], cached=cached,
                                  device=_device_name(self.device))
        if best["config"] is None:
            return self._library_run
        return self._template_run(best["config"])

    def _time(self, name: str, run: Callable, tensors, config) -> dict:
        try:
            run(tensors)
            milliseconds = _median_ms(lambda: run(tensors), self.device)
        except Exception as error:  # noqa: BLE001 - a config that does not compile (registers) is skipped
            return {"candidate": name, "config": config, "ms": None, "error": str(error)[:200]}
        return {"candidate": name, "config": config, "ms": milliseconds}


def _config_text(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "cpu"


def _median_ms(fn: Callable[[], Any], device: str) -> float:
    if str(device).startswith("cuda"):
        from triton.testing import do_bench
        return float(do_bench(fn, return_mode="median"))
    times = []
    deadline = time.perf_counter() + CPU_TIMING_SECONDS
    while len(times) < 5 or time.perf_counter() < deadline and len(times) < 200:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3
