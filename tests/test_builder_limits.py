"""The builder inside the job's limits (issue 33; Note [Builds inside the job's limits] in
engine/tools/builder.py): sources that include device, proc or any absolute file, or hand the assembler a file
to read, are refused, in time linear in their size; what the filter misses meets g++ with the job's memory and
time and none of the server's environment; g++ dies with the job, also when the app stops it; a job's bytes in
the shared cache are capped, however large one library is, and the cache is cut back to its size by evicting
what was used longest ago."""
import ctypes
import json
import os
import re
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
from app.hostile_checks import SLOW_SOURCE
from engine.tools.builder import TrustedBuilder, evict, refused_source
from engine.tools.sandbox import Limits, SandboxedProcess
from engine.tools.sweep_hostile import MACRO_BOMB  # passes the filter; cc1plus grows ~200 MB/s
from engine.tools.procfs import alive, command_name, compilers_below


def _ask(builder: TrustedBuilder, source: str) -> dict:
    with socket.socket(fileno=os.dup(builder.worker_fd())) as channel:
        build.send_message(channel, {"source": source})
        return build.receive_message(channel)


@pytest.mark.parametrize("source", [
    '#include "/dev/zero"\n', "#  include </proc/self/environ>\n", '#/**/include "/dev/zero"\n',
    "#define F </dev/zero>\n#include F\n", '#include "../../../etc/shadow"\n', '#include_next "/dev/urandom"\n',
    '#embed "/dev/zero"\n', 'asm(".incbin \\"/dev/zero\\"");\n', '#inc\\\nlude "/dev/zero"\n',
    # spellings the first filter let through (issue 33, round three's audit)
    '%:include "/dev/zero"\n',  # the digraph of #
    '#\finclude "/dev/zero"\n',  # a form feed is a space in a directive
    '#inc\\ \nlude "/dev/zero"\n',  # g++ splices a backslash followed by spaces, too
    '// /*\n#/**/include "/dev/zero"\n// */\n',  # a line comment's /* is no comment
    '"/*"\n#include "/dev/zero"\n"*/"\n',  # nor is a string's
    "int x = 1'2'/*\n#include </dev/zero>\n*/;\n",  # a digit separator, then a character literal to g++
    'asm(".\\x69ncbin \\"/dev/zero\\"");\n',  # .incbin spelled with an escape
    'asm(".include \\"/proc/self/environ\\"");\n',  # the assembler's own include
    '__attribute__((section(".data;.incbin \\"/dev/zero\\";#"))) char x = 1;\n',  # a section name goes to as
    '__attribute__((__section__(".data;.inc" "bin \\"/dev/zero\\";#"))) char x = 1;\n',
    '#define P(a, b) a##b\n__attribute__((P(sec, tion)(".data;.inc" "bin \\"/dev/zero\\";#"))) char x = 1;\n',
    '#\\u0069nclude "/dev/zero"\n',
    # what the blocklist let through and the allowlist of directives and headers refuses (issue 33, round four)
    '#line 1 "/etc/passwd"\nint x = ;\n',  # g++'s diagnostic prints the presumed file's line
    '# 1 "/etc/passwd"\nint x = ;\n',  # the same as a line marker
    '#include "kernels.cpp"\n',  # the source includes itself, 200 deep
    '#pragma GCC dependency "/dev/zero"\n',  # opens the file it names
    '_Pragma("GCC dependency \\"/dev/zero\\"")\n',  # any pragma, spelled from a string
    '#if __has_include("/root/.ssh/id_rsa")\n#error found\n#endif\n'])  # opens it: whether it exists
def test_a_source_that_can_read_a_file_is_refused_before_gcc(source):
    assert refused_source(source)
    builder = TrustedBuilder(memory_bytes=500 << 20, timeout_s=30)
    try:
        start = time.monotonic()
        source += f"// {uuid.uuid4().hex}\n"
        answer = _ask(builder, source)
    finally:
        builder.close()
    assert "error" in answer and "path" not in answer and time.monotonic() - start < 10, answer
    assert not (build.cache_dir() / "cpp" / build.library_key(source)).exists()  # g++ never ran on it


def test_a_line_directive_reads_no_file_into_the_build_error():
    # `#line N "FILE"` passed the blocklist, and g++'s error then printed line N of FILE back to the job
    secret = Path("/etc/passwd").read_text().splitlines()[0]
    builder = TrustedBuilder(memory_bytes=500 << 20, timeout_s=60)
    try:
        answer = _ask(builder, f'#line 1 "/etc/passwd"\nint x = ;\n// {uuid.uuid4().hex}\n')
    finally:
        builder.close()
    assert "error" in answer and secret not in answer["error"], answer


def test_the_filter_takes_time_linear_in_the_source():
    # it runs in the server's process: a regex that took quadratic time on `/* ` repeated (4 s for 60 kB)
    # would have held the app for hours on one 64 MB request
    for source in ["/* " * 700_000, "#include <" + "x include " * 200_000, "\\" + " " * 2_000_000 + "x",
                   "'" * 2_000_000, 'R"x(' * 500_000]:
        start = time.monotonic()
        refused_source(source)
        assert time.monotonic() - start < 5, source[:20]


def test_the_allowlist_holds_what_the_code_generator_prints(monkeypatch):
    # the allowlist must refuse no generated code: every header named anywhere in the C++ code generator, the
    # prelude and the GEMM helpers as printed, and the modules of a model compiled with and without a template
    import torch

    import engine
    from engine.codegen.cpp import gemm
    from engine.codegen.cpp.module import PRELUDE
    from engine.runtime import load

    root = Path(build.__file__).parents[1] / "codegen" / "cpp"
    named = {name for path in root.iterdir() if path.suffix in (".py", ".h")
             for name in re.findall(r"#\s*include\s*<([^>\n]+)>", path.read_text())}
    assert named and named <= builder_module.ALLOWED_HEADERS, named - builder_module.ALLOWED_HEADERS
    sources = [PRELUDE, gemm.STREAM_HELPERS]
    real_build = load.build_library
    monkeypatch.setattr(load, "build_library",
                        lambda source, **kw: (sources.append(source), real_build(source, **kw))[1])
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    inputs = torch.randn(8, 64)
    for templates in ("on", "off"):
        torch._dynamo.reset()
        compiled = engine.compile(model, mode="max-autotune", templates=templates)
        torch.testing.assert_close(compiled(inputs), model(inputs), rtol=1e-4, atol=1e-4)
    assert len(sources) >= 4 and [source for source in sources if refused_source(source)] == []


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
def test_what_the_filter_misses_is_stopped_at_the_jobs_memory(monkeypatch):
    # the filter is a first line only: with it out of the way, cc1plus reading /dev/zero meets the job's memory
    monkeypatch.setattr(builder_module, "refused_source", lambda source: "")
    builder = TrustedBuilder(memory_bytes=500 << 20, timeout_s=120)
    try:
        start = time.monotonic()
        answer = _ask(builder, f'#include "/dev/zero"\n// {uuid.uuid4().hex}\n')
    finally:
        builder.close()
    assert "error" in answer and "path" not in answer, answer
    assert time.monotonic() - start < 60  # stopped by its address-space limit, long before the time limit


@pytest.mark.slow
@pytest.mark.skipif(bool(isolation.bwrap_problem()) or not isolation.Cgroup.available(),
                    reason="needs bubblewrap and writable cgroups (elsewhere: the separate cap above)")
@pytest.mark.parametrize("source, filtered", [(MACRO_BOMB, True), ('#include "/dev/zero"\n', False)],
                         ids=["macro-bomb", "dev-zero-unfiltered"])
def test_a_build_is_stopped_at_its_jobs_memory_and_counted_in_it(monkeypatch, tmp_path, source, filtered):
    # the compile ran beside the job's cgroup with a cap of its own (at least 1 GB): a job limited to 400 MB
    # had cc1plus grow to that cap and finished; now the compile is one of the job's processes, and the job is
    # stopped at its own memory limit
    if not filtered:
        monkeypatch.setattr(builder_module, "refused_source", lambda text: "")
    assert not refused_source(source) or not filtered
    script = tmp_path / "job.py"
    source += f"// {uuid.uuid4().hex}\n"
    script.write_text(f"from engine.runtime import build\nbuild.build_library({source!r})\n")
    process = SandboxedProcess([sys.executable, str(script)], Limits(timeout_s=120, memory_mb=400))
    seen: set[str] = set()
    try:
        result = process.wait(lambda _: seen.update(command_name(pid) for pid in process.members()), tick_s=0.05)
    finally:
        process.close()
    assert "cc1plus" in seen  # the compile is counted among the job's processes
    assert result.limit_hit == "memory", (result.summary(), result.stderr[-2000:])
    assert compilers_below(os.getpid()) == []


@pytest.mark.slow
def test_what_the_filter_misses_sees_none_of_the_servers_environment(monkeypatch):
    # the assembler read /proc/self/environ, the server's whole environment, into errors the job reads back
    monkeypatch.setattr(builder_module, "refused_source", lambda source: "")
    secret = f"hunter2-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GLASSBOX_SERVER_SECRET", f"x\n{secret} on a line of its own\n")  # gas prints that line
    builder = TrustedBuilder(memory_bytes=500 << 20, timeout_s=60)
    try:
        answer = _ask(builder, f'asm(".include \\"/proc/self/environ\\"");\n// {uuid.uuid4().hex}\n')
    finally:
        builder.close()
    assert secret not in json.dumps(answer), answer


@pytest.mark.slow
def test_a_build_dies_when_its_job_ends():
    source = SLOW_SOURCE.replace("SALT", str(uuid.uuid4().int % 100000))
    builder = TrustedBuilder(memory_bytes=1000 << 20, timeout_s=300)
    asking = threading.Thread(target=lambda: _ask(builder, source), daemon=True)
    asking.start()
    deadline, compilers = time.monotonic() + 60, []
    while not compilers and time.monotonic() < deadline:
        time.sleep(0.2)
        compilers = [pid for pid in compilers_below(os.getpid()) if command_name(pid) == "cc1plus"]
    process = builder._running
    assert compilers and process is not None
    time.sleep(1.0)
    assert alive(compilers), "the compile ended by itself: nothing to kill"
    builder.close()  # the job ended
    process.wait(timeout=10)
    assert process.returncode == -9  # killed, not finished
    deadline = time.monotonic() + 5
    while alive(compilers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(compilers) == [] and compilers_below(os.getpid()) == []  # nothing of the compile is left


@pytest.mark.slow
def test_a_build_outlives_no_job_the_app_stops():
    # the app stops a job by raising out of on_tick (Streamlit's Stop, or a rerun): the worker is killed and
    # so is the compile it asked the trusted builder for (app/worker.py run_job, Note [Builds inside the job's
    # limits])
    from app import worker
    from engine.options import Options

    source = ("import torch\nfrom engine.runtime import build\n"
              f"build.build_library({SLOW_SOURCE.replace('SALT', str(uuid.uuid4().int % 100000))!r})\n"
              "model = torch.nn.ReLU()\nexample_inputs = (torch.randn(3),)\n")
    seen: list[int] = []

    def stop_once_compiling(seconds: float) -> None:
        seen.extend(pid for pid in compilers_below(os.getpid()) if pid not in seen)
        if any(command_name(pid) == "cc1plus" for pid in alive(seen)) and seconds > 2:
            raise KeyboardInterrupt  # what the app's Stop looks like from inside on_tick
        if seconds > 120:
            raise TimeoutError("no compile started")

    enabled, worker.STANDBY.enabled = worker.STANDBY.enabled, False  # no standby left behind by this test
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.explore(source, "slow_build", Options(), timeout=300, on_tick=stop_once_compiling)
    finally:
        worker.STANDBY.enabled = enabled
    assert seen
    deadline = time.monotonic() + 5
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(seen) == [] and compilers_below(os.getpid()) == []


def test_a_jobs_bytes_in_the_shared_cache_are_capped(monkeypatch):
    builder = TrustedBuilder()
    try:
        first = _ask(builder, f'extern "C" int a() {{ return {uuid.uuid4().int % 100000}; }}\n')
        monkeypatch.setattr(builder_module, "JOB_CACHE_BYTES", builder.stored_bytes + 1)  # one byte left
        source = f'extern "C" int b() {{ return {uuid.uuid4().int % 100000}; }}\n'
        second = _ask(builder, source)
        third = _ask(builder, f'extern "C" int c() {{ return {uuid.uuid4().int % 100000}; }}\n')
    finally:
        builder.close()
    assert "path" in first and "error" in second and "error" in third, (first, second, third)
    assert not (build.cache_dir() / "cpp" / build.library_key(source)).exists()
    assert builder.stored_bytes <= builder_module.JOB_CACHE_BYTES


def test_one_large_library_cannot_take_a_job_past_its_quota(monkeypatch, tmp_path):
    # the quota was checked before each build only: one 32 MB array made a library 8 times a 4 MB quota
    monkeypatch.setattr(builder_module, "JOB_CACHE_BYTES", 4 << 20)
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path))  # a cache of its own: nobody else's builds in it
    builder = TrustedBuilder()
    try:
        source = f'extern "C" {{ char hoard[32 << 20] = {{1}}; }}\n// {uuid.uuid4().hex}\n'
        answer = _ask(builder, source)
    finally:
        builder.close()
    assert "error" in answer and "path" not in answer, answer
    assert not (build.cache_dir() / "cpp" / build.library_key(source)).exists()
    assert builder.stored_bytes <= 4 << 20
    assert builder_module.cache_bytes(tmp_path) < 4 << 20


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
