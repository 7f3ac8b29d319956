"""The app's settings that the environment may override, read in this one place (each is listed in README,
"Environment"); an unset or empty variable keeps the default."""
from __future__ import annotations

import os
from pathlib import Path


def _read(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


EXPLORE_TIMEOUT_S = float(_read("GLASSBOX_APP_TIMEOUT", "180"))  # one exploration's default wall time
BENCH_TIMEOUT_S = float(_read("GLASSBOX_APP_BENCH_TIMEOUT", "420"))  # a bench, Inductor or profile job's
MEMORY_GB = float(_read("GLASSBOX_APP_MEMORY_GB", "8"))  # a job's default resident memory
STANDBY = _read("GLASSBOX_APP_STANDBY", "1") != "0"  # keep a worker with torch imported waiting
CACHE_MB = int(_read("GLASSBOX_APP_CACHE_MB", "1024"))  # the result cache's bytes (Note [Result cache in bytes])
CACHE_ENTRIES = int(_read("GLASSBOX_APP_CACHE_ENTRIES", "32"))


def allowed_hosts() -> set[str]:
    """Host names the server answers besides loopback and server.address (app/host_check.py), read at each
    request."""
    return {name.strip().lower() for name in _read("GLASSBOX_ALLOWED_HOSTS").split(",") if name.strip()}


def share_dir() -> Path:
    """Where pasted models are stored for links (Note [Shareable URL] in app/share.py)."""
    cache = _read("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return Path(_read("GLASSBOX_SHARE_DIR") or os.path.join(cache, "glassbox", "shared"))
