"""The compile cache survives corruption, concurrency and an unusable directory (Note [Compile cache])."""
import ctypes
import subprocess
import sys
import textwrap
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
