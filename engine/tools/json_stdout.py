"""stdout holds the JSON document and nothing else (the CLI's `--json`, and the product tools' `--json`).

Note [JSON on stdout]
Under --json everything the model, torch, a compiler or our own progress lines print goes to stderr, at the
file-descriptor level (C code writing to fd 1 included), so a program reading stdout parses one document.
"""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python's print, and C code writing to fd 1) to stderr for a while."""
    sys.stdout.flush()
    saved_fd = os.dup(1)
    saved_stdout = sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved_stdout


def print_json(document: Any) -> None:
    """The one document a `--json` run prints on stdout."""
    sys.stdout.write(json.dumps(document, default=str) + "\n")
    sys.stdout.flush()
