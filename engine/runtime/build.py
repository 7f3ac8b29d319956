"""Build generated code: g++ -> shared library loaded with ctypes, cached by content hash.

Note [Compile cache]
The key hashes the source, the flags and the compiler's version. Entries are written to a temporary name
and renamed into place, so a crash or a concurrent build never leaves a half-written library under a key.
Next to each library, kernels.so.sha256 holds its checksum (written, also atomically, after the library):
an entry whose library is missing, truncated or altered does not match and is rebuilt. Builders of one key
take an exclusive lock (flock on kernels.lock in the entry's directory), so concurrent explorations of the
same model compile it once; the others wait and then find the entry. When the cache directory cannot be
created or written (read-only, full disk), we warn and build in a fresh temporary directory instead.

Note [Trusted builder]
A sandboxed worker sees the shared cache read-only, at its own path, and writes only a private one
(its GLASSBOX_CACHE_DIR, for Triton modules and autotuning, which dies with the job). It builds a library by
sending the generated source over the socket GLASSBOX_BUILDER_FD to a trusted builder in the process that
started it (engine/tools/builder.py). The builder chooses the flags and the compiler itself (the toolchain
probe runs there), computes the key from source, flags and compiler version, compiles (g++ itself in a
sandbox of its own), stores, and answers with the library's path in the shared cache. So a job can only ever
store the correct binary of the source it sent, under that source's key; nothing a job writes reaches the next.

Note [Precompiled prelude]
Every generated C++ unit starts with the same prelude (engine/codegen/cpp/prelude.h), and parsing it was most
of g++'s time on a small graph (about 1 s of 1.3 s). The caller names it (`prelude=`; the builder names its own,
never a job's) and it is precompiled once per compiler (binary and version), compile flags and prelude text, into
pch/<key>/gb_prelude.h.gch: under a lock (pch.lock), by the library's own `run` (so in the builder's sandbox),
renamed into place with a checksum (checked once per process), and kept only if a probe compile with -H shows
that g++ takes it. g++ takes a .gch only through the unit's first #include and with the same flags, so the
library is compiled, with the plain build's flags, from a wrapper: `#include "gb_prelude.h"`, a #line back to the
source's own line, the rest of the source; it is named kernels.cpp too, the name the library keeps as its FILE
symbol. The library is then the plain build's byte for byte (reports/precompiled_prelude.md) and its key is
unchanged: the pch is an accelerator, not part of correctness. Where there is none (a read-only cache, g++
refusing it: remembered in pch.refused) or a build with it fails, the plain build runs, and the reason is logged
at debug level (logger engine.runtime.build). The entries (45 MB each, the 3 used last kept) are outside the
builder's quota; GLASSBOX_PCH_DIR puts them elsewhere (the test suite shares one).
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

log = logging.getLogger(__name__)

BASE_FLAGS = ["-O3", "-shared", "-fPIC", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-std=c++17",
              "-w"]


class BuildError(Exception):
    pass


def cache_dir() -> Path:
    root = os.environ.get("GLASSBOX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "glassbox")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def compiler() -> str:
    return os.environ.get("CXX", "g++")


# Note [Toolchain probe]
# The cache key needs the compiler's version, and the flags need to know whether this compiler and CPU take
# -march=native and -lmvec. Probing runs g++ three times (~0.2 s), which every fresh process (a CLI call, an
# app worker) would pay before its first cache hit. The answers are remembered in the cache directory under
# a key made of the compiler binary (path, size, modification time) and the CPU's feature flags, so a new
# compiler or a different machine sharing the cache directory probes again.
@functools.lru_cache(maxsize=None)
def _toolchain() -> tuple[str, tuple[str, ...]]:
    """(compiler version text, native flags), from the probe cache or a fresh probe."""
    cpu_flags = _cpu_flags_line()
    try:
        record = cache_dir() / "toolchain" / f"{_toolchain_key(cpu_flags)}.json"
    except OSError:
        record = None  # no usable cache directory: probe every time
    if record is not None:
        try:
            known = json.loads(record.read_text())
            if isinstance(known["version"], str):
                return known["version"], _trusted_flags(known["native_flags"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    version, native = _probe_version(), _probe_native_flags(cpu_flags)
    if record is not None:
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(record, json.dumps({"version": version, "native_flags": list(native)}))
        except OSError:
            pass  # an unwritable cache only costs the probe next time
    return version, native


def _trusted_flags(flags: list) -> tuple[str, ...]:
    """The probe record's flags, if every one is a flag the probe can find (ValueError otherwise): a record
    that was written by something else must not put its own words on g++'s command line."""
    allowed = {"-march=native", "-lmvec", "-mprefer-vector-width=256", "-mprefer-vector-width=512"}
    if not isinstance(flags, list) or not all(isinstance(f, str) and f in allowed for f in flags):
        raise ValueError(f"untrusted flags in the toolchain record: {flags!r}")
    return tuple(flags)


def _toolchain_key(cpu_flags: str) -> str:
    digest = hashlib.sha256(compiler().encode())
    binary = shutil.which(compiler())
    if binary:
        info = os.stat(binary)
        digest.update(f"{os.path.realpath(binary)}:{info.st_size}:{info.st_mtime_ns}".encode())
    digest.update(cpu_flags.encode())
    digest.update(b"probe 2")  # what the probe tries: a new candidate flag means probing again
    return digest.hexdigest()[:24]


def _probe_version() -> str:
    try:
        return subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise BuildError(f"no working C++ compiler ({compiler()}): {error}") from None


def _probe_native_flags(cpu_flags: str) -> tuple[str, ...]:
    """-march=native, the widest vectors this CPU has (gcc prefers narrower ones on many CPUs: 128 bits on
    AMD Zen 1, 256 on AVX-512 Intel parts; wide vectors halve the calls into libmvec's exp and friends), and
    glibc's vector math library (libmvec), each where this compiler and machine take it."""
    features = set(cpu_flags.split())
    width = "512" if "avx512f" in features else "256" if "avx2" in features else None
    candidates = ["-march=native"] + ([f"-mprefer-vector-width={width}"] if width else []) + ["-lmvec"]
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.cpp")
        src.write_text("int main() { return 0; }\n")
        for flag in candidates:
            if subprocess.run([compiler(), flag, str(src), "-o", str(Path(tmp, "probe"))],
                              capture_output=True).returncode == 0:
                found.append(flag)
    return tuple(found)


def _cpu_flags_line() -> str:
    """The CPU's feature flags, as /proc/cpuinfo lists them ("" where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        return ""


def compiler_version() -> str:
    return _toolchain()[0]


def native_flags() -> tuple[str, ...]:
    return _toolchain()[1]


def flags() -> list[str]:
    return BASE_FLAGS + list(native_flags())


def library_key(source: str) -> str:
    digest = hashlib.sha256()
    for part in (source, " ".join(flags()), compiler_version()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build_library(source: str, run=subprocess.run, prelude: str = "") -> tuple[Path, bool]:
    """Compile `source` to a shared library; returns (path, cache_hit). See Note [Compile cache]. In a sandboxed
    worker the trusted builder does it (Note [Trusted builder]); `run` runs the compiler (the builder's runs it
    in a sandbox). `prelude`: the text the source starts with, read from a precompiled header where one can be
    had (Note [Precompiled prelude])."""
    if _builder_fd() is not None:
        return _ask_builder(source)
    key = library_key(source)
    try:
        entry = cache_dir() / "cpp" / key
        entry.mkdir(parents=True, exist_ok=True)
        lock = open(entry / "kernels.lock", "a")
    except OSError as error:
        warnings.warn(f"Glassbox's compile cache is not usable ({error}); building without it.", stacklevel=2)
        return _compile(source, Path(tempfile.mkdtemp(prefix="glassbox-build-")), run, prelude), False
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        target = entry / "kernels.so"
        if _intact(target):
            return target, True
        try:
            return _compile(source, entry, run, prelude), False
        except OSError as error:  # e.g. the disk filled up while writing the entry
            warnings.warn(f"Glassbox could not write to its compile cache ({error}); building without it.",
                          stacklevel=2)
            return _compile(source, Path(tempfile.mkdtemp(prefix="glassbox-build-")), run, prelude), False


_BUILDER_LOCK = threading.Lock()  # one request at a time on the worker's one socket


def _builder_fd() -> int | None:
    """The trusted builder's socket, when this process has it. A process started below the worker without it
    (subprocess closes descriptors) builds into its own cache instead, which in the sandbox is the private one."""
    try:
        fd = int(os.environ.get("GLASSBOX_BUILDER_FD", ""))
        return fd if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
    except (ValueError, OSError):
        return None


def _ask_builder(source: str) -> tuple[Path, bool]:
    """Send the source to the trusted builder; its answer is a library in the read-only shared cache."""
    with _BUILDER_LOCK:
        with socket.socket(fileno=os.dup(_builder_fd())) as channel:
            try:
                send_message(channel, {"source": source})
                answer = receive_message(channel)
            except (OSError, ValueError) as error:
                raise BuildError(f"the trusted builder did not answer ({error})") from None
    if answer is None or "error" in answer:
        raise BuildError((answer or {}).get("error") or "the trusted builder went away")
    return Path(answer["path"]), bool(answer["cache_hit"])


def send_message(channel: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    channel.sendall(struct.pack("!Q", len(data)) + data)


def receive_message(channel: socket.socket, limit: int = 256 << 20) -> dict | None:
    """One length-prefixed JSON message, or None at the end of the stream (or one over `limit` bytes)."""
    def exactly(count: int) -> bytes | None:
        chunks, left = [], count
        while left:
            chunk = channel.recv(min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    header = exactly(8)
    if header is None or struct.unpack("!Q", header)[0] > limit:
        return None
    body = exactly(struct.unpack("!Q", header)[0])
    if body is None:
        return None
    message = json.loads(body)
    return message if isinstance(message, dict) else None


def _checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _intact(target: Path) -> bool:
    """Whether a cache entry's library exists and matches the checksum written after it."""
    try:
        return _checksum(target) == (target.parent / "kernels.so.sha256").read_text().strip()
    except OSError:
        return False


def atomic_write(path: Path, text: str) -> None:
    fd, tmp_path = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp_path, path)


def _compile_flags() -> list[str]:
    return [f for f in flags() if not f.startswith("-l")]


def _link_flags() -> list[str]:
    return [f for f in flags() if f.startswith("-l")]


def _compile(source: str, directory: Path, run=subprocess.run, prelude: str = "") -> Path:
    target = directory / "kernels.so"
    atomic_write(directory / "kernels.cpp", source)
    fd, tmp_path = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    result = None
    if prelude:
        try:
            result = _compile_with_prelude(source, prelude, directory, tmp_path, run)
        except OSError as error:
            log.debug("no precompiled prelude: %s", error)
    if result is None:
        command = [compiler(), *_compile_flags(), str(directory / "kernels.cpp"), "-o", tmp_path, *_link_flags()]
        result = run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp_path)
        raise BuildError(f"g++ failed on generated code:\n{result.stderr[-4000:]}")
    os.replace(tmp_path, target)
    atomic_write(directory / "kernels.so.sha256", _checksum(target))
    return target


# --- the precompiled prelude (Note [Precompiled prelude]) ---------------------------------------------------

PCH_HEADER = "gb_prelude.h"
NEWLINE = "\n"
PCH_KEEP = 3  # pch entries kept (those used last): one per prelude text, compiler and flags seen lately
_PCH_VERIFIED: dict[str, tuple] = {}  # gch path -> its (device, inode, size, mtime) when its checksum matched
_PCH_FAILED: dict[str, str] = {}  # pch directory -> why it could not be built (in this process)


def pch_root() -> Path:
    return Path(os.environ.get("GLASSBOX_PCH_DIR") or cache_dir() / "pch")


@functools.lru_cache(maxsize=None)
def _compiler_binary() -> str:
    binary = shutil.which(compiler())
    if not binary:
        return compiler()
    info = os.stat(binary)
    return f"{os.path.realpath(binary)}:{info.st_size}:{info.st_mtime_ns}"


def pch_key(prelude: str) -> str:
    digest = hashlib.sha256(b"pch 1\0")
    for part in (_compiler_binary(), compiler_version(), " ".join(_compile_flags()), prelude):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def _compile_with_prelude(source: str, prelude: str, directory: Path, output: str, run):
    """The library compiled with the precompiled prelude into `output`: the CompletedProcess of g++, or None
    where the plain build must do it (no pch, or the build with it failed: the reason is logged)."""
    presumed = str(directory / "kernels.cpp")  # the name the plain build's g++ gives the unit
    if not (prelude.endswith("\n") and source.startswith(prelude)):
        log.debug("no precompiled prelude: the source does not start with the prelude")
        return None
    if any(c in presumed for c in '"\\') or not presumed.isprintable():
        log.debug("no precompiled prelude: the entry's path %r does not fit a #line directive", presumed)
        return None
    pch = precompiled_prelude(prelude, run)
    if pch is None:
        return None
    wrapper = Path(tempfile.mkdtemp(prefix="with-pch-", dir=directory))
    try:
        unit = wrapper / "kernels.cpp"  # the library's FILE symbol is the unit's name: the plain build's
        unit.write_text(f'#include "{PCH_HEADER}"\n#line {prelude.count(NEWLINE) + 1} "{presumed}"\n'
                        + source[len(prelude):])
        command = [compiler(), *_compile_flags(), f"-I{pch}", str(unit), "-o", output, *_link_flags()]
        result = run(command, capture_output=True, text=True)
    finally:
        shutil.rmtree(wrapper, ignore_errors=True)
    if result.returncode > 0:  # < 0: killed from outside (a job's time limit), as a plain build would be
        log.debug("the build with the precompiled prelude failed; building without it:\n%s", result.stderr[-2000:])
        return None
    return result


def precompiled_prelude(prelude: str, run=subprocess.run) -> Path | None:
    """The directory of the prelude's precompiled header (gb_prelude.h and its .gch), built if need be; None
    where there is none to be had (the reason is logged)."""
    try:
        root = pch_root() / pch_key(prelude)
    except (OSError, BuildError) as error:
        log.debug("no precompiled prelude: %s", error)
        return None
    if _pch_intact(root, prelude):
        return _used(root)
    refused = root / "pch.refused"
    if str(root) in _PCH_FAILED or refused.exists():
        log.debug("no precompiled prelude: it failed before (%s)", _PCH_FAILED.get(str(root)) or refused)
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / "pch.lock", "a")
    except OSError as error:
        log.debug("no precompiled prelude: its directory is not writable (%s)", error)
        return None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _pch_intact(root, prelude):  # built while we waited
            return _used(root)
        try:
            reason, outcome = _build_pch(root, prelude, run)
        except OSError as error:
            reason, outcome = f"it could not be stored ({error})", "failed"
        if reason:
            log.debug("no precompiled prelude: %s", reason)
            if outcome != "stopped":  # a compile stopped from outside (the job's time limit) is no verdict
                _PCH_FAILED[str(root)] = reason[:200]  # not tried again in this process
            if outcome == "refused":  # g++ compiled it and does not take it: not tried again anywhere
                try:
                    atomic_write(refused, reason)
                except OSError:
                    pass
            return None
    _prune(root)
    return root


def _build_pch(root: Path, prelude: str, run) -> tuple[str, str]:
    """Precompile the prelude into root (Note [Precompiled prelude]): ("", "stored"), or why not and whether the
    compile "failed", was "stopped" from outside, or g++ "refused" the .gch it made."""
    header, gch = root / PCH_HEADER, root / (PCH_HEADER + ".gch")
    for stale in (gch, root / (gch.name + ".sha256")):
        stale.unlink(missing_ok=True)
    atomic_write(header, prelude)
    fd, tmp_gch = tempfile.mkstemp(dir=root, prefix=gch.name + ".")
    os.close(fd)
    probe_dir = Path(tempfile.mkdtemp(prefix="probe-", dir=root))
    try:
        made = run([compiler(), *_compile_flags(), "-x", "c++-header", str(header), "-o", tmp_gch],
                   capture_output=True, text=True)
        if made.returncode != 0:
            return (f"g++ could not precompile it (exit {made.returncode}): {made.stderr[-1000:]}",
                    "stopped" if made.returncode < 0 else "failed")
        os.replace(tmp_gch, gch)
        probe = probe_dir / "probe.cpp"
        probe.write_text(f'#include "{PCH_HEADER}"\n')
        checked = run([compiler(), *_compile_flags(), f"-I{root}", "-H", str(probe), "-o", str(probe_dir / "probe.so"),
                       *_link_flags()], capture_output=True, text=True)
        if checked.returncode != 0 or f"! {gch}" not in checked.stderr.splitlines():
            gch.unlink(missing_ok=True)
            outcome = "refused" if checked.returncode == 0 else "stopped" if checked.returncode < 0 else "failed"
            return f"g++ did not take it in a probe (exit {checked.returncode}): {checked.stderr[-1000:]}", outcome
        atomic_write(root / (gch.name + ".sha256"), _checksum(gch))
        return "", "stored"
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
        if os.path.exists(tmp_gch):
            os.unlink(tmp_gch)


def _pch_intact(root: Path, prelude: str) -> bool:
    """Whether root holds this prelude's header and a .gch that matches its checksum (checked once per process
    for each version of the file)."""
    gch = root / (PCH_HEADER + ".gch")
    try:
        if (root / PCH_HEADER).read_bytes() != prelude.encode():
            return False
        info = gch.stat()
        stamp = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if _PCH_VERIFIED.get(str(gch)) == stamp:
            return True
        if _checksum(gch) != (root / (gch.name + ".sha256")).read_text().strip():
            return False
    except OSError:
        return False
    _PCH_VERIFIED[str(gch)] = stamp
    return True


def _used(root: Path) -> Path:
    try:
        os.utime(root)  # used now: pruned last
    except OSError:
        pass  # a read-only cache
    return root


def _prune(keep: Path) -> None:
    """Remove the pch entries used longest ago beyond PCH_KEEP (one being built, its lock held, stays)."""
    try:
        entries = sorted((e for e in keep.parent.iterdir() if e.is_dir() and e != keep),
                         key=lambda e: e.stat().st_mtime, reverse=True)
    except OSError:
        return
    for entry in entries[PCH_KEEP - 1:]:
        try:
            with open(entry / "pch.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


def load_library(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path))
