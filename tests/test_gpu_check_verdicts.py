"""`python -m engine bench gpu` (engine/tools/bench_gpu.py) judges compiled outputs by the engine's rule (Note
[Tolerance policy]): close to eager, or no less accurate than eager against float64. A bf16 cancellation far from
eager (eager's own rounding) but close to the float64 result passes, judged by fp64; a wrong answer still fails."""
import torch

from engine.tools import bench_gpu as gpu_check
from engine.tools.bench_verdicts import Verdicts


def cancellation(x):
    return (x + 1000) - 1000  # in bf16, eager rounds x to a multiple of 4 (bf16's step at 1000)


def test_zoo_verdict_is_the_engines():
    torch.manual_seed(0)
    x = torch.rand(4096, dtype=torch.bfloat16) * 4
    expected = [cancellation(x)]
    judge = Verdicts(cancellation, (x,), expected, None)
    accurate = [x.clone()]  # computed in float32: better than eager
    verdict = judge("glassbox", accurate)
    assert verdict["glassbox_ok"] and verdict["glassbox_judged_by"] == "fp64", verdict
    assert judge.fp64_note.startswith("computed")
    wrong = judge("inductor", [accurate[0] + 20])
    assert not wrong["inductor_ok"], wrong
    close = Verdicts(cancellation, (x,), expected, None)("glassbox", [expected[0].clone()])
    assert close["glassbox_ok"] and close["glassbox_judged_by"] == "eager"


def test_the_tests_section_keeps_each_failures_traceback():
    """The GPU tests section reports pytest's FAILURES section, which the output's tail can miss (a -rA
    summary of 44 tests pushed it out on the H200)."""
    output = "\n".join(["....F", "=" * 20 + " FAILURES " + "=" * 20, "___ test_a ___", "E   assert 1 == 2",
                        "=" * 10 + " short test summary info " + "=" * 10, *[f"PASSED t{i}" for i in range(500)],
                        "FAILED test_a", "1 failed, 500 passed"])
    failures = gpu_check._failures(output)
    assert "E   assert 1 == 2" in failures and "PASSED" not in failures and "short test summary" not in failures
    assert gpu_check._failures("3 passed") == ""


def test_a_graph_that_ran_eagerly_fails_the_check(monkeypatch):
    # Note [A fallback is loud]: a case whose graph fell back is marked, gets no ratio, and fails the run
    import dataclasses

    from engine import pipeline

    def broken(artifact, options):
        raise RuntimeError("injected failure")

    stages = list(pipeline.STAGES)
    where = [s.name for s in stages].index("codegen")
    stages[where] = dataclasses.replace(stages[where], fn=broken)
    monkeypatch.setattr(pipeline, "STAGES", stages)
    case = dict(name="gelu_chain", model=gpu_check.gelu_chain, inputs=lambda: (torch.randn(256),))
    report = gpu_check.run_case(case, "cpu", gpu_check.timer("cpu"), with_inductor=False)
    assert report["fallbacks"] == ["fell back: codegen stage, RuntimeError: injected failure"], report
    assert "eager_over_glassbox" not in report and "fell back" in gpu_check.table_row(report)
