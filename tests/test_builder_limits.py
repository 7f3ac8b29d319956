"""The builder inside the job's limits (issue 33; Note [Builds inside the job's limits] in
engine/tools/builder.py): sources that include device, proc or any absolute file are refused; g++ gets the
job's memory and time and dies with the job; a job's bytes in the shared cache are capped, and the cache is
cut back to its size by evicting what was used longest ago."""
import ctypes
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from engine.runtime import build
from engine.tools import builder as builder_module
from engine.tools import isolation
from engine.tools.builder import TrustedBuilder, evict, refused_source
from engine.tools.procfs import all_processes


def _ask(builder: TrustedBuilder, source: str) -> dict:
    with socket.socket(fileno=os.dup(builder.worker_fd())) as channel:
        build.send_message(channel, {"source": source})
        return build.receive_message(channel)


@pytest.mark.parametrize("source", [
    '#include "/dev/zero"\n', "#  include </proc/self/environ>\n", '#/**/include "/dev/zero"\n',
    "#define F </dev/zero>\n#include F\n", '#include "../../../etc/shadow"\n', '#include_next "/dev/urandom"\n',
    '#embed "/dev/zero"\n', 'asm(".incbin \\"/dev/zero\\"");\n', '#inc\\\nlude "/dev/zero"\n'])
def test_a_source_that_includes_a_file_by_path_is_refused_before_gcc(source):
    assert refused_source(source)
    builder = TrustedBuilder(memory_bytes=500 << 20, timeout_s=30)
    try:
        start = time.monotonic()
        answer = _ask(builder, source + f"// {uuid.uuid4().hex}\n")
    finally:
        builder.close()
    assert "trusted builder does not compile it" in answer["error"] and time.monotonic() - start < 10


def test_generated_code_includes_still_build():
    assert not refused_source("#include <cmath>\n#include <immintrin.h>\n#include <vector>\n#include \"x.h\"\n")


@pytest.mark.slow
def test_the_compiler_runs_with_the_jobs_memory_and_time(tmp_path):
    # cc1plus reading #include "/dev/zero" grew without bound; whatever the builder runs for a job now meets
    # the job's address-space limit (a stand-in process that allocates 3 GB) and its time limit
    builder = TrustedBuilder(memory_bytes=200 << 20, timeout_s=3)
    try:
        grown = builder.compile([sys.executable, "-c", "bytearray(3 << 30)", "-o", str(tmp_path / "out")])
        start = time.monotonic()
        slow = builder.compile([sys.executable, "-c", "import time; time.sleep(60)", "-o", str(tmp_path / "out")])
    finally:
        builder.close()
    assert grown.returncode != 0 and "MemoryError" in grown.stderr, grown.stderr[-500:]
    assert slow.returncode != 0 and "ran past the job's 3 s" in slow.stderr and time.monotonic() - start < 20


def test_a_failed_build_leaves_nothing_in_the_shared_cache():
    source = f"this is not C++ {uuid.uuid4().hex}\n"
    builder = TrustedBuilder()
    try:
        assert "g++ failed" in _ask(builder, source)["error"]
    finally:
        builder.close()
    assert not (build.cache_dir() / "cpp" / build.library_key(source)).exists()


@pytest.mark.slow
def test_a_build_dies_when_its_job_ends():
    source = ("template<int N> struct F { static constexpr long v = F<N - 1>::v + F<N - 2>::v % 7; };\n"
              "template<> struct F<0> { static constexpr long v = 0; };\n"
              "template<> struct F<1> { static constexpr long v = 1; };\n"
              "constexpr long f(long n) { long s = 0; for (long i = 0; i < n; ++i) s += i % 13; return s; }\n"
              f"extern \"C\" long get() {{ constexpr long x = f(1L << 40); return x + {uuid.uuid4().int % 1000}; }}\n")
    builder = TrustedBuilder(memory_bytes=1000 << 20, timeout_s=300)
    answers = []
    asking = threading.Thread(target=lambda: answers.append(_ask(builder, source)), daemon=True)
    asking.start()
    deadline = time.monotonic() + 60
    while builder._running is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process = builder._running
    assert process is not None
    time.sleep(1.0)
    builder.close()  # the job ended
    process.wait(timeout=10)
    time.sleep(0.5)
    group = [pid for pid, fields in all_processes() if len(fields) > 3 and int(fields[3]) == process.pid]
    assert group == [], group  # nothing of the compile's process group is left


def test_a_jobs_bytes_in_the_shared_cache_are_capped(monkeypatch):
    monkeypatch.setattr(builder_module, "JOB_CACHE_BYTES", 1)  # any stored library exhausts it
    builder = TrustedBuilder()
    try:
        first = _ask(builder, f'extern "C" int a() {{ return {uuid.uuid4().int % 100000}; }}\n')
        second = _ask(builder, f'extern "C" int b() {{ return {uuid.uuid4().int % 100000}; }}\n')
    finally:
        builder.close()
    assert "path" in first and "quota" in second["error"], (first, second)


def test_the_cache_is_cut_back_by_evicting_what_was_used_longest_ago(tmp_path):
    root = tmp_path / "cpp"
    for number in range(8):
        entry = root / f"entry{number}"
        entry.mkdir(parents=True)
        (entry / "kernels.so").write_bytes(b"x" * 1000)
        os.utime(entry, (1000 + number, 1000 + number))
    removed = evict(root, max_bytes=4000)
    assert sorted(p.name for p in removed) == [f"entry{n}" for n in range(5)]  # down to 3/4 of 4000 bytes
    assert sorted(p.name for p in root.iterdir()) == ["entry5", "entry6", "entry7"]
    assert evict(root, max_bytes=4000) == []


@pytest.mark.parametrize("pch_dir", ["shared", pytest.param("fresh", marks=pytest.mark.slow)])
def test_the_sandboxed_builder_reads_its_prelude_precompiled(tmp_path, monkeypatch, pch_dir):
    """Note [Precompiled prelude] in engine/runtime/build.py: the builder's g++ (in its sandbox, where bubblewrap
    runs) takes the builder's own precompiled prelude, bound read-only. `fresh`: the prelude is precompiled (and
    probed) in the sandbox too, and the library stored is the plain build's, byte for byte."""
    from engine.codegen.cpp.module import PRELUDE

    assert builder_module.builder_prelude() == PRELUDE  # the builder's own, read without importing codegen
    if pch_dir == "fresh":
        monkeypatch.setenv("GLASSBOX_PCH_DIR", str(tmp_path / "pch"))
    calls = []
    real_compile = TrustedBuilder.compile

    def compile_with_headers_named(self, command, **options):  # -H: g++ names the .gch it takes
        result = real_compile(self, command + ["-H"], **options)
        calls.append((command, result))
        return result

    monkeypatch.setattr(TrustedBuilder, "compile", compile_with_headers_named)
    value = uuid.uuid4().int % 100000
    source = PRELUDE + f'\nextern "C" int64_t answer() {{ return gb_max_i({value}, 7); }}\n'
    builder = TrustedBuilder()
    try:
        answer = _ask(builder, source)
    finally:
        builder.close()
    assert "path" in answer, answer
    root = build.precompiled_prelude(PRELUDE)
    library = [(c, r) for c, r in calls if f"-I{root}" in c and "probe.cpp" not in " ".join(c)]
    assert len(library) == 1 and library[0][1].returncode == 0
    assert f"! {root / 'gb_prelude.h.gch'}" in library[0][1].stderr.splitlines(), library[0][1].stderr[-2000:]
    sandboxed = not isolation.bwrap_problem()
    assert all(any(a.endswith("bwrap") for a in result.args) == sandboxed for _, result in calls)
    if pch_dir == "fresh":
        assert any("c++-header" in command for command, _ in calls)  # precompiled by the builder's own g++
    path = Path(answer["path"])
    function = ctypes.CDLL(str(path)).answer
    function.restype = ctypes.c_int64
    assert function() == value
    if pch_dir == "fresh":
        monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path / "plain"))
        plain, hit = build.build_library(source)
        assert not hit and plain.read_bytes() == path.read_bytes()


def test_the_builder_reads_its_prelude_without_importing_torch():
    # the app's server makes builders (engine/tools/sandbox.py) and must not import torch (engine/__init__.py)
    code = ("import sys, engine.tools.sandbox, engine.tools.builder as b; b.builder_prelude(); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(build.__file__).parents[2])
    assert done.stdout.strip() == "False", done.stderr[-2000:]
