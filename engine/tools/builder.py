"""The trusted builder: compiles C++ for sandboxed workers into the shared compile cache (Note [Trusted builder]
in engine/runtime/build.py).

One `TrustedBuilder` serves one worker over a socket pair (the worker's end is inherited as GLASSBOX_BUILDER_FD),
from a thread of the process that started the worker. A request carries only the generated source; the flags,
the compiler and the cache key are the builder's (engine.runtime.build), and g++ itself runs in a sandbox of its own
(bubblewrap where it works: no network, no processes to see, only the cache entry writable; a time limit),
since the source comes from a job and could `#include` a file to read it back in an error message.
"""
from __future__ import annotations

import socket
import subprocess
import threading

from engine.runtime import build
from engine.tools import isolation

COMPILE_TIMEOUT_S = 600.0
SOURCE_LIMIT_BYTES = 64 << 20
BUILDS_PER_JOB = 256  # a real exploration builds one library per graph; more is a job filling the cache


def sandboxed_compiler(command: list[str], **options) -> subprocess.CompletedProcess:
    """subprocess.run for g++ on a job's source: under bubblewrap with only the output's directory writable."""
    output = command[command.index("-o") + 1]
    entry = output.rsplit("/", 1)[0]
    if not isolation.bwrap_problem():
        command = isolation.bwrap_argv(entry, [], 1 << 30) + command
    try:
        return subprocess.run(command, timeout=COMPILE_TIMEOUT_S, **options)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 1, "", f"the compiler ran past {COMPILE_TIMEOUT_S:g} s")


class TrustedBuilder:
    """Answers one worker's build requests until the worker closes its end (it exits or is killed)."""

    def __init__(self):
        self._ours, self._theirs = socket.socketpair()
        self.builds = 0
        self._thread = threading.Thread(target=self._serve, daemon=True, name="glassbox-builder")
        self._thread.start()

    def worker_fd(self) -> int:
        """The descriptor to pass to the worker (pass_fds), as GLASSBOX_BUILDER_FD."""
        return self._theirs.fileno()

    def started(self) -> None:
        """The worker has its copy of the descriptor: ours closes, so its exit ends the stream."""
        self._theirs.close()

    def close(self) -> None:
        for end in (self._theirs, self._ours):
            try:
                end.close()
            except OSError:
                pass

    def _serve(self) -> None:
        while True:
            try:
                request = build.receive_message(self._ours, limit=SOURCE_LIMIT_BYTES)
            except (OSError, ValueError):
                return
            if request is None:
                return
            self.builds += 1
            answer = self._answer(request) if self.builds <= BUILDS_PER_JOB else {
                "error": f"this job asked for more than {BUILDS_PER_JOB} builds; the trusted builder stops here"}
            try:
                build.send_message(self._ours, answer)
            except OSError:
                return

    @staticmethod
    def _answer(request: dict) -> dict:
        source = request.get("source")
        if not isinstance(source, str):
            return {"error": "a build request carries the generated source as text"}
        try:
            path, hit = build.build_library(source, run=sandboxed_compiler)
        except build.BuildError as error:
            return {"error": str(error)}
        except OSError as error:
            return {"error": f"the trusted builder could not build: {error}"}
        return {"path": str(path), "cache_hit": hit}
