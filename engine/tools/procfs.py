"""What /proc says about processes: sessions, PID namespaces, descendants, memory, CPU time (for the sandbox's
limits and for checking that nothing of a job is left; Note [Sandbox] in engine/tools/sandbox.py)."""
from __future__ import annotations

import os
import resource
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int | str) -> list[bytes]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): fields 3 (state) on."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()


def all_processes() -> list[tuple[int, list[bytes]]]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                found.append((int(entry.name), stat_fields(entry.name)))
            except (OSError, IndexError):
                continue
    return found


def session_processes(session: int) -> list[tuple[int, bytes]]:
    """(pid, state letter) of every process in a session, from /proc (field 6 of stat is the session id)."""
    return [(pid, fields[0]) for pid, fields in all_processes() if len(fields) > 3 and fields[3] == b"%d" % session]


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_processes(namespace: str) -> list[tuple[int, bytes]]:
    """(pid, state letter) of every process in a PID namespace (the sandbox's, seen from outside)."""
    return [(pid, fields[0]) for pid, fields in all_processes() if pid_namespace(pid) == namespace]


def leftovers(session: int | None, namespace: str | None = None, grace_s: float = 2.0) -> list[int]:
    """Live (non-zombie) processes still in a worker's session or PID namespace, after a grace for the kernel."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = [pid for pid, state in (session_processes(session) if session else []) +
                 (namespace_processes(namespace) if namespace else []) if state != b"Z"]
        if not alive or time.monotonic() > deadline:
            return sorted(set(alive))
        time.sleep(0.1)


def descendants(root: int) -> list[int]:
    """root and every process below it (children of children), from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for pid, fields in all_processes():
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def resident_mb(pids: list[int]) -> float:
    rss_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as statm:
                rss_kb += int(statm.read().split()[1]) * (resource.getpagesize() // 1024)
        except (OSError, IndexError, ValueError):
            continue
    return rss_kb / 1024


def shared_mb(pids: list[int], root_pid: int | None) -> float:
    """Memory a job holds outside its resident pages: memfds it has open, and files on its private tmpfs
    (/tmp, /dev/shm; root_pid is a process inside the sandbox, None when there is none)."""
    seen, total = set(), 0
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in descriptors:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    info = os.stat(f"/proc/{pid}/fd/{fd}")
                    if (info.st_dev, info.st_ino) not in seen:
                        seen.add((info.st_dev, info.st_ino))
                        total += info.st_blocks * 512
            except OSError:
                continue
    if root_pid is not None:
        for mount in ("tmp", "dev/shm"):
            try:
                usage = os.statvfs(f"/proc/{root_pid}/root/{mount}")
                total += (usage.f_blocks - usage.f_bfree) * usage.f_frsize
            except OSError:
                continue
    return total / (1 << 20)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    try:
        fields = stat_fields(pid)
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return 0.0


def command_name(pid: int) -> str:
    """The process's command name (/proc/PID/comm), or "" once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def compilers_below(pid: int) -> list[int]:
    """The compiler's processes (g++, cc1plus, as, ld) below `pid`, wherever their PID namespace."""
    return [child for child in descendants(pid)
            if command_name(child) in ("g++", "cc1plus", "as", "ld", "collect2", "c++")]


def alive(pids: list[int]) -> list[int]:
    """Those of pids still running (not gone, not a zombie)."""
    running = {pid: fields[0] for pid, fields in all_processes()}
    return [pid for pid in pids if pid in running and running[pid] != b"Z"]
