"""A compile cache no job can poison (Note [Trusted builder] in engine/runtime/build.py, engine/tools/builder.py)."""
import ctypes
import hashlib
import json
import os
import socket
import sys
import textwrap
import uuid

import pytest

from engine.runtime import build
from engine.tools import isolation
from engine.tools.builder import TrustedBuilder
from engine.tools.procfs import leftovers
from engine.tools.sandbox import Limits, explore_command, run_sandboxed

needs_bwrap = pytest.mark.skipif(bool(isolation.bwrap_problem()), reason=isolation.bwrap_problem() or "")
pytestmark = pytest.mark.slow  # sandboxed explorations (Note [Two lanes], tests/conftest.py)


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory):
    """These tests list and rewrite the whole cache: a cache of their own, so builds of tests running beside
    them on another worker are not in it (Note [Parallel test workers], tests/conftest.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GLASSBOX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        build._toolchain.cache_clear()
        yield
    build._toolchain.cache_clear()


def _source(value: int) -> str:
    return f'extern "C" int answer() {{ return {value}; }}\n'


def _ask(builder: TrustedBuilder, request: dict) -> dict:
    """What a (hostile) worker can do: send any request on its end of the builder's socket."""
    with socket.socket(fileno=os.dup(builder.worker_fd())) as channel:
        build.send_message(channel, request)
        return build.receive_message(channel)


def test_the_builder_stores_only_the_binary_of_the_source_it_was_sent():
    source = _source(uuid.uuid4().int % 100000)
    builder = TrustedBuilder()
    try:
        answer = _ask(builder, {"source": source, "flags": ["-fplugin=/tmp/evil.so"], "path": "/etc/passwd",
                                "binary": "AAAA", "key": "0" * 24})
    finally:
        builder.close()
    expected = build.cache_dir() / "cpp" / build.library_key(source) / "kernels.so"
    assert answer["path"] == str(expected) and build._intact(expected)
    assert ctypes.CDLL(answer["path"]).answer() == int(source.split("return ")[1].split(";")[0])


def test_a_job_cannot_flood_the_cache_through_the_builder(monkeypatch):
    from engine.tools import builder as builder_module
    monkeypatch.setattr(builder_module, "BUILDS_PER_JOB", 2)
    builder = TrustedBuilder()
    try:
        answers = [_ask(builder, {"source": _source(7)}) for _ in range(3)]
    finally:
        builder.close()
    assert "path" in answers[0] and "path" in answers[1] and "more than 2 builds" in answers[2]["error"]


def test_a_build_that_fails_comes_back_as_the_compilers_error():
    builder = TrustedBuilder()
    try:
        answer = _ask(builder, {"source": "this is not C++ " + uuid.uuid4().hex})
    finally:
        builder.close()
    assert "g++ failed on generated code" in answer["error"]


def test_a_request_without_source_text_is_refused():
    builder = TrustedBuilder()
    try:
        assert "error" in _ask(builder, {"source": ["not", "text"]})
    finally:
        builder.close()


def test_a_toolchain_record_with_foreign_flags_is_ignored_and_probed_again():
    build._toolchain.cache_clear()
    build.native_flags()  # make sure the record exists
    record = build.cache_dir() / "toolchain" / f"{build._toolchain_key(build._cpu_flags_line())}.json"
    honest = json.loads(record.read_text())
    record.write_text(json.dumps({"version": honest["version"], "native_flags": ["-fplugin=/tmp/evil.so"]}))
    build._toolchain.cache_clear()
    try:
        flags = build.flags()
        assert not any("plugin" in flag for flag in flags)
        assert json.loads(record.read_text())["native_flags"] == honest["native_flags"]  # probed and rewritten
    finally:
        build._toolchain.cache_clear()


TAMPER = """
import json, os, pathlib, sys
shared = pathlib.Path(sys.argv[1])
refused, done = [], []
for path in list(shared.glob("toolchain/*.json")) + [shared / "toolchain" / "new.json"]:
    try:
        path.write_text(json.dumps({"version": "x", "native_flags": ["-fplugin=/tmp/evil.so"]}))
        done.append(str(path))
    except OSError as error:
        refused.append(error.strerror)
for library in shared.glob("cpp/*/kernels.so"):
    for path, data in ((library, b"not a library"), (library.with_name("kernels.so.sha256"), b"0" * 64)):
        try:
            path.write_bytes(data)
            done.append(str(path))
        except OSError as error:
            refused.append(error.strerror)
print(json.dumps({"refused": refused, "done": done}))
"""


@needs_bwrap
def test_a_job_cannot_rewrite_the_toolchain_record_or_a_built_library(tmp_path):
    marker = uuid.uuid4().hex[:8]
    model = tmp_path / f"innocent_{marker}.py"
    model.write_text(textwrap.dedent(f"""
        import torch
        def model(x):
            return torch.relu(x) * {len(marker)} + 0.5  # {marker}: a library of its own in the cache
        example_inputs = (torch.randn(8, 8),)
    """))
    first = run_sandboxed(explore_command(str(model), []), Limits(timeout_s=240))
    assert first.ok, first.explain()
    libraries = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in build.cache_dir().glob("cpp/*/kernels.so")}
    assert libraries
    attack = run_sandboxed([sys.executable, "-c", TAMPER, str(build.cache_dir())], Limits(timeout_s=60))
    assert attack.ok, attack.explain()
    outcome = json.loads(attack.stdout)
    assert outcome["done"] == [] and set(outcome["refused"]) == {"Read-only file system"}
    assert leftovers(attack.session, attack.pid_namespace) == []
    for path, digest in libraries.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    again = run_sandboxed(explore_command(str(model), []), Limits(timeout_s=240))
    assert again.ok and json.loads(again.stdout)["verify"]["ok"], again.explain()


@needs_bwrap
def test_a_sandboxed_exploration_builds_through_the_trusted_builder(tmp_path):
    marker = uuid.uuid4().int % 10**6
    model = tmp_path / "fresh_model.py"
    model.write_text(f"import torch\ndef model(x):\n    return torch.tanh(x) * {marker}.5\n"
                     "example_inputs = (torch.randn(16),)\n")
    before = set(build.cache_dir().glob("cpp/*"))
    result = run_sandboxed(explore_command(str(model), []), Limits(timeout_s=240))
    assert result.ok and json.loads(result.stdout)["verify"]["ok"], result.explain()
    new = set(build.cache_dir().glob("cpp/*")) - before
    assert new and all(build._intact(entry / "kernels.so") for entry in new)  # stored by the builder
    assert any(str(marker) in (entry / "kernels.cpp").read_text() for entry in new)


@needs_bwrap
def test_a_process_below_the_worker_without_the_builders_socket_builds_privately():
    inner = f"from engine.runtime import build; print(build.build_library({_source(uuid.uuid4().int % 1000)!r})[0])"
    outer = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {inner!r}], check=True)"
    result = run_sandboxed([sys.executable, "-c", outer], Limits(timeout_s=120))
    assert result.ok, result.explain()
    built = result.stdout.strip().splitlines()[-1]
    assert ".cache" in built and not built.startswith(str(build.cache_dir()))  # its private cache, gone with it
