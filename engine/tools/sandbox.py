"""Run untrusted model code in a separate process with limits, so nothing it does reaches the caller.

Note [Sandbox]
A sandboxed process (the CLI's `explore --sandbox`, the hostile suite, and every worker of the app) is started
by `SandboxedProcess` in a new session (its own process group), with
  - a clean environment: only what Python and the compiler need; no inherited secrets
  - its own working and temp directory (HOME too), removed afterwards; the compile cache is shared
    (content-addressed, checksummed, atomic: Note [Compile cache])
  - a wall-time limit, and a CPU-time limit (RLIMIT_CPU, a backstop should the watcher itself die)
  - a memory limit enforced by watching the resident memory of the whole process group (an address-space
    limit would break CUDA, which reserves far more virtual memory than it uses)
  - a cap on output bytes and on the number of processes
When a limit is hit, the whole process group is killed and the result says which limit, in words; so does a
process that died from a signal (a segfault in native code, SIGKILL from outside, KeyboardInterrupt).
Limits are set from the parent with prlimit(), not in a preexec_fn: a preexec_fn is unsafe in a threaded
parent (the Streamlit server), and the child runs no user code until long after it starts (it imports torch).
This protects a local tool against mistakes and hostile paste-ins; it is not a container: code that calls
setsid() can leave the group, and the file system is the user's. See README, "Security".

Note [Standby worker]
Importing torch and the engine is most of a small model's exploration time (5-10 s on two busy cores). A
`Standby` keeps one sandboxed process started ahead of time, under the same environment and directory rules,
that has done those imports and waits for one job on stdin. Its limits (wall time, memory, processes, output)
are enforced only from the moment it is given the job, and its CPU limit is lowered to the job's then; it runs
exactly one job and is thrown away, so no state from one model reaches the next.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
POLL_SECONDS = 0.05
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 120.0
    memory_mb: int = 4096
    cpu_s: int = 600
    output_bytes: int = 64 * 1024 * 1024
    processes: int = 64


# What a signal means, in words: (short name, the likely cause). Note [Sandbox]
SIGNAL_WORDS: dict[int, tuple[str, str]] = {
    signal.SIGSEGV: ("segmentation fault", "native code (a C/C++ extension, a ctypes call or a compiled kernel) "
                                           "touched memory it does not own"),
    signal.SIGBUS: ("bus error", "native code accessed memory it cannot (or a memory-mapped file shrank)"),
    signal.SIGFPE: ("arithmetic fault", "native code divided an integer by zero"),
    signal.SIGILL: ("illegal instruction", "native code used an instruction this CPU does not have"),
    signal.SIGABRT: ("abort", "a library found an internal error and aborted, often a failed C++ assertion"),
    signal.SIGKILL: ("killed", "something outside the model ended it: the system's out-of-memory killer, a "
                               "person, or the model itself (os.kill)"),
    signal.SIGTERM: ("terminated", "something asked it to stop: a person, the system, or the model itself"),
    signal.SIGINT: ("interrupt", "the model raised KeyboardInterrupt, or something pressed Ctrl-C on it"),
    signal.SIGPIPE: ("broken pipe", "it wrote to a pipe nobody reads"),
}


def signal_words(number: int) -> str:
    """`SIGSEGV (segmentation fault)`, or `signal 42` for one without a name."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    meaning = SIGNAL_WORDS.get(number)
    return f"{name} ({meaning[0]})" if meaning else name


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_mb: float
    limit_hit: str | None = None  # "time", "memory", "cpu", "output", "processes", or None
    details: list[str] = field(default_factory=list)
    session: int | None = None  # the worker's session (process group) id, to check that nothing is left
    limits: Limits = field(default_factory=Limits)

    @property
    def ok(self) -> bool:
        return self.limit_hit is None and self.returncode == 0

    @property
    def signal(self) -> int | None:
        """The signal that ended the process (not one of our limit kills), or None."""
        if self.limit_hit is None and self.returncode is not None and self.returncode < 0:
            return -self.returncode
        return None

    def summary(self) -> str:
        """What happened, in words: which limit stopped the process, or which signal ended it ("" otherwise)."""
        return self._words()[0]

    def explain(self) -> str:
        """What happened and what to do about it, in words a user can act on (the stderr tail for a process
        that simply failed)."""
        what, advice = self._words()
        return f"{what} {advice}".strip() if what else self.stderr.strip()[-4000:]

    def _words(self) -> tuple[str, str]:
        limits = self.limits
        if self.limit_hit == "time":
            return (f"The model was still running after {limits.timeout_s:g} s (its time limit), so it was stopped "
                    "with every process it started.",
                    "Look for a loop that never ends or a very large input; or raise the time limit.")
        if self.limit_hit == "memory":
            return (f"The model used more memory than its limit ({limits.memory_mb} MB resident; it reached "
                    f"{self.peak_rss_mb:.0f} MB), so it was stopped with every process it started.",
                    "Use smaller inputs, or raise the memory limit.")
        if self.limit_hit == "cpu":
            return (f"The model used more than its CPU-time limit ({limits.cpu_s} s of processor time), so it was "
                    "stopped.", "Look for a loop that never ends, or raise the time limit.")
        if self.limit_hit == "output":
            return (f"The model printed more than {limits.output_bytes >> 20} MB of output, so it was stopped.",
                    "Remove large prints.")
        if self.limit_hit == "processes":
            return (f"The model started more than {limits.processes} processes, so it was stopped with all of "
                    "them.", "Models must not fork or spawn many processes.")
        if self.signal is not None:
            cause = SIGNAL_WORDS.get(self.signal, ("", "it crashed, or something outside ended it"))[1]
            return (f"The model's process was killed by signal {signal_words(self.signal)}: {cause}.",
                    "Only that process died; the next exploration starts a fresh one.")
        return "", ""


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


def _stat_fields(pid: int | str) -> list[bytes]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): fields 3 (state) on."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()


def session_processes(session: int) -> list[tuple[int, bytes]]:
    """(pid, state letter) of every process in a session, from /proc (field 6 of stat is the session id)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(entry.name)
            if int(fields[3]) == session:
                found.append((int(entry.name), fields[0]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _group_usage(session: int) -> tuple[float, int]:
    """(resident MB, process count) of every process in a session."""
    members = session_processes(session)
    rss_kb = 0
    for pid, _ in members:
        try:
            with open(f"/proc/{pid}/statm", "rb") as statm:
                rss_kb += int(statm.read().split()[1]) * (resource.getpagesize() // 1024)
        except (OSError, IndexError, ValueError):
            continue
    return rss_kb / 1024, len(members)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    try:
        fields = _stat_fields(pid)
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return 0.0


class SandboxedProcess:
    """One process under Note [Sandbox]: started at once, limited while it runs its job, killed with its group.

    `wait()` enforces the limits and collects the result. With `stdin_job=True` the process waits for one line
    on stdin (Note [Standby worker]): `send(line)` hands it over and the limits count from then. A process
    that answers `stack_signal` by printing its Python stack to stderr (faulthandler.register) is sent that
    signal before a limit kills it, so the result can say where the model was: the line of the endless loop.
    """

    def __init__(self, argv: list[str], limits: Limits = Limits(), workdir: Path | None = None,
                 env: dict[str, str] | None = None, stdin_job: bool = False, stack_signal: int | None = None):
        self.limits, self.stack_signal = limits, stack_signal
        self.own_dir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="glassbox-run-")) if workdir is None else workdir
        self.born = time.monotonic()
        try:
            self.process = subprocess.Popen(
                argv, cwd=self.workdir, env=clean_environment(self.workdir, env),
                stdin=subprocess.PIPE if stdin_job else subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
        except BaseException:
            if self.own_dir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        self._set_cpu_limit(limits.cpu_s, hard=limits.cpu_s + 5)
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._output_bytes = 0
        self._limit_hit: str | None = None
        self._readers = [threading.Thread(target=self._pump, args=(self.process.stdout, "stdout"), daemon=True),
                         threading.Thread(target=self._pump, args=(self.process.stderr, "stderr"), daemon=True)]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid  # also its session and process-group id (start_new_session)

    def alive(self) -> bool:
        return self.process.poll() is None

    def _set_cpu_limit(self, soft: float, hard: float | None = None) -> None:
        try:
            _, current_hard = resource.prlimit(self.pid, resource.RLIMIT_CPU)
            hard = current_hard if hard is None else int(hard)
            if current_hard != resource.RLIM_INFINITY and hard > current_hard:
                hard = current_hard  # a limit can only be lowered
            soft = min(int(soft), hard) if hard != resource.RLIM_INFINITY else int(soft)
            resource.prlimit(self.pid, resource.RLIMIT_CPU, (soft, hard))
            resource.prlimit(self.pid, resource.RLIMIT_CORE, (0, 0))
        except (ProcessLookupError, PermissionError, ValueError, OSError):
            pass  # it is gone already: wait() reports how it ended

    def _pump(self, stream, name: str) -> None:
        for block in iter(lambda: stream.read1(65536), b""):
            self._output_bytes += len(block)
            if self._output_bytes > self.limits.output_bytes:
                self._limit_hit = self._limit_hit or "output"
                self.kill()
                break
            self._chunks[name].append(block)

    def send(self, line: str, limits: Limits | None = None) -> bool:
        """Give a waiting process its job (one line on stdin, which is then closed); the job's limits apply
        from now. False when the process is no longer there to take it."""
        if limits is not None:
            self.limits = limits
            soft = _cpu_seconds(self.pid) + limits.cpu_s
            self._set_cpu_limit(soft, hard=soft + 5)
        if not self.alive() or self.process.stdin is None:
            return False
        try:
            self.process.stdin.write(line.encode("utf-8") + (b"" if line.endswith("\n") else b"\n"))
            self.process.stdin.close()
        except OSError:
            return False
        return True

    def wait(self, on_tick: Callable[[float], None] | None = None, tick_s: float = 0.25) -> SandboxResult:
        """Watch the process until it ends or hits a limit (then its whole group is killed), calling
        `on_tick(seconds)` now and then; if on_tick raises (the caller was interrupted), the group is killed and
        the exception goes on. Time counts from this call."""
        start = last_tick = time.monotonic()
        peak = 0.0
        try:
            while self.process.poll() is None:
                rss, count = _group_usage(self.pid)
                peak = max(peak, rss)
                elapsed = time.monotonic() - start
                if elapsed > self.limits.timeout_s:
                    self._limit_hit = self._limit_hit or "time"
                elif rss > self.limits.memory_mb:
                    self._limit_hit = self._limit_hit or "memory"
                elif count > self.limits.processes:
                    self._limit_hit = self._limit_hit or "processes"
                if self._limit_hit:
                    self._ask_for_stack()
                    break
                if on_tick is not None and time.monotonic() - last_tick >= tick_s:
                    last_tick = time.monotonic()
                    on_tick(elapsed)
                time.sleep(POLL_SECONDS)
        finally:
            self.kill()  # on a limit, on interruption, and whatever the worker left behind in its group
        for reader in self._readers:
            reader.join(timeout=5)
        code = self.process.returncode
        if self._limit_hit is None and code == -signal.SIGXCPU:
            self._limit_hit = "cpu"
        return SandboxResult(code, b"".join(self._chunks["stdout"]).decode(errors="replace"),
                             b"".join(self._chunks["stderr"]).decode(errors="replace"),
                             time.monotonic() - start, peak, self._limit_hit, session=self.pid, limits=self.limits)

    def _ask_for_stack(self, grace_s: float = 0.5) -> None:
        """Send stack_signal and give the process a moment to print its stack (faulthandler writes it from a C
        signal handler, so it answers even inside a long C call)."""
        if self.stack_signal is None:
            return
        seen = len(self._chunks["stderr"])
        try:
            os.kill(self.pid, self.stack_signal)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            if b"most recent call first" in b"".join(self._chunks["stderr"][seen:]):
                time.sleep(0.05)  # the rest of the frames
                return
            time.sleep(0.01)

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the process (it leads the group: its pgid is its pid)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Kill it and remove its directory (when the sandbox made it)."""
        self.kill()
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        if self.own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def run_sandboxed(argv: list[str], limits: Limits = Limits(), workdir: Path | None = None,
                  env: dict[str, str] | None = None,
                  on_tick: Callable[[float], None] | None = None) -> SandboxResult:
    """Run argv (a Python module invocation or any command) under the limits of Note [Sandbox].
    `env` adds or overrides variables of the clean environment (e.g. CXX, to test a failing compiler)."""
    process = SandboxedProcess(argv, limits, workdir, env)
    try:
        return process.wait(on_tick)
    finally:
        process.close()


class Standby:
    """One sandboxed process started ahead of time, ready for one job (Note [Standby worker]).

    `take()` hands it out (or None when there is none ready: start one yourself with `start()`), and
    `refill_later()` starts the next one after a pause: on a small machine, importing torch while the last
    job's result is being drawn would slow that down."""

    def __init__(self, argv: list[str], limits: Limits, env: dict[str, str] | None = None,
                 max_age_s: float = 600.0, enabled: bool = True, stack_signal: int | None = None):
        self.argv, self.limits, self.env, self.stack_signal = argv, limits, env, stack_signal
        self.max_age_s = max_age_s  # an older one may hold stale code (the engine is edited while the app runs)
        self.enabled = enabled
        self._lock = threading.Lock()
        self._ready: SandboxedProcess | None = None

    def start(self) -> SandboxedProcess:
        """A new process of this kind, started now."""
        return SandboxedProcess(self.argv, self.limits, env=self.env, stdin_job=True,
                                stack_signal=self.stack_signal)

    def _fresh(self, process: SandboxedProcess | None) -> bool:
        return process is not None and process.alive() and time.monotonic() - process.born < self.max_age_s

    def refill(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._fresh(self._ready):
                return
            if self._ready is not None:
                self._ready.close()
            self._ready = self.start()

    def refill_later(self, delay_s: float = 6.0) -> None:
        timer = threading.Timer(delay_s, self.refill)
        timer.daemon = True
        timer.start()

    def take(self) -> SandboxedProcess | None:
        with self._lock:
            process, self._ready = self._ready, None
        if process is None:
            return None
        if not self._fresh(process):
            process.close()
            return None
        return process

    def close(self) -> None:
        with self._lock:
            process, self._ready = self._ready, None
        if process is not None:
            process.close()


def explore_command(target: str, options: list[str]) -> list[str]:
    """The worker command for one exploration (absolute path: the worker runs in its own directory)."""
    path = Path(target)
    target = str(path.resolve()) if path.exists() else target
    return [sys.executable, "-m", "engine", "explore", target, "--json", *options]
