"""A warm compile in a fresh process: what a second `python -m engine explore` of the same model waits for.

Note [Fresh-process warm compile]
bench's compile_warm_s compiles again in the process that compiled first, after torch._dynamo.reset(): torch's
and our modules are imported and their one-time set-up is done. A new process (a CLI call, an app worker)
starts without that, so bench also runs this module in a child process against the same, now filled,
compile cache. The child imports the compile path first (those seconds are reported apart, as `imports_s`),
then times the first call of engine.compile(model): `first_call_s`, of which `ours_s` is spent in Glassbox's
own stages (lower, schedule, codegen, build: a cache hit) and the rest in Dynamo and AOTAutograd.

Run as `python -m engine.tools.fresh_compile CASE` (a bench case name, sample name or model file); it prints one
JSON object. bench.py starts it (in_fresh_process) and imports nothing from here: this side is the child.
"""
from __future__ import annotations

import json
import sys
import time


def measure(case_name: str) -> dict:
    start = time.perf_counter()
    import torch

    import engine.pipeline as pipeline
    from engine.tools.bench import load_case
    import engine.lowering.all_lowerings  # noqa: F401  the lowering registry, imported on first use otherwise

    spec = load_case(case_name)
    imports_s = time.perf_counter() - start
    ours: dict[str, float] = {}

    def heard(stage: str, seconds: float) -> None:  # the pipeline's timing hook
        if stage in pipeline.GRAPH_STAGES:
            ours[stage] = ours.get(stage, 0.0) + seconds

    compiled = pipeline.compile(spec.model, on_stage=heard)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(*spec.example_inputs)
    first_call_s = time.perf_counter() - start
    return {"imports_s": imports_s, "first_call_s": first_call_s, "ours_s": sum(ours.values()),
            "stages_s": ours}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1])))
