"""One way to time things, shared by the CLI's bench, the app (which runs the CLI's bench in a worker) and the
scripts: interleaved rounds with their spread, how busy the machine was, how many threads it really had free,
and when a ratio cannot be trusted (Note [Fair timing]); on a GPU, a quiet host first (Note [Fair GPU timing]).

Note [Fair timing]
On a shared machine the load changes from second to second, and timing one runner after another hands each a
different machine: the app's bench once showed a 1324x speedup and the CLI a 0.14 ms model at 94-124 ms. So:
  - before timing, the CPU time that *other* processes use is read from /proc/stat (all busy ticks, less our
    own process's from os.times(), plus the hypervisor's steal), and the thread count defaults to the cores
    left free (free_threads): OpenMP's and torch's threads wait for each other at every parallel loop, so one
    thread on a busy core stalls the others, and two threads on a core another process keeps busy measure the
    other process;
  - runners are timed in rounds, each runner once a round (a block of calls long enough to read a clock over,
    sized from the fastest call seen so far: one sizing call slowed by a burst of load once made every block
    a single 0.3 ms call, 126 noisy rounds where 7 would do), the first of a round rotating, so a burst of load lands on every runner of its round instead of one
    runner's figure; a figure is the median of its rounds, its spread their interquartile range;
  - a ratio of two figures is judged only when both spreads are narrow (at most NOISY_SPREAD of their median):
    otherwise it reads "too noisy to judge", with the range the ratio could take beside it;
  - how busy the machine was during the timing is read the same way and reported beside the figures.

Note [Fair GPU timing]
A GPU time is the host's time too wherever the host cannot keep the queue ahead of the kernels: do_bench
records an event, clears L2, calls the function and records another for every sample, so a call whose host
work outlasts its kernels (a small model in default mode, a small GEMM) is timed at its host's pace. The
H200 runs of 2026-12-02 timed each runner once, one after the other, right after every runner's first call;
Inductor's came last, and Inductor wakes its pool of compile workers at every compile
(torch._inductor.async_compile.maybe_warm_pool: one process per core, each importing torch, for seconds).
The runners timed next shared the host with them: the load average went from 1.3 to 4.8 in the GEMM run,
where a plan identical to another runner's timed 0.095 ms against 0.074. So GPU timing
  - shuts Inductor's compile workers down once every runner has made its first call (they start again at
    Inductor's next compile, outside any timing), then waits until the host is quiet: less than QUIET_CORES
    of busy CPU over QUIET_WINDOW_S, for at most QUIET_MAX_S (the busy cores seen last go into the report;
    once a wait runs out, the host is busy by itself and the run's later waits are short: QuietHost);
  - times the runners in rounds as above, with triton's do_bench (CUDA events, L2 cleared) inside a round.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import time
import traceback
from typing import Any, Callable

NOISY_SPREAD = 0.25  # a figure whose interquartile range is over a quarter of its median cannot back a ratio
MIN_ROUNDS, MAX_ROUNDS = 7, 200
MIN_BLOCK_S = 2e-3  # a round's block of calls lasts at least this long: the clock's overhead stays negligible
BUSY_WINDOW_S = 0.3  # how long free_threads watches the machine before timing
QUIET_CORES, QUIET_WINDOW_S, QUIET_MAX_S = 1.0, 0.5, 30.0
GPU_ROUNDS, GPU_WARMUP_MS, GPU_REP_MS = 5, 10, 40  # per round and runner
TOO_NOISY = "too noisy to judge"


# --- how busy the machine is ---------------------------------------------------------------------------------


def cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container or taskset narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _proc_stat() -> tuple[int, int, int] | None:
    """(all ticks, busy ticks, stolen ticks) over every CPU since boot; None where /proc/stat is unreadable."""
    try:
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(values) < 4:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    return sum(values[:8]), sum(values[:8]) - idle, steal


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


class BusyMeter:
    """Cores kept busy by other processes (and stolen by a hypervisor) between start() and stop(): all busy CPU
    time from /proc/stat, less this process's own (Note [Fair timing])."""

    def __init__(self):
        self._start = None

    def start(self) -> "BusyMeter":
        self._start = (_proc_stat(), _own_cpu_s(), time.perf_counter())
        return self

    def stop(self) -> dict:
        """{"others_cores": float | None, "steal_cores": float | None, "seconds": float}."""
        stat0, own0, wall0 = self._start
        stat1, own1, wall1 = _proc_stat(), _own_cpu_s(), time.perf_counter()
        wall = max(wall1 - wall0, 1e-9)
        if stat0 is None or stat1 is None or stat1[0] <= stat0[0]:
            return {"others_cores": None, "steal_cores": None, "seconds": wall}
        ticks = stat1[0] - stat0[0]
        machine = os.cpu_count() or 1  # /proc/stat counts every CPU of the machine
        busy_cores = (stat1[1] - stat0[1]) / ticks * machine
        steal_cores = (stat1[2] - stat0[2]) / ticks * machine
        others = max(busy_cores - (own1 - own0) / wall, 0.0) + steal_cores
        return {"others_cores": round(others, 3), "steal_cores": round(steal_cores, 3), "seconds": wall}


def others_busy_cores(window_s: float = BUSY_WINDOW_S) -> float | None:
    """Cores that other processes kept busy over the next window_s seconds (this one sleeps meanwhile)."""
    meter = BusyMeter().start()
    time.sleep(window_s)
    return meter.stop()["others_cores"]


def free_threads(window_s: float = BUSY_WINDOW_S) -> tuple[int, dict]:
    """The thread count the machine really has free, and why: its CPUs less the cores other processes kept busy
    over window_s seconds, rounded to the nearest core, at least one (Note [Fair timing])."""
    available = cpus()
    others = others_busy_cores(window_s)
    if others is None:
        return available, {"cpus": available, "others_cores_before": None,
                           "threads_reason": f"{available} CPUs (the machine's load could not be read)"}
    threads = max(1, min(available, int(available - others + 0.5)))
    return threads, {"cpus": available, "others_cores_before": others,
                     "threads_reason": f"{available} CPUs, other processes kept {others:.1f} of them busy: "
                                       f"{threads} thread{'s' if threads != 1 else ''} free"}


def load_summary(before: float | None, during: dict, threads: int) -> dict:
    """The machine's load around a timing, for a report: load average, CPUs, the cores other processes used
    before and during it, and a warning in words when they competed with our threads."""
    available = cpus()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    others = during.get("others_cores")
    crowded = others is not None and others + threads > available + 0.5
    warning = ""
    if crowded:
        warning = (f"other processes kept {others:.1f} of {available} CPUs busy while timing on {threads} "
                   f"thread{'s' if threads != 1 else ''}: the times are inflated; trust a ratio only where it "
                   "is judged (both spreads narrow)")
    return {"load_avg_1m": load, "cpus": available, "others_cores_before": before, "others_cores_during": others,
            "steal_cores_during": during.get("steal_cores"), "load_warning": warning}


# --- timing in rounds ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class Timing:
    """One runner's figure: the median of its rounds (ms per call) and the rounds' quartiles."""
    median_ms: float
    q1_ms: float
    q3_ms: float
    rounds_ms: list[float]

    @classmethod
    def of(cls, rounds_ms: list[float]) -> "Timing":
        values = sorted(rounds_ms)
        if len(values) >= 4:
            q1, q2, q3 = statistics.quantiles(values, n=4)
        else:
            q1, q2, q3 = values[0], statistics.median(values), values[-1]
        return cls(q2, q1, q3, list(rounds_ms))

    @property
    def spread_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    @property
    def noisy(self) -> bool:
        return self.median_ms <= 0 or self.spread_ms > NOISY_SPREAD * self.median_ms


def _sync_for(device: str) -> Callable[[], None]:
    if str(device).startswith("cuda"):
        import torch
        return torch.cuda.synchronize
    return lambda: None


def interleaved(functions: dict[str, Callable[[], Any]], min_time_s: float = 0.5, device: str = "cpu",
                min_rounds: int = MIN_ROUNDS) -> dict[str, Timing]:
    """Each runner's Timing: rounds, each runner once a round in a rotating order, each time a block of calls
    (as many as fill min_time_s / min_rounds, at least MIN_BLOCK_S, at least one call, at the fastest per-call
    time seen so far), until every runner has min_rounds rounds and min_time_s of calls (Note [Fair timing]).
    Every function is called once first."""
    sync = _sync_for(device)
    names = list(functions)
    per_call = {}
    for name in names:  # a first call outside the timing, then one to size the blocks
        functions[name]()
        sync()
        start = time.perf_counter()
        functions[name]()
        sync()
        per_call[name] = max(time.perf_counter() - start, 1e-7)
    block_s = max(MIN_BLOCK_S, min_time_s / min_rounds)
    calls = {name: max(1, int(block_s / per_call[name])) for name in names}
    rounds: dict[str, list[float]] = {name: [] for name in names}
    spent = {name: 0.0 for name in names}
    r = 0
    while r < MAX_ROUNDS and (r < min_rounds or min(spent.values()) < min_time_s):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, n = functions[name], calls[name]
            sync()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            elapsed = time.perf_counter() - start
            spent[name] += elapsed
            rounds[name].append(elapsed / n * 1e3)
            if elapsed / n < per_call[name]:  # a faster call than the sizing one: longer blocks from now on
                per_call[name] = max(elapsed / n, 1e-7)
                calls[name] = max(1, int(block_s / per_call[name]))
        r += 1
    return {name: Timing.of(values) for name, values in rounds.items()}


def ratio(numerator: Timing | None, denominator: Timing | None) -> dict | None:
    """numerator / denominator, judged or not (Note [Fair timing]): {"ratio", "low", "high", "judged",
    "text"}; the range is the quartiles' (the ratio's value if both runners sat at opposite quartiles)."""
    if numerator is None or denominator is None or denominator.median_ms <= 0 or denominator.q1_ms <= 0:
        return None
    value = numerator.median_ms / denominator.median_ms
    low, high = numerator.q1_ms / denominator.q3_ms, numerator.q3_ms / denominator.q1_ms
    judged = not (numerator.noisy or denominator.noisy)
    text = f"{value:.2f}x ({low:.2f}-{high:.2f})" if judged else f"{TOO_NOISY} ({low:.2f}x-{high:.2f}x)"
    return {"ratio": value, "low": low, "high": high, "judged": judged, "text": text}


def timed_in_rounds(functions: dict[str, Callable[[], Any]], min_time_s: float, threads: int,
                    device: str = "cpu", before: float | None = None) -> tuple[dict[str, Timing], dict]:
    """interleaved() with the machine's load around it: (timings, load_summary)."""
    meter = BusyMeter().start()
    timings = interleaved(functions, min_time_s, device)
    return timings, load_summary(before, meter.stop(), threads)


# Note [Interleaved slices]
# The CPU tiling bench (scripts/cpu_tiling_bench.py) asks for one ratio (ours / Inductor) on two cores shared
# with other programs, where the load changes from one second to the next, so two runners timed in windows
# one after the other measure two different machines. Each repeat's time is cut into slices of about
# slice_seconds; the runners take one slice each per round, the first of a round rotating; the ratio of two
# runners is the median over rounds of the ratio of their slices in the same round (a few milliseconds
# apart, under nearly the same load), and each runner's time is its fastest slice (noise only ever adds
# time). A burst that hits one runner is one outlier among many rounds. The measurements behind it:
# reports/runtime_measurements.md, "Interleaved slices".
SLICE_SECONDS = 0.02


def sliced_ms(runners: dict, inputs: tuple, min_time: float, repeats: int, slice_seconds: float,
              clock=time.perf_counter) -> tuple[dict, list[float]]:
    """Per runner, the milliseconds per call of each of its slices, round by round (Note [Interleaved
    slices]), by `clock` (wall clock, or time.process_time for --cpu-time); and the 1-minute load averages
    seen along the way."""
    calls = {}
    for name, fn in runners.items():  # warm up, then size a slice from the fastest of three calls
        fn(*inputs)
        once = []
        for _ in range(3):
            start = clock()
            fn(*inputs)
            once.append(clock() - start)
        calls[name] = max(1, int(slice_seconds / max(min(once), 1e-9)))
    rounds = max(1, round(repeats * min_time / slice_seconds))
    times: dict = {name: [] for name in runners}
    loads = []
    names = list(runners)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection inside one runner's slice would be charged to it alone
    try:
        for index in range(rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                fn, count = runners[name], calls[name]
                start = clock()
                for _ in range(count):
                    fn(*inputs)
                times[name].append((clock() - start) / count * 1e3)
            if index % 10 == 9 or index == rounds - 1:
                loads.append(os.getloadavg()[0])
    finally:
        if gc_was_enabled:
            gc.enable()
    return times, loads


def paired_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median over rounds of ours / theirs in the same round (Note [Interleaved slices])."""
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


# --- GPU: a quiet host, then do_bench rounds (Note [Fair GPU timing]) -----------------------------------------


def host_busy_cores(window_s: float = QUIET_WINDOW_S) -> float | None:
    """CPU cores busy over the next window_s seconds, all processes (from /proc/stat); None where unreadable."""
    stat0 = _proc_stat()
    time.sleep(window_s)
    stat1 = _proc_stat()
    if stat0 is None or stat1 is None:
        return None
    ticks = stat1[0] - stat0[0]
    return (stat1[1] - stat0[1]) / ticks * (os.cpu_count() or 1) if ticks > 0 else 0.0


def quiet_host(max_s: float = QUIET_MAX_S) -> float | None:
    """Shut Inductor's compile workers down and wait (at most max_s) until the host is quiet; the busy cores
    seen last."""
    try:
        from torch._inductor import async_compile
        shutdown = getattr(async_compile, "shutdown_compile_workers", None)
        if shutdown is not None:
            shutdown()
    except Exception:  # noqa: BLE001 - an Inductor without it still gets the wait
        traceback.print_exc()
    deadline = time.perf_counter() + max_s
    while True:
        busy = host_busy_cores()
        if busy is None or busy < QUIET_CORES or time.perf_counter() >= deadline:
            return busy


class QuietHost:
    """quiet_host with a memory, one per run of many cases: once a wait runs out (the host is busy by itself:
    Inductor's workers are shut down by then, so a baseline load stays), later waits last at most
    2 * QUIET_WINDOW_S, so a run does not spend QUIET_MAX_S on every case."""

    def __init__(self, max_s: float = QUIET_MAX_S):
        self.max_s = max_s

    def __call__(self) -> float | None:
        busy = quiet_host(self.max_s)
        if busy is not None and busy >= QUIET_CORES and self.max_s > 2 * QUIET_WINDOW_S:
            self.max_s = 2 * QUIET_WINDOW_S
            print(f"[timing] the host stayed busy ({busy:.2f} cores) through the wait: later waits last at most "
                  f"{self.max_s:.1f} s", flush=True)
        return busy


def gpu_rounds(functions: dict, rounds: int = GPU_ROUNDS, warmup_ms: float = GPU_WARMUP_MS,
               rep_ms: float = GPU_REP_MS) -> dict:
    """name -> the do_bench median of each of `rounds` rounds, the runners in turn in each round, the first of
    a round rotating."""
    from triton.testing import do_bench

    names, times = list(functions), {name: [] for name in functions}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(float(do_bench(functions[name], warmup=warmup_ms, rep=rep_ms, return_mode="median")))
    return times
