"""The explorer's jobs in a real browser (Playwright + Debian's Chromium), as a user sees them: the offline HTML
report opened with the network blocked (graphs, code, the per-kernel profile chart, graph-break hints and
rewrites, the highlighted line of code that starts with blank lines and CRLF), a 2000-node graph searched in
the report, and the app's compare page (C++ vs Triton showing a diff; an edit paired with the kernel it changed).
The app server comes from
tests/test_browser.py's fixture. With GLASSBOX_SHOTS=DIR, screenshots are saved there."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

# the app server (started by the fixture below) and this test share one folder of shared code
os.environ.setdefault("GLASSBOX_SHARE_DIR", tempfile.mkdtemp(prefix="glassbox-share-"))

from test_browser import CHROMIUM, FIRST_VIEW_TIMEOUT_MS, server  # noqa: F401 - the app server fixture

import engine
from app import share
from engine.record import Exploration, FxNode, GraphRecord
from engine.tools.model_file import load_model_file
from visualizers.html_report import report_html

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}"),
              pytest.mark.skipif(not shutil.which("dot"), reason="Graphviz's dot is not installed")]

# the graph_break sample, opening with blank lines and CRLF line ends: its breaks' lines must still be the
# highlighted ones (pygments used to drop the leading blank lines, shifting every highlight)
SHIFTED = "\r\n\r\n\r\n" + (Path(__file__).resolve().parents[1] / "samples" / "graph_break.py").read_text().replace("\n", "\r\n")


EDITOR_FRAME = "iframe[title*=streamlit_ace]"


def editor_frame(page):
    """The code editor's frame, once the page shows one editor (it is remounted when its marks change, and the
    old frame lingers for a moment)."""
    for _ in range(20):
        page.wait_for_function(f"document.querySelectorAll({EDITOR_FRAME!r}).length == 1", timeout=60_000)
        page.wait_for_timeout(1500)
        if page.locator(EDITOR_FRAME).count() == 1:  # and it stayed alone: no rerun remounting it
            break
    return page.frame_locator(EDITOR_FRAME)


def choose(page, label: str, option: str) -> None:
    """Pick `option` in the st.selectbox labelled `label`."""
    page.get_by_label(label, exact=True).first.click()
    page.get_by_role("option", name=option).first.click()
    page.wait_for_timeout(1500)


def shot(page, name: str) -> None:
    folder = os.environ.get("GLASSBOX_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def offline_page(browser, path: Path):
    """A page that may load the file and nothing else: any other request is aborted and counted."""
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    fetched: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith("file://"):
            request_route.continue_()
        else:
            fetched.append(url)
            request_route.abort()
    context.route("**/*", route)
    page = context.new_page()
    page.goto(path.as_uri())
    return page, fetched


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "shifted.py"
    path.write_bytes(SHIFTED.encode())
    spec = load_model_file(str(path))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name, description=spec.description,
                            source={"filename": spec.filename, "text": spec.source}, profile=True)
    out = path.with_suffix(".html")
    out.write_text(report_html(record), encoding="utf-8")
    return out, record


def test_report_offline_shows_graphs_code_profile_and_break_fixes(browser, report_file):
    path, record = report_file
    page, fetched = offline_page(browser, path)
    page.locator("svg g.node").first.wait_for(timeout=30_000)
    assert page.locator(".svg svg").count() >= 3  # FX and ATen graphs drawn, inline
    assert page.get_by_text("Generated cpp code").count() >= 1
    assert page.locator("[data-language=cpp] pre").first.inner_text().strip()
    page.locator(".plotly .bars, .plotly .barlayer").first.wait_for(timeout=30_000)  # the per-kernel chart drew
    assert page.get_by_text("Time per kernel").count() >= 1
    hint = page.get_by_text("Suggested rewrite:").first
    hint.scroll_into_view_if_needed()
    assert "torch.where(flag.sum() > 0" in page.locator(".hint").all_inner_texts().__str__()
    shot(page, "report_breaks")
    assert fetched == []


def test_report_highlights_the_break_lines_despite_blank_lines_and_crlf(browser, report_file):
    path, record = report_file
    page, _ = offline_page(browser, path)
    lines = [b.lineno for b in record.graph_breaks]
    source = SHIFTED.replace("\r\n", "\n").splitlines()
    highlighted = page.locator("#source ~ div .gb-highlight span[style*='#fde68a']").all_inner_texts()
    assert len(highlighted) == len(lines)
    for number, text in zip(lines, highlighted):
        assert source[number - 1].strip() in text  # the line Dynamo named, not its neighbour
    page.locator("#source").scroll_into_view_if_needed()
    shot(page, "report_source_lines")


def test_report_of_a_2000_node_graph_is_searchable(browser, tmp_path):
    fx = [{"name": "x", "op": "placeholder", "target": "x", "args": [], "shape": ["64"], "dtype": "float32"}]
    for i in range(2000):
        fx.append({"name": f"op{i}", "op": "call_function", "target": "mul" if i % 2 else "add",
                   "args": [fx[-1]["name"]], "shape": ["64"], "dtype": "float32", "module_path": ""})
    fx.append({"name": "output", "op": "output", "target": "output", "args": [fx[-1]["name"]]})
    path = tmp_path / "big.html"
    path.write_text(report_html(Exploration(model="chain", backend="cpp", device="cpu",
                                       graphs=[GraphRecord(index=0, fx=[FxNode.from_json(n) for n in fx])])))
    page, fetched = offline_page(browser, path)
    page.fill("input[type=search]", "op1234 ")
    page.fill("input[type=search]", "op1234")
    page.wait_for_timeout(500)
    assert page.locator("g.node.gb-match").count() == 1
    assert page.locator("#g0-fx-hits").inner_text() == "1 match"
    assert page.locator("g.node.gb-match").first.is_visible()
    shot(page, "report_big_search")
    assert fetched == []


def test_compare_cpp_with_triton_shows_a_diff(browser, server):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(f"{server}/compare")
    page.get_by_role("button", name="Compare A and B").wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    choose(page, "What to compare", "custom")  # the presets compare on one backend; C++ vs Triton is custom's
    page.get_by_role("button", name="Compare A and B").click()
    page.get_by_text("Code diff").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert page.get_by_text("kernels A").count() and page.get_by_text("speedup of B over A").count()
    diff = page.locator("[data-language=diff]").first
    diff.scroll_into_view_if_needed()
    text = diff.inner_text()
    assert "--- A (defaults)" in text and "+++ B (backend=triton)" in text and "@triton.jit" in text
    assert page.get_by_text("Triton's interpreter").count()  # B's times are flagged, not trusted
    shot(page, "compare_cpp_triton")
    page.close()


def grid_rows(page, has_text: str) -> list[list[str]]:
    """The cells of the st.dataframe that shows `has_text` in a header, row by row (the grid's accessible table)."""
    grid = page.locator("[data-testid=stDataFrame]").filter(has_text=has_text).first
    grid.wait_for(timeout=60_000)
    rows: list[list[str]] = []
    for _ in range(30):  # the grid fills its accessible rows a moment after it shows
        rows = grid.evaluate("""(el) => [...el.querySelectorAll('[role=row]')].map(r =>
            [...r.querySelectorAll('[role=columnheader], [role=gridcell], th, td')].map(c => c.innerText.trim()))""")
        if len(rows) > 1 and any(rows[1]):
            break
        page.wait_for_timeout(1000)
    return rows


def test_compare_before_and_after_an_edit_pairs_the_changed_kernel(browser, server):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1300})
    page.goto(f"{server}/compare?sample=scale_bias_relu")
    page.get_by_role("button", name="Compare A and B").wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    choose(page, "What to compare", "this code before vs after an edit")
    editor = page.get_by_label("B's code (edit it)")
    editor.wait_for(timeout=60_000)
    code = editor.input_value()
    assert "x * self.scale + self.bias" in code
    editor.fill(code.replace("x * self.scale + self.bias", "x * self.scale - self.bias"))
    editor.press("Control+Enter")
    page.wait_for_timeout(1500)
    page.get_by_role("button", name="Compare A and B").click()
    page.get_by_text("Code diff").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    paired = page.locator("[data-testid=stMetric]").filter(has_text="kernels paired")
    assert int(paired.locator("[data-testid=stMetricValue]").inner_text()) == 1
    rows = grid_rows(page, "what differs")
    header, body = rows[0], [row for row in rows[1:] if any(row)]
    change, differs = header.index("change"), header.index("what differs")
    assert [row[change] for row in body] == ["changed"], rows
    assert "A also computes add" in body[0][differs] and "B also computes sub" in body[0][differs], rows
    diff = [re.sub(r"^\s*\d+", "", line)  # the code view numbers its lines
            for line in page.locator("[data-language=diff]").first.inner_text().splitlines()]
    assert "+++ B (file=edited.py)" in diff, diff[:3]  # the edited code named, not its path in the worker
    assert any(line.startswith("-") and " + " in line for line in diff), diff  # the add, then the subtract
    assert any(line.startswith("+") and " - " in line for line in diff), diff
    shot(page, "compare_edit")
    page.close()


def test_a_url_restores_sample_backend_and_stage_and_keeps_them_across_pages(browser, server):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/?sample=softmax&backend=triton&stage=fusion&side=none")
    page.get_by_text("Fusion decisions").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    sidebar = page.locator("[data-testid=stSidebar]")
    assert sidebar.get_by_text("softmax").count() >= 1
    assert sidebar.get_by_role("radio", name="Triton").is_checked()
    shot(page, "url_restored_fusion")
    page.get_by_role("link", name="Graph breaks").click()
    page.wait_for_timeout(3000)
    assert "sample=softmax" in page.url and "backend=triton" in page.url and "stage=fusion" in page.url
    page.close()


def test_a_shared_link_opens_the_pasted_model_and_a_dead_link_says_so(browser, server):  # noqa: F811
    source = ("import torch\n\ndescription = 'shared model'\n\ndef model(x):\n    return torch.tanh(x) * 3.0\n\n"
              "example_inputs = (torch.randn(8, 8),)\n")
    key = share.store_code(source)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/model?code={key}")
    page.get_by_text("your code").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    editor = editor_frame(page).locator(".ace_content")
    editor.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert "torch.tanh(x) * 3.0" in editor.inner_text()
    assert f"code={key}" in page.url
    shot(page, "shared_link")
    page.goto(f"{server}/?code={'0' * 24}")
    page.get_by_text("no longer exists").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.close()


def test_profile_page_draws_the_kernel_chart_and_offers_the_report(browser, server):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(f"{server}/profile?sample=softmax")
    page.get_by_role("button", name="Profile the kernels").click(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("Time per kernel").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert page.get_by_text("Roofline").count() and page.get_by_text("copy bandwidth").count()
    assert page.locator(".js-plotly-plot").count() >= 3  # times, roofline, memory plan
    assert page.get_by_text("takes the most time").count()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the report (offline HTML)").click()
    assert download.value.suggested_filename.endswith(".html")
    shot(page, "profile_page")
    page.close()


def test_graph_breaks_page_shows_dynamos_hint_and_the_rewrite(browser, server):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(f"{server}/breaks?sample=graph_break")
    page.get_by_text("Suggested rewrite").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert page.get_by_text("Hint: Use `torch.cond`").count() or page.get_by_text("torch.cond").count()
    assert page.get_by_text("z = torch.where(flag.sum() > 0, torch.relu(y), torch.sigmoid(y))").count()
    shot(page, "breaks_hint")
    page.close()


def localhost_page(browser, server):  # noqa: F811
    """A page of the app that may reach the app's server and nothing else (the app must work offline)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    fetched: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith(server) or url.startswith(("data:", "blob:")):
            request_route.continue_()
        else:
            fetched.append(url)
            request_route.abort()
    context.route("**/*", route)
    return context.new_page(), fetched


def test_the_code_editor_highlights_numbers_lines_indents_and_marks_lines_offline(browser, server):  # noqa: F811
    page, fetched = localhost_page(browser, server)
    page.goto(f"{server}/model?sample=graph_break")
    page.get_by_text("Explored").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    frame = editor_frame(page)
    frame.locator(".ace_gutter-cell.ace_warning").first.wait_for(timeout=30_000)
    source = (Path(__file__).resolve().parents[1] / "samples" / "graph_break.py").read_text()
    assert frame.locator(".ace_gutter-cell").count() >= len(source.splitlines())  # line numbers
    assert frame.locator(".ace_keyword").count() > 3  # Python highlighted: def, if, return, ...
    warned = [int(t) for t in frame.locator(".ace_gutter-cell.ace_warning").all_inner_texts()]
    breaks = [i for i, line in enumerate(source.splitlines(), 1) if "graph break" in line and "#" in line]
    assert warned == breaks  # the two graph-break lines, marked in the gutter
    shot(page, "editor_graph_breaks")
    frame.locator(".ace_content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text("import torch\n\ndef model(x):\n")
    page.keyboard.press("Tab")  # indents (4 spaces), not a focus change
    page.keyboard.insert_text("return torch.relu(x) +* 2\n\nexample_inputs = (torch.randn(4),)\n")
    assert "    return torch.relu(x)" in frame.locator(".ace_content").inner_text()
    page.wait_for_timeout(1500)  # the editor sends its text after 200 ms of quiet
    page.get_by_role("button", name="Explore", exact=True).click()
    page.get_by_text("There is a problem in the model code").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    frame = editor_frame(page)
    frame.locator(".ace_gutter-cell.ace_error").first.wait_for(timeout=30_000)
    assert frame.locator(".ace_gutter-cell.ace_error").all_inner_texts() == ["4"]  # the SyntaxError's line
    assert frame.locator(".ace_error-marker").count() == 1
    shot(page, "editor_error_line")
    page.get_by_role("link", name="Explorer").click()  # an edit survives a visit to another page
    page.get_by_role("link", name="Model code").click()
    frame = editor_frame(page)
    frame.get_by_text("example_inputs").first.wait_for(timeout=30_000)
    assert "+* 2" in frame.locator(".ace_content").inner_text()
    assert fetched == []  # nothing but the app's own server: the editor works offline
    page.close()


BIG_MODEL = '''import torch
from torch import nn

description = "2000 FX nodes: 200 blocks of 10 pointwise ops"


class Block(nn.Module):
    def forward(self, x):
        x = x * 1.01
        x = x + 0.1
        x = torch.tanh(x)
        x = x - 0.05
        x = x * 0.99
        x = torch.sigmoid(x)
        x = x + 0.2
        x = x * 1.5
        x = torch.relu(x)
        return x - 0.3


model = nn.Sequential(*[Block() for _ in range(200)])
example_inputs = (torch.randn(16, 32),)
'''


@pytest.fixture(scope="module", autouse=True)
def _time_for_a_big_model():
    """This module's app server may take long over a 2000-node model (Dynamo alone takes a minute on 2 cores)."""
    before = os.environ.get("GLASSBOX_APP_TIMEOUT")
    os.environ["GLASSBOX_APP_TIMEOUT"] = "900"
    yield
    if before is None:
        os.environ.pop("GLASSBOX_APP_TIMEOUT", None)
    else:
        os.environ["GLASSBOX_APP_TIMEOUT"] = before


def test_a_2000_node_model_side_by_side_zooms_folds_and_finds_a_node(browser, server):  # noqa: F811
    key = share.store_code(BIG_MODEL)
    page, fetched = localhost_page(browser, server)
    page.goto(f"{server}/?code={key}&stage=capture&side=ATen")
    viewers = page.locator("iframe[srcdoc]")
    viewers.nth(1).wait_for(timeout=900_000)
    assert viewers.count() == 2  # FX and ATen graphs side by side, each in the zoomable viewer
    left = page.frame_locator("iframe[srcdoc] >> nth=0")
    assert "2002 nodes" in left.locator("#bar").inner_text()  # 2000 ops, the input and the output
    assert 150 < left.locator("g.node").count() < 400  # folded: one box per block, not 2000
    assert left.get_by_text("kernel").count() >= 1  # kernels named on the folded boxes
    before = left.locator("svg").get_attribute("viewBox")
    left.locator("#zin").click()
    assert left.locator("svg").get_attribute("viewBox") != before  # zoomed
    finder = page.get_by_role("combobox", name="Find a node")
    finder.click()
    finder.fill("x_1234")
    page.get_by_role("option", name=re.compile(r"^x_1234\b")).click()  # its label adds its op and module
    page.wait_for_function("document.querySelectorAll('iframe[srcdoc]').length == 2", timeout=60_000)
    page.wait_for_timeout(2000)
    left = page.frame_locator("iframe[srcdoc] >> nth=0")
    left.locator("g.node.gb-selected").first.wait_for(timeout=120_000)  # its module unfolded, the node marked
    assert "x_1234" in left.locator("g.node.gb-selected").first.text_content()
    right = page.frame_locator("iframe[srcdoc] >> nth=1")
    right.locator("g.node.gb-selected").first.wait_for(timeout=60_000)  # the ATen op it became, on the right
    assert "node=x_1234" in page.url
    left.locator("#q").fill("x_1234")
    assert left.locator("#hits").inner_text() == "1 match"
    shot(page, "big_graph_side_by_side")
    assert fetched == []
    page.close()

