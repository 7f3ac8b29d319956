"""The app against a hostile record and a hostile page: foreign Host headers, record fields that try to be
Markdown or HTML, descriptions that load remote images, and the CLI's limit arguments (Note [Host check],
Note [Record text])."""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import host_check, worker
from app.safe_text import description_markdown, html_text, md_code, md_text
from engine.options import Options
from engine.record import Exploration

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app" / "streamlit_app.py")
EVIL_IMAGE = "![pixel](https://evil.example/pixel.png)"
EVIL_HTML = "<img src=x onerror=alert(1)>"


def test_xsrf_protection_and_cors_stay_on_and_the_server_binds_to_localhost():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["enableXsrfProtection"] is True and config["server"]["enableCORS"] is True
    assert config["server"]["address"] == "localhost"


@pytest.mark.parametrize("header,allowed", [
    ("localhost:8501", True), ("127.0.0.1:8501", True), ("[::1]:8501", True), ("LOCALHOST", True),
    (None, True),  # no request behind the run (AppTest)
    ("evil.example:8501", False), ("localhost.evil.example", False), ("127.0.0.1.nip.io:8501", False),
    ("", False),
])
def test_foreign_host_headers_are_refused(header, allowed):
    assert host_check.host_allowed(header) is allowed


def test_a_page_asked_for_under_a_foreign_name_runs_nothing(monkeypatch):
    monkeypatch.setattr(host_check, "request_host", lambda: "rebound.evil.example:8501")
    monkeypatch.setattr(worker, "explore", lambda *a, **k: pytest.fail("a model was explored for a foreign host"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert any("not served under the name" in e.value for e in at.error)


def test_extra_names_can_be_allowed_on_purpose(monkeypatch):
    monkeypatch.setenv("GLASSBOX_ALLOWED_HOSTS", "glassbox.lan, other.lan")
    assert host_check.host_allowed("glassbox.lan:8501") and not host_check.host_allowed("evil.lan")


def test_record_text_renders_literally():
    shown = md_text(f"{EVIL_IMAGE} {EVIL_HTML} **bold** :red[x] $x$")
    assert not re.search(r"(?<!\\)!\[", shown) and "<img" not in shown.replace("\\<img", "")
    assert "&lt;img" in html_text(EVIL_HTML) and "<" not in html_text(EVIL_HTML)


def test_record_text_in_a_code_span_shows_as_written():
    line = f"x = y_1 ``{EVIL_IMAGE}``\n+ 1"
    shown = md_code(line)
    fence = shown.split(" ")[0]
    assert set(fence) == {"`"} and len(fence) == 3 and shown.endswith(f" {fence}")  # longer than any run inside
    assert "\n" not in shown and "y_1" in shown and "\\" not in shown  # one line, nothing escaped to show


def test_descriptions_keep_their_markdown_but_load_nothing():
    text = (f"# Title\n**bold** and a [link](https://example.org)\n{EVIL_IMAGE}\n![ref][r]\n\n"
            f"[r]: https://evil.example/ref.png\n{EVIL_HTML}")
    shown = description_markdown(text)
    assert "**bold**" in shown and "[link](https://example.org)" in shown
    assert "evil.example" not in shown and "<img" not in shown and "pixel" in shown  # alt text stays


def _hostile_record() -> Exploration:
    """A real record with every text field a worker could forge set to something hostile (read back typed, as
    app/worker.py reads every record: a forged record still has to be a record)."""
    import engine
    record = engine.explore(lambda x: torch_relu(x), (__import__("torch").randn(4),), name="m").to_json()
    record["model"] = f"m{EVIL_HTML}"
    record["description"] = f"About {EVIL_IMAGE} {EVIL_HTML}"
    record["graph_breaks"] = [{"reason": f"break {EVIL_IMAGE} (Dynamo: {EVIL_IMAGE})", "filename": "pasted.py",
                               "lineno": 1, "line": "x"}]
    record["errors"] = [{"kind": "inputs", "stage": "run", "message": f"error {EVIL_IMAGE}"}]
    for graph in record.get("graphs") or []:
        for node in (graph.get("ir") or {}).get("nodes") or []:
            node["kind"], node["name"], node["reason"] = "fallback", f"n{EVIL_HTML}", f"because {EVIL_IMAGE}"
    return Exploration.from_json(record)


def torch_relu(x):
    import torch
    return torch.relu(x) + 1


def _all_text(at: AppTest) -> list[str]:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [w.value for w in at.warning]
    parts += [e.value for e in at.error] + [s.value for s in at.success] + [i.value for i in at.info]
    return [str(p) for p in parts] + [str(h.proto.body) for h in at.get("html")]


def test_a_forged_record_reaches_the_page_escaped(monkeypatch):
    import streamlit as st
    st.cache_resource.clear()  # the app's result cache may hold the real record of this sample from another test
    record = _hostile_record()
    outcome = worker.Outcome(record=record, seconds=0.1, inputs=[{"dtype": "float32", "shape": [4]}])
    monkeypatch.setattr(worker, "explore", lambda *a, **k: outcome)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    shown = _all_text(at)
    at.switch_page("views/breaks.py").run()
    assert not at.exception, at.exception
    shown += _all_text(at)
    joined = "\n".join(shown)
    assert "m&lt;img" in joined  # the header's model name, escaped HTML
    for text in shown:
        assert "<img src=x" not in text, text
        assert not re.search(r"(?<!\\)!\[pixel\]", text) or "evil.example" not in text, text


@pytest.mark.slow
@pytest.mark.parametrize("argument", ["--timeout=nan", "--timeout=inf", "--timeout=0", "--timeout=-5",
                                      "--memory-mb=0", "--memory-mb=-1", "--memory-mb=nan", "--memory-mb=2.5"])
def test_the_cli_refuses_limits_that_are_no_limit(argument):
    done = subprocess.run([sys.executable, "-m", "engine", "explore", "softmax", "--sandbox", argument],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "above 0" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_a_large_model_file_is_refused_with_the_reason(tmp_path):
    from engine.tools.model_file import MAX_SOURCE_BYTES
    big = tmp_path / "big.py"
    filler = "# " + "x" * 98 + "\n"
    big.write_text("import torch\n" + filler * (MAX_SOURCE_BYTES // len(filler) + 10) +
                   "def model(x):\n    return x\nexample_inputs = (torch.randn(3),)\n")
    done = subprocess.run([sys.executable, "-m", "engine", "explore", str(big), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "MB" in done.stderr and "keep the .py file small" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    outcome = worker.explore(big.read_text(), "big", Options())
    assert outcome.problem is not None and "keep the .py file small" in outcome.problem.message
    assert len(json.dumps(outcome.record or {})) < MAX_SOURCE_BYTES


LEAVES_A_LINK = """
import os, torch
os.symlink({target!r}, "record.json")
os._exit(0)  # before the CLI writes its own record: the server finds only the link
"""


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
@pytest.mark.parametrize("kind", ["link to a server file", "link to /dev/zero", "fifo", "hard link"])
def test_a_record_file_the_model_forged_is_not_read(tmp_path, kind):
    """Note [Reading what a worker wrote]: the server reads back only a regular file the worker wrote itself."""
    import torch

    import engine
    secret = tmp_path / "server_secret.json"  # a server file that would read as a good record, were it read
    secret.write_text(json.dumps(engine.explore(torch.relu, (torch.randn(3),), description="hunter2-server")
                                 .to_json()))
    code = {"link to a server file": LEAVES_A_LINK.format(target=str(secret)),
            "link to /dev/zero": LEAVES_A_LINK.format(target="/dev/zero"),
            "fifo": 'import os\nos.mkfifo("record.json")\nos._exit(0)\n',
            "hard link": 'import os\nopen("x", "w").write("{}")\nos.link("x", "record.json")\nos._exit(0)\n'}[kind]
    outcome = worker.explore(code, "pasted", Options(), timeout=60)
    assert outcome.record is None and outcome.problem is not None  # no result, said so
    shown = " ".join(str(part) for part in (outcome.problem.title, outcome.problem.message, outcome.problem.log))
    assert "hunter2-server" not in shown
    assert worker.explore("import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.randn(3),)\n", "next",
                          Options()).problem is None  # and the next one works


def test_reading_back_refuses_what_is_not_a_plain_file_of_the_directory(tmp_path):
    plain = tmp_path / "plain.json"
    plain.write_text("{}")
    (tmp_path / "link.json").symlink_to(plain)
    (tmp_path / "big.json").write_text("x" * 100)
    assert worker._read(plain) == "{}"
    assert worker._read(tmp_path / "link.json") is None and worker._read(tmp_path / "missing.json") is None
    assert worker._read(tmp_path / "big.json", limit_bytes=99) is None
    assert worker._read(tmp_path / "big.json", limit_bytes=100) == "x" * 100
