"""Record text in a user's words: the engine's references to its own Notes left out, buffer names said as ops.

Reasons in the record are written for the engine's readers: they cite Notes ("(see Note [Row tiles] in
engine/schedule.py)") and name the scheduler's buffers ("buf238"). A user reading the CLI or the app wants neither:
the Note reference goes, and a buffer is said as the ops that compute it ("mm's result"). The rule lives here once,
beside the record and like it standard library only, so the CLI (engine/tools/cli_format.py) and the visualizers
(visualizers/teaching.py, which may import only the record and this) say the same text the same way; each passes
its own `namer`, the way it already turns a buffer into op names.
"""
from __future__ import annotations

import re
from typing import Callable

NOTE = re.compile(r"\s*\((?:[^()]*?[;,:]\s*)?(?:see )?Note \[[^\]]+\](?: in [\w/.]+)?\)|\s*Note \[[^\]]+\]")
BUFFER = re.compile(r"\b(buf\d+)\b( is a library call(?: \(([^)]*)\))?)?")


def plain_words(text: str | None, namer: Callable[[str], str] | None = None) -> str:
    """`text` without Note references and, given `namer` (a buffer name -> its ops, "mul + add", or "" when it
    cannot say), with each buffer said as its ops: "buf1 is contiguous" -> "relu's result is contiguous", "buf7 is
    a library call (mm)" -> "mm is a library call". A buffer the namer cannot say stays as it is, not guessed."""
    text = NOTE.sub("", str(text or "")).strip()
    if namer is None:
        return text

    def named(match: re.Match) -> str:
        ops = namer(match.group(1))
        if not ops:
            return match.group(0)
        if match.group(2) and match.group(3) in (None, ops):  # "buf7 is a library call (mm)": "mm is a library call"
            return f"{ops} is a library call"
        return f"{ops}'s result" + (match.group(2) or "")
    return BUFFER.sub(named, text)
