"""The compile cache survives corruption, concurrency and an unusable directory (Note [Compile cache])."""
import ctypes
import logging
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from engine.runtime import build

SOURCE = 'extern "C" int answer() { return 42; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _answer(path) -> int:
    return ctypes.CDLL(str(path)).answer()


def test_a_second_build_is_a_cache_hit(cache):
    path, hit = build.build_library(SOURCE)
    assert not hit and _answer(path) == 42
    again, hit = build.build_library(SOURCE)
    assert hit and again == path


@pytest.mark.parametrize("damage", ["truncate", "garble", "delete_checksum", "delete_library"])
def test_a_damaged_entry_is_detected_and_rebuilt(cache, damage):
    path, _ = build.build_library(SOURCE)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "garble":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "delete_checksum":
        (path.parent / "kernels.so.sha256").unlink()
    else:
        path.unlink()
    rebuilt, hit = build.build_library(SOURCE)
    assert not hit and rebuilt == path and build._intact(rebuilt)
    # a fresh process loads the rebuilt library (this one may have the old one mapped under the same name)
    code = f"import ctypes; print(ctypes.CDLL({str(rebuilt)!r}).answer())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "42"


def test_concurrent_builders_of_one_key_compile_once(cache, tmp_path):
    script = tmp_path / "builder.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(build.Path(build.__file__).resolve().parents[2])!r})
        from engine.runtime.build import build_library
        path, hit = build_library({SOURCE!r})
        import ctypes
        print(hit, ctypes.CDLL(str(path)).answer())
    """))
    workers = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    results = [worker.communicate(timeout=120)[0].split() for worker in workers]
    assert all(answer == "42" for _, answer in results), results
    assert sorted(hit for hit, _ in results) == ["False", "True", "True", "True"]  # one compiled, three waited
    entry = next((cache / "cpp").iterdir())
    assert sorted(p.name for p in entry.iterdir()) == ["kernels.cpp", "kernels.lock", "kernels.so",
                                                        "kernels.so.sha256"]  # no temporaries left


def test_an_unusable_cache_dir_degrades_to_no_cache_with_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(blocker / "cache"))  # mkdir fails, even as root
    with pytest.warns(UserWarning, match="compile cache is not usable"):
        path, hit = build.build_library(SOURCE)
    assert not hit and _answer(path) == 42 and not str(path).startswith(str(blocker))


def test_a_failing_write_into_the_cache_degrades_with_a_warning(cache, monkeypatch):
    real_compile = build._compile
    calls = []

    def full_disk(source, directory, *run):
        calls.append(directory)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real_compile(source, directory, *run)

    monkeypatch.setattr(build, "_compile", full_disk)
    with pytest.warns(UserWarning, match="could not write"):
        path, hit = build.build_library(SOURCE)
    assert not hit and _answer(path) == 42 and calls[0] != calls[1]


@pytest.mark.parametrize("damage", ["none", "garble", "unwritable_dir"])
def test_the_toolchain_probe_is_remembered_and_a_bad_record_is_probed_again(tmp_path, monkeypatch, damage):
    """Note [Toolchain probe]: a fresh process reads the compiler's version and native flags from the cache
    instead of running g++; a damaged record, or a cache it cannot write, costs only a new probe."""
    probes = []
    real_probe = build._probe_native_flags
    monkeypatch.setattr(build, "_probe_native_flags", lambda cpu: probes.append(1) or real_probe(cpu))
    root = tmp_path / "cache"
    if damage == "unwritable_dir":
        (tmp_path / "a_file").write_text("not a directory")
        root = tmp_path / "a_file" / "cache"
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(root))
    build._toolchain.cache_clear()
    first = build.flags()
    if damage == "garble":
        for record in (root / "toolchain").iterdir():
            record.write_text("{not json")
    build._toolchain.cache_clear()  # as a new process would start
    second = build.flags()
    build._toolchain.cache_clear()
    assert first == second and "-O3" in first
    assert len(probes) == (1 if damage == "none" else 2)


# --- Note [Precompiled prelude] -------------------------------------------------------------------------------

SMALL_PRELUDE = ('#include <cstdint>\nstatic int32_t gb_base = 21;\n'
                 'static inline int32_t gb_twice(int32_t x) { return 2 * x; }\n'
                 'extern "C" int32_t gb_base_value() { return gb_base; }\n')
SMALL_SOURCE = SMALL_PRELUDE + '\nextern "C" int answer() { return gb_twice(gb_base); }\n'


@pytest.fixture
def pch(tmp_path, monkeypatch):
    """A pch directory of the test's own (the suite's is shared, Note [Parallel test workers])."""
    monkeypatch.setenv("GLASSBOX_PCH_DIR", str(tmp_path / "pch"))
    monkeypatch.setattr(build, "_PCH_VERIFIED", {})
    monkeypatch.setattr(build, "_PCH_FAILED", {})
    return tmp_path / "pch"


@pytest.fixture
def debug_log():
    """The build's debug messages (pytest's logging plugin is off: pyproject.toml)."""
    messages = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("engine.runtime.build")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


class Recorder:
    """The `run` of build_library with -H added: g++ then names each header it reads, and a precompiled one it
    takes as `! path.gch` (`x path.gch` where it refuses one)."""

    def __init__(self):
        self.calls = []

    def __call__(self, command, **options):
        result = subprocess.run(command + ["-H"], **options)
        self.calls.append((command, result))
        return result

    def library_builds(self):
        return [(c, r) for c, r in self.calls if "-x" not in c and "probe.cpp" not in " ".join(c)]


def _plain_library(source, cache_root, monkeypatch) -> bytes:
    monkeypatch.setenv("GLASSBOX_CACHE_DIR", str(cache_root))
    path, hit = build.build_library(source)
    assert not hit
    return path.read_bytes()


def test_a_library_built_with_the_precompiled_prelude_is_the_plain_builds(cache, tmp_path, monkeypatch):
    """The real prelude (the suite's shared pch, built here if no test did before): g++ takes the .gch, and the
    library is the plain build's, byte for byte."""
    from engine.codegen.cpp.module import PRELUDE

    source = PRELUDE + textwrap.dedent("""
        #include <algorithm>

        extern "C" void kernel0(const uint16_t* in, float* out, int64_t n) {
            #pragma omp parallel for num_threads(gb_thread_count())
            for (int64_t i = 0; i < n; ++i)
                out[i] = std::max(gb_half_to_float(in[i]), 0.0f) + expf(gb_round_bf16(1.5f));
        }
    """)
    recorder = Recorder()
    path, hit = build.build_library(source, run=recorder, prelude=PRELUDE)
    assert not hit and path == cache / "cpp" / build.library_key(source) / "kernels.so"  # the key is unchanged
    root = build.precompiled_prelude(PRELUDE)
    [(command, result)] = recorder.library_builds()
    assert f"-I{root}" in command and result.returncode == 0
    assert f"! {root / 'gb_prelude.h.gch'}" in result.stderr.splitlines(), result.stderr[-2000:]
    assert sorted(p.name for p in path.parent.iterdir()) == ["kernels.cpp", "kernels.lock", "kernels.so",
                                                              "kernels.so.sha256"]  # no wrapper left
    assert (path.parent / "kernels.cpp").read_text() == source
    with_pch = path.read_bytes()
    assert _plain_library(source, tmp_path / "plain", monkeypatch) == with_pch
    halves = (ctypes.c_uint16 * 4)(0x3c00, 0xc000, 0x7bff, 0)  # 1, -2, 65504, 0
    out = (ctypes.c_float * 4)()
    ctypes.CDLL(str(path)).kernel0(halves, out, ctypes.c_int64(4))
    e = 4.4816890703380645  # exp(1.5)
    assert list(out) == pytest.approx([1 + e, e, 65504 + e, e], rel=1e-6)


@pytest.mark.parametrize("damage", ["garble", "truncate", "truncate_and_checksum", "delete_header"])
def test_a_damaged_precompiled_prelude_is_rebuilt_or_passed_by(cache, pch, tmp_path, monkeypatch, debug_log, damage):
    """A .gch that does not match its checksum is built again; one that matches but g++ cannot read (written
    behind our back) costs a plain build; either way the library is the plain build's."""
    root = build.precompiled_prelude(SMALL_PRELUDE)
    gch = root / "gb_prelude.h.gch"
    data = bytearray(gch.read_bytes())
    if damage.startswith("garble"):
        data[len(data) // 2] ^= 0xFF
        gch.write_bytes(bytes(data))
    elif damage.startswith("truncate"):
        gch.write_bytes(bytes(data[:1000]))
    else:
        (root / "gb_prelude.h").write_text("#error not the prelude\n")
    if damage.endswith("_and_checksum"):
        (root / "gb_prelude.h.gch.sha256").write_text(build._checksum(gch))
    recorder = Recorder()
    path, hit = build.build_library(SMALL_SOURCE, run=recorder, prelude=SMALL_PRELUDE)
    assert not hit and _answer(path) == 42
    if damage.endswith("_and_checksum"):  # taken as it is: g++ fails on it, and the plain build runs
        assert any("building without it" in m for m in debug_log) and len(recorder.library_builds()) == 2
    else:  # built again, and used
        assert any("c++-header" in c for c, _ in recorder.calls)
        assert build._pch_intact(root, SMALL_PRELUDE)
        [(_, result)] = recorder.library_builds()
        assert f"! {gch}" in result.stderr.splitlines()
    assert _plain_library(SMALL_SOURCE, tmp_path / "plain", monkeypatch) == path.read_bytes()


def test_without_a_usable_pch_directory_the_plain_build_runs(cache, tmp_path, monkeypatch, debug_log):
    (tmp_path / "a_file").write_text("not a directory")
    monkeypatch.setenv("GLASSBOX_PCH_DIR", str(tmp_path / "a_file" / "pch"))  # mkdir fails, even as root
    recorder = Recorder()
    path, hit = build.build_library(SMALL_SOURCE, run=recorder, prelude=SMALL_PRELUDE)
    assert not hit and _answer(path) == 42
    assert [c[c.index("-o") - 1] for c, _ in recorder.calls] == [str(path.parent / "kernels.cpp")]  # plain
    assert any("no precompiled prelude" in m for m in debug_log)


@pytest.mark.parametrize("outcome", ["failed", "refused"])
def test_a_pch_that_gcc_cannot_make_or_does_not_take_is_not_tried_again(cache, pch, monkeypatch, debug_log, outcome):
    """A precompile that fails is not tried again in this process; a .gch that g++ made but does not take in the
    probe compile is not tried again at all (pch.refused); the libraries are built the plain way meanwhile."""
    def unwilling(command, **options):
        if "c++-header" in command and outcome == "failed":
            return subprocess.CompletedProcess(command, 1, "", "cc1plus: error: no precompiled headers here")
        result = subprocess.run(command, **options)
        if "-H" in command:  # the probe: as if g++ had passed the .gch by
            result.stderr = "x " + result.stderr
        return result

    assert build.precompiled_prelude(SMALL_PRELUDE, unwilling) is None
    assert any(("no precompiled headers here" if outcome == "failed" else "did not take it") in m for m in debug_log)
    calls = []
    path, _ = build.build_library(SMALL_SOURCE, run=lambda c, **o: calls.append(c) or subprocess.run(c, **o),
                                  prelude=SMALL_PRELUDE)
    assert _answer(path) == 42 and len(calls) == 1 and "c++-header" not in calls[0]  # plain, and nothing tried
    build._PCH_FAILED.clear()  # as a new process would start
    root = build.precompiled_prelude(SMALL_PRELUDE)
    assert (root is None) == (outcome == "refused")


def test_the_pch_is_built_once_under_a_lock(cache, pch, monkeypatch):
    real_build = build._build_pch
    builds = []

    def slow_build(*args):
        builds.append(1)
        time.sleep(0.5)  # the other thread is waiting on the lock meanwhile
        return real_build(*args)

    monkeypatch.setattr(build, "_build_pch", slow_build)
    found = []
    threads = [threading.Thread(target=lambda: found.append(build.precompiled_prelude(SMALL_PRELUDE)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(set(found)) == 1 and found[0] is not None
    assert sorted(p.name for p in found[0].iterdir()) == ["gb_prelude.h", "gb_prelude.h.gch",
                                                         "gb_prelude.h.gch.sha256", "pch.lock"]  # no temporaries
