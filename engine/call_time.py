"""The whole model's time per call, compiled and eager, measured once an exploration has run.

Note [Call time]
What an edit costs or saves at run time (a graph-break fix applied in place, Note [Applying a rewrite] in
engine/tools/apply_fix.py) is the whole call as the model makes it: the compiled graphs and the Python between
them, which is where a graph break leaves the code Dynamo did not capture. So after the run stage the compiled
model and eager take turns in interleaved rounds (Note [Fair timing] in engine/runtime/timing.py: each a median
of rounds with its interquartile range) for about CALL_TIME_S each, on copies of the example inputs, under
no_grad and with the threads of the first call (both are Dynamo guards: a change would recompile), and Dynamo
told to fail rather than recompile (a call that would recompile adds graphs to the record: it says so instead
of a time). On a busy machine the spreads are wide and the ratio says "too noisy to judge". Two explorations (before and after an edit) are timed in different
processes, maybe under different load: each one's ratio to eager, timed in the same rounds, is what compares
them fairly, and a ratio whose spreads are wide reads "too noisy to judge". Training steps are not timed here
(bench --train times them).
"""
from __future__ import annotations

import torch

from engine import run as run_module
from engine.record import CallTime
from engine.runtime.timing import interleaved, ratio

CALL_TIME_S = 0.2


def measure(model, compiled, inputs: tuple, device: str = "cpu") -> CallTime:
    """CallTime of `compiled` against eager `model` (Note [Call time]); a call that raises says why instead."""
    eager_inputs, compiled_inputs = run_module.fresh(inputs), run_module.fresh(inputs)
    try:
        with torch.no_grad(), torch.compiler.set_stance("fail_on_recompile"):
            timings = interleaved({"eager": lambda: model(*eager_inputs),
                                   "compiled": lambda: compiled(*compiled_inputs)}, CALL_TIME_S, device)
    except Exception as error:  # noqa: BLE001 - the exploration stands; the record says why there is no time
        return CallTime(error=f"{type(error).__name__}: {str(error)[:200]}")
    ours, eager = timings["compiled"], timings["eager"]
    return CallTime(ms=ours.median_ms, iqr_ms=ours.spread_ms, eager_ms=eager.median_ms,
                    eager_iqr_ms=eager.spread_ms, rounds=len(ours.rounds_ms), threads=torch.get_num_threads(),
                    speedup=ratio(eager, ours) or {})
