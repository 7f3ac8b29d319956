"""The explorer at real-model scale, in a real browser: a Hugging Face Llama (transformers from a config, random
weights) pasted as code. Its first ATen view folds by module path (model.layers.N..., not Dynamo's G['net']),
the graph viewer's search finds a node folded inside a module and "Find a node" unfolds it, the kernels table
filters by kind, and the compare page pairs the kernels of fusion on and off. With GLASSBOX_SHOTS=DIR,
screenshots are saved there."""
from __future__ import annotations

import os
import re
import tempfile
import textwrap
from pathlib import Path

import pytest

# the app server (started by the fixture below) and this test share one folder of shared code
os.environ.setdefault("GLASSBOX_SHARE_DIR", tempfile.mkdtemp(prefix="glassbox-share-"))

from test_browser import CHROMIUM, FIRST_VIEW_TIMEOUT_MS, server  # noqa: E402,F401 - the app server fixture
from test_browser_explorer import browser, choose, shot  # noqa: E402,F401

from app import share  # noqa: E402

pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

def llama_source(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, tokens: int) -> str:
    """A pasted model file: a Hugging Face Llama from its config, random weights."""
    return textwrap.dedent(f'''\
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(vocab_size={vocab}, hidden_size={hidden}, intermediate_size={2 * hidden},
                             num_hidden_layers={layers}, num_attention_heads={heads}, num_key_value_heads={kv_heads},
                             max_position_embeddings={max(16, tokens * 4)})
        net = LlamaForCausalLM(config).eval()


        def model(input_ids):
            return net(input_ids=input_ids).logits


        example_inputs = (torch.randint(0, {vocab}, (1, {tokens})),)
    ''')


LLAMA = llama_source(vocab=128, hidden=32, layers=4, heads=4, kv_heads=2, tokens=8)
VIEWER = "iframe[srcdoc*='search the drawn nodes']"


def selected_in_a_viewer(page, timeout_s: float = 90) -> bool:
    """Whether a graph viewer (the page draws them again after a pick; an old frame may linger) marks a node."""
    for _ in range(int(timeout_s)):
        page.wait_for_timeout(1000)
        for frame in page.frames:
            try:
                if frame.locator("svg g.node.gb-selected").count():
                    return True
            except Exception:  # noqa: BLE001 - a frame being replaced
                continue
    page.screenshot(path=str(Path(tempfile.gettempdir()) / "scale_llama_not_found.png"), full_page=True)
    return False


@pytest.fixture(scope="module")
def llama_key():
    return share.store_code(LLAMA)


def open_aten_view(browser, server: str, key: str) -> tuple:
    """(page, graph viewer frame) of pasted code's first ATen view, drawn, no control touched."""
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(f"{server}/?code={key}&stage=ATen&side=code")
    page.locator(VIEWER).first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    viewer = page.frame_locator(VIEWER).first
    viewer.locator("svg g.node").first.wait_for(timeout=60_000)
    return page, viewer


def test_first_aten_view_folds_by_module_path_and_search_reaches_inside(browser, server, llama_key):  # noqa: F811
    page, viewer = open_aten_view(browser, server, llama_key)
    drawn = viewer.locator("svg").first.text_content()
    assert "model.layers.1" in drawn and "model.layers.3" in drawn and "G[" not in drawn
    boxes = viewer.locator("svg g.node").count()
    assert 10 <= boxes <= 80, boxes  # tens of boxes, read without touching a control
    assert page.get_by_text("your code (pasted)").count()  # the header names what is explored
    shot(page, "scale_llama_aten")

    # a node folded inside layer 2's attention: the viewer finds its module box, Find a node unfolds it
    viewer.locator("#q").fill("q_proj")
    hits = viewer.locator("#hits")
    hits.wait_for()
    assert re.search(r"[1-9]\d* match", hits.inner_text()) and "inside folded modules" in hits.inner_text()
    finder = page.get_by_label("Find a node", exact=True).first
    finder.click()
    page.keyboard.type("model.layers.2.self_attn.q_proj")
    page.get_by_role("option").first.click()
    assert selected_in_a_viewer(page), "the picked node is not drawn marked in any graph viewer"
    assert "node=" in page.url
    shot(page, "scale_llama_found")
    page.close()


def open_and_pick(page, label: str, option: str, tries: int = 6) -> None:
    """Pick `option` in the multiselect labelled `label`. A rerun still in flight (the page settling on a loaded
    machine) closes an open list, so the list is opened again until its option shows."""
    wanted = page.get_by_role("option", name=option, exact=True).first
    for _ in range(tries):
        page.wait_for_timeout(1500)
        page.get_by_label(label, exact=True).first.click()
        try:
            wanted.wait_for(state="visible", timeout=10_000)
            wanted.click(timeout=10_000)  # a rerun can redraw the list under the click: its option detaches
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: the list closed under a rerun; open it again
            page.keyboard.press("Escape")
            continue
        page.keyboard.press("Escape")
        return
    raise AssertionError(f"the {label!r} list never showed {option!r}")


def test_kernels_table_filters_by_kind(browser, server, llama_key):  # noqa: F811
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(f"{server}/?code={llama_key}&stage=fusion&side=none")
    heading = page.get_by_text(re.compile(r"^Kernels \(\d+ of \d+\)")).first
    heading.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    shown, total = map(int, re.search(r"\((\d+) of (\d+)\)", heading.inner_text()).groups())
    assert shown == total > 20
    open_and_pick(page, "Kernel kinds", "reduction")
    page.wait_for_function("(t) => [...document.querySelectorAll('p')].some(p => /^Kernels \\((\\d+) of/.test("
                           "p.innerText) && !p.innerText.startsWith(`Kernels (${t} of`))", arg=total,
                           timeout=60_000)
    heading = page.get_by_text(re.compile(r"^Kernels \(\d+ of \d+\)")).first
    filtered, same_total = map(int, re.search(r"\((\d+) of (\d+)\)", heading.inner_text()).groups())
    assert 0 < filtered < total and same_total == total
    # the filtered table itself (the grid's accessible table): reductions only, each with its tiling and why
    grid = page.locator("[data-testid=stDataFrame]").filter(has_text="tiling: why").first
    grid.wait_for(timeout=60_000)
    rows = []
    header, body = [], []
    for _ in range(30):  # the grid redraws its accessible rows a moment after the heading; wait for it to settle
        rows = grid.evaluate("""(el) => [...el.querySelectorAll('[role=row]')].map(r =>
            [...r.querySelectorAll('[role=columnheader], [role=gridcell], th, td')].map(c => c.innerText.trim()))""")
        if len(rows) > 1 and all(len(row) == len(rows[0]) for row in rows) and "kind" in rows[0]:
            header, body = rows[0], [row for row in rows[1:] if any(row)]
            if all(row[header.index("kind")] == "reduction" for row in body):
                break
        page.wait_for_timeout(1000)
    kind, tiling, why = header.index("kind"), header.index("tiling"), header.index("tiling: why")
    assert body and all(row[kind] == "reduction" for row in body), rows
    assert all(row[tiling] and row[why] for row in body), rows
    shot(page, "scale_llama_kernels_filtered")
    page.close()


def test_compare_pairs_kernels_of_fusion_on_and_off(browser, server, llama_key):  # noqa: F811
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.goto(f"{server}/compare?code={llama_key}")
    page.get_by_role("button", name="Compare A and B").wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert page.get_by_text(re.compile(r"A: fusion=on backend=cpp.*B: fusion=off backend=cpp")).count()  # the default
    page.get_by_role("button", name="Compare A and B").click()
    page.get_by_text("Code diff").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    paired = page.locator("[data-testid=stMetric]").filter(has_text="kernels paired")
    value = int(paired.locator("[data-testid=stMetricValue]").inner_text())
    assert value > 20, value
    diff = page.locator("[data-language=diff]").first.inner_text()
    assert "shared helpers folded" in diff
    shot(page, "scale_llama_compare")
    page.close()


def test_a_wide_graph_opens_on_its_top_nodes(browser, tmp_path):  # noqa: F811
    """A backward graph is wider than the page, its first nodes far from its left edge: the viewer opens at
    natural size on the nodes of its top band, not on an empty corner."""
    from app.components import graph_view
    from visualizers.html_report import render_svg

    dot = ['digraph { top [label="the top node"]; top -> c1; c1 -> c2; c2 -> c3; c3 -> c4; c4 -> c5; c5 -> hub;']
    dot += [f'hub -> leaf{i}; leaf{i} [label="a wide leaf {i}"];' for i in range(60)] + ["}"]  # wide below, not on top
    svg, problem = render_svg("\n".join(dot))
    assert svg is not None, problem
    page_file = tmp_path / "wide.html"
    page_file.write_text(graph_view.viewer_html(svg, 151))
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.goto(page_file.as_uri())
    page.wait_for_timeout(500)
    shown = page.evaluate("""() => {var view = document.getElementById('view'), v = view.getBoundingClientRect();
        return [...document.querySelectorAll('g.node')].filter(n => {var r = n.getBoundingClientRect();
          return r.right > v.left && r.left < v.right && r.bottom > v.top && r.top < v.bottom;})
          .map(n => n.querySelector('title').textContent);}""")
    assert "top" in shown, shown
    page.close()
