"""Per-kernel profile: each kernel's time, achieved GB/s and FLOP/s, its share of the graph's call, and the
machine's measured copy bandwidth and matmul peak (the two roofs of a roofline chart).

Note [Timing kernels inside the real wrapper]
A graph runs as one generated Python function, `call(args)`, that looks its kernels up by name in its module
namespace (ctypes functions for C++, jit functions with `.run` for Triton, `op_<node>` for library and eager
calls). To time each kernel we swap those namespace entries for timing proxies, run the unchanged wrapper
many times, and put the originals back. So the kernels run with the wrapper's own buffers, reuse and order:
what is timed is what the compiled model does, not a kernel in isolation on fresh memory. On the CPU a proxy
reads perf_counter before and after the call (our kernels are synchronous); on a GPU it records CUDA events
around the launch and the times are read after a synchronize, so they are device times. The whole call is
also timed without proxies; the difference from the sum of the kernels is the wrapper's own overhead
(allocation, argument handling, Python). Each figure is the median over the repeats, with the interquartile
range as its spread. Under the Triton interpreter (Triton on the CPU) the times are the interpreter's and say
nothing about a GPU.

Note [FLOP and byte estimates]
Bytes are those the scheduler's kernel reads and writes in memory (report.py's `bytes`: each buffer once).
FLOPs are counted from the loop IR: each floating-point arithmetic op of a loop body counts one per element
of its iteration space (per element of rows x reduction for a reduction, plus one for the combine). A matmul
library call counts 2*M*N*K; other library and eager calls have no estimate (None). Both are estimates, good
for a roofline's arithmetic intensity, not exact instruction counts (exp counts as one, as in Inductor's and
most rooflines' convention).
"""
from __future__ import annotations

import functools
import os
import statistics
import time
from typing import Any, Callable

import sympy
import torch

from engine.ir.handlers import AccessRecorder, Var
from engine.ir.indexing import loop_var
from engine.ir.nodes import Extern, Pointwise, Reduction, Scan
from engine.ir.ops import BINARY, UNARY, use_handler
from engine.record import MachineRecord, PeaksRecord, ProfileRecord, TimelineEntry
from engine.runtime import peaks
from engine.runtime.stand_ins import kernel_entries, swapped, wrapper_function

MIN_TIME_S = 0.2  # seconds of repeated calls per graph, at least
MIN_REPEATS, MAX_REPEATS = 5, 2000


class _OpCounter(AccessRecorder):
    """Counts the floating-point arithmetic ops of one loop body (Note [FLOP and byte estimates])."""

    def __init__(self, buffers: dict):
        super().__init__(buffers)
        self.count = 0

    def __getattr__(self, name):
        if name in UNARY or name in BINARY:
            op = super().__getattr__(name)

            def counted(*args):
                result = op(*args)
                self.count += bool(result.dtype.is_floating_point)
                return result
            return counted
        raise AttributeError(name)


def _number(expr, hints: dict) -> int | None:
    value = sympy.sympify(expr).subs(hints)
    return int(value) if value.is_Integer else None


def _body_flops(node, buffers: dict, hints: dict) -> int | None:
    counter = _OpCounter(buffers)
    index = [loop_var("i", d) for d in range(len(node.size))]
    with use_handler(counter):
        if isinstance(node, Reduction):
            result = node.inner_fn(index, [loop_var("r", d) for d in range(len(node.reduction_size))])
            per_element = counter.count + bool(isinstance(result, Var) and result.dtype.is_floating_point)
            elements = _number(node.numel * sympy.Mul(*node.reduction_size), hints)
        else:
            node.inner_fn(index)
            per_element, elements = counter.count, _number(node.numel, hints)
    return None if elements is None else per_element * elements


_MATMULS = {"mm": 0, "addmm": 1, "bmm": 0, "baddbmm": 1}  # ATen op -> position of the first matrix argument


def _extern_flops(node, buffers: dict, hints: dict) -> int | None:
    name = str(getattr(node.target, "__name__", node.target)).split(".")[0]
    first = _MATMULS.get(name)
    if first is None or len(node.args) < first + 2:
        return None
    a, b = node.args[first], node.args[first + 1]
    if not (hasattr(a, "size") and hasattr(b, "size")):
        return None
    batch = sympy.Mul(*a.size[:-2]) if len(a.size) > 2 else 1
    return _number(2 * batch * a.size[-2] * a.size[-1] * b.size[-1], hints)


def kernel_flops(kernel, buffers: dict, hints: dict) -> int | None:
    """Estimated floating-point operations of one scheduled kernel per call (None: no estimate)."""
    total = 0
    for node in kernel.nodes:
        if isinstance(node, (Pointwise, Reduction, Scan)):
            flops = _body_flops(node, buffers, hints)
        elif isinstance(node, Extern):
            flops = _extern_flops(node, buffers, hints)
        else:
            flops = 0 if kernel.kind not in ("extern", "fallback") else None
        if flops is None:
            return None
        total += flops
    return total


# --- timing --------------------------------------------------------------------------------------------------


class _Clock:
    """perf_counter on the CPU; CUDA events on a GPU (read after a synchronize)."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return (started, event)
        return (time.perf_counter() - started) * 1e3

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def read(self, mark) -> float:
        if self.cuda:
            return mark[0].elapsed_time(mark[1])
        return mark


class _Timed:
    """Stands in for one kernel in the wrapper's namespace (Note [Timing kernels inside the real wrapper])."""

    def __init__(self, function, name: str, clock: _Clock, sink: list):
        self.function, self.name, self.clock, self.sink = function, name, clock, sink

    def _timed(self, target: Callable, args, kwargs):
        started = self.clock.start()
        result = target(*args, **kwargs)
        self.sink[-1].setdefault(self.name, []).append(self.clock.stop(started))  # the current call's marks
        return result

    def __call__(self, *args, **kwargs):
        return self._timed(self.function, args, kwargs)

    def run(self, *args, **kwargs):  # Triton's launch path: kernel.run(..., grid=..., warmup=False)
        return self._timed(self.function.run, args, kwargs)


def _quartiles(values: list[float]) -> tuple[float, float]:
    """(median, interquartile range)."""
    if len(values) < 4:
        return statistics.median(values), (max(values) - min(values))
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q2, q3 - q1


def _repeat(run_once: Callable[[], Any], min_time: float) -> int:
    """Call `run_once` until `min_time` seconds and MIN_REPEATS calls have passed; the number of calls."""
    repeats, started = 0, time.perf_counter()
    while repeats < MAX_REPEATS and (repeats < MIN_REPEATS or time.perf_counter() - started < min_time):
        run_once()
        repeats += 1
    return repeats


def time_graph(compiled, args: list, device: str, min_time: float = MIN_TIME_S) -> dict:
    """Time one compiled graph on `args` (Note [Timing kernels inside the real wrapper]). Plain and instrumented
    calls alternate, so both see the same load of the machine; a kernel's share is of the instrumented call it
    ran in. {"call_ms", "call_iqr_ms", "timed_call_ms", "repeats", "kernels": {name: {"time_ms", "iqr_ms"}}}."""
    function = wrapper_function(compiled.call)
    namespace = function.__globals__
    clock = _Clock(device)
    entries = {key: name for key, name in kernel_entries(compiled.schedule.kernels).items() if key in namespace}
    per_call: list[dict] = []  # one {kernel name: [marks]} per instrumented call
    plain, instrumented = [], []

    def timed(into: list) -> None:
        started = clock.start()
        function(list(args))
        into.append(clock.stop(started))

    def one_round() -> None:
        timed(plain)
        per_call.append({})
        with swapped(namespace, entries, lambda key, original: _Timed(original, entries[key], clock, per_call)):
            timed(instrumented)

    with torch.no_grad():
        function(list(args))  # warm-up: first-launch work (autotuning, lazy loading) is not a kernel's time
        repeats = _repeat(one_round, min_time)
        clock.sync()
    kernels = {}
    for name in dict.fromkeys(entries.values()):
        median, spread = _quartiles([sum(clock.read(m) for m in marks.get(name, [])) for marks in per_call])
        kernels[name] = {"time_ms": median, "iqr_ms": spread}
    call_median, call_spread = _quartiles([clock.read(m) for m in plain])
    return {"call_ms": call_median, "call_iqr_ms": call_spread, "repeats": repeats, "kernels": kernels,
            "timed_call_ms": statistics.median([clock.read(m) for m in instrumented])}


class _Marked(_Timed):
    """Stands in for one kernel and keeps (name, start mark, end mark) of each launch, in launch order."""

    def _timed(self, target: Callable, args, kwargs):
        started = self.clock.start()
        result = target(*args, **kwargs)
        self.sink.append((self.name, started, self.clock.start()))
        return result


def kernel_timeline(compiled, args: list, device: str, calls: int = 5) -> list[dict]:
    """One call of the graph with each launch's start and end (ms since the call began): the run's part of
    the trace (Note [Compile trace] in engine/runtime/spans.py). Of `calls` instrumented calls, the one whose length is
    the median (one call alone is at the mercy of a busy machine). CPU: perf_counter; GPU: CUDA events."""
    function = wrapper_function(compiled.call)
    namespace = function.__globals__
    clock = _Clock(device)
    entries = {key: name for key, name in kernel_entries(compiled.schedule.kernels).items() if key in namespace}
    recorded = []  # per call: (begin, end, marks)
    with torch.no_grad():
        for _ in range(calls):
            marks: list = []
            with swapped(namespace, entries, lambda key, original: _Marked(original, entries[key], clock, marks)):
                begin = clock.start()
                function(list(args))
                recorded.append((begin, clock.start(), marks))
    clock.sync()

    def ms(begin, mark) -> float:
        return begin.elapsed_time(mark) if clock.cuda else (mark - begin) * 1e3

    begin, end, marks = sorted(recorded, key=lambda call: ms(call[0], call[1]))[len(recorded) // 2]
    return [{"kernel": name, "start_ms": ms(begin, start), "dur_ms": ms(begin, stop) - ms(begin, start)}
            for name, start, stop in marks] + [{"kernel": "call", "start_ms": 0.0, "dur_ms": ms(begin, end)}]


# --- the machine's roofs -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def machine_roofs(device: str = "cpu") -> dict:
    """The measured copy bandwidth (GB/s: bytes read + written per second by a large tensor copy, well past the
    caches) and matmul throughput (GFLOP/s of a large float32 matmul): the roofs of a roofline. Measured once
    per process and device."""
    clock = _Clock(device)
    numel = (64 if clock.cuda else 16) * 2 ** 20  # 256 MiB on a GPU; 64 MiB on a CPU (past its caches)
    source = torch.empty(numel, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)

    def best_ms(fn: Callable[[], Any], repeats: int) -> float:
        fn()
        clock.sync()
        marks = []
        for _ in range(repeats):
            started = clock.start()
            fn()
            marks.append(clock.stop(started))
        clock.sync()
        return min(clock.read(m) for m in marks)

    copy_ms = best_ms(lambda: target.copy_(source), 5)
    n = 2048 if clock.cuda else 512
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    mm_ms = best_ms(lambda: torch.mm(a, b), 5)
    return {"device": device, "copy_gbps": 2 * numel * 4 / copy_ms / 1e6,
            "matmul_gflops": 2 * n ** 3 / mm_ms / 1e6, "threads": torch.get_num_threads(),
            "how": f"copy of {numel * 4 // 2 ** 20} MiB float32 (read + write) and a {n}x{n} float32 matmul, "
                   "best of 5"}


# --- into the record -----------------------------------------------------------------------------------------


def profile_into(graph_record, compiled, args: list, hints: dict, device: str, min_time: float = MIN_TIME_S) -> None:
    """Time `compiled` on `args` and write each kernel's time_ms, spread, share, gbps, flops and gflops into
    the graph's record, and the call's totals into graph_record.profile."""
    measured = time_graph(compiled, args, device, min_time)
    buffers = compiled.lowered.buffers
    flops = {k.name: kernel_flops(k, buffers, hints) for k in compiled.schedule.kernels}
    kernels_ms = sum(k["time_ms"] for k in measured["kernels"].values())
    for entry in graph_record.kernels:
        timing = measured["kernels"].get(entry.name)
        if timing is None:
            continue
        ms = timing["time_ms"]
        entry.time_ms, entry.time_iqr_ms = ms, timing["iqr_ms"]
        entry.share = ms / measured["timed_call_ms"] if measured["timed_call_ms"] > 0 else None
        entry.gbps = entry.bytes / ms / 1e6 if ms > 0 and entry.bytes else None
        entry.flops = flops.get(entry.name)
        entry.gflops = entry.flops / ms / 1e6 if ms > 0 and entry.flops else None
    graph_record.profile = ProfileRecord(
        call_ms=measured["call_ms"], call_iqr_ms=measured["call_iqr_ms"], kernels_ms=kernels_ms,
        timed_call_ms=measured["timed_call_ms"],
        overhead_ms=max(measured["timed_call_ms"] - kernels_ms, 0.0), repeats=measured["repeats"],
        device=device, interpreted=compiled.module.language == "triton" and not str(device).startswith("cuda"))


class Profiler:
    """Keeps each compiled graph and its first real arguments during an exploration, to time them after the
    run (timing inside Dynamo's call would time fake tensors, and the run's first call includes compiling)."""

    def __init__(self, device: str, min_time: float = MIN_TIME_S):
        self.device, self.min_time = device, min_time
        self.graphs: list[tuple[Any, Any, dict, list]] = []  # (graph record, compiled, hints, saved args)

    def watch(self, graph_record, compiled, hints: dict) -> Callable:
        """The graph's call, which also keeps a copy of the first arguments it is given."""
        saved: list = []
        self.graphs.append((graph_record, compiled, hints, saved))
        call = compiled.call

        def watched(args):
            if not saved:
                saved.extend(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            return call(args)

        watched._boxed_call = True
        return watched

    def measure(self, exploration) -> None:
        measured = machine_roofs(self.device)
        roofs = peaks.device_peaks(peaks.device_name(self.device), measured, str(self.device).startswith("cuda"))
        for graph_record, compiled, hints, saved in self.graphs:
            if saved and any(g is graph_record for g in exploration.graphs):  # Note [Restarted analysis]
                profile_into(graph_record, compiled, saved, hints, self.device, self.min_time)
                graph_record.profile.timeline = [TimelineEntry(**entry)
                                                 for entry in kernel_timeline(compiled, saved, self.device)]
                place_under_roofs(graph_record, compiled, roofs)
        exploration.machine = MachineRecord(**measured, **machine_load(), peaks=roofs)


def _kernel_dtype(kernel) -> str | None:
    """The dtype a kernel computes in, as the record spells it (its last node's): picks its arithmetic roof."""
    dtype = getattr(kernel.nodes[-1], "dtype", None) if kernel.nodes else None
    return str(dtype).replace("torch.", "") if dtype is not None else None


def place_under_roofs(graph_record, compiled, roofs: PeaksRecord) -> None:
    """Each timed kernel's `roofline`: its % of the roof at its arithmetic intensity (Note [Roofs from the
    datasheet] in engine/runtime/peaks.py)."""
    dtypes = {k.name: _kernel_dtype(k) for k in compiled.schedule.kernels}
    for entry in graph_record.kernels:
        if entry.time_ms:
            entry.roofline = peaks.kernel_roof(entry, roofs, dtypes.get(entry.name))


def machine_load() -> dict:
    """The machine's load while profiling: other work on the same cores skews every time (more so with OpenMP,
    whose threads wait for each other at every parallel loop), so the record carries it and a warning."""
    cpus = os.cpu_count() or 1
    load = os.getloadavg()[0]
    busy = load > 0.5 * cpus
    return {"load_avg_1m": load, "cpus": cpus,
            "load_warning": (f"the machine was busy while measuring (load average {load:.2f} on {cpus} CPUs): "
                             "times may be inflated and noisy, most of all with several threads (OpenMP and "
                             "torch's threads wait for each other at every parallel loop; --threads 1 is "
                             "steadier); compare ratios measured side by side, and trust the spread")
            if busy else ""}
