"""The trusted builder: compiles C++ for sandboxed workers into the shared compile cache (Note [Trusted builder]
in engine/runtime/build.py).

One `TrustedBuilder` serves one worker over a socket pair (the worker's end is inherited as GLASSBOX_BUILDER_FD),
from a thread of the process that started the worker. A request carries only the generated source; the flags,
the compiler and the cache key are the builder's (engine.runtime.build), and g++ itself runs in a sandbox of its own
(bubblewrap where it works: no network, no processes to see, only the cache entry writable), since the source
comes from a job and could `#include` a file to read it back in an error message. The prelude a job's source
starts with is read precompiled when it is the builder's own (Note [Precompiled prelude] in build.py): its
directory, the one g++ is told to search (-I), is bound read-only into the sandbox.

Note [Builds inside the job's limits]
A build is the job's work, so it gets the job's limits, not the server's. Where the job has a cgroup (Note
[Isolation]), g++ starts at a gate, is put into it (join(), from the sandbox) and only then runs: its memory is
the job's, counted by the sandbox's polling among the job's processes and held by the kernel at the job's
backstop, so a compile that grows (cc1plus reading `#include "/dev/zero"`, ten macros that expand to 10^8
tokens) stops the job at its memory limit, and it dies with the job's other processes. Where there is no
cgroup, g++ keeps a cap of its own, not counted in the job's memory: an address space of the job's backstop,
at least COMPILER_MEMORY_FLOOR (prlimit); isolation.protection() and README's Security say so. Either way it
runs with the job's time limit, in a process group of its own that the builder kills when the job ends
(close(), from the sandbox's kill(): a constexpr-heavy source kept g++ running for minutes after its job was
stopped in the app).
It runs with a clean environment (compile_environment): the assembler read the server's environment back
into its error messages from `asm(".include \"/proc/self/environ\"")`, and the job reads the build's error.
A source that could make the compiler or the assembler read a file is refused before g++ sees it
(refused_source). Its preprocessor is held to an allowlist of what generated code uses: each `#` (or `%:`)
must begin one of the directives #define, #undef, #if, #ifdef, #ifndef, #elif, #else, #endif, `#pragma omp`,
`#pragma GCC unroll` or `#include <header>` of one of ALLOWED_HEADERS, the code generator's own (no quoted
name, no path, no macro); anything else is refused with what it was: #line and line markers (the diagnostic
printer reads the file they name), #include_next, #import, #embed, `#pragma GCC dependency` (opens a file),
`_Pragma` (spells any pragma), `__has_include` (opens the file it names), and a `#` that begins no directive.
The words `include`, `include_next`, `import` and `embed` stand nowhere else. Below the preprocessor no
allowlist is sound (identifiers are the model's names), so a blocklist remains: words that put text of the
source into the assembler's input (asm, section, alias, symver, weakref, ifunc, ident, sccs), `.incbin`, token
pasting (which can spell them) and universal character names are refused wherever they stand. Generated code
has none of them. The check is context-free, so no comment, string or raw string can hide a directive from it
(a lexer can be led astray: `1'2'/*` is a comment to one and a character literal to g++), and it takes time
linear in the source (the comment-stripping regex it replaced took quadratic time, in the server's process, on
a source of `/* `).
The filter is a first line only: what it misses reads no more than the job could itself (g++'s sandbox
hides what the job's does) and meets the job's memory and time.
What a job stores in the shared cache is counted, and capped at JOB_CACHE_BYTES: each compile may write no
file larger than what is left of it (RLIMIT_FSIZE), and a library that would take the job past it is removed
and refused (one 32 MB initialized array passed a quota checked only before each build); a failed
build's entry is removed too. After each new entry the cache is cut back to CACHE_MAX_BYTES by evicting the
entries used longest ago (a hit touches its entry).
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

from engine.runtime import build
from engine.tools import isolation

COMPILE_TIMEOUT_S = 600.0
SOURCE_LIMIT_BYTES = 64 << 20
BUILDS_PER_JOB = 256  # a real exploration builds one library per graph; more is a job filling the cache
JOB_CACHE_BYTES = int(os.environ.get("GLASSBOX_JOB_CACHE_MB", "256")) << 20
CACHE_MAX_BYTES = int(os.environ.get("GLASSBOX_CACHE_MAX_MB", "2048")) << 20
COMPILER_MEMORY_FLOOR = 1 << 30  # g++ on a large generated file needs this much address space at least
# a compile in the job's cgroup starts here and becomes g++ once the builder has put it in (as the job's gate does)
BUILD_GATE = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "glassbox-build-gate"]

_SPLICE = re.compile(r"\\[ \t\f\v]*\n")  # g++ joins a line ending in a backslash, spaces after it or not
_NOT_IN_WORD = "A-Za-z0-9_$"
# the headers generated code includes (engine/codegen/cpp: prelude.h, gemm.py), and no other: Note [Builds inside
# the job's limits]; tests/test_builder_limits.py checks the code generator against it
ALLOWED_HEADERS = frozenset({"algorithm", "cmath", "cstdint", "cstring", "immintrin.h", "limits", "omp.h", "vector"})
ALLOWED_DIRECTIVES = frozenset({"define", "undef", "if", "ifdef", "ifndef", "elif", "else", "endif", "include",
                                "pragma"})
_DIRECTIVE = re.compile(r"(?:#|%:)[ \t\f\v]*([A-Za-z_][A-Za-z0-9_]*)?")
_ALLOWED_INCLUDE = re.compile(r"[ \t\f\v]*<([A-Za-z0-9_.]+)>")
_ALLOWED_PRAGMA = re.compile(rf"[ \t\f\v]+(?:omp|GCC[ \t\f\v]+unroll)(?![{_NOT_IN_WORD}])")
_INCLUDING = re.compile(rf"(?<![{_NOT_IN_WORD}])(include_next|include|import|embed)(?![{_NOT_IN_WORD}])")
_OPENING = re.compile(r"has_include|has_embed|_Pragma|\?\?[=/'()!<>-]")  # trigraphs: ??= is a #
_TO_ASSEMBLER = re.compile(rf"(?<![{_NOT_IN_WORD}])_*(asm|section|alias|symver|weakref|ifunc|ident|sccs|"
                           rf"pch_preprocess)_*(?![{_NOT_IN_WORD}])")
_SPELLS = re.compile(r"##|%:%:|incbin|\\[uU]", re.I)
_DIRECTIVES_WORDS = ("#include <header> of the code generator's own headers, #define, #undef, #if, #ifdef, "
                     "#ifndef, #elif, #else, #endif, #pragma omp and #pragma GCC unroll")
# the prelude that generated C++ starts with (engine/codegen/cpp/module.py reads the same file): read, not
# imported, since importing codegen would import torch into the app's server
PRELUDE_FILE = Path(__file__).resolve().parents[1] / "codegen" / "cpp" / "prelude.h"


def _allowed_directive(text: str, match: re.Match) -> bool:
    name = match.group(1)
    if name not in ALLOWED_DIRECTIVES:
        return False
    if name == "include":
        header = _ALLOWED_INCLUDE.match(text, match.end())
        return header is not None and header.group(1) in ALLOWED_HEADERS
    return name != "pragma" or _ALLOWED_PRAGMA.match(text, match.end()) is not None


def refused_source(source: str) -> str:
    """Why a job's source may not be compiled ("" when it may): Note [Builds inside the job's limits]. Linear in
    the source's length; context-free, so nothing in a comment or a string hides a directive from it."""
    text = _SPLICE.sub("", source.replace("\r\n", "\n").replace("\r", "\n"))
    for match in _DIRECTIVE.finditer(text):
        if not _allowed_directive(text, match):
            line = text[match.start():match.start() + 80].split("\n", 1)[0].strip()
            return (f"the source has `{line}`: generated code uses only the preprocessor's {_DIRECTIVES_WORDS} "
                    "(no other header, no quoted or macro name, no #line, #include_next, #embed or other "
                    "pragma), so the trusted builder does not compile it")
    for match in _INCLUDING.finditer(text):
        header = _ALLOWED_INCLUDE.match(text, match.end())
        if match.group(1) != "include" or header is None or header.group(1) not in ALLOWED_HEADERS:
            operand = text[match.end():match.end() + 80].split("\n", 1)[0].strip()
            return (f"the source has `{match.group(1)} {operand}`: generated code includes only its own headers "
                    f"({', '.join(sorted(ALLOWED_HEADERS))}), by name, so the trusted builder does not compile it")
    found = _OPENING.search(text)
    if found:
        return (f"the source has `{found.group(0)}`, which can make the preprocessor open a file or spell a "
                "directive (__has_include, __has_embed, _Pragma, a trigraph): generated code has none, so the "
                "trusted builder does not compile it")
    found = _TO_ASSEMBLER.search(text) or _SPELLS.search(text)
    if found:
        return (f"the source has `{found.group(0)}`, which can make the assembler read a file (inline assembly, "
                "a section or symbol name, token pasting): generated code has none, so the trusted builder does "
                "not compile it")
    return ""


# what g++ may see of the server's environment: where its tools are, nothing else (Note [Builds inside the job's
# limits]); the toolchain's own variables are configuration, kept so that a build here is the build elsewhere
_COMPILER_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "COMPILER_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "CPATH",
                       "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")


def compile_environment(isolated: bool) -> dict[str, str]:
    """The compiler's whole environment: none of the server's secrets (the source is a job's)."""
    env = {key: os.environ[key] for key in _COMPILER_VARIABLES if key in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    env.update({"LANG": "C", "LC_ALL": "C", "TMPDIR": "/tmp" if isolated else tempfile.gettempdir()})
    return env


def builder_prelude() -> str:
    """The prelude the builder reads precompiled (Note [Precompiled prelude] in engine/runtime/build.py): its own,
    never one a job names; "" where it cannot be read (then every build is plain)."""
    try:
        return PRELUDE_FILE.read_text()
    except OSError:
        return ""


def include_directories(command: list[str]) -> list[tuple[str, str]]:
    """(real path, path) of the directories g++ is told to search (-Idir: the builder's own precompiled prelude,
    Note [Precompiled prelude] in engine/runtime/build.py), bound read-only into its sandbox."""
    found = [arg[2:] for arg in command if arg.startswith("-I") and os.path.isabs(arg[2:]) and os.path.isdir(arg[2:])]
    return [(os.path.realpath(path), path) for path in found]


def cache_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def evict(cpp_root: Path, max_bytes: int = CACHE_MAX_BYTES) -> list[Path]:
    """Cut the shared cache's C++ entries back to 3/4 of max_bytes once over it, those used longest ago first;
    an entry being built (its lock held) is kept. Returns the entries removed."""
    try:
        entries = [(entry.stat().st_mtime, entry) for entry in cpp_root.iterdir() if entry.is_dir()]
    except OSError:
        return []
    sizes = {entry: cache_bytes(entry) for _, entry in entries}
    total = sum(sizes.values())
    if total <= max_bytes:
        return []
    removed = []
    for _, entry in sorted(entries, key=lambda pair: pair[0]):
        if total <= max_bytes * 3 // 4:
            break
        try:
            with open(entry / "kernels.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue  # being built or used right now
        total -= sizes[entry]
        removed.append(entry)
    return removed


class TrustedBuilder:
    """Answers one worker's build requests until the worker closes its end (it exits or is killed), inside the
    job's limits (Note [Builds inside the job's limits])."""

    def __init__(self, memory_bytes: int = 4 << 30, timeout_s: float = COMPILE_TIMEOUT_S):
        self._ours, self._theirs = socket.socketpair()
        self.builds = 0
        self.stored_bytes = 0
        self.set_limits(memory_bytes, timeout_s)
        self._running: subprocess.Popen | None = None
        self.cgroup: isolation.Cgroup | None = None  # the job's, once it has one (join)
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="glassbox-builder")
        self._thread.start()

    def set_limits(self, memory_bytes: int, timeout_s: float) -> None:
        """The job's limits: its memory backstop and its time (a standby worker learns its job's when it is
        handed over)."""
        self.memory_bytes = max(COMPILER_MEMORY_FLOOR, int(memory_bytes))
        self.timeout_s = min(COMPILE_TIMEOUT_S, max(1.0, float(timeout_s)))

    def join(self, cgroup: isolation.Cgroup | None) -> None:
        """Run every later compile in the job's cgroup: its memory counts as the job's, under the job's limit
        (Note [Builds inside the job's limits])."""
        self.cgroup = cgroup

    def quota_left(self) -> int:
        """What this job may still store in the shared cache, in bytes (Note [Builds inside the job's limits])."""
        return JOB_CACHE_BYTES - self.stored_bytes

    def worker_fd(self) -> int:
        """The descriptor to pass to the worker (pass_fds), as GLASSBOX_BUILDER_FD."""
        return self._theirs.fileno()

    def started(self) -> None:
        """The worker has its copy of the descriptor: ours closes, so its exit ends the stream."""
        self._theirs.close()

    def close(self) -> None:
        """The job ended: kill the compile it left running (its whole process group), close the channel."""
        with self._lock:
            self._closed = True
            running = self._running
        if running is not None:
            _kill_group(running)
        for end in (self._theirs, self._ours):
            try:
                end.close()
            except OSError:
                pass

    def compile(self, command: list[str], **options) -> subprocess.CompletedProcess:
        """The `run` of build.build_library for a job's source: g++ under bubblewrap (only the entry writable),
        with the job's memory and time, in its own process group (Note [Builds inside the job's limits])."""
        output = command[command.index("-o") + 1]
        entry = output.rsplit("/", 1)[0]
        isolated = not isolation.bwrap_problem()
        if isolated:
            readable = isolation.readable_paths(command) + include_directories(command)
            command = isolation.bwrap_argv(Path(entry), readable, 1 << 30) + command
        cgroup, limit = self.cgroup, shutil.which("prlimit")
        if limit:  # no file it writes (the library, the assembler's object) may be larger than the job's quota left
            memory = [] if cgroup else [f"--as={self.memory_bytes}"]  # in the job's cgroup, the job's limit holds
            command = [limit, *memory, f"--cpu={int(self.timeout_s) + 1}", "--core=0",
                       f"--fsize={max(1, self.quota_left())}", "--"] + command
        with self._lock:
            if self._closed:
                return subprocess.CompletedProcess(command, -signal.SIGKILL, "", "the job ended before its build")
            # in the job's cgroup, g++ waits at a gate until it is in there, so all it starts is counted
            process = subprocess.Popen((BUILD_GATE if cgroup else []) + command, text=True,
                                       stdin=subprocess.PIPE if cgroup else subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                       env=compile_environment(isolated))
            self._running = process
        try:
            if cgroup is not None:
                try:
                    cgroup.add(process.pid)
                except OSError as error:  # the job's cgroup is gone: the job ended
                    _kill_group(process)
                    process.communicate()
                    return subprocess.CompletedProcess(command, -signal.SIGKILL, "",
                                                       f"the job's cgroup could not take its build ({error})")
            stdout, stderr = process.communicate("go\n" if cgroup else None, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            return subprocess.CompletedProcess(command, -signal.SIGKILL, "",
                                               f"the compiler ran past the job's {self.timeout_s:g} s")
        finally:
            with self._lock:
                self._running = None
            _kill_group(process)  # anything it left in its group
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def _serve(self) -> None:
        while True:
            try:
                request = build.receive_message(self._ours, limit=SOURCE_LIMIT_BYTES)
            except (OSError, ValueError):
                return
            if request is None:
                return
            self.builds += 1
            if self.builds > BUILDS_PER_JOB:
                answer = {"error": f"this job asked for more than {BUILDS_PER_JOB} builds; the trusted builder "
                                   "stops here"}
            elif self.quota_left() <= 0:
                answer = {"error": f"this job stored {self.stored_bytes >> 20} MB in the shared compile cache, "
                                   f"past its quota of {JOB_CACHE_BYTES >> 20} MB; the trusted builder stops here"}
            else:
                answer = self._answer(request)
            try:
                build.send_message(self._ours, answer)
            except OSError:
                return

    def _answer(self, request: dict) -> dict:
        source = request.get("source")
        if not isinstance(source, str):
            return {"error": "a build request carries the generated source as text"}
        refused = refused_source(source)
        if refused:
            return {"error": refused}
        try:
            entry = build.cache_dir() / "cpp" / build.library_key(source)
            existed = entry.exists()
        except (OSError, build.BuildError) as error:
            return {"error": f"the trusted builder could not build: {error}"}
        try:
            path, hit = build.build_library(source, run=self.compile, prelude=builder_prelude())
        except build.BuildError as error:
            if not existed:  # a failed build leaves nothing in the shared cache
                shutil.rmtree(entry, ignore_errors=True)
            return {"error": str(error)}
        except OSError as error:
            return {"error": f"the trusted builder could not build: {error}"}
        if hit:
            try:
                os.utime(entry)  # used now: evicted last
            except OSError:
                pass
        elif path.parent == entry:
            size = cache_bytes(entry)
            if size > self.quota_left():  # the job's quota holds after the build too, however large its library
                _remove_entry(entry)
                return {"error": f"this build's library ({size >> 20} MB) would take the job past its quota of "
                                 f"{JOB_CACHE_BYTES >> 20} MB in the shared compile cache; the trusted builder "
                                 "removed it"}
            self.stored_bytes += size
            evict(entry.parent)
        return {"path": str(path), "cache_hit": hit}


def _remove_entry(entry: Path) -> None:
    """Remove a cache entry this job just stored, under its builders' lock."""
    try:
        with open(entry / "kernels.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            shutil.rmtree(entry, ignore_errors=True)
    except OSError:
        shutil.rmtree(entry, ignore_errors=True)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
