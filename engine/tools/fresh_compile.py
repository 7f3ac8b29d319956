"""A warm compile in a fresh process: what a second `python -m engine explore` of the same model waits for.

Note [Fresh-process warm compile]
bench's compile_warm_s compiles again in the process that compiled first, after torch._dynamo.reset(): torch's
and our modules are imported and their one-time set-up is done. A new process (a CLI call, an app worker)
starts without that, so bench also runs this module in a child process against the same, now filled,
compile cache. The child imports the compile path first (those seconds are reported apart, as `imports_s`),
then times the first call of engine.compile(model): `first_call_s`, of which `ours_s` is spent in Glassbox's
own stages (lower, schedule, codegen, build: a cache hit) and the rest in Dynamo and AOTAutograd.

Run as `python -m engine.tools.fresh_compile CASE` (a bench case name, sample name or model file); it prints one
JSON object.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def measure(case_name: str) -> dict:
    start = time.perf_counter()
    import torch

    import engine.pipeline as pipeline
    from engine.tools.bench import load_case
    import engine.lowering.all_lowerings  # noqa: F401  the lowering registry, imported on first use otherwise

    spec = load_case(case_name)
    imports_s = time.perf_counter() - start
    ours: dict[str, float] = {}
    compile_graph = pipeline.compile_graph

    def timed_compile_graph(aten_gm, example_inputs, options, timings):
        return compile_graph(aten_gm, example_inputs, options, ours)

    pipeline.compile_graph = timed_compile_graph
    compiled = pipeline.compile(spec.model)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(*spec.example_inputs)
    first_call_s = time.perf_counter() - start
    return {"imports_s": imports_s, "first_call_s": first_call_s, "ours_s": sum(ours.values()),
            "stages_s": ours}


def in_fresh_process(case_name: str, timeout_s: float = 300) -> dict:
    """measure(case_name) in a child Python process (same environment: the caller's compile cache)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # in a sandboxed worker, builds go over the socket GLASSBOX_BUILDER_FD to the trusted builder (engine/build.py):
    # the child needs that descriptor too (subprocess closes every other one by default)
    builder = os.environ.get("GLASSBOX_BUILDER_FD")
    result = subprocess.run([sys.executable, "-m", "engine.tools.fresh_compile", case_name], capture_output=True,
                            text=True, timeout=timeout_s, env=env, pass_fds=(int(builder),) if builder else ())
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh-process compile failed: {last}")
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1])))
