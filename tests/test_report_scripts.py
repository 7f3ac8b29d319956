"""The offline report runs no script but its own (issue 33; Note [Report scripts] in visualizers/html_report.py):
a record with markup in every string rendered by `python -m engine report` runs no script in headless Chromium
(markup where a number belongs, the graph index that once ran 16 scripts, is refused as a malformed record), while the report's own node search still works; a record `report` cannot read is
a clear error, not a traceback."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import engine

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("GLASSBOX_CHROMIUM", "/usr/bin/chromium")
PAYLOAD = ('"\'><script>window.__pwned=(window.__pwned||0)+1</script><img src=x onerror="window.__pwned=1">'
           '<svg onload="window.__pwned=1"></svg>')


def _poison(value):
    """Markup appended to every string of the record (keys stay: the report looks them up)."""
    if isinstance(value, str):
        return value + PAYLOAD
    if isinstance(value, list):
        return [_poison(v) for v in value]
    if isinstance(value, dict):
        return {k: _poison(v) for k, v in value.items()}
    return value


def _report(tmp_path: Path, record_text: str, out: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "record.json"
    path.write_text(record_text, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "engine", "report", str(path), "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists() or not shutil.which("dot"), reason="needs Chromium and dot")
def test_a_record_full_of_markup_runs_no_script_in_chromium(tmp_path):
    playwright_api = pytest.importorskip("playwright.sync_api")
    record = engine.explore(lambda x: torch.relu(x) * 2 + 1, (torch.randn(8, 8),)).to_json()
    record = _poison(record)
    record["graph_breaks"] = [{"reason": PAYLOAD, "filename": PAYLOAD, "lineno": 3, "line": PAYLOAD,
                               "gb_type": PAYLOAD, "explanation": PAYLOAD, "hints": [PAYLOAD]}]
    indexed = json.loads(json.dumps(record))
    indexed["graphs"][0]["index"] = PAYLOAD  # the field that ran 16 scripts: a typed record refuses it
    refused = _report(tmp_path, json.dumps(indexed), tmp_path / "indexed.html")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and "index" in refused.stderr, refused.stderr
    assert not (tmp_path / "indexed.html").exists()
    out = tmp_path / "report.html"
    finished = _report(tmp_path, json.dumps(record), out)
    assert finished.returncode == 0, finished.stderr
    page_text = out.read_text(encoding="utf-8")
    assert "'unsafe-inline'" not in page_text.split("script-src", 1)[1].split(";", 1)[0]
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page()
            page.goto(out.as_uri())
            page.wait_for_load_state("load")
            assert page.evaluate("window.__pwned") is None  # no script of the record ran
            box = page.locator("input[data-target]").first
            box.fill("relu")  # ... and the report's own, hashed script did
            hits = page.locator(f"#{box.get_attribute('data-target')}-hits")
            hits.wait_for(state="attached")
            page.wait_for_function("t => document.getElementById(t).textContent.includes('match')",
                                   arg=f"{box.get_attribute('data-target')}-hits", timeout=10_000)
        finally:
            browser.close()


@pytest.mark.slow
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", json.dumps({"graphs": "x"}),
                                  json.dumps({"graphs": [1]}), json.dumps({"graphs": [{"kernels": 5}]})])
def test_a_record_report_cannot_read_is_a_clear_error(tmp_path, text):
    finished = _report(tmp_path, text, tmp_path / "r.html")
    assert finished.returncode == 2, (finished.returncode, finished.stderr)
    assert "Traceback" not in finished.stderr and "record" in finished.stderr


@pytest.mark.slow
def test_report_into_a_directory_writes_a_file_there(tmp_path):
    (tmp_path / "out").mkdir()
    record = {"model": PAYLOAD, "graphs": [{"index": 0}], "errors": []}
    finished = _report(tmp_path, json.dumps(record), tmp_path / "out")
    assert finished.returncode == 0 and "Traceback" not in finished.stderr, finished.stderr
    assert "<script>window.__pwned" not in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
