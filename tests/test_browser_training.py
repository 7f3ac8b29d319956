"""The Training page in a real browser (Playwright + Debian's Chromium against `streamlit run`), as a user sees
it: with the sidebar's "Training step" off the page offers to turn it on; on, the mlp sample's forward and
backward graphs side by side, the joint graph with saved values, the cut and each node's reason on hover, the
saved and recomputed tables, the activation-memory charts, and a benchmarked training step (eager vs Glassbox
vs Inductor) adding the measured activations of each. The app server comes from tests/test_browser.py's
fixture. With GLASSBOX_SHOTS=DIR, screenshots are saved there."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_browser import CHROMIUM, FIRST_VIEW_TIMEOUT_MS, browser, new_page, server, shot  # noqa: F401 - fixtures

pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

BENCH_TIMEOUT_MS = 480_000  # Inductor's cold compile of a forward and a backward graph, on 2 loaded cores


def chart(page, text: str):
    return page.locator(".stPlotlyChart").filter(has_text=text)


def test_training_page_shows_both_graphs_the_partition_memory_and_a_bench(browser, server):  # noqa: F811
    page = new_page(browser)
    page.goto(f"{server}/training?sample=mlp")
    # training off: the page says what it shows and offers to turn it on
    page.get_by_role("button", name="Explore a training step").click()
    page.get_by_text("Training step of mlp").wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    main = page.locator("[data-testid='stMain']")
    for heading in ("Forward graph", "Backward graph", "The partition on the joint graph",
                    "Activation memory and a timed training step"):
        main.get_by_text(heading, exact=True).wait_for()
    assert "train=1" in page.url  # the view is shareable as a link
    metric = page.locator("[data-testid='stMetric']").filter(has_text="loss and gradients match eager")
    assert metric.inner_text().split()[-3:] == ["6", "/", "6"]  # loss, two weights, two biases, the input
    # forward, backward and joint graphs, each drawn; the joint graph's saved relu carries its size
    page.wait_for_function("document.querySelectorAll('.stGraphVizChart svg').length >= 3")
    graphs = page.locator(".stGraphVizChart svg")
    assert "tangents_1" in graphs.nth(1).text_content() and "tangents_1" not in graphs.nth(0).text_content()
    joint = graphs.nth(2)
    assert "saved 32.0 KiB" in joint.text_content()
    # hover text of a node: why the partitioner put it there (graphviz's tooltip becomes the node's link title)
    titles = joint.evaluate("svg => [...svg.querySelectorAll('a')].map(a => a.getAttribute('xlink:title') || "
                            "a.getAttribute('title') || '').join('\\n')")
    assert "recomputed in the backward from relu" in titles and "saved: " in titles
    assert joint.locator("path[stroke='#dc2626']").count() >= 1  # the cut: saved values entering the backward
    # saved, recomputed, gradients (the grid is drawn on a canvas: its cells are not text)
    page.wait_for_function("document.querySelectorAll(\"[data-testid='stDataFrame']\").length >= 3")
    chart(page, "our partition").wait_for()
    chart(page, "Saved for the backward, per value").wait_for()
    shot(page, "training_mlp")

    page.get_by_role("button", name="Benchmark a training step: eager vs Glassbox vs Inductor").click()
    chart(page, "Time per call").wait_for(timeout=BENCH_TIMEOUT_MS)
    chart(page, "Speedup over eager").wait_for()
    memory = chart(page, "our partition")
    for bar in ("ours, measured", "Inductor's partition, measured", "eager autograd, measured"):
        memory.get_by_text(bar).wait_for()
    caption = main.get_by_text("a training step per call")
    caption.wait_for()  # Streamlit draws the page top-down: the caption under the charts may come a moment later
    assert caption.count() == 1
    shot(page, "training_mlp_bench")
    page.close()
