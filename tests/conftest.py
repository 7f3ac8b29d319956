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
# - Each worker has its own compile cache, a folder of the run's GLASSBOX_CACHE_DIR named after the worker.
#   Some tests look at the whole cache (tests/test_cache_trust.py lists its libraries before and after a job,
#   and rewrites the toolchain record); the other worker's builds landing in it meanwhile would be noise. The
#   cost is that a kernel both workers need is built twice, well under a second of g++ each.
# - Tests of a module that uses a module-scoped fixture (a Streamlit server and a browser, the hostile suite's
#   outcomes, a traced 2000-op graph) stay on one worker, so the fixture is made once, as in a serial run; every
#   other test is sent on its own, to whichever worker is free. xdist 3.8 does that by renaming the tests, which
#   pytest 9.2 no longer honours: requirements-dev.txt keeps pytest below 9.2, and
#   pytest_collection_finish below stops the run if the groups are lost.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    _base = os.environ.get("GLASSBOX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "glassbox")
    os.environ["GLASSBOX_CACHE_DIR"] = os.path.join(_base, f"xdist-{_worker}")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        shared = any(defs[-1].scope in ("class", "module", "package") for defs in info.name2fixturedefs.values())
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


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
