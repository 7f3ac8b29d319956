"""The app in a real browser: Playwright drives Debian's Chromium against `streamlit run` on localhost.

The server is started here (headless, a free port, waited for on /_stcore/health) and stopped at the end. Timings
(first view cold and cached, stage switch) are printed and appended to $GLASSBOX_BROWSER_LOG (default
/tmp/glassbox-browser-timings.txt). With GLASSBOX_SHOTS=DIR, each page's screenshot is saved there.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("GLASSBOX_CHROMIUM", "/usr/bin/chromium")
FIRST_VIEW_TIMEOUT_MS = 240_000  # a cold worker imports torch and compiles; CI machines have 2 cores
STEP_TIMEOUT_MS = 120_000

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.slow,  # a Streamlit server and Chromium (Note [Two lanes], tests/conftest.py)
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]

TIMINGS: dict[str, float] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url}/_stcore/health did not answer in {timeout} s")


@contextlib.contextmanager
def running_app(extra_env: dict | None = None, log_prefix: str = "glassbox-streamlit-"):
    """(url, process) of a Streamlit server of the app, stopped (its whole session) afterwards."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix=log_prefix, suffix=".log", delete=False)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {}))
    # a fresh compile cache for the engine: the first view is really cold
    env.setdefault("GLASSBOX_CACHE_DIR", tempfile.mkdtemp(prefix="glassbox-cache-"))
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
         "--server.headless", "true", "--server.address", "localhost", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://localhost:{port}"
    try:
        wait_healthy(url, process)
        yield url, process
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


@pytest.fixture(scope="module")
def server():
    with running_app() as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


def new_page(browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1400})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    return page


def wait_first_view(page) -> None:
    page.wait_for_selector(".stGraphVizChart svg g.node", timeout=FIRST_VIEW_TIMEOUT_MS)
    page.wait_for_selector(".gb-code pre span[style]", timeout=FIRST_VIEW_TIMEOUT_MS)
    page.wait_for_selector(".stPlotlyChart .js-plotly-plot", timeout=FIRST_VIEW_TIMEOUT_MS)


def shot(page, name: str) -> None:
    folder = os.environ.get("GLASSBOX_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.wait_for_timeout(800)  # let graphviz and plotly finish drawing
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def run_downloaded_reproducer(page, shot_name: str, folder: Path) -> Path:
    """On a page at the code stage: download the first kernel's reproducer into `folder`, run it in a fresh
    process (no PYTHONPATH: it must stand alone) and check it passes. The file's path."""
    button = page.get_by_role("button", name="Download reproducer", exact=True).first
    button.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    button.scroll_into_view_if_needed()
    shot(page, shot_name)
    with page.expect_download() as download:
        button.click()
    path = folder / download.value.suggested_filename
    download.value.save_as(path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, str(path), "--iters", "1"], cwd=folder, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": ok," in result.stdout
    return path


def open_anchored_explanation(page, url: str, title: str, drawn: str, shot_name: str) -> None:
    """Open `url`, unfold the explanation `title`, wait for `drawn` (text shown after the lit lines) and check
    the chosen sentence's lines are lit."""
    page.goto(url)
    expander = page.get_by_text(title).first
    expander.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    expander.click()
    page.get_by_text(drawn).first.wait_for()
    highlighted = page.locator(".gb-highlight span[style*='#fde68a']")  # the sentence's lines, lit
    highlighted.first.wait_for()
    assert highlighted.count() >= 1
    expander.scroll_into_view_if_needed()
    shot(page, shot_name)


def record_timing(name: str, seconds: float) -> None:
    TIMINGS[name] = seconds
    line = f"{name}: {seconds:.2f} s"
    print(f"\n[glassbox timing] {line}")
    log = os.environ.get("GLASSBOX_BROWSER_LOG", os.path.join(tempfile.gettempdir(),
                                                              "glassbox-browser-timings.txt"))
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def test_default_page_shows_graph_code_and_chart(server, browser):
    page = new_page(browser)
    start = time.perf_counter()
    page.goto(server)
    wait_first_view(page)
    record_timing("first view, cold", time.perf_counter() - start)
    svg = page.locator(".stGraphVizChart svg").first
    assert svg.locator("g.node").count() >= 3
    assert page.locator(".gb-code").first.inner_text().strip()
    shot(page, "explorer")
    page.close()

    page = new_page(browser)  # a new session: the result comes from the server's cache
    start = time.perf_counter()
    page.goto(server)
    wait_first_view(page)
    record_timing("first view, cached", time.perf_counter() - start)
    page.close()


def test_choosing_a_stage_and_a_sample_updates_the_view(server, browser):
    page = new_page(browser)
    page.goto(server)
    wait_first_view(page)

    stages = page.get_by_role("radiogroup", name="Stage")
    start = time.perf_counter()
    stages.get_by_role("radio", name="loop IR").click()
    page.locator('.gb-code[data-language="ir"]:visible').first.wait_for()  # the IR stage also holds a hidden copy
    record_timing("stage switch (capture -> loop IR)", time.perf_counter() - start)
    assert "reduce" in page.content() or "load" in page.locator('.gb-code[data-language="ir"]').inner_text()
    shot(page, "stage_loop_ir")

    start = time.perf_counter()
    stages.get_by_role("radio", name="fusion").click()
    page.get_by_text("Fusion decisions").wait_for()
    record_timing("stage switch (loop IR -> fusion)", time.perf_counter() - start)
    shot(page, "stage_fusion")

    sample = page.get_by_role("combobox", name="Sample")
    sample.click()
    sample.fill("softmax")
    page.get_by_role("option", name="softmax", exact=True).click()
    page.get_by_role("heading", name=re.compile(r"^softmax")).wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.wait_for_selector(".stGraphVizChart svg g.node", timeout=FIRST_VIEW_TIMEOUT_MS)
    # the fusion stage is still chosen: softmax's five ATen ops sit in one kernel cluster
    assert page.locator(".stGraphVizChart svg g.cluster").count() >= 1
    assert "kernel_0" in page.locator(".stGraphVizChart svg").first.text_content()
    shot(page, "softmax_fusion")
    page.close()


PAGES = [  # path, heading, what shows once the page has rendered its exploration
    ("model", "Model code", "text=Explored graph_break"),
    ("provenance", "Provenance", ".stGraphVizChart svg g.node"),
    ("breaks", "Graph breaks, guards and recompiles", "text=Break 1 — line 15"),
    ("inductor", "Inductor beside Glassbox", "text=Press Compile with Inductor"),
]


@pytest.mark.parametrize("path,heading,ready", PAGES, ids=[p[0] for p in PAGES])
def test_every_page_renders(server, browser, path, heading, ready):
    page = new_page(browser)
    page.goto(f"{server}/{path}?sample=graph_break")
    page.get_by_role("heading", name=heading).wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    page.locator(ready).first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)
    assert page.locator('[data-testid="stException"]').count() == 0
    shot(page, f"page_{path}")
    page.close()


# --- hostile code through the real app (issue 6) -----------------------------------------------------------

HOSTILE = [  # id, pasted code, sidebar limits to set first, the title shown, words on the page, next sample
    ("infinite_loop", "import torch\n\ndef model(x):\n    while True:\n        x = x + 1\n\n"
                      "example_inputs = (torch.randn(3),)\n",
     {"Time limit (s)": "6"}, "The model ran too long and was stopped", ("6 s (its time limit)", "line 5 of pasted.py"),
     "layernorm"),
    ("syntax_error", "import torch\n\ndef model(x)\n    return x * 2\n\nexample_inputs = (torch.randn(4),)\n",
     {}, "There is a problem in the model code", ("SyntaxError at pasted.py:3", "pasted.py, line 3"), "rmsnorm"),
    ("memory_bomb", "import torch\n\nhoard = []\n\ndef model(x):\n    while True:\n"
                    "        hoard.append(torch.ones(2 ** 25))\n\nexample_inputs = (torch.randn(3),)\n",
     {"Memory limit (GB)": "1.5"}, "The model used too much memory and was stopped",
     ("its limit (1536 MB resident", "line 7 of pasted.py"), "gelu_chain"),
    ("os_exit", "import os, torch\n\ndef model(x):\n    os._exit(1)\n\nexample_inputs = (torch.randn(3),)\n",
     {}, "The model's process ended early", ("exit code 1", "os._exit()"), "matmul"),
    ("segfault", "import ctypes, torch\n\ndef model(x):\n    ctypes.string_at(0)\n    return x\n\n"
                 "example_inputs = (torch.randn(3),)\n",
     {}, "The model's process crashed", ("killed by signal SIGSEGV (segmentation fault)", "line 4 of pasted.py"),
     "mlp"),
]
HOSTILE_TIMEOUT_MS = 90_000


def wait_idle(page) -> None:
    """Wait until the script is not running: typing into a widget during a rerun may lose the text."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidgetRunningIcon"]').wait_for(state="detached", timeout=STEP_TIMEOUT_MS)


def set_limits(page, values: dict[str, str]) -> None:
    """Type into the sidebar's Limits (opening the expander first), and check that each value holds."""
    if not values:
        return
    wait_idle(page)
    fields = [page.get_by_label(label, exact=True) for label in values]
    if not fields[0].is_visible():
        page.get_by_text("Limits", exact=True).click()
    for field, value in zip(fields, values.values()):
        for _ in range(3):
            wait_idle(page)
            field.fill(value)
            field.press("Enter")
            wait_idle(page)
            if float(field.input_value()) == float(value):
                break
        assert float(field.input_value()) == float(value), (field, field.input_value(), value)


def wait_text(page, text: str, timeout_ms: float, within: str = "body") -> None:
    """Wait for `text` on the page (in `within`); on timeout, fail with what the page shows instead."""
    try:
        page.locator(within).get_by_text(text).first.wait_for(timeout=timeout_ms)
    except playwright_api.TimeoutError:
        page.screenshot(path=os.path.join(tempfile.gettempdir(), "glassbox-browser-failure.png"), full_page=True)
        raise AssertionError(f"{text!r} did not show; the page shows:\n"
                             + page.locator('[data-testid="stMain"]').inner_text()[:3000]) from None


def choose_sample(page, name: str) -> None:
    sample = page.get_by_role("combobox", name="Sample")
    sample.click()
    sample.fill(name)
    page.get_by_role("option", name=name, exact=True).click()


@pytest.mark.parametrize("case", HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_code_shows_a_clear_message_and_the_next_sample_explores(server, browser, case):
    name, code, limits, title, words, next_sample = case
    page = new_page(browser)
    page.goto(f"{server}/model")
    page.get_by_text("Explored").first.wait_for(timeout=FIRST_VIEW_TIMEOUT_MS)  # the default sample, explored
    defaults = {label: page.get_by_label(label, exact=True).input_value() for label in limits} if limits else {}
    set_limits(page, limits)
    wait_idle(page)
    page.get_by_text("Plain text box").click()  # the code editor is tested in test_browser_explorer.py
    page.locator(".st-key-editor textarea").fill(code)
    start = time.perf_counter()
    page.get_by_role("button", name="Explore", exact=True).click()
    wait_text(page, title, HOSTILE_TIMEOUT_MS, '[data-testid="stAlert"]')  # the problem, not just the status
    shown = time.perf_counter()
    wait_idle(page)
    problem = page.locator('[data-testid="stMain"]').inner_text()
    assert all(word in problem for word in words), problem
    assert "What to try" in problem
    assert "Traceback" not in problem  # the worker's log is behind "details", collapsed
    assert page.locator('[data-testid="stException"]').count() == 0
    shot(page, f"hostile_{name}")
    set_limits(page, defaults)  # back to the defaults: the problem stays cached, nothing runs again
    wait_idle(page)
    choose_sample(page, next_sample)  # a sample nobody explored yet: a fresh worker, not the result cache
    wait_text(page, f"Explored {next_sample}:", FIRST_VIEW_TIMEOUT_MS)
    recovered = time.perf_counter()
    wait_idle(page)  # until the rerun ends, Streamlit keeps the last run's elements on the page (stale, greyed)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert title not in page.locator('[data-testid="stMain"]').inner_text()
    record_timing(f"hostile {name}: error shown", shown - start)
    record_timing(f"hostile {name}: recovered ({next_sample} explored)", recovered - shown)
    page.close()


def teardown_module(module):
    if TIMINGS:
        print("\n[glassbox timings] " + "; ".join(f"{k}: {v:.2f} s" for k, v in TIMINGS.items()))
