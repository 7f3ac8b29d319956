import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Note [Parallel test workers]
# CI runs the suite on two pytest-xdist workers (.ci/run: `-n 2 --dist loadgroup`): most tests compile in one
# thread or wait on one subprocess, so a second worker uses the second core. Two rules keep that safe and cheap:
# - The workers share one compile cache (the run's GLASSBOX_CACHE_DIR), so a kernel both need is built once.
#   Sharing is safe because every cache write is atomic and builders of one key take a lock (Note [Compile
#   cache] in engine/runtime/build.py). The tests that look at the whole cache (tests/test_cache_trust.py
#   lists its libraries before and after a job and rewrites the toolchain record) give their module a cache
#   of its own, so the other worker's builds landing meanwhile are not noise there. The precompiled prelude
#   (Note [Precompiled prelude] in engine/runtime/build.py) is shared even with the tests that make a cache of
#   their own (GLASSBOX_PCH_DIR, set below for this process and every one it starts): precompiling it takes
#   longer than building two libraries, which is all many of those tests build.
# - Tests of a module that uses a module-scoped fixture (a Streamlit server and a browser, the hostile suite's
#   outcomes, a traced 2000-op graph) stay on one worker, so the fixture is made once, as in a serial run; every
#   other test is sent on its own, to whichever worker is free. xdist 3.8 does that by renaming the tests, which
#   pytest 9.2 no longer honours: requirements-dev.txt keeps pytest below 9.2, and
#   pytest_collection_finish below stops the run if the groups are lost.
# - Modules that hold a slow test are collected first. xdist hands out the groups first (most tests first),
#   then single tests in collection order, so the long ones (a zoo model, a sandboxed job) start early and the
#   last tests either worker takes are short: both finish together, not one alone on test_zoo.py at the end.
#
# Note [Two lanes]
# `pytest -m "not slow"` is the developer's loop (under 5 minutes on 2 cores with a warm compile cache);
# `pytest` (and .ci/run) runs everything. A test is marked slow (pytestmark = pytest.mark.slow for a whole
# module) when it drives whole processes rather than the compiler (the hostile suite, the browser, sandboxed
# and isolated workers, the CLI in a subprocess, the sweeps and benches as verbs), or when one call takes more
# than about 1.5 s on a warm cache (a whole Hugging Face model, Inductor beside us, a long scan under the Triton
# interpreter). Each compiler stage keeps its own fast tests in the other lane, and a sweep over the samples or
# over op variants stays fast as a whole: the lane must still catch a wrong kernel in any stage.
# Note [Vision lane]
# torchvision and timm (timm imports torchvision) do not import beside the CPU torch 2.13.0 wheel that the
# project's venv installs, so the tests that need them (marked `vision`: the zoo's torchvision and timm models,
# timm's ViT through the attention rewrite, tests/test_vision_models.py) skip there and run in .ci/run's second
# venv, on torch 2.14.1 with torchvision 0.29.1 and timm: `pytest -m vision`. That lane also runs the engine on
# the newest torch we support, which no other test does.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
# Every exploration measures its graphs' call and wrapper overhead (Note [Wrapper overhead]) within a wall-clock
# budget that one call under the Triton interpreter outlasts: the tests check that the figures exist, not their
# precision, so one call or a few will do, here and in the processes started with this environment (a sandboxed
# job keeps only the variables the sandbox passes on) (reports/test_lanes.md).
os.environ.setdefault("GLASSBOX_MEASURE_BUDGET_MS", "10")

from engine.runtime import build as _build  # noqa: E402 (after the repository is on sys.path)

os.environ.setdefault("GLASSBOX_PCH_DIR", str(_build.pch_root()))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        shared = any(defs[-1].scope in ("class", "module", "package") for defs in info.name2fixturedefs.values())
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # modules that hold a slow test first (Note [Parallel test workers]), each module's tests together, in order
    slow: dict[str, bool] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        slow[path] = slow.get(path, False) or item.get_closest_marker("slow") is not None
    rank = {path: (not is_slow, index) for index, (path, is_slow) in enumerate(slow.items())}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


def pytest_collection_finish(session):
    """xdist's loadgroup keeps a group on one worker by appending "@group" to each marked test's id; under a
    pytest that ignores the rename (9.2 keeps the id elsewhere) the groups would be spread over both workers
    silently, and each worker would build the module fixtures (the hostile suite: 5.6 minutes, twice). The
    worker says so on its stderr, which the run shows (xdist reports a worker's own errors only as its crash)."""
    if not (_worker and session.config.getvalue("loadgroup")):
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        message = (f"pytest-xdist's loadgroup lost its groups under pytest {pytest.__version__} ({len(lost)} tests, "
                   f"e.g. {lost[0]}): install the pytest that requirements-dev.txt pins")
        os.write(2, f"\n{_worker}: {message}\n".encode())
        raise pytest.UsageError(message)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test starts with a cold Dynamo, so compiled frames from one test never serve another."""
    import torch._dynamo
    torch._dynamo.reset()
    yield
