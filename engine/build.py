"""Build generated code: g++ -> shared library loaded with ctypes, cached by content hash.

Note [Compile cache]
The key hashes the source, the flags and the compiler's version. Entries are written to a temporary name
and renamed into place, so a crash or a concurrent build never leaves a half-written library under a key.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
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


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    try:
        return subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise BuildError(f"no working C++ compiler ({compiler()}): {error}") from None


@functools.lru_cache(maxsize=None)
def native_flags() -> tuple[str, ...]:
    """-march=native and glibc's vector math library (libmvec), each where this machine has it."""
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.cpp")
        src.write_text("int main() { return 0; }\n")
        for flag in ("-march=native", "-lmvec"):
            if subprocess.run([compiler(), flag, str(src), "-o", str(Path(tmp, "probe"))],
                              capture_output=True).returncode == 0:
                found.append(flag)
    return tuple(found)


def flags() -> list[str]:
    return BASE_FLAGS + list(native_flags())


def library_key(source: str) -> str:
    digest = hashlib.sha256()
    for part in (source, " ".join(flags()), compiler_version()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build_library(source: str) -> tuple[Path, bool]:
    """Compile `source` to a shared library; returns (path, cache_hit)."""
    key = library_key(source)
    target = cache_dir() / "cpp" / key / "kernels.so"
    if target.exists():
        return target, True
    target.parent.mkdir(parents=True, exist_ok=True)
    (target.parent / "kernels.cpp").write_text(source)
    fd, tmp_path = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    command = [compiler(), *[f for f in flags() if not f.startswith("-l")], str(target.parent / "kernels.cpp"),
               "-o", tmp_path, *[f for f in flags() if f.startswith("-l")]]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp_path)
        raise BuildError(f"g++ failed on generated code:\n{result.stderr[-4000:]}")
    os.replace(tmp_path, target)
    return target, False


def load_library(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path))
