"""Isolation by the operating system for sandboxed workers: bubblewrap namespaces, cgroup limits, work directories.

Note [Isolation]
A worker (engine/tools/sandbox.py) runs as
    /bin/sh gate -> bwrap (outside) -> bwrap's init (pid 1 of a new PID namespace) -> the worker (pid 2)
with bubblewrap's
  - new user, PID, mount, IPC, UTS and network namespaces (network only when asked), --die-with-parent and
    --new-session; uid/gid 65534 (nobody) inside, every capability dropped;
  - the whole file system read-only; private size-capped tmpfs on /tmp and /dev/shm; /run hidden (sockets)
    and read-only; a /dev of its own with only the basic devices and the GPU's (/dev/nvidia*, /dev/dri),
    read-only (a job that filled bwrap's uncapped /dev tmpfs held memory outside every limit);
  - no nested user namespace (--disable-userns): inside one a job could mount a cgroup hierarchy its uid owns
    and lift its own memory and process limits; the cgroup files it can see are on the read-only system;
    its own /proc, which lists only the job's processes: no server process to signal (`os.kill(os.getppid())`
    reaches bwrap's init, which ignores it), no server /proc/<pid>/environ to read, no other job's stdin;
  - writable: only its work directory (no other job's is visible); the compile cache is bound read-only
    (Note [Trusted builder]);
  - files named on its command line are bound read-only at the same path (a model file under /tmp).
  - the server user's files it does not need are hidden (Note [Private files]).

Note [Private files]
uid 65534 inside is the server's user outside, so the read-only system shows whatever that user may read. A
job needs the Python installation, the repository's code, its compile cache and the files on its command line;
so the server user's home, /root and /home get empty tmpfs (the paths a job needs under them are bound back
read-only, as are ~/.cache/huggingface and ~/.cache/torch, where a model's downloaded weights live), the
repository's .streamlit (the app's secrets.toml) is hidden, and /etc/shadow, /etc/gshadow, /etc/sudoers and the
SSH host keys read as empty files. What remains readable is the rest of the system (/etc/passwd, /usr, /opt,
other disks): README, "Security", says so.
Memory and processes are limited by a cgroup made for the worker (cgroup v2, or v1's memory and pids
controllers) where the cgroup tree is writable: the memory limit counts the page cache, so files on the
private /tmp and /dev/shm and memfds count against it, and the kernel's OOM killer ends the job at its limit;
pids.max stops a fork bomb before it can fork. The gate shell blocks until the worker's cgroup is joined,
so everything the job starts is inside it from the first instruction; so does each compile the trusted builder
runs for the job, which joins the same cgroup (Note [Builds inside the job's limits]).
Where the cgroup tree is read-only, sandbox.py's /proc polling enforces the memory limit (resident memory,
plus the private tmpfs and memfds), and where bubblewrap cannot run at all (not installed, or user namespaces
disallowed), the worker runs only in its own session: `protection()` then says in words what is missing,
and the app and the CLI show it.

Note [Work directories]
Each worker's directory is made under one root (glassbox-runs in the temp directory) beside a lock file that
its owner holds (flock) for the worker's lifetime. A process that dies without cleaning up (the CLI or the
server killed by SIGKILL) releases its locks with it, and `sweep_stale()`, run whenever a worker is made,
removes every directory whose lock is free, and every empty cgroup we left.
"""
from __future__ import annotations

import fcntl
import functools
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

UNPRIVILEGED_ID = "65534"  # nobody/nogroup inside the namespace
CGROUP_PREFIX = "glassbox-"
RUN_ROOT = Path(tempfile.gettempdir()) / "glassbox-runs"
REPO_ROOT = Path(__file__).resolve().parents[2]


# --- bubblewrap ----------------------------------------------------------------------------------------------


def bwrap_argv(workdir: Path, readable: list[tuple[str, str]], tmpfs_bytes: int, network: bool = False) -> list[str]:
    """bubblewrap's arguments for one worker (Note [Isolation]); the command follows. `readable`: (source,
    destination) pairs to bind read-only over the private mounts."""
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-user", "--uid", UNPRIVILEGED_ID, "--gid", UNPRIVILEGED_ID,
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", *userns_refusal(), "--cap-drop", "ALL"]
    if not network:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--size", str(tmpfs_bytes), "--tmpfs", "/tmp", "--size", str(tmpfs_bytes), "--tmpfs", "/dev/shm",
             "--tmpfs", "/run"]
    if RUN_ROOT.is_dir():
        argv += ["--tmpfs", str(RUN_ROOT)]  # other jobs' directories, wherever the temp directory is
    for directory in private_directories():
        argv += ["--tmpfs", directory]  # Note [Private files]: what a job needs there is bound back below
    for path in private_files():
        argv += ["--ro-bind", "/dev/null", path]
    for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri")):
        argv += ["--dev-bind", device, device]  # the GPU: its own /dev has only null, zero, random, tty, ...
    for source, destination in readable:
        argv += ["--ro-bind", source, destination]
    for directory in private_directories():  # a private directory inside what was bound back (the repository's
        if any(directory.startswith(destination + "/") for _, destination in readable):  # .streamlit, the repo
            argv += ["--tmpfs", directory]  # under /tmp) is hidden again
    argv += ["--bind", str(workdir), str(workdir), "--remount-ro", "/dev", "--remount-ro", "/run"]
    if RUN_ROOT.is_dir():
        argv += ["--remount-ro", str(RUN_ROOT)]  # its tmpfs; the work directory bound inside stays writable
    return argv + ["--chdir", str(workdir), "--"]


def readable_paths(argv: list[str]) -> list[tuple[str, str]]:
    """(real path, path) pairs a worker must read that its private /tmp, /dev/shm, /run and hidden directories
    would hide: the repo, the Python installation and the files named on its command line, where they live there
    (Note [Isolation], Note [Private files])."""
    import site

    paths = {str(REPO_ROOT), sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), site.getusersitepackages(),
             *needed_under_private(), *(a for a in argv if os.path.isabs(a) and os.path.isfile(a))}
    hidden = ("/tmp/", "/dev/shm/", "/run/", "/var/run/", *(d + "/" for d in private_directories()))

    def under_hidden(path: str) -> bool:
        return any((candidate + "/").startswith(hidden) for candidate in (os.path.realpath(path), path))

    # a symbolic link (the venv's python into a hidden home) resolves inside to its target, bound at its own path
    return sorted({(os.path.realpath(p), os.path.realpath(p) if os.path.islink(p) else p) for p in paths
                   if os.path.exists(p) and under_hidden(p)})


def private_directories() -> list[str]:
    """Directories hidden behind an empty tmpfs (Note [Private files]): the server user's home, /root, /home,
    the repository's .streamlit; never / or a directory that holds the temp directory."""
    temp = os.path.realpath(tempfile.gettempdir()) + "/"
    found = []
    for directory in (os.path.expanduser("~"), "/root", "/home", str(REPO_ROOT / ".streamlit")):
        real = os.path.realpath(directory)
        if real != "/" and os.path.isdir(real) and not temp.startswith(real + "/") and real not in found:
            found.append(real)
    return found


PRIVATE_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")


def private_files() -> list[str]:
    """Files that read as empty inside the sandbox (Note [Private files])."""
    return [path for path in (*PRIVATE_FILES, *sorted(glob.glob("/etc/ssh/ssh_host_*key"))) if os.path.isfile(path)]


def needed_under_private() -> list[str]:
    """Caches a model may read its downloaded weights from, bound back read-only (Note [Private files])."""
    home = os.path.expanduser("~")
    return [path for path in (os.path.join(home, ".cache", "huggingface"), os.path.join(home, ".cache", "torch"),
                              os.environ.get("HF_HOME", "")) if path and os.path.isdir(path)]


@functools.lru_cache(maxsize=None)
def userns_refusal() -> tuple[str, ...]:
    """bubblewrap's flags that refuse a nested user namespace inside the sandbox (Note [Isolation]), where this
    bubblewrap has them (0.8 and later); () otherwise, and protection() says so."""
    try:
        usage = subprocess.run([shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return ("--disable-userns", "--assert-userns-disabled") if "--disable-userns" in usage else ()


@functools.lru_cache(maxsize=None)
def bwrap_problem() -> str:
    """"" where bubblewrap runs here, else why it does not, in words."""
    if os.environ.get("GLASSBOX_SANDBOX_NO_BWRAP") == "1":
        return "bubblewrap is turned off (GLASSBOX_SANDBOX_NO_BWRAP=1)"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    RUN_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)  # probed with the mounts a job gets
    with tempfile.TemporaryDirectory() as probe:
        try:
            done = subprocess.run(bwrap_argv(Path(probe), [], 1 << 20) + ["/bin/true"], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bubblewrap does not start ({error})"
    if done.returncode != 0:
        return f"bubblewrap cannot make namespaces here ({done.stderr.strip()[:200] or done.returncode})"
    return ""


def protection() -> tuple[list[str], list[str]]:
    """(protections in force, protections missing), in words, for this machine."""
    have, missing = ["a clean environment", "wall-time, CPU-time, output and process limits",
                     "its own work directory, removed afterwards"], []
    problem = bwrap_problem()
    if problem:
        missing += [f"no namespaces: {problem}, so the model can see and signal this machine's processes, read "
                    "their environments, use the network, write wherever this user can (the compile cache "
                    "too), and a process that calls setsid() can outlive its job"]
    else:
        have += ["bubblewrap namespaces (PID, mount, IPC, UTS, network) with an unprivileged uid",
                 "a read-only file system with private size-capped /tmp and /dev/shm",
                 "a read-only compile cache (builds go through a trusted builder)"]
        if userns_refusal():
            have.append("no nested user namespaces (the job cannot lift its own limits)")
        else:
            missing.append("nested user namespaces are not refused (bubblewrap older than 0.8 has no "
                           "--disable-userns): a job could mount a cgroup hierarchy of its own and lift its limits")
    if Cgroup.available():
        have.append("cgroup memory and process limits (shared memory counted)")
    else:
        missing.append("no writable cgroups: memory is watched by polling /proc (resident memory, private "
                       "tmpfs and memfds), which a fast allocation can overshoot between two polls; a C++ build "
                       "the job asks for is not counted in its memory, only capped on its own (an address space "
                       "of the job's memory, at least 1 GB)")
    return have, missing


def missing_protection_words() -> str:
    """One paragraph for the app and the CLI; "" when everything is in force."""
    missing = protection()[1]
    return ("Sandbox protection missing on this machine: " + "; ".join(missing) + ".") if missing else ""


# --- cgroups ---------------------------------------------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    found = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = path
    except (OSError, ValueError):
        pass
    return found


def _mounts() -> dict[str, tuple[str, str]]:
    """controller (or "" for v2) -> (mount point, root inside the hierarchy), from /proc/self/mountinfo."""
    found = {}
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, right = line.split(" - ", 1)
            fields, kind = left.split(), right.split()
            if kind[0] == "cgroup2":
                found.setdefault("", (fields[4], fields[3]))
            elif kind[0] == "cgroup":
                for option in kind[2].split(","):
                    if option in ("memory", "pids"):
                        found.setdefault(option, (fields[4], fields[3]))
    except (OSError, ValueError, IndexError):
        pass
    return found


def _directory(controller: str) -> Path | None:
    mounts, own = _mounts(), _own_cgroups()
    if controller not in mounts or controller not in own:
        return None
    mount, root = mounts[controller]
    path = own[controller]
    relative = path[len(root):] if root != "/" and path.startswith(root) else path
    return Path(mount) / relative.lstrip("/")


def _write(path: Path, value: str) -> None:
    with open(path, "w") as out:
        out.write(value)


def _number(path: Path, key: str | None = None) -> int:
    """A cgroup file's number, or the number after `key` in a flat-keyed file; 0 where absent."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    if key is None:
        return int(text.split()[0]) if text.split() and text.split()[0].isdigit() else 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return 0


class Cgroup:
    """One worker's memory and pids cgroup (Note [Isolation]): v2 when its memory and pids controllers can be
    delegated below ours, else v1's memory and pids hierarchies; `create` returns None where neither is
    writable."""

    def __init__(self, version: int, directories: dict[str, Path]):
        self.version, self.directories = version, directories

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def available() -> bool:
        if os.environ.get("GLASSBOX_SANDBOX_NO_CGROUP") == "1":
            return False
        probe = Cgroup.create(1 << 30, 64)
        if probe is None:
            return False
        probe.remove()
        return True

    @classmethod
    def create(cls, memory_bytes: int, pids: int, name: str | None = None) -> Cgroup | None:
        """A new cgroup; `name` ties it to a work directory (Note [Work directories])."""
        if os.environ.get("GLASSBOX_SANDBOX_NO_CGROUP") == "1":
            return None
        name = name or CGROUP_PREFIX + uuid.uuid4().hex[:12]
        for attempt in (cls._create_v2, cls._create_v1):
            try:
                group = attempt(name)
            except OSError:
                continue
            if group is None:
                continue
            try:
                group.set_memory(memory_bytes)
                group.set_pids(pids)
                return group
            except OSError:
                group.remove()
        return None

    @classmethod
    def _create_v2(cls, name: str) -> Cgroup | None:
        parent = _directory("")
        if parent is None or not (parent / "cgroup.controllers").exists():
            return None
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            _write(parent / "cgroup.subtree_control", "+memory +pids")  # fails where our cgroup holds processes
        (parent / name).mkdir()
        return cls(2, {"memory": parent / name, "pids": parent / name})

    @classmethod
    def _create_v1(cls, name: str) -> Cgroup | None:
        memory, pids = _directory("memory"), _directory("pids")
        if memory is None or pids is None:
            return None
        (memory / name).mkdir()
        try:
            (pids / name).mkdir()
        except OSError:
            (memory / name).rmdir()
            raise
        return cls(1, {"memory": memory / name, "pids": pids / name})

    def set_memory(self, memory_bytes: int) -> None:
        memory = self.directories["memory"]
        if self.version == 2:
            _write(memory / "memory.max", str(memory_bytes))
            if (memory / "memory.swap.max").exists():
                _write(memory / "memory.swap.max", "0")
            return
        limit, swap = memory / "memory.limit_in_bytes", memory / "memory.memsw.limit_in_bytes"
        if swap.exists():  # memsw must stay >= the memory limit: order the two writes accordingly
            lowering = memory_bytes < _number(limit)
            for path in ((limit, swap) if lowering else (swap, limit)):
                _write(path, str(memory_bytes))
        else:
            _write(limit, str(memory_bytes))

    def set_pids(self, pids: int) -> None:
        _write(self.directories["pids"] / "pids.max", str(pids))

    def add(self, pid: int) -> None:
        for directory in {str(d): d for d in self.directories.values()}.values():
            _write(directory / "cgroup.procs", str(pid))

    def members(self) -> list[int]:
        try:
            return [int(p) for p in (self.directories["memory"] / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def memory_mb(self) -> float:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return _number(self.directories["memory"] / name) / (1 << 20)

    def peak_mb(self) -> float:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        return _number(self.directories["memory"] / name) / (1 << 20)

    def oom_killed(self) -> bool:
        if self.version == 2:
            return _number(self.directories["memory"] / "memory.events", "oom_kill") > 0
        return _number(self.directories["memory"] / "memory.oom_control", "oom_kill") > 0

    def forks_refused(self) -> bool:
        return _number(self.directories["pids"] / "pids.events", "max") > 0

    def kill_all(self) -> None:
        for directory in {str(d): d for d in self.directories.values()}.values():
            _kill_members(directory)

    def remove(self) -> None:
        for directory in {str(d): d for d in self.directories.values()}.values():
            _remove_cgroup(directory)


def _kill_members(directory: Path) -> None:
    """SIGKILL every process of a cgroup until none is left (cgroup.kill where v2 has it; pids.max bounds a
    forking loop in v1)."""
    if (directory / "cgroup.kill").exists():
        try:
            _write(directory / "cgroup.kill", "1")
        except OSError:
            pass
    for _ in range(100):
        try:
            members = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        if not members:
            return
        kill_processes(members)
        time.sleep(0.02)


def kill_processes(pids: list[int]) -> None:
    """SIGKILL each of them; one already gone is fine."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _remove_cgroup(directory: Path) -> None:
    for _ in range(50):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


# --- work directories ------------------------------------------------------------------------------------------


class WorkDirectory:
    """A worker's private directory under RUN_ROOT with its owner's lock (Note [Work directories])."""

    def __init__(self):
        sweep_stale()
        RUN_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
        while True:  # the lock first, so that a sweep never sees the directory without a held lock
            self.path = RUN_ROOT / f"glassbox-run-{uuid.uuid4().hex[:16]}"
            self._lock = open(str(self.path) + ".lock", "w")
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            try:
                if os.stat(self._lock.name).st_ino == os.fstat(self._lock.fileno()).st_ino:
                    break  # not unlinked by a sweep between open and flock
            except FileNotFoundError:
                pass
            self._lock.close()
        self.path.mkdir(mode=0o755)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            os.unlink(str(self.path) + ".lock")
        except OSError:
            pass
        self._lock.close()


def cgroup_name(workdir: Path) -> str:
    """The cgroup of the worker that runs in `workdir` (so that a sweep finds it from the directory)."""
    return CGROUP_PREFIX + workdir.name.rsplit("-", 1)[-1]


def sweep_stale() -> list[Path]:
    """Remove work directories whose owner is gone, after killing whatever still runs in their cgroups (a worker
    whose owner died while bubblewrap was still setting up), and our empty cgroups (Note [Work directories])."""
    removed = []
    parents = [parent for parent in map(_directory, ("", "memory", "pids")) if parent is not None]
    try:
        locks = [entry for entry in os.scandir(RUN_ROOT) if entry.name.endswith(".lock")]
    except OSError:
        locks = []
    for entry in locks:
        try:
            with open(entry.path) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                directory = Path(entry.path[:-len(".lock")])
                for parent in parents:
                    if (parent / cgroup_name(directory)).is_dir():
                        _kill_members(parent / cgroup_name(directory))
                        _remove_cgroup(parent / cgroup_name(directory))
                shutil.rmtree(directory, ignore_errors=True)
                os.unlink(entry.path)
                removed.append(directory)
        except OSError:  # held: its owner is alive (or it went between the scan and the open)
            continue
    for parent in parents:
        try:
            for child in parent.glob(CGROUP_PREFIX + "*"):
                try:  # old enough not to be one that is being set up right now, and empty
                    old = time.time() - child.stat().st_mtime > 60
                    if old and not (child / "cgroup.procs").read_text().split():
                        child.rmdir()
                except OSError:
                    continue
        except OSError:
            continue
    return removed
