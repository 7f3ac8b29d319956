"""Limits a job cannot lift (issue 33; Note [Isolation] in engine/tools/isolation.py): no nested user namespace
(where a job mounted its own cgroup hierarchy and raised its memory limit), no write to any cgroup file, /dev
and /run read-only (bwrap's /dev tmpfs had no size cap), and memory held in SysV shared memory stopped at the
job's limit."""
import sys
import textwrap

import pytest

from engine.tools import isolation
from engine.tools.sandbox import Limits, run_sandboxed

needs_bwrap = pytest.mark.skipif(bool(isolation.bwrap_problem()), reason=isolation.bwrap_problem() or "")


def python(code: str, limits: Limits = Limits(timeout_s=60)):
    return run_sandboxed([sys.executable, "-c", textwrap.dedent(code)], limits)


@needs_bwrap
@pytest.mark.skipif(not isolation.userns_refusal(), reason="this bubblewrap has no --disable-userns")
def test_a_job_cannot_unshare_a_user_namespace():
    result = python("""
        import ctypes, os, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
        print("unshare", libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
        print("tool", subprocess.run(["unshare", "-U", "-r", "-m", "true"]).returncode)
    """)
    assert result.ok, result.explain()
    assert "unshare -1" in result.stdout and "tool 0" not in result.stdout, result.stdout


CGROUP_LIMITS = ("memory.max", "memory.limit_in_bytes", "memory.oom_control", "pids.max", "memory.high")


@needs_bwrap
def test_a_job_cannot_change_any_cgroup_limit():
    import glob

    result = python(f"""
        import glob
        lifted, tried = [], 0
        for pattern in {CGROUP_LIMITS!r}:
            for path in glob.glob("/sys/fs/cgroup/**/" + pattern, recursive=True)[:200]:
                tried += 1
                try:
                    with open(path, "w") as f:
                        f.write("max" if "pids" in path or path.endswith("memory.max") else "-1")
                    lifted.append(path)
                except OSError:
                    pass
        print("lifted", lifted, "tried", tried)
    """)
    assert result.ok, result.explain()
    assert "lifted [] " in result.stdout, result.stdout
    if any(glob.glob("/sys/fs/cgroup/**/" + pattern, recursive=True) for pattern in CGROUP_LIMITS):
        assert "tried 0" not in result.stdout, result.stdout  # the job saw limit files, and could change none


@needs_bwrap
def test_dev_and_run_are_read_only_and_the_work_directory_is_not():
    result = python("""
        for path in ("/dev/fill", "/run/fill", "/dev/shm/ok", "./ok"):
            try:
                with open(path, "wb") as f:
                    f.write(b"x" * 4096)
                print("wrote", path)
            except OSError as error:
                print("refused", path, error.errno)
        open("/dev/null", "w").write("still a device")
    """)
    assert result.ok, result.explain()
    assert "refused /dev/fill" in result.stdout and "refused /run/fill" in result.stdout, result.stdout
    assert "wrote /dev/shm/ok" in result.stdout and "wrote ./ok" in result.stdout


@needs_bwrap
@pytest.mark.skipif(not isolation.Cgroup.available(), reason="no writable cgroups: the polling cannot see SysV shm")
def test_two_gigabytes_of_sysv_shared_memory_are_stopped_at_the_limit():
    result = python("""
        import ctypes, time
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        size = 2 << 30
        segment = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        address = libc.shmat(segment, None, 0)
        for offset in range(0, size, 64 << 20):
            ctypes.memset(ctypes.c_void_p(address + offset), 1, 64 << 20)
        libc.shmdt(ctypes.c_void_p(address))  # detached: in no process's resident memory any more
        print("held 2 GB")
        time.sleep(5)
    """, Limits(timeout_s=120, memory_mb=500))
    assert result.limit_hit == "memory", (result.limit_hit, result.returncode, result.stdout, result.stderr[-500:])
    assert "held 2 GB" not in result.stdout


@pytest.mark.slow
@needs_bwrap
def test_a_job_reads_none_of_the_server_users_private_files(tmp_path):
    # Note [Private files]: the server user's home, the app's secrets and the system's password hashes
    import os
    import uuid
    from pathlib import Path

    home_secret = Path(os.path.expanduser("~")) / f".glassbox-secret-{uuid.uuid4().hex[:8]}"
    streamlit = isolation.REPO_ROOT / ".streamlit"
    app_secret = streamlit / f"secrets-{uuid.uuid4().hex[:8]}.toml"
    home_secret.write_text("hunter2")
    streamlit.mkdir(exist_ok=True)
    app_secret.write_text("password = 'hunter2'")
    try:
        paths = [str(home_secret), str(app_secret), *[p for p in isolation.PRIVATE_FILES if os.path.isfile(p)]]
        result = python(f"""
            import sys
            import torch, engine  # the installation and the repository stay readable
            for path in {paths!r}:
                try:
                    print(path, repr(open(path).read()[:20]))
                except OSError as error:
                    print(path, "refused", error.strerror)
        """)
    finally:
        home_secret.unlink()
        app_secret.unlink()
    assert result.ok, result.explain()
    assert "hunter2" not in result.stdout and "$" not in result.stdout, result.stdout
    assert result.stdout.count("\n") == len(paths), result.stdout
