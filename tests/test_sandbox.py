"""The sandboxed worker keeps the caller safe: limits stop runaway models, the environment is clean."""
import json
import os
import sys
import textwrap

import pytest

from engine.tools.sandbox import Limits, explore_command, run_sandboxed

pytestmark = pytest.mark.slow  # sandboxed workers that run into their limits (Note [Two lanes], tests/conftest.py)


def _model_file(tmp_path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_infinite_loop_is_stopped_by_the_time_limit(tmp_path):
    target = _model_file(tmp_path, """
        import torch
        def model(x):
            while True:
                x = x + 1
        example_inputs = (torch.randn(3),)
    """)
    result = run_sandboxed(explore_command(target, []), Limits(timeout_s=8))
    assert result.limit_hit == "time" and "stopped" in result.explain()


def test_memory_bomb_is_stopped_by_the_memory_limit(tmp_path):
    target = _model_file(tmp_path, """
        import torch
        hoard = []
        def model(x):
            while True:
                hoard.append(torch.ones(2 ** 25))
        example_inputs = (torch.randn(3),)
    """)
    result = run_sandboxed(explore_command(target, []), Limits(timeout_s=60, memory_mb=1200))
    assert result.limit_hit == "memory" and "memory" in result.explain()


@pytest.mark.parametrize("attempt", range(3))  # the kill used to outrun the stack now and then: try thrice
def test_a_fast_allocator_is_stopped_with_its_stack(tmp_path, attempt):
    # Note [Memory backstop]: the polling stops it (after asking for its stack), not the kernel's limit first
    import signal
    from engine.tools.sandbox import SandboxedProcess

    script = tmp_path / "bomb.py"
    script.write_text("import faulthandler, signal\n"
                      "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
                      "hoard = []\n"
                      "while True:\n"
                      "    hoard.append(b'x' * (128 << 20))\n")
    process = SandboxedProcess([sys.executable, str(script)], Limits(timeout_s=60, memory_mb=768),
                               stack_signal=signal.SIGUSR1)
    try:
        result = process.wait()
    finally:
        process.close()
    assert result.limit_hit == "memory", result.explain()
    assert 'bomb.py", line 5' in result.stderr, result.stderr[-2000:]


def test_worker_sees_no_inherited_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_TEST_SECRET", "hunter2")
    result = run_sandboxed([sys.executable, "-c", "import os; print(sorted(os.environ))"], Limits(timeout_s=30))
    assert result.ok and "GLASSBOX_TEST_SECRET" not in result.stdout


def test_a_sample_explores_through_the_sandbox():
    result = run_sandboxed(explore_command("scale_bias_relu", []), Limits(timeout_s=180))
    assert result.ok, result.explain()
    record = json.loads(result.stdout)
    assert record["verify"]["ok"] and record["graphs"][0]["kernels"]


def _worker_pid(marker: str, timeout_s: float = 60) -> int:
    """The pid of the worker whose command line names `marker` (its model file)."""
    import time
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and entry.name != str(os.getpid()):
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                        argv = cmdline.read()
                    if marker.encode() in argv and b"explore" in argv:
                        return int(entry.name)
                except OSError:
                    continue
        time.sleep(0.1)
    raise AssertionError("the worker never started")


def test_killing_a_worker_mid_run_gives_a_clear_message_and_the_next_run_works(tmp_path):
    import signal
    import threading
    target = _model_file(tmp_path, """
        import time, torch
        time.sleep(60)
        def model(x):
            return x
        example_inputs = (torch.randn(3),)
    """)
    results = []
    runner = threading.Thread(target=lambda: results.append(
        run_sandboxed(explore_command(target, []), Limits(timeout_s=90))))
    runner.start()
    os.kill(_worker_pid(target), signal.SIGKILL)
    runner.join(timeout=60)
    assert results and results[0].returncode == -signal.SIGKILL
    assert "killed by signal SIGKILL" in results[0].explain()
    test_a_sample_explores_through_the_sandbox()


def test_four_explorations_at_once_all_finish_correctly(tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    targets = []
    for scale in range(4):
        (tmp_path / f"m{scale}").mkdir()
        targets.append(_model_file(tmp_path / f"m{scale}", f"""
            import torch
            def model(x):
                return torch.relu(x) * {scale + 2} + 1
            example_inputs = (torch.randn(8, 8),)
        """))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda t: run_sandboxed(explore_command(t, []), Limits(timeout_s=240)), targets))
    for result in results:
        assert result.ok, result.explain()
        assert json.loads(result.stdout)["verify"]["ok"]


# --- the pieces the app's worker uses: a standby process, signals in words, CPU limit, interruption ----------

WAITS_FOR_A_JOB = """
import json, os, sys, time
job = json.loads(sys.stdin.readline())
print(json.dumps({"job": job, "cwd": os.getcwd(), "secret": os.environ.get("GLASSBOX_TEST_SECRET")}))
exec(job["code"])
"""


def test_a_standby_process_takes_one_job_under_the_jobs_limits(monkeypatch):
    import time
    from engine.tools.sandbox import Standby
    monkeypatch.setenv("GLASSBOX_TEST_SECRET", "hunter2")
    standby = Standby([sys.executable, "-c", WAITS_FOR_A_JOB], Limits(timeout_s=1, cpu_s=60))
    standby.refill()
    process = standby.take()
    assert process is not None and standby.take() is None  # one process, one job
    try:
        time.sleep(2)  # idle longer than the time limit: the limits count from the job only
        assert process.send(json.dumps({"code": "pass"}), Limits(timeout_s=30))
        result = process.wait()
        assert result.ok, result.explain()
        printed = json.loads(result.stdout)
        assert printed["job"] == {"code": "pass"} and printed["secret"] is None
        assert printed["cwd"] == str(process.workdir)  # its own directory...
    finally:
        process.close()
    assert not process.workdir.exists()  # ...removed afterwards


def test_a_standby_job_that_hangs_is_stopped_at_the_jobs_time_limit():
    from engine.tools.sandbox import Standby
    standby = Standby([sys.executable, "-c", WAITS_FOR_A_JOB], Limits())
    process = standby.start()
    try:
        process.send(json.dumps({"code": "while True: pass"}), Limits(timeout_s=2))
        result = process.wait()
    finally:
        process.close()
    assert result.limit_hit == "time" and "2 s" in result.explain() and result.wall_s < 10


SLOW_TO_START = """
import json, pathlib, sys, time
time.sleep(3)  # importing torch on a busy machine
job = json.loads(sys.stdin.readline())
pathlib.Path(job["started"]).write_text("")
exec(job["code"])
"""


@pytest.mark.parametrize("code,stopped", [("time.sleep(0.5)", False), ("while True: pass", True)])
def test_a_jobs_time_limit_counts_from_when_the_worker_has_begun_it(code, stopped):
    """Note [Standby worker]: a job handed to a worker that is still importing gets its whole time limit."""
    from engine.tools.sandbox import Standby
    process = Standby([sys.executable, "-c", SLOW_TO_START], Limits()).start()
    started = process.workdir / "started"
    try:
        process.send(json.dumps({"code": code, "started": str(started)}), Limits(timeout_s=2))
        result = process.wait(started=started.exists)
    finally:
        process.close()
    assert (result.limit_hit == "time") == stopped, result.explain()
    assert result.wall_s > 3 + (2 if stopped else 0.5)  # the imports, then the job's own time


BUSY_BEFORE_STARTING = """
import json, pathlib, sys, time
job = json.loads(sys.stdin.readline())
end = time.process_time() + 2.5
while time.process_time() < end:  # importing torch on a busy machine costs processor time too
    pass
pathlib.Path(job["started"]).write_text("")
exec(job["code"])
"""


@pytest.mark.parametrize("code,stopped", [("time.sleep(0.2)", False), ("while True: pass", True)])
def test_a_jobs_cpu_limit_counts_from_when_the_worker_has_begun_it(code, stopped):
    """Note [Standby worker]: processor time spent on the imports does not count against the job's CPU limit,
    and the job's own does."""
    from engine.tools.sandbox import Standby
    process = Standby([sys.executable, "-c", BUSY_BEFORE_STARTING], Limits()).start()
    started = process.workdir / "started"
    try:
        process.send(json.dumps({"code": code, "started": str(started)}), Limits(timeout_s=60, cpu_s=2))
        result = process.wait(started=started.exists)
    finally:
        process.close()
    assert (result.limit_hit == "cpu") == stopped, result.explain()
    assert result.ok != stopped


@pytest.mark.parametrize("code,words", [
    ("import ctypes; ctypes.string_at(0)", "killed by signal SIGSEGV (segmentation fault)"),
    ("raise KeyboardInterrupt", "killed by signal SIGINT (interrupt)"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by signal SIGKILL (killed)"),
    ("import os; os.abort()", "killed by signal SIGABRT (abort)"),
])
def test_a_process_killed_by_a_signal_is_explained_in_words(code, words):
    result = run_sandboxed([sys.executable, "-c", code], Limits(timeout_s=30))
    assert result.signal is not None and result.limit_hit is None
    assert words in result.explain() and "next exploration" in result.explain()


def test_cpu_time_limit():
    result = run_sandboxed([sys.executable, "-c", "while True: pass"], Limits(timeout_s=60, cpu_s=1))
    assert result.limit_hit == "cpu" and "CPU-time limit" in result.explain()


def test_an_interrupted_caller_kills_the_whole_group(tmp_path):
    from engine.tools.sandbox import SandboxedProcess
    process = SandboxedProcess([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '60'])"],
                               Limits(timeout_s=60))

    def interrupt(seconds):
        raise KeyboardInterrupt  # what Streamlit's stop looks like from inside on_tick

    with pytest.raises(KeyboardInterrupt):
        process.wait(on_tick=interrupt, tick_s=0.5)
    process.close()
    from engine.tools import procfs
    assert procfs.leftovers(process.pid, process.pid_namespace) == []  # the sleeping child went too
