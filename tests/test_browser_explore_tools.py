"""The explorer's answers no other tool gives, in a real browser (Playwright + Debian's Chromium; the app server
from tests/test_browser.py's fixture): a kernel's reproducer downloaded from the code stage runs standalone and
matches eager; the bench stage draws the compile timeline and offers the trace. With GLASSBOX_SHOTS=DIR,
screenshots are saved there."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_browser import (CHROMIUM, FIRST_VIEW_TIMEOUT_MS, browser, new_page,  # noqa: F401 - fixtures
                          open_anchored_explanation, run_downloaded_reproducer, server, shot)

pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]


def test_download_a_kernels_reproducer_and_run_it(server, browser, tmp_path):
    page = new_page(browser)
    page.goto(f"{server}/?sample=softmax&stage=code")
    assert run_downloaded_reproducer(page, "code_reproducer", tmp_path).name.endswith("kernel_0.py")


def test_the_bench_stage_draws_the_compile_timeline_and_offers_the_trace(server, browser, tmp_path):
    page = new_page(browser)
    page.goto(f"{server}/?sample=layernorm&stage=bench")
    page.get_by_text("Compile timeline").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    chart = page.locator(".stPlotlyChart").filter(has_text="Compile timeline")
    assert chart.locator(".bars path, .barlayer path").count() >= 8  # a bar per stage and pass
    chart.scroll_into_view_if_needed()
    shot(page, "bench_compile_timeline")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the trace (Chrome / Perfetto JSON)").first.click()
    path = tmp_path / "trace.json"
    download.value.save_as(path)
    events = json.loads(path.read_text())["traceEvents"]
    assert {"capture", "run"} <= {e["name"] for e in events if e.get("cat") == "stage"}


def test_the_run_stage_shows_the_numerics_bisect_on_the_graph(server, browser):
    page = new_page(browser)
    page.goto(f"{server}/?sample=layernorm&stage=run")
    page.get_by_text("Numerics bisect, graph 0").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("A clean graph").first.wait_for()
    pane = page.locator("[data-testid='stVerticalBlock']").filter(has_text="Numerics bisect").last
    graph = page.locator(".stGraphVizChart svg").last
    graph.wait_for()
    assert graph.locator("g.node").count() >= 5
    fills = graph.locator("g.node path, g.node polygon").evaluate_all("els => els.map(e => e.getAttribute('fill'))")
    assert "#dcfce7" in fills or "#fef9c3" in fills  # nodes coloured exact / within tolerance
    graph.scroll_into_view_if_needed()
    shot(page, "run_numerics_bisect")
    assert pane.count() >= 1


def test_the_profile_page_paints_time_on_the_graph_and_the_source(server, browser):
    page = new_page(browser)
    page.goto(f"{server}/profile?sample=gelu_chain")
    page.get_by_role("button", name="Profile the kernels").click(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("Where the time goes").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    hot_lines = page.locator("tr.gb-heat-line[style*='#ff']")
    hot_lines.first.wait_for()
    assert hot_lines.count() >= 1
    assert "ms" in page.locator("tr.gb-heat-head").first.inner_text()  # the columns: ms, share, GB/s, ...
    assert float(hot_lines.first.locator("td").first.inner_text()) > 0  # the line's time
    graph = page.locator(".stGraphVizChart svg").last
    graph.wait_for()
    assert "ms (" in " ".join(graph.locator("text").all_text_contents())  # a node labelled with its time, share
    page.get_by_text("Where the time goes").first.scroll_into_view_if_needed()
    shot(page, "profile_heat")
    page.locator(".stPlotlyChart").filter(has_text="Run timeline").first.wait_for()


def test_the_recompile_what_if_predicts_then_runs(server, browser):
    page = new_page(browser)
    page.goto(f"{server}/breaks?sample=mlp")
    field = page.get_by_role("textbox", name="Inputs, one per tensor")
    field.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    field.fill("float32[16, 128]")
    field.press("Enter")
    page.wait_for_timeout(1500)
    page.get_by_role("button", name="Ask, then run").click()
    page.get_by_text("Would recompile").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("the prediction was right").first.wait_for()
    assert page.get_by_text("size mismatch").count() >= 1
    assert page.get_by_text("mark_dynamic on L['args'][0] dim 0").count() >= 1  # names the dim to mark
    page.get_by_text("Would recompile").first.scroll_into_view_if_needed()
    shot(page, "breaks_whatif")
    page.get_by_role("button", name="dim 0 = 32").click()  # mark the batch dim dynamic, ask again
    page.wait_for_timeout(1500)
    page.get_by_role("button", name="Ask, then run").click()
    page.get_by_text("No recompile").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("are marked dynamic").first.wait_for()
    page.get_by_text("the prediction was right").first.wait_for()
    matters = page.get_by_text("The checks that matter").first
    matters.wait_for()
    page.get_by_text("float32[dynamic, 128]").first.wait_for()  # the marked dim is a symbol in the guard
    raw = page.locator("[data-testid='stExpander']").filter(has_text="as Dynamo's guard tree runs them")
    assert raw.locator("details").first.get_attribute("open") is None  # the raw dump folded
    matters.scroll_into_view_if_needed()
    shot(page, "breaks_whatif_marked")


def test_applying_a_break_fix_in_place_removes_it_and_can_be_reverted(server, browser):
    page = new_page(browser)
    page.goto(f"{server}/breaks?sample=graph_break")
    page.get_by_role("button", name="Apply this rewrite").first.click(timeout=FIRST_VIEW_TIMEOUT_MS)
    banner = page.get_by_text("Applied the rewrite of break 1")
    banner.first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert "graph breaks 2 → 1" in banner.first.inner_text()
    page.get_by_text("Dynamo split this model at 1 graph break").first.wait_for()
    shot(page, "breaks_fix_applied")
    page.get_by_role("button", name="Revert").click()
    page.get_by_text("Dynamo split this model at 2 graph break").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)


def test_the_code_explanation_highlights_the_lines_it_talks_about(server, browser):
    page = new_page(browser)
    open_anchored_explanation(page, f"{server}/?sample=gelu_chain&stage=code",
                              "Explain the code, anchored to its lines", "comes from IR node", "code_anchored")


def test_the_loop_ir_explanation_highlights_the_lines_it_talks_about(server, browser):
    page = new_page(browser)
    open_anchored_explanation(page, f"{server}/?sample=softmax&stage=loop+IR",
                              "Explain the loop IR, anchored to its lines", "belongs to IR node", "ir_anchored")
    assert page.get_by_text("is a reduction: max over 512 elements").count() >= 1
