"""The explorer's seven answers (issue 31) on a real model, in a real browser: Hugging Face's GPT-2 built from a
config with random weights, pasted as code. The run stage's numerics bisect, the profile's heat on the graph and
the source (GB/s, GFLOP/s, % of roof), the recompile what-if, a graph break's fix applied in place (the same GPT-2
with a branch on a value), a kernel's reproducer that runs standalone, the compile's cost per stage, pass and kernel, and the
code and loop IR explained line by line. With GLASSBOX_SHOTS=DIR, screenshots are saved there."""
from __future__ import annotations

import os
import re
import tempfile
import textwrap
from pathlib import Path

import pytest

# the app server (started by the fixture below) and this test share one folder of shared code
os.environ.setdefault("GLASSBOX_SHARE_DIR", tempfile.mkdtemp(prefix="glassbox-share-"))

from test_browser import (CHROMIUM, FIRST_VIEW_TIMEOUT_MS, browser, new_page,  # noqa: E402,F401
                          open_anchored_explanation, run_downloaded_reproducer, server, shot)

from app import share  # noqa: E402

pytest.importorskip("transformers")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

GPT2 = textwrap.dedent('''\
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    net = GPT2LMHeadModel(config).eval()


    def model(input_ids):
        {body}


    example_inputs = (torch.randint(0, 128, (1, 8)),)
''')


@pytest.fixture(scope="module")
def gpt2():
    return share.store_code(GPT2.format(body="return net(input_ids=input_ids).logits"))


@pytest.fixture(scope="module")
def gpt2_with_a_branch():  # a branch on a tensor's value: a graph break whose rewrite is torch.where
    return share.store_code(GPT2.format(body=textwrap.indent(textwrap.dedent('''\
        logits = net(input_ids=input_ids).logits
        if logits.sum() > 0:
            out = logits * 2
        else:
            out = logits
        return out'''), "    ").lstrip()))


PLANTED = "kernel_7"  # the first block's second layer norm: a generated kernel mid-graph, with kernels before it


@pytest.fixture(scope="module")
def gpt2_with_a_wrong_kernel():  # the test-only hook pasted above the model: the worker runs both
    hook = (Path(__file__).parent / "planted_kernel.py").read_text(encoding="utf-8")
    model = GPT2.format(body="return net(input_ids=input_ids).logits")
    about = f"description = 'GPT-2 with {PLANTED} planted wrong (a test-only hook)'\n"
    return share.store_code(f"{hook}\n\n{model}\n{about}plant_wrong_kernel({PLANTED!r})\n")


def test_gpt2_numerics_bisect_on_the_run_stage(server, browser, gpt2):
    page = new_page(browser)
    page.goto(f"{server}/?code={gpt2}&stage=run")
    verdict = page.get_by_text("Numerics bisect").first
    verdict.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    if page.get_by_text("exactly eager's, so there is nothing to bisect").count() == 0:
        graph = page.locator(".stGraphVizChart svg, iframe[srcdoc*='svg']").last
        graph.wait_for()
        page.get_by_text("A clean graph").or_(page.get_by_text("diverges first")).first.wait_for()
    verdict.scroll_into_view_if_needed()
    shot(page, "gpt2_run_bisect")


def test_gpt2_bisect_names_a_planted_wrong_kernel_and_colours_it(server, browser, gpt2_with_a_wrong_kernel):
    page = new_page(browser)
    page.goto(f"{server}/?code={gpt2_with_a_wrong_kernel}&stage=run")
    finding = page.get_by_text("Diverges first at").first
    finding.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    text = finding.inner_text()
    assert f"{PLANTED} (" in text and "modeling_gpt2.py, line" in text, text  # the culprit, its ops and line
    assert "\\" not in text, text  # the line as written, not escaped
    viewer = page.frame_locator("iframe[srcdoc*='search the drawn nodes']").last  # 179 ATen nodes: the viewer
    viewer.locator("svg g.node").first.wait_for()
    fills = viewer.locator("svg g.node").evaluate_all(
        "nodes => nodes.map(n => [n.querySelector('path, polygon, ellipse').getAttribute('fill'),"
        " n.classList.contains('gb-selected')])")
    assert "#dcfce7" in [fill for fill, _ in fills]  # before the culprit: exact
    culprit = [fill for fill, picked in fills if picked]
    assert culprit and set(culprit) == {"#fee2e2"}  # the culprit's nodes: diverging, drawn bold
    assert [fill for fill, picked in fills if not picked].count("#fee2e2") >= 1  # and downstream of it
    node = viewer.locator("svg g.node.gb-selected").first.bounding_box()
    view = viewer.locator("#view").bounding_box()
    assert view["y"] <= node["y"] + node["height"] / 2 <= view["y"] + view["height"]  # the viewer opens on it
    finding.scroll_into_view_if_needed()
    shot(page, "gpt2_bisect_planted")
    viewer.locator("#view").scroll_into_view_if_needed()
    shot(page, "gpt2_bisect_planted_graph")


def test_gpt2_profile_paints_time_rates_and_roof_on_graph_and_source(server, browser, gpt2):
    page = new_page(browser)
    page.goto(f"{server}/profile?code={gpt2}")
    page.get_by_role("button", name="Profile the kernels").click(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("Where the time goes").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("% of roof: achieved over attainable").first.wait_for()
    header = page.locator("tr.gb-heat-head")
    assert "% roof" in header.first.inner_text() and "GB/s" in header.first.inner_text()
    hot = page.locator("tr.gb-heat-line[style*='#ff']")
    assert hot.count() >= 2  # several of the model's lines carry time
    page.get_by_text("Where the time goes").first.scroll_into_view_if_needed()
    shot(page, "gpt2_profile_heat")
    page.locator(".stPlotlyChart").filter(has_text="Run timeline").first.scroll_into_view_if_needed()
    shot(page, "gpt2_profile_run_timeline")


def test_gpt2_recompile_what_if(server, browser, gpt2):
    page = new_page(browser)
    page.goto(f"{server}/breaks?code={gpt2}")
    field = page.get_by_role("textbox", name="Inputs, one per tensor")
    field.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    field.fill("int64[1, 16]")
    field.press("Enter")
    page.wait_for_timeout(1500)
    page.get_by_role("button", name="Ask, then run").click()
    page.get_by_text("Would recompile").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("the prediction was right").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("Would recompile").first.scroll_into_view_if_needed()
    shot(page, "gpt2_whatif")


def test_gpt2_break_fix_applied_in_place(server, browser, gpt2_with_a_branch):
    page = new_page(browser)
    page.goto(f"{server}/breaks?code={gpt2_with_a_branch}")
    page.get_by_role("button", name="Apply this rewrite").first.click(timeout=FIRST_VIEW_TIMEOUT_MS)
    banner = page.get_by_text("Applied the rewrite of break 1")
    banner.first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    text = banner.first.inner_text()
    assert "graph breaks 1 → 0" in text
    # the whole call, timed with eager before and after (Note [Call time]): measured ratios, not a placeholder
    assert re.search(r"eager / compiled .*(\d+\.\d+x|too noisy to judge).* → .*(\d+\.\d+x|too noisy)", text), text
    cells = page.locator("[data-testid='stDataFrame']").filter(has_text="run time per call").first
    cells.wait_for()
    texts = cells.locator("td, [role=gridcell]").all_text_contents()  # the grid's accessible table
    times = [re.fullmatch(r"(\d[\d.e+-]*) ms ± (\d[\d.e+-]*)", t.strip()) for t in texts]
    assert len([m for m in times if m and float(m[1]) > 0]) == 2, texts
    banner.first.scroll_into_view_if_needed()
    shot(page, "gpt2_fix_applied")


def test_gpt2_kernel_reproducer_runs_standalone(server, browser, gpt2, tmp_path):
    page = new_page(browser)
    page.goto(f"{server}/?code={gpt2}&stage=code")
    run_downloaded_reproducer(page, "gpt2_code_reproducer", tmp_path)


def test_gpt2_compile_cost_per_stage_pass_and_kernel(server, browser, gpt2):
    page = new_page(browser)
    page.goto(f"{server}/?code={gpt2}&stage=bench")
    page.get_by_text("Compile timeline").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.get_by_text("Compile cost per stage, pass and kernel, and the cache").first.click()
    table = page.locator("[data-testid='stExpander']").filter(has_text="Compile cost per stage").locator(
        "[data-testid='stDataFrame']").first  # the cost table, not the code pane's kernels beside it
    table.wait_for()
    table.scroll_into_view_if_needed()
    shot(page, "gpt2_bench_compile_cost")


def test_gpt2_code_and_loop_ir_explained_line_by_line(server, browser, gpt2):
    page = new_page(browser)
    open_anchored_explanation(page, f"{server}/?code={gpt2}&stage=code", "Explain the code, anchored to its lines",
                              "comes from IR node", "gpt2_code_anchored")
    open_anchored_explanation(page, f"{server}/?code={gpt2}&stage=loop+IR",
                              "Explain the loop IR, anchored to its lines", "belongs to IR node", "gpt2_ir_anchored")
