"""Isolation by the operating system (Note [Isolation]): what a hostile model tries, and the safe outcome.

Each test runs the attack in a sandboxed worker and checks the outcome from outside: the caller is alive, no
secret crossed, no process of the job is left (its session and its PID namespace are empty), its directory is
gone. They need bubblewrap (and, for the memory ones, a writable cgroup or the polling fallback)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from engine.tools import isolation
from engine.tools.procfs import leftovers
from engine.tools.sandbox import Limits, SandboxedProcess, Standby, explore_command, run_sandboxed

pytestmark = pytest.mark.slow  # sandboxed workers under bubblewrap (Note [Two lanes], tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(bool(isolation.bwrap_problem()), reason=isolation.bwrap_problem() or "")


def python(code: str, limits: Limits = Limits(timeout_s=60), **options):
    return run_sandboxed([sys.executable, "-c", textwrap.dedent(code)], limits, **options)


def assert_nothing_left(result):
    assert leftovers(result.session, result.pid_namespace) == []


@needs_bwrap
@pytest.mark.parametrize("escape", ["os.setpgid(0, 0)", "os.setsid()"])
def test_a_child_that_leaves_the_process_group_dies_with_the_job(escape):
    result = python(f"""
        import os, sys, time
        if os.fork() == 0:
            {escape}
            if os.fork() == 0:  # a daemon: double fork, reparented to the namespace's init
                time.sleep(300)
                os._exit(0)
            os._exit(0)
        time.sleep(0.5)
        print("parent done")
    """)
    assert result.ok and "parent done" in result.stdout, result.explain()
    assert result.pid_namespace is not None
    assert_nothing_left(result)


@needs_bwrap
def test_a_model_that_kills_its_parent_does_not_reach_the_caller():
    result = python(f"""
        import os, signal
        os.kill(os.getppid(), signal.SIGKILL)   # bwrap's init in the job's namespace: ignored
        try:
            os.kill({os.getpid()}, signal.SIGKILL)  # the caller's pid: not in this namespace
            print("reached the caller")
        except ProcessLookupError:
            print("caller not visible")
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        print("survived", os.getppid())
    """)
    assert result.ok and "caller not visible" in result.stdout and "survived" in result.stdout, result.explain()
    assert_nothing_left(result)


def _server_with_a_secret(code: str, secret: str, extra_env: dict | None = None) -> str:
    """Run `code` sandboxed from a separate "server" process whose environment holds a secret; the job's
    stdout."""
    server = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from engine.tools.sandbox import Limits, run_sandboxed
        result = run_sandboxed([sys.executable, "-c", {textwrap.dedent(code)!r}], Limits(timeout_s=60))
        print(result.stdout + result.stderr)
    """)
    env = {**os.environ, "GLASSBOX_SERVER_SECRET": secret, **(extra_env or {})}
    return subprocess.run([sys.executable, "-c", server], env=env, capture_output=True, text=True,
                          timeout=120).stdout


@needs_bwrap
def test_the_servers_environment_cannot_be_read():
    secret = "hunter2-" + uuid.uuid4().hex
    printed = _server_with_a_secret("""
        import os
        seen = []
        for pid in ["self", str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                seen.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
            except OSError:
                pass
        print("read", len(seen), "environments;", "\\n".join(seen))
    """, secret)
    assert "read" in printed and "environments" in printed
    assert secret not in printed


@needs_bwrap
@pytest.mark.parametrize("hoard", [
    "open('/dev/shm/hoard', 'wb')",
    "open('/tmp/hoard', 'wb')",
    "os.fdopen(os.memfd_create('hoard'), 'wb')",
])
def test_shared_memory_counts_against_the_memory_limit(hoard):
    result = python(f"""
        import os, time
        hoard = {hoard}
        for _ in range(150):
            hoard.write(b"x" * (10 << 20))
            hoard.flush()
        time.sleep(1)
        print("kept 1.5 GB")
    """, Limits(timeout_s=60, memory_mb=400))
    assert result.limit_hit == "memory" or (result.returncode != 0 and "No space left" in result.stderr), \
        (result.limit_hit, result.returncode, result.stderr[-500:])
    assert "kept 1.5 GB" not in result.stdout
    assert_nothing_left(result)


@needs_bwrap
def test_the_job_sees_the_system_read_only_and_no_network(tmp_path):
    result = python(f"""
        import os, socket
        for path in [{str(ROOT / "glassbox-written")!r}, "/etc/glassbox-written", {str(tmp_path / "x")!r}]:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError as error:
                print("refused", path, error.errno)
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=3)
            print("network")
        except OSError:
            print("no network")
        print("uid", os.getuid(), "hostname", os.uname().nodename)
    """)
    assert result.ok, result.explain()
    assert "wrote" not in result.stdout and result.stdout.count("refused") == 3
    assert "no network" in result.stdout and "uid 65534" in result.stdout
    assert not (ROOT / "glassbox-written").exists()


@needs_bwrap
def test_a_job_sees_no_other_jobs_work_directory():
    other = isolation.WorkDirectory()
    try:
        (other.path / "their_model.py").write_text("secret model")
        result = python(f"""
            import os
            print(sorted(os.listdir({str(isolation.RUN_ROOT)!r})), os.path.exists({str(other.path)!r}))
        """)
    finally:
        other.remove()
    assert result.ok, result.explain()
    assert "their_model" not in result.stdout and result.stdout.strip().endswith("False")


WAITS_FOR_A_JOB = """
import json, sys
print("standby-marker ready", flush=True)
print(json.dumps({"job": json.loads(sys.stdin.readline())}))
"""


@needs_bwrap
def test_a_job_cannot_reach_the_next_standby_workers_stdin():
    standby = Standby([sys.executable, "-c", WAITS_FOR_A_JOB], Limits(timeout_s=60))
    standby.refill()
    waiting = standby.take()
    try:
        time.sleep(1)
        attack = python("""
            import os, time
            def hijack():
                found = 0
                for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
                    try:
                        if b"standby-" + b"marker" in open(f"/proc/{pid}/cmdline", "rb").read():
                            found += 1
                            with open(f"/proc/{pid}/fd/0", "w") as stdin:
                                stdin.write('{"forged": true}\\n')
                    except OSError:
                        pass
                return found
            print("standby workers found:", hijack())
            if os.fork() == 0:  # and a daemon that keeps trying after the job
                os.setsid()
                for _ in range(50):
                    hijack()
                    time.sleep(0.1)
                os._exit(0)
        """)
        assert attack.ok and "standby workers found: 0" in attack.stdout, attack.explain()
        assert_nothing_left(attack)
        assert waiting.send(json.dumps({"real": True}), Limits(timeout_s=30))
        result = waiting.wait()
    finally:
        waiting.close()
    assert result.ok, result.explain()
    assert json.loads(result.stdout.splitlines()[-1]) == {"job": {"real": True}}


def _wait_for(predicate, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out")


def _processes_naming(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                    if marker.encode() in cmdline.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_cli_leaves_no_worker_and_no_work_directory(tmp_path, how):
    marker = f"sleeper_{uuid.uuid4().hex[:8]}"
    nap = f"{300 + uuid.uuid4().int % 1000 / 1000:.3f}"  # the model's child, found by its unique argument
    target = tmp_path / f"{marker}.py"
    target.write_text(f"import time, subprocess\nsubprocess.Popen(['sleep', '{nap}'])\ntime.sleep(300)\n"
                      "def model(x):\n    return x\nexample_inputs = ()\n")
    cli = subprocess.Popen([sys.executable, "-m", "engine", "explore", str(target), "--sandbox", "--timeout", "600"],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _wait_for(lambda: _processes_naming(nap))  # the model runs
        workdir = _held_work_directory(cli.pid)
        cli.send_signal(how)
        cli.wait(timeout=30)
    finally:
        cli.kill()
    if how == signal.SIGKILL:  # nothing could clean up: the next start does (Note [Work directories])
        isolation.sweep_stale()
    _wait_for(lambda: not [p for p in _processes_naming(nap) + _processes_naming(marker) if _alive(p)],
              timeout_s=15)
    assert not workdir.exists()


def _held_work_directory(pid: int) -> Path:
    """The work directory whose lock the process holds open (Note [Work directories])."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith(".lock") and "glassbox-run-" in target:
            return Path(target[:-len(".lock")])
    raise AssertionError("the CLI holds no work directory lock")


def _is_worker(pid: int) -> bool:
    try:
        return b"--json" in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_a_stale_work_directory_is_swept_and_a_live_one_is_not():
    live = isolation.WorkDirectory()
    stale = isolation.WorkDirectory()
    stale._lock.close()  # what a killed owner leaves: the directory and a lock nobody holds
    try:
        removed = isolation.sweep_stale()
        assert stale.path in removed and not stale.path.exists()
        assert live.path.exists()
    finally:
        live.remove()


def test_without_bubblewrap_the_cli_says_what_is_missing(monkeypatch):
    env = {**os.environ, "GLASSBOX_SANDBOX_NO_BWRAP": "1", "GLASSBOX_SANDBOX_NO_CGROUP": "1"}
    done = subprocess.run([sys.executable, "-m", "engine", "explore", "scale_bias_relu", "--sandbox", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Sandbox protection missing" in done.stderr and "bubblewrap is turned off" in done.stderr
    assert "cgroups" in done.stderr
    assert json.loads(done.stdout)["verify"]["ok"]


@needs_bwrap
def test_an_exploration_through_bubblewrap_reports_what_it_ran_under():
    have, missing = isolation.protection()
    assert any("namespaces" in words for words in have)
    process = SandboxedProcess(explore_command("scale_bias_relu", []), Limits(timeout_s=240))
    try:
        result = process.wait()
    finally:
        process.close()
    assert result.ok, result.explain()
    assert json.loads(result.stdout)["verify"]["ok"]
    assert_nothing_left(result)
    assert not process.workdir.exists()
