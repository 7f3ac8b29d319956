"""`python -m engine bench gemm` (engine/tools/bench_gemm.py) and the timing it takes from engine/runtime/timing.py
(Note [Fair GPU timing]): Inductor's compile workers are shut down and the host waited on before timing, the GPU
runners are timed in rounds in a rotating order and reported by the median round, the JSON is written after every
case, and --kernels sums a runner's GPU kernels; checked with stand-ins for do_bench, /proc/stat and the profiler,
and by a --dry-run of the bench (tiny shapes on the CPU, Triton under the interpreter)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    from engine.tools import bench_gemm
    return bench_gemm


@pytest.fixture(scope="module")
def fair():
    from engine.runtime import timing
    return timing


def test_gpu_runners_are_timed_in_rotating_rounds(fair, monkeypatch):
    import triton.testing

    order = []
    times = iter(range(1, 100))

    def fake_do_bench(fn, warmup, rep, return_mode):
        fn()
        return float(next(times))
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    functions = {name: (lambda name=name: order.append(name)) for name in ("eager", "gb_autotune", "inductor")}
    rounds = fair.gpu_rounds(functions, 5, 10, 40)
    assert all(len(v) == 5 for v in rounds.values()), rounds
    firsts = order[::len(functions)]
    assert firsts[:3] == ["eager", "gb_autotune", "inductor"], order  # no runner is always first after the wait
    for r in range(5):  # each round times every runner once
        assert sorted(order[r * 3:(r + 1) * 3]) == sorted(functions), order


def test_quiet_host_shuts_inductors_workers_down_and_waits(fair, monkeypatch):
    from torch._inductor import async_compile

    shut, busy = [], iter([3.5, 2.0, 0.4, 0.1])
    monkeypatch.setattr(async_compile, "shutdown_compile_workers", lambda: shut.append(True))
    monkeypatch.setattr(fair, "host_busy_cores", lambda window_s=0: next(busy))
    assert fair.quiet_host(max_s=60) == 0.4 and shut == [True]
    monkeypatch.setattr(fair, "host_busy_cores", lambda window_s=0: 5.0)
    assert fair.quiet_host(max_s=0) == 5.0  # never quiet: it gives up at the deadline


def test_host_busy_cores_reads_the_machine(fair):
    busy = fair.host_busy_cores(0.05)
    assert busy is None or 0 <= busy <= (os.cpu_count() or 1) + 1e-6


def test_timing_notes_name_the_widest_spread(bench):
    reports = [{"name": "a M=1", "eager_rounds_ms": [1.0, 1.1], "gb_autotune_rounds_ms": [1.0, 2.0],
                "host_busy_cores": 0.3}, {"name": "b M=1", "eager_rounds_ms": [1.0, 1.0], "host_busy_cores": 0.8}]
    text = "\n".join(bench.timing_notes(reports))
    assert "2.00 (a M=1, gb_autotune)" in text and "0.30 to 0.80" in text, text


@pytest.mark.slow
def test_dry_run_writes_its_report(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path), "GLASSBOX_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "engine", "bench", "gemm", "--device", "cuda", "--dry-run",
                             "--only", "proj_residual", "--runners", "gb_library,gb_autotune", "--json"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (case,) = json.loads((tmp_path / "gemm_bench_cuda_dry.json").read_text())["cases"]
    assert json.loads(result.stdout)["cases"] == [case]  # --json: the same cases on stdout, and nothing else
    assert case["eager_ok"] and case["gb_library_ok"] and case["gb_autotune_ok"], case
    assert "host_busy_cores" in case and "inductor_ms" not in case, case


def test_kernel_summary_counts_gpu_kernels_a_call(bench):
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    averages = [SimpleNamespace(key="ampere_bf16_gemm", count=20, device_type=DeviceType.CUDA,
                                self_device_time_total=1200.0),
                SimpleNamespace(key="template_0", count=10, device_type=DeviceType.CUDA, self_device_time_total=150.0),
                SimpleNamespace(key="aten::mm", count=20, device_type=DeviceType.CPU, self_device_time_total=0.0)]
    summary = bench.kernel_summary(averages, calls=10)
    assert summary["kernels"] == 3 and summary["kernel_us"] == 135.0, summary
    assert list(summary["by_kernel"]) == ["ampere_bf16_gemm", "template_0"], summary
    text = bench.kernels_text([{"name": "swiglu M=8192", "kernels": {"gb_autotune": {"host_us": 40.0, **summary}}}])
    assert "135.0 us in 3" in text and "host    40.0 us" in text, text


def test_a_case_is_saved_once_timed_before_its_autotune_choices(bench, monkeypatch):
    """The choices compile the model once more (minutes for an end-to-end case): the figures are saved first."""
    import torch

    events = []
    monkeypatch.setattr(bench, "autotune_choices", lambda *args: events.append("choices") or [])
    case = {"name": "linear M=16", "model": bench.MODELS["linear"](16, 32), "dtype": torch.float32,
            "inputs": lambda: (torch.randn(16, 16),)}
    monkeypatch.setattr(bench, "CPU_SECONDS", 0.0)
    report = bench.run_case(case, "cpu", 1, False, {"gb_autotune"},
                            checkpoint=lambda report: events.append(("saved", report.get("gb_autotune_ms"))))
    assert [e if isinstance(e, str) else e[0] for e in events] == ["saved", "choices"], events
    assert events[0][1] and report["gb_autotune_ok"], (events, report)


def test_a_host_busy_by_itself_is_waited_on_once(fair, monkeypatch):
    """After one wait that ran out (a baseline load, not Inductor's workers), later waits are short."""
    waits = []

    def quiet_host(max_s):
        waits.append(max_s)
        return 3.0
    monkeypatch.setattr(fair, "quiet_host", quiet_host)
    quiet = fair.QuietHost()
    assert [quiet() for _ in range(3)] == [3.0] * 3
    assert waits == [fair.QUIET_MAX_S, 2 * fair.QUIET_WINDOW_S, 2 * fair.QUIET_WINDOW_S], waits
    monkeypatch.setattr(fair, "quiet_host", lambda max_s: waits.append(max_s) or 0.2)
    quiet = fair.QuietHost()
    quiet(), quiet()
    assert waits[-2:] == [fair.QUIET_MAX_S, fair.QUIET_MAX_S]  # a host that gets quiet keeps the full wait