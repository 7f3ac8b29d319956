"""Run untrusted model code in a separate process with limits, so nothing it does reaches the caller.

Note [Sandbox]
A sandboxed process (the CLI's `explore --sandbox`, the hostile suite, and every worker of the app) is started
by `SandboxedProcess` under the operating system's isolation of Note [Isolation] (engine/tools/isolation.py:
bubblewrap namespaces, a read-only system, private capped /tmp and /dev/shm, an unprivileged uid, a cgroup
for memory and processes), with
  - a clean environment: only what Python and the compiler need; no inherited secrets
  - its own work directory (HOME too), removed afterwards, or by the next start when its owner was killed
    (Note [Work directories]); the compile cache read-only, builds by the trusted builder (Note [Trusted
    builder] in engine/runtime/build.py) inside the job's memory and time, killed with the job (Note [Builds inside
    the job's limits] in engine/tools/builder.py)
  - a wall-time limit, and a CPU-time limit (RLIMIT_CPU, a backstop should the watcher itself die)
  - a memory limit: this module's polling of the resident memory of every process of the job plus its private
    tmpfs and memfds, with the cgroup's limit a little above it as the kernel's backstop (Note [Memory
    backstop]; an address-space limit would break CUDA, which reserves far more virtual memory than it uses)
  - a cap on output bytes and on the number of processes
When a limit is hit, every process of the job is killed and the result says which limit, in words; so does a
process that died from a signal (a segfault in native code, SIGKILL from outside, KeyboardInterrupt).
Limits are set from the parent (prlimit(), cgroup files), not in a preexec_fn: a preexec_fn is unsafe in a
threaded parent (the Streamlit server). Where bubblewrap cannot run, `isolation.protection()` says what is
missing, and the process runs in its own session only. See README, "Security".

Note [Memory backstop]
The job's memory limit is enforced by the polling (every POLL_SECONDS), which asks the worker for its Python
stack before it kills it, so the message can name the model's line that was allocating. The cgroup's limit,
and the size of the private /tmp and /dev/shm, sit backstop_bytes' headroom above it (512 MB, or a quarter of a
large limit): a kernel limit equal to the job's killed a fast allocator (128 MB a step) between two polls,
before any stack, and a CI run lost the "line 7 of pasted.py" of the memory bomb that way. The kernel still
stops what outruns the polling, at the backstop. The tmpfs is as large as the backstop, so filling /dev/shm
meets the limit (counted by the polling, charged to the cgroup) before it meets a full disk.

Note [Standby worker]
Importing torch and the engine is most of a small model's exploration time (5-10 s on two busy cores). A
`Standby` keeps one sandboxed process started ahead of time, under the same isolation, that has done those
imports and waits for one job on stdin. Nothing of any job can reach it: its stdin is a pipe only the parent
holds, and every job lives in its own PID namespace, so no job sees the standby's /proc/<pid>/fd/0 (a daemon a
job leaves dies with the job's namespace anyway). Its limits (wall time, memory, processes, output) are enforced
from the moment it is given the job, and its CPU limit is lowered to the job's then; it runs exactly one job
and is thrown away, so no state from one model reaches the next.
A job may reach a process that is still importing (none was ready, or the standby was started a moment ago):
on a loaded machine that takes longer than a short time limit (4 s), and the model was "stopped after 4 s"
before its first line ran. So the wall-time limit counts from the moment the process says it has begun the
job (`wait(started=...)`; app/worker_main.py writes a file), with STARTUP_S as the bound on the imports. The
CPU-time backstop does the same: until the job has begun, the worker may also spend STARTUP_S times the cores
on its imports; from then on it has the job's CPU limit, counted from that moment.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.tools import isolation
from engine.tools.builder import TrustedBuilder
from engine.tools.procfs import (all_processes, cpu_seconds, descendants, pid_namespace, resident_mb,
                                 session_processes, shared_mb)

REPO_ROOT = isolation.REPO_ROOT
POLL_SECONDS = 0.05
STARTUP_S = 180.0  # the longest a worker may take to import torch and the engine before its job begins


def backstop_bytes(memory_mb: int) -> int:
    """The kernel's memory limit, and the private tmpfs size, for a job limited to memory_mb (Note [Memory
    backstop])."""
    return (memory_mb + max(512, memory_mb // 4)) << 20


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 120.0
    memory_mb: int = 4096
    cpu_s: int = 600
    output_bytes: int = 64 * 1024 * 1024
    processes: int = 64


def positive_limit(unit: str, whole: bool = False) -> Callable[[str], float]:
    """An argparse type for a limit: a finite number above zero (nan, inf, 0 and negatives are refused in
    words, since a limit of nan or inf would mean no limit at all)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of {unit}, got {text!r}") from None
        if not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
            kind = "a whole number" if whole else "a finite number"
            raise argparse.ArgumentTypeError(f"must be {kind} of {unit} above 0, got {text!r}")
        return int(value) if whole else value
    return parse


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
    pid_namespace: str | None = None  # the sandbox's PID namespace (bubblewrap), to check that nothing is left

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
            return (f"The model used more memory than its limit ({limits.memory_mb} MB resident, shared memory and "
                    f"its /tmp counted; it reached {self.peak_rss_mb:.0f} MB), so it was stopped with every process "
                    "it started.",
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


def clean_environment(workdir: Path, extra: dict[str, str] | None = None, isolated: bool = False) -> dict[str, str]:
    """The worker's whole environment. Isolated, its compile cache is a private one in its work directory (the
    shared cache is read-only there) and its temp directory the private capped /tmp."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir), "TMPDIR": "/tmp" if isolated else str(workdir), "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key in ("GLASSBOX_CACHE_DIR", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "CXX",
                "VIRTUAL_ENV", "LD_LIBRARY_PATH"):
        if key in os.environ:
            env[key] = os.environ[key]
    if isolated:
        env["GLASSBOX_CACHE_DIR"] = str(workdir / ".cache")
    elif "GLASSBOX_CACHE_DIR" not in env:  # keep sharing the user's compile cache; HOME moved
        shared = _shared_cache()
        if shared is not None:
            env["GLASSBOX_CACHE_DIR"] = str(shared)
    env.update(extra or {})
    return env


def _shared_cache() -> Path | None:
    from engine.runtime.build import cache_dir
    try:
        return cache_dir()
    except OSError:  # the worker warns and builds without a cache (Note [Compile cache])
        return None


# the gate: wait for the parent's go (after it put this process into the job's cgroup), then become the worker
GATE = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "glassbox-gate"]


class SandboxedProcess:
    """One process under Note [Sandbox]: started at once, limited while it runs its job, killed with every
    process of its job.

    `wait()` enforces the limits and collects the result. With `stdin_job=True` the process waits for one line
    on stdin (Note [Standby worker]): `send(line)` hands it over and the limits count from then. A process
    that answers `stack_signal` by printing its Python stack to stderr (faulthandler.register) is sent that
    signal before a limit kills it, so the result can say where the model was: the line of the endless loop.
    `network=True` keeps the machine's network (the sandbox has none otherwise).
    """

    def __init__(self, argv: list[str], limits: Limits = Limits(), workdir: Path | None = None,
                 env: dict[str, str] | None = None, stdin_job: bool = False, stack_signal: int | None = None,
                 network: bool = False):
        self.limits, self.stack_signal, self.stdin_job = limits, stack_signal, stdin_job
        self.isolated = not isolation.bwrap_problem()
        self._own_dir = isolation.WorkDirectory() if workdir is None else None
        self.workdir = self._own_dir.path if self._own_dir is not None else workdir
        self.born = time.monotonic()
        self.cgroup: isolation.Cgroup | None = None
        self.builder: TrustedBuilder | None = None
        self.pid_namespace: str | None = None
        self._worker: int | None = None
        self._init: int | None = None  # bwrap's init, pid 1 of the job's namespace: the namespace dies with it
        try:
            self.process = self._start(argv, env, network)
        except BaseException:
            self._release()
            raise
        self._set_cpu_limit(self.pid, limits.cpu_s, hard=limits.cpu_s + 5)
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._output_bytes = 0
        self._limit_hit: str | None = None
        self._readers = [threading.Thread(target=self._pump, args=(self.process.stdout, "stdout"), daemon=True),
                         threading.Thread(target=self._pump, args=(self.process.stderr, "stderr"), daemon=True)]
        for reader in self._readers:
            reader.start()
        self._open_gate()

    def _start(self, argv: list[str], env: dict[str, str] | None, network: bool) -> subprocess.Popen:
        environment = clean_environment(self.workdir, env, self.isolated)
        command, keep = argv, ()
        if self.isolated:
            self.builder = TrustedBuilder(backstop_bytes(self.limits.memory_mb), self.limits.timeout_s)
            environment["GLASSBOX_BUILDER_FD"] = str(self.builder.worker_fd())
            keep = (self.builder.worker_fd(),)
            shared = _shared_cache()  # read-only: Note [Trusted builder]
            readable = isolation.readable_paths(argv) + ([(str(shared.resolve()), str(shared))] if shared else [])
            command = isolation.bwrap_argv(self.workdir, readable, backstop_bytes(self.limits.memory_mb),
                                           network) + argv
        process = subprocess.Popen(GATE + command, cwd=self.workdir, env=environment, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                   pass_fds=keep)
        if self.builder is not None:
            self.builder.started()
        return process

    def _open_gate(self) -> None:
        """Put the gate into the job's cgroup (where cgroups are writable), then let it become the worker."""
        self.cgroup = isolation.Cgroup.create(backstop_bytes(self.limits.memory_mb), self._pids_max(self.limits),
                                              isolation.cgroup_name(self.workdir) if self._own_dir else None)
        if self.cgroup is not None:
            try:
                self.cgroup.add(self.pid)
            except OSError:
                self.cgroup.remove()
                self.cgroup = None
        if self.builder is not None:  # its builds run in its cgroup (Note [Builds inside the job's limits])
            self.builder.join(self.cgroup)
        try:
            self.process.stdin.write(b"go\n")
            self.process.stdin.flush()
            if not self.stdin_job:
                self.process.stdin.close()
        except OSError:
            pass  # it is gone already: wait() reports how it ended

    @staticmethod
    def _pids_max(limits: Limits) -> int:
        # the pids controller counts threads too (OpenMP and torch start one per core): a backstop against a
        # fork bomb; the process count itself is watched by wait()
        return max(4096, 64 * limits.processes)

    @property
    def pid(self) -> int:
        return self.process.pid  # the gate, then bwrap; its session and process group (start_new_session)

    def worker_pid(self) -> int | None:
        """The worker itself: bwrap's init's child inside the sandbox (found once it exists), else the gate."""
        if not self.isolated:
            return self.pid
        if self._worker is None:
            below = [pid for pid, fields in all_processes() if len(fields) > 1 and int(fields[1]) == self.pid]
            inner = [pid for pid, fields in all_processes() if len(fields) > 1 and int(fields[1]) in below]
            if inner:
                self._worker, self._init = inner[0], below[0]
                self.pid_namespace = pid_namespace(inner[0])
        return self._worker

    def members(self) -> list[int]:
        """Every process of the job: its cgroup's, else every process below the gate and in its session."""
        if self.cgroup is not None:
            return self.cgroup.members()
        return sorted(set(descendants(self.pid)) | {pid for pid, _ in session_processes(self.pid)})

    def alive(self) -> bool:
        return self.process.poll() is None

    def _set_cpu_limit(self, pid: int | None, soft: float, hard: float | None = None) -> None:
        try:
            _, current_hard = resource.prlimit(pid, resource.RLIMIT_CPU)
            hard = current_hard if hard is None else int(hard)
            if current_hard != resource.RLIM_INFINITY and hard > current_hard:
                hard = current_hard  # a limit can only be lowered
            soft = min(int(soft), hard) if hard != resource.RLIM_INFINITY else int(soft)
            resource.prlimit(pid, resource.RLIMIT_CPU, (soft, hard))
            resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
        except (ProcessLookupError, PermissionError, ValueError, OSError, TypeError):
            pass  # it is gone already: wait() reports how it ended

    def _limit_cpu_from_now(self, seconds: float) -> None:
        """The worker may use `seconds` more of processor time from now (RLIMIT_CPU counts from its start)."""
        worker = self.worker_pid()
        soft = cpu_seconds(worker) + seconds if worker else seconds
        self._set_cpu_limit(worker, soft, hard=soft + 5)

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
            if self.builder is not None:  # its builds get the job's limits too (Note [Builds inside the job's limits])
                self.builder.set_limits(backstop_bytes(limits.memory_mb), limits.timeout_s)
            # the imports a worker may still be doing get their own allowance; wait() lowers the limit to the
            # job's own when the job has begun (Note [Standby worker])
            self._limit_cpu_from_now(limits.cpu_s + STARTUP_S * (os.cpu_count() or 1))
            if self.cgroup is not None:
                try:
                    self.cgroup.set_memory(backstop_bytes(limits.memory_mb))
                    self.cgroup.set_pids(self._pids_max(limits))
                except OSError:  # e.g. it already holds more than the job may: the polling decides alone
                    pass
        if not self.alive() or self.process.stdin is None or self.process.stdin.closed:
            return False
        try:
            self.process.stdin.write(line.encode("utf-8") + (b"" if line.endswith("\n") else b"\n"))
            self.process.stdin.close()
        except OSError:
            return False
        return True

    def _usage(self) -> tuple[float, int]:
        """(memory MB as the limit counts it, process count) of the job now."""
        members = self.members()
        private_tmpfs = self.worker_pid() if self.isolated else None  # else /tmp and /dev/shm are the machine's
        return resident_mb(members) + shared_mb(members, private_tmpfs), len(members)

    def wait(self, on_tick: Callable[[float], None] | None = None, tick_s: float = 0.25,
             started: Callable[[], bool] | None = None) -> SandboxResult:
        """Watch the process until it ends or hits a limit (then every process of the job is killed), calling
        `on_tick(seconds of the job)` now and then; if on_tick raises (the caller was interrupted), the job is
        killed and the exception goes on. Time counts from this call, or, given `started`, from when it first
        returns True (Note [Standby worker]), the wait before that bounded by STARTUP_S."""
        start = last_tick = time.monotonic()
        job_start = None if started is not None else start
        peak = 0.0
        try:
            while self.process.poll() is None:
                self.worker_pid()
                memory, count = self._usage()
                peak = max(peak, memory)
                now = time.monotonic()
                if job_start is None and started():
                    job_start = now
                    self._limit_cpu_from_now(self.limits.cpu_s)  # the imports' allowance ends
                elapsed = now - job_start if job_start is not None else 0.0
                if elapsed > self.limits.timeout_s or (job_start is None and now - start > STARTUP_S):
                    self._limit_hit = self._limit_hit or "time"
                elif memory > self.limits.memory_mb or (self.cgroup is not None and self.cgroup.oom_killed()):
                    self._limit_hit = self._limit_hit or "memory"
                elif count > self.limits.processes or (self.cgroup is not None and self.cgroup.forks_refused()):
                    self._limit_hit = self._limit_hit or "processes"
                if self._limit_hit:
                    self._ask_for_stack()
                    break
                if on_tick is not None and time.monotonic() - last_tick >= tick_s:
                    last_tick = time.monotonic()
                    on_tick(elapsed)
                time.sleep(POLL_SECONDS)
        finally:
            self.kill()  # on a limit, on interruption, and whatever the worker left behind
        for reader in self._readers:
            reader.join(timeout=5)
        code = self.process.returncode
        if self.isolated and code is not None and 128 < code <= 128 + 64:
            code = 128 - code  # bwrap reports a worker killed by signal N as exit status 128 + N
        if self.cgroup is not None and self._limit_hit is None:
            if self.cgroup.oom_killed():
                self._limit_hit = "memory"  # the kernel's OOM killer, at the cgroup's limit
            elif self.cgroup.forks_refused():
                self._limit_hit = "processes"
        if self._limit_hit == "memory" and self.cgroup is not None:
            peak = max(peak, self.cgroup.peak_mb())
        if self._limit_hit is None and code == -signal.SIGXCPU:
            self._limit_hit = "cpu"
        return SandboxResult(code, b"".join(self._chunks["stdout"]).decode(errors="replace"),
                             b"".join(self._chunks["stderr"]).decode(errors="replace"),
                             time.monotonic() - start, peak, self._limit_hit, session=self.pid, limits=self.limits,
                             pid_namespace=self.pid_namespace)

    def _ask_for_stack(self, grace_s: float = 2.0) -> None:
        """Send stack_signal and give the process a moment to print its stack (faulthandler writes it from a C
        signal handler, so it answers even inside a long C call). The wait ends as soon as the stack is there;
        the grace is for a loaded machine, where 0.5 s was seen to pass before the worker was scheduled."""
        worker = self.worker_pid()
        if self.stack_signal is None or worker is None:
            return
        seen = len(self._chunks["stderr"])
        try:
            os.kill(worker, self.stack_signal)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            if b"most recent call first" in b"".join(self._chunks["stderr"][seen:]):
                time.sleep(0.05)  # the rest of the frames
                return
            time.sleep(0.01)

    def kill(self) -> None:
        """SIGKILL every process of the job and reap the gate: its process group (bwrap: its PID namespace dies
        with it), its cgroup, and (without bubblewrap) whatever is left below it or in its session."""
        self.worker_pid()  # its PID namespace, to check afterwards that nothing of it is left
        stragglers = [] if self.isolated or self.cgroup is not None else self.members()
        if self._init is not None and pid_namespace(self._init) == self.pid_namespace:  # still the job's init
            isolation.kill_processes([self._init])  # pid 1 of the namespace: every process in it dies at once
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        isolation.kill_processes(stragglers)
        if self.builder is not None:  # the job ended: so does the build it asked for
            self.builder.close()
        if self.cgroup is not None:
            self.cgroup.kill_all()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Kill it and remove its directory (when the sandbox made it) and its cgroup."""
        self.kill()
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        self._release()

    def _release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.builder is not None:
            self.builder.close()
        if self._own_dir is not None:
            self._own_dir.remove()


def run_sandboxed(argv: list[str], limits: Limits = Limits(), workdir: Path | None = None,
                  env: dict[str, str] | None = None,
                  on_tick: Callable[[float], None] | None = None) -> SandboxResult:
    """Run argv (a Python module invocation or any command) under the limits of Note [Sandbox].
    `env` adds or overrides variables of the clean environment (e.g. CXX, to test a failing compiler)."""
    with _terminate_as_exit():
        process = SandboxedProcess(argv, limits, workdir, env)
        try:
            return process.wait(on_tick)
        finally:
            process.close()


@contextlib.contextmanager
def _terminate_as_exit():
    """In the main thread (the CLI), SIGTERM and SIGHUP end the wait like Ctrl-C does: the worker is killed and
    its directory removed on the way out, instead of the caller dying with the worker left unwatched."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(number, frame):
        raise SystemExit(128 + number)

    previous = {number: signal.signal(number, leave) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


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


def explore_command(target: str, options: list[str], verb: str = "explore") -> list[str]:
    """The worker command for one exploration (or another verb's run: bench, compare) of a model file or
    sample, or of several separated by commas (absolute paths: the worker runs in its own directory)."""
    items = [target] if Path(target).exists() else target.split(",")
    items = [str(Path(item).resolve()) if item and Path(item).exists() else item for item in items]
    return [sys.executable, "-m", "engine", verb, ",".join(items), "--json", *options]
