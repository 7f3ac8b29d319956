"""GPU timing that is fair to host-bound runners (Note [Fair GPU timing]): for scripts/gpu_check.py and
scripts/gemm_bench.py.

Note [Fair GPU timing]
A GPU time is the host's time too wherever the host cannot keep the queue ahead of the kernels: do_bench
records an event, clears L2, calls the function and records another for every sample, so a call whose host
work outlasts its kernels (a small model in default mode, a small GEMM) is timed at its host's pace. The
H200 runs of 2026-12-02 timed each runner once, one after the other, right after every runner's first call;
Inductor's came last, and Inductor wakes its pool of compile workers at every compile
(torch._inductor.async_compile.maybe_warm_pool: one process per core, each importing torch, for seconds).
The runners timed next shared the host with them: the load average went from 1.3 to 4.8 in the GEMM run,
where a plan identical to another runner's timed 0.095 ms against 0.074. The zoo runs every model that way
too (ours compiled, Inductor compiled, then eager, ours and Inductor timed): host-bound ResNet-50 timed
3.39 ms for us against Inductor's 2.20 there, where launch_profile's host times, taken before Inductor had
compiled anything, had ours 5% below Inductor's (part of that gap was ours all the same: the per-call
moves of Note [Tensors on another device]). So timing now
  - shuts Inductor's compile workers down once every runner has made its first call (they start again at
    Inductor's next compile, outside any timing), then waits until the host is quiet: less than QUIET_CORES
    of busy CPU over QUIET_WINDOW_S, read from /proc/stat, for at most QUIET_MAX_S (the busy cores seen last
    go into the report; once a wait runs out, the host is busy by itself and the run's later waits are short:
    QuietHost);
  - times the runners in rounds, each runner once a round in an order that rotates, and reports the median
    of its rounds' medians, with the rounds beside it: a burst of host load shows as one slow round of every
    runner timed in it, not as one runner's figure.
"""
from __future__ import annotations

import os
import time
import traceback

QUIET_CORES, QUIET_WINDOW_S, QUIET_MAX_S = 1.0, 0.5, 30.0
GPU_ROUNDS, GPU_WARMUP_MS, GPU_REP_MS = 5, 10, 40  # per round and runner


def host_busy_cores(window_s: float = QUIET_WINDOW_S) -> float | None:
    """CPU cores busy over the next window_s seconds, all processes (from /proc/stat); None where unreadable."""
    def sample():
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
        return sum(values), values[3] + (values[4] if len(values) > 4 else 0)  # total, idle + iowait
    try:
        total0, idle0 = sample()
        time.sleep(window_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    ticks = total1 - total0
    return (ticks - (idle1 - idle0)) / ticks * (os.cpu_count() or 1) if ticks > 0 else 0.0


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
    deadline, busy = time.perf_counter() + max_s, None
    while True:
        busy = host_busy_cores()
        if busy is None or busy < QUIET_CORES or time.perf_counter() >= deadline:
            return busy


class QuietHost:
    """quiet_host with a memory, one per run of many cases: once a wait runs out (the host is busy by itself:
    Inductor's workers are shut down by then, so a baseline load stays), later waits last at most
    2 * QUIET_WINDOW_S, so a run does not spend QUIET_MAX_S on every case (9 GEMM cases would wait 4.5 minutes
    of a 10-minute device call)."""

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
