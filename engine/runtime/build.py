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
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import json
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


def build_library(source: str, run=subprocess.run) -> tuple[Path, bool]:
    """Compile `source` to a shared library; returns (path, cache_hit). See Note [Compile cache]. In a sandboxed
    worker the trusted builder does it (Note [Trusted builder]); `run` runs the compiler (the builder's runs it
    in a sandbox)."""
    if _builder_fd() is not None:
        return _ask_builder(source)
    key = library_key(source)
    try:
        entry = cache_dir() / "cpp" / key
        entry.mkdir(parents=True, exist_ok=True)
        lock = open(entry / "kernels.lock", "a")
    except OSError as error:
        warnings.warn(f"Glassbox's compile cache is not usable ({error}); building without it.", stacklevel=2)
        return _compile(source, Path(tempfile.mkdtemp(prefix="glassbox-build-"))), False
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        target = entry / "kernels.so"
        if _intact(target):
            return target, True
        try:
            return _compile(source, entry, run), False
        except OSError as error:  # e.g. the disk filled up while writing the entry
            warnings.warn(f"Glassbox could not write to its compile cache ({error}); building without it.",
                          stacklevel=2)
            return _compile(source, Path(tempfile.mkdtemp(prefix="glassbox-build-")), run), False


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


def _compile(source: str, directory: Path, run=subprocess.run) -> Path:
    target = directory / "kernels.so"
    atomic_write(directory / "kernels.cpp", source)
    fd, tmp_path = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    command = [compiler(), *[f for f in flags() if not f.startswith("-l")], str(directory / "kernels.cpp"),
               "-o", tmp_path, *[f for f in flags() if f.startswith("-l")]]
    result = run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp_path)
        raise BuildError(f"g++ failed on generated code:\n{result.stderr[-4000:]}")
    os.replace(tmp_path, target)
    atomic_write(directory / "kernels.so.sha256", _checksum(target))
    return target


def load_library(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path))
