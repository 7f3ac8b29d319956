"""The offline HTML report (visualizers/html_report.py, `python -m engine report`) and the code-highlighting
fixes it relies on (line numbers with leading blank lines, tabs and CRLF; TTIR without error tokens)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pygments.token import Error

import engine
from engine.tools.model_file import load_model_file
from engine.record import Exploration, FxNode, GraphRecord, SourceFile
from visualizers.code import highlight_html, lexer_for
from visualizers.html_report import failed_record, is_self_contained, report_html

ROOT = Path(__file__).resolve().parents[1]
needs_dot = pytest.mark.skipif(not shutil.which("dot"), reason="Graphviz's dot is not installed")


@pytest.fixture(scope="module")
def graph_break_record():
    spec = load_model_file("graph_break")
    return engine.explore(spec.model, spec.example_inputs, name=spec.name, description=spec.description,
                          source={"filename": spec.filename, "text": spec.source}, profile=True)


@needs_dot
def test_report_holds_graphs_code_breaks_and_profile_offline(graph_break_record):
    page = report_html(graph_break_record)
    assert is_self_contained(page)
    assert page.count("<svg") >= 3  # FX and ATen graphs as inline SVG
    assert "<?xml" not in page and "DOCTYPE svg" not in page
    assert 'id="g0-code-1"' in page  # generated lines are link targets for provenance
    assert 'href="#src-' in page  # ... and provenance links back to the user's lines
    assert "Graph break 1" in page and "Time per kernel" in page and "Roofline" in page
    assert "cdn" not in page.lower().split("plotly.js v")[0][-2000:]  # plotly.js is inline
    assert "Content-Security-Policy" in page


def test_record_strings_are_escaped_and_remote_images_never_load():
    record = Exploration(model="<img src=x onerror=alert(1)>", backend="cpp", device="cpu",
                         description="![x](https://example.org/pixel.png)",
                         source=SourceFile(text="<script>alert(1)</script>"))
    page = report_html(record)
    assert "<img src=x" not in page and "&lt;img src=x" in page
    assert "<script>alert(1)" not in page
    assert is_self_contained(page)


def test_a_failed_exploration_still_renders_with_its_error():
    page = report_html(failed_record("broken", SourceFile(filename="m.py", text="model = 1/0\n"), "explore",
                                     "ZeroDivisionError: division by zero"))
    assert "ZeroDivisionError" in page and 'class="error"' in page and "Your model" in page


@needs_dot
def test_a_2000_node_graph_stays_a_usable_file():
    fx = [{"name": "x", "op": "placeholder", "target": "x", "args": [], "shape": ["64"], "dtype": "float32"}]
    for i in range(2000):
        fx.append({"name": f"op{i}", "op": "call_function", "target": "mul" if i % 2 else "add",
                   "args": [fx[-1]["name"]], "shape": ["64"], "dtype": "float32", "module_path": ""})
    fx.append({"name": "output", "op": "output", "target": "output", "args": [fx[-1]["name"]]})
    record = Exploration(model="chain", backend="cpp", device="cpu",
                         graphs=[GraphRecord(index=0, fx=[FxNode.from_json(node) for node in fx])])
    start = time.perf_counter()
    page = report_html(record)
    assert time.perf_counter() - start < 60
    assert "<svg" in page and len(page) < 10_000_000
    # a search box over the nodes, wired up by the report's own script (no inline handler: Note [Report scripts])
    assert 'type="search"' in page and 'data-target="g0-fx"' in page and "oninput=" not in page
    for node in record.graphs[0].fx:  # modules fold a graph; this one has none, so it is drawn whole
        node.module_path = f"layers.{int(node.name[2:]) // 20}" if node.name.startswith("op") else ""
    folded = report_html(record)
    assert "drawn folded to module depth" in folded and len(folded) < len(page)


@pytest.mark.slow
def test_cli_report_writes_a_file_and_reports_a_broken_model(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "r.html"
    result = subprocess.run([sys.executable, "-m", "engine", "report", "scale_bias_relu", "--out", str(out)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "scale_bias_relu" in out.read_text() and is_self_contained(out.read_text())
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nmodel = lambda x: x.nonexistent()\nexample_inputs = (torch.ones(2),)\n")
    out2 = tmp_path / "b.html"
    result = subprocess.run([sys.executable, "-m", "engine", "report", str(broken), "--out", str(out2)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "nonexistent" in out2.read_text()
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"model": "from json", "graphs": [], "errors": []}))
    out3 = tmp_path / "j.html"
    subprocess.run([sys.executable, "-m", "engine", "report", str(record), "--out", str(out3)], cwd=ROOT, env=env,
                   capture_output=True, text=True, timeout=300, check=True)
    assert "from json" in out3.read_text()


# --- highlighting fixes -------------------------------------------------------------------------------------


def _highlighted_text(page: str) -> list[str]:
    """The text of each highlighted line (pygments wraps them in a span with the highlight colour)."""
    spans = re.findall(r'<span style="background-color: #fde68a">(.*?)</span>\n?', page, re.S)
    return [re.sub(r"<[^>]+>", "", s) for s in spans]


@pytest.mark.parametrize("code", [
    "\n\nx = 1\ny = 2\ntarget = 3\n",  # leading blank lines (pygments dropped them: every number shifted)
    "\n\tx = 1\n\n\ty = 2\ntarget = 3\n",  # tabs
    "\r\n\r\nx = 1\r\ny = 2\r\ntarget = 3\r\n",  # CRLF
])
def test_highlighted_line_is_the_line_asked_for(code):
    page = highlight_html(code, "python", hl_lines=[5], line_numbers=False)
    (text,) = _highlighted_text(page)
    assert "target" in text


def test_ttir_has_no_error_tokens():
    ttir = ('#blocked = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32]}>\n'
            'module attributes {"ttg.num-warps" = 4 : i32} {\n'
            '  tt.func public @kernel_0(%arg0: !tt.ptr<f32> loc("x")) {\n'
            '    %0 = tt.get_program_id x : i32 loc(#loc1)\n    tt.return loc(#loc2)\n  }\n}\n')
    for language in ("ttir", "ttgir"):
        tokens = list(lexer_for(language).get_tokens(ttir))
        assert not [t for t in tokens if t[0] in Error]


def test_long_code_lines_wrap_instead_of_being_clipped():
    page = highlight_html("x = " + "a + " * 200 + "1\n", "python")
    assert "white-space:pre-wrap" in page and "white-space:pre}" not in page


@needs_dot
def test_report_has_the_rewrites_section_with_the_matched_nodes_marked():
    spec = load_model_file("handwritten_attention")
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name,
                            source={"filename": spec.filename, "text": spec.source})
    page = report_html(record)
    section = page.split("<h3>Rewrites</h3>", 1)[1].split("<h3>", 1)[0]
    assert "attention" in section and "compute attention" in section  # the pass, its count and the reason
    marked = re.findall(r'<g id="[^"]*" class="node gb&#45;selected">\s*<title>([^<]*)</title>', section)
    assert len(marked) >= 10 and any("bmm" in name for name in marked), marked
    after = page.split("<h3>ATen graph</h3>", 1)[1].split("<h3>Rewrites</h3>", 1)[0]
    assert "scaled_dot_product_attention" in after and "gb&#45;selected" in after
