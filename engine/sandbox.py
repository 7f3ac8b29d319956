"""Run untrusted model code in a separate process with limits, so nothing it does reaches the caller.

Note [Sandbox]
The worker is `python -m engine explore FILE --json` in a new session (its own process group), with
  - a clean environment: only what Python and the compiler need; no inherited secrets
  - its own working directory and temp directory; the compile cache is shared (content-addressed, atomic)
  - a wall-time limit, and a CPU-time limit (RLIMIT_CPU)
  - a memory limit enforced by watching the resident memory of the whole process group (an address-space
    limit would break CUDA, which reserves far more virtual memory than it uses)
  - a cap on output bytes and on the number of processes
When a limit is hit, the whole process group is killed and the result says which limit, in words.
This protects a local tool against mistakes and hostile paste-ins; it is not a container: code that calls
setsid() can leave the group, and the file system is the user's. See README, "Security".
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
POLL_SECONDS = 0.05


@dataclass
class Limits:
    timeout_s: float = 120.0
    memory_mb: int = 4096
    cpu_s: int = 600
    output_bytes: int = 64 * 1024 * 1024
    processes: int = 64


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_mb: float
    limit_hit: str | None = None  # "time", "memory", "output", "processes", or None
    details: list[str] = field(default_factory=list)
    session: int | None = None  # the worker's session (process group) id, to check that nothing is left

    @property
    def ok(self) -> bool:
        return self.limit_hit is None and self.returncode == 0

    def explain(self) -> str:
        """What happened, in words a user can act on."""
        if self.limit_hit == "time":
            return (f"The model was still running after {self.wall_s:.0f} s, so it was stopped. Look for an "
                    "infinite loop or a very large input; or raise the time limit.")
        if self.limit_hit == "memory":
            return (f"The model used more than its memory limit ({self.peak_rss_mb:.0f} MB resident), so it "
                    "was stopped. Use smaller inputs, or raise the memory limit.")
        if self.limit_hit == "output":
            return "The model printed more output than allowed, so it was stopped. Remove large prints."
        if self.limit_hit == "processes":
            return "The model started too many processes, so it was stopped. Models must not fork."
        if self.returncode is not None and self.returncode < 0:
            name = signal.Signals(-self.returncode).name if -self.returncode in signal.valid_signals() else ""
            return f"The worker process died ({name or self.returncode}). The model may have crashed it."
        return self.stderr.strip()[-4000:]


def clean_environment(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key in ("GLASSBOX_CACHE_DIR", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "CXX",
                "VIRTUAL_ENV", "LD_LIBRARY_PATH"):
        if key in os.environ:
            env[key] = os.environ[key]
    if "GLASSBOX_CACHE_DIR" not in env:  # keep sharing the user's compile cache; HOME moved
        from engine.build import cache_dir
        try:
            env["GLASSBOX_CACHE_DIR"] = str(cache_dir())
        except OSError:  # the worker warns and builds without a cache (Note [Compile cache])
            pass
    env.update(extra or {})
    return env


def _group_usage(session: int) -> tuple[float, int]:
    """(resident MB, process count) of every process in a session, from /proc."""
    rss_kb, count = 0, 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) != session:  # field 6 of stat: session id
                continue
            count += 1
            with open(f"/proc/{entry.name}/statm", "rb") as statm:
                rss_kb += int(statm.read().split()[1]) * (resource.getpagesize() // 1024)
        except (OSError, IndexError, ValueError):
            continue
    return rss_kb / 1024, count


def run_sandboxed(argv: list[str], limits: Limits = Limits(), workdir: Path | None = None,
                  env: dict[str, str] | None = None) -> SandboxResult:
    """Run argv (a Python module invocation or any command) under the limits of Note [Sandbox].
    `env` adds or overrides variables of the clean environment (e.g. CXX, to test a failing compiler)."""
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="glassbox-run-")) if own_dir else workdir

    def limit_cpu():
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=workdir, env=clean_environment(workdir, env), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=limit_cpu)
    chunks = {"stdout": [], "stderr": []}
    sizes = {"total": 0}
    hit: dict[str, str | None] = {"limit": None}

    def pump(stream, name):
        for block in iter(lambda: stream.read1(65536), b""):
            sizes["total"] += len(block)
            if sizes["total"] > limits.output_bytes:
                hit["limit"] = hit["limit"] or "output"
                _kill(process)
                break
            chunks[name].append(block)

    readers = [threading.Thread(target=pump, args=(process.stdout, "stdout"), daemon=True),
               threading.Thread(target=pump, args=(process.stderr, "stderr"), daemon=True)]
    for reader in readers:
        reader.start()
    peak = 0.0
    while process.poll() is None:
        rss, count = _group_usage(process.pid)
        peak = max(peak, rss)
        if time.perf_counter() - start > limits.timeout_s:
            hit["limit"] = "time"
        elif rss > limits.memory_mb:
            hit["limit"] = "memory"
        elif count > limits.processes:
            hit["limit"] = "processes"
        if hit["limit"]:
            _kill(process)
            break
        time.sleep(POLL_SECONDS)
    process.wait()
    _kill(process)  # whatever the worker left behind in its group goes too
    for reader in readers:
        reader.join(timeout=5)
    wall = time.perf_counter() - start
    if own_dir:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return SandboxResult(process.returncode, b"".join(chunks["stdout"]).decode(errors="replace"),
                         b"".join(chunks["stderr"]).decode(errors="replace"), wall, peak, hit["limit"],
                         session=process.pid)


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def explore_command(target: str, options: list[str]) -> list[str]:
    """The worker command for one exploration (absolute path: the worker runs in its own directory)."""
    path = Path(target)
    target = str(path.resolve()) if path.exists() else target
    return [sys.executable, "-m", "engine", "explore", target, "--json", *options]
