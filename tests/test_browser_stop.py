"""The app's Stop button, pressed in a real browser (Playwright driving Debian's Chromium) while a job's build
runs (issue 33): the job's processes and the compile the trusted builder ran for it (g++, cc1plus) are gone
within seconds, and the app explores the next model. Streamlit shows its Stop button only with its toolbar,
which the config's toolbarMode "minimal" hid until the app defined a menu item (app/streamlit_app.py): the app
had no Stop button to press. Its own server (tests/test_browser.py's way of starting one) runs without a
standby worker, so every process below it while the job runs is the job's or its build's.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from test_browser import (CHROMIUM, FIRST_VIEW_TIMEOUT_MS, browser, choose_sample, new_page,  # noqa: F401
                          running_app, wait_idle, wait_text)

from app.hostile_checks import SLOW_SOURCE
from engine.tools.procfs import alive, command_name, compilers_below, descendants

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

ROOT = Path(__file__).resolve().parents[1]
GONE_S = 5.0  # how long the job and its build may take to die after Stop


@pytest.fixture(scope="module")
def app_server():
    """(url, server process) of a Streamlit server without a standby worker."""
    with running_app({"GLASSBOX_APP_STANDBY": "0"}, "glassbox-streamlit-stop-") as started:
        yield started


def test_stop_ends_the_job_and_its_build_and_the_app_explores_the_next_model(app_server, browser):
    url, server = app_server
    # a model whose import asks the trusted builder for a source g++ takes minutes over
    model = ("import torch\nfrom engine.runtime import build\n\n"
             f"build.build_library({SLOW_SOURCE.replace('SALT', str(uuid.uuid4().int % 100000))!r})\n\n"
             "model = torch.nn.ReLU()\nexample_inputs = (torch.randn(3),)\n")
    page = new_page(browser)
    page.goto(f"{url}/model")
    page.get_by_text("Explored").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)  # the default sample, explored
    wait_idle(page)
    page.get_by_text("Plain text box").click()
    page.locator(".st-key-editor textarea").fill(model)
    page.get_by_role("button", name="Explore", exact=True).click()

    deadline, compiling = time.monotonic() + 180, []
    while not compiling and time.monotonic() < deadline:
        time.sleep(0.2)
        compiling = [pid for pid in compilers_below(server.pid) if command_name(pid) == "cc1plus"]
    assert compiling, "no compile started within 180 s"
    time.sleep(1.0)
    job = [pid for pid in descendants(server.pid) if pid != server.pid]  # the worker's and the build's
    assert alive(compiling), "the compile ended by itself: nothing to stop"
    assert any(command_name(pid) == "python" for pid in job)  # the worker is among them

    page.locator('[data-testid="stStatusWidget"]').get_by_role("button", name="Stop").click()
    stopped = time.monotonic()
    while alive(job) and time.monotonic() - stopped < GONE_S:
        time.sleep(0.1)
    left = alive(job)
    assert left == [], [(pid, command_name(pid)) for pid in left]
    assert compilers_below(server.pid) == [] and server.poll() is None

    choose_sample(page, "softmax")  # the app goes on: a fresh worker explores the next model
    wait_text(page, "Explored softmax:", FIRST_VIEW_TIMEOUT_MS)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
