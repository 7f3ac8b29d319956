"""The hostile suite's attacks on the app's own machinery (issue 33), run by `python -m engine sweep hostile` as

    python -m app.hostile_checks [--json]

in a process of their own (the engine's tools never import the app: tests/test_layering.py); their rows are the
suite's (engine/tools/sweep_hostile.py, reports/hostile_suite.md). Each check is an attack through the app's
real path (app/worker.py), and returns (outcome, message, processes it left running):
  - a job's document of tiny containers in the result cache: a model writes its bench document as 300,000
    empty lists, which take 16 times their JSON as Python objects; the app's result cache, bounded at 2.5 times
    one such document as measured, must hold no more than its bound measured the same way (Note [Result cache in
    bytes] in app/results.py);
  - a build when the app stops its job: a model asks the trusted builder for a source g++ takes minutes over,
    and the app stops the job (an exception out of on_tick, as Streamlit's Stop raises); no compiler process may
    be left (Note [Builds inside the job's limits] in engine/tools/builder.py).
Run with GLASSBOX_APP_STANDBY=0 (the suite does), so that no standby worker is left behind.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc
import uuid
from typing import Callable

from app import worker
from app.results import ResultCache
from engine.options import Options
from engine.tools import isolation, procfs

CONTAINERS = 300_000


def _held_bytes(text: str) -> tuple[dict, int]:
    """A document parsed from `text`, and what it holds as Python objects (tracemalloc), apart from the text."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = json.loads(text)
        return value, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def result_cache_bound() -> tuple[str, str, list[int]]:
    source = ("import json, os, sys\n"
              "out = sys.argv[sys.argv.index('--record-out') + 1]  # where the app reads the bench document\n"
              f"json.dump({{'cases': [], 'errors': [], 'rows': [[] for _ in range({CONTAINERS})]}}, open(out, 'w'))\n"
              "os._exit(0)\n")
    outcome = worker.bench(source, "tiny_containers", Options(), timeout=300, min_time=0.02, with_inductor=False)
    if not isinstance(outcome.document, dict) or len(outcome.document.get("rows") or []) != CONTAINERS:
        return "no-document", f"the app did not read the job's document: {outcome.problem}", []
    text = json.dumps(outcome.document)
    documents = [_held_bytes(text) for _ in range(3)]  # three jobs' documents, each as the app holds one
    bound = documents[0][1] * 5 // 2
    cache = ResultCache(max_entries=32, max_bytes=bound)
    for number, (document, _) in enumerate(documents):
        cache.put(f"job{number}", worker.Outcome(document=document))
    held = sum(size for number, (_, size) in enumerate(documents) if f"job{number}" in cache)
    message = (f"{len(cache)} of 3 documents kept ({len(text) >> 10} kB of JSON, {documents[0][1] >> 20} MB as "
               f"objects each): {held >> 20} MB held, counted as {cache.bytes >> 20} MB, against a bound of "
               f"{bound >> 20} MB")
    return ("within-bound" if held <= bound and cache.bytes >= held else "over-bound"), message, []


# a source g++ takes minutes over (each H<K> is a separate constexpr evaluation of 260,000 iterations, under
# g++'s per-evaluation limits), so that a compile is still running when its job ends
SLOW_SOURCE = ("constexpr long g(long n) { long s = 0; for (long i = 0; i < n; ++i) s += i % 13; return s; }\n"
               "template<int K> struct H { static constexpr long v = g(260000 + K); };\n"
               "template<int N> struct S { static constexpr long v = H<N>::v + S<N - 1>::v; };\n"
               "template<> struct S<0> { static constexpr long v = 0; };\n"
               "extern \"C\" long get() { return S<800>::v + SALT; }\n")


class _Stop(Exception):
    """What the app's Stop raises out of on_tick (Streamlit's StopException, a rerun)."""


def build_when_the_app_stops() -> tuple[str, str, list[int]]:
    build_source = SLOW_SOURCE.replace("SALT", str(uuid.uuid4().int % 100000))
    source = ("import torch\nfrom engine.runtime import build\n"
              f"build.build_library({build_source!r})\n"
              "model = torch.nn.ReLU()\nexample_inputs = (torch.randn(3),)\n")
    seen: list[int] = []

    def stop_while_compiling(seconds: float) -> None:
        seen.extend(pid for pid in procfs.compilers_below(os.getpid()) if pid not in seen)
        if seconds > 2 and any(procfs.command_name(pid) == "cc1plus" for pid in procfs.alive(seen)):
            raise _Stop
        if seconds > 180:
            raise TimeoutError

    try:
        worker.explore(source, "slow_build", Options(), timeout=600, on_tick=stop_while_compiling)
        return "not-stopped", "the job ended before a compile was seen", []
    except TimeoutError:
        return "no-compile", "no compiler process started within 180 s", []
    except _Stop:
        pass
    deadline = time.monotonic() + 5
    while procfs.alive(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = procfs.alive(seen) + [pid for pid in procfs.compilers_below(os.getpid()) if pid not in seen]
    isolation.kill_processes(left)  # the suite leaves nothing running, whatever the outcome
    words = "the builder's" if not isolation.bwrap_problem() else "the job's own"
    return (("compile-killed" if not left else "compile-left-running"),
            f"{len(seen)} compiler processes ({words}) seen while the job ran; {len(left)} left after the stop", left)


# name -> (attack, expected outcome, what the outcome means)
CHECKS: dict[str, tuple[Callable[[], tuple[str, str, list[int]]], str, str]] = {
    "a job's document of tiny containers in the app's result cache": (
        result_cache_bound, "within-bound",
        "the cache counts at least what it holds, so it holds no more than its bound (Note [Result cache in "
        "bytes])"),
    "the app stops a job while its build runs": (
        build_when_the_app_stops, "compile-killed",
        "the builder kills its compile when the job's worker is closed (Note [Builds inside the job's limits])"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.hostile_checks", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the outcomes as one JSON document")
    args = parser.parse_args(argv)
    rows = []
    for name, (attack, expected, note) in CHECKS.items():
        start = time.monotonic()
        try:
            outcome, message, left = attack()
        except Exception as error:  # a check that breaks is a failing row, with why
            outcome, message, left = "error", f"{type(error).__name__}: {error}", []
        rows.append({"case": name, "expected": expected, "outcome": outcome, "message": message, "note": note,
                     "seconds": time.monotonic() - start, "leftovers": left, "passed": outcome == expected})
    worker.STANDBY.close()
    if args.json:
        print(json.dumps({"outcomes": rows}))
    else:
        for row in rows:
            print(f"{'ok  ' if row['passed'] else 'FAIL'} {row['case']}: {row['outcome']} ({row['message']})")
    return 0 if all(row["passed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
