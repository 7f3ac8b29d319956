"""The explorer's Rewrites stage in a real browser (Playwright + Debian's Chromium): on the hand-written attention
sample it draws the ATen graph before the rewrites with the matched nodes marked and the graph after with the
attention call marked, lists the pass with its count, and the match's reason and user line. The app server comes
from tests/test_browser.py's fixture. With GLASSBOX_SHOTS=DIR, a screenshot is saved there."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_browser import CHROMIUM, FIRST_VIEW_TIMEOUT_MS, browser, server, shot  # noqa: F401 - fixtures

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]


def test_rewrites_stage_marks_the_matched_attention_nodes(server, browser):  # noqa: F811
    page = browser.new_page(viewport={"width": 1500, "height": 1400})
    page.goto(f"{server}/?sample=handwritten_attention&stage=rewrites&side=none")
    page.get_by_text("Before").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    charts = page.locator(".stGraphVizChart svg")
    charts.nth(1).wait_for(timeout=120_000)
    before, after = charts.nth(0), charts.nth(1)
    before_marked = before.locator("g.node.gb-selected")
    after_marked = after.locator("g.node.gb-selected")
    # the two bmms, the softmax's amax/exp/sum/div and the scale are among the marked nodes before
    marked_text = " ".join(before_marked.all_text_contents())
    assert before_marked.count() >= 10, marked_text
    for op in ("bmm", "amax", "exp", "div"):
        assert op in marked_text, marked_text
    assert "scaled_dot_product_attention" in " ".join(after_marked.all_text_contents())
    assert "bmm" not in " ".join(after.locator("g.node").all_text_contents())
    assert page.get_by_text("compute attention").count() >= 1  # the match's reason
    before_marked.nth(4).scroll_into_view_if_needed()
    shot(page, "rewrites_stage")
    page.close()
