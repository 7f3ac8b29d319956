"""Graph-break fixes applied in place: a suggested rewrite with no blanks to fill is put into the user's code,
and the code is explored again, before beside after.

Note [Applying a rewrite]
engine/break_fixes.py suggests a rewrite per break (Note [Suggested rewrites]); one is concrete when its `after`
has no `<...>` blank for the user to fill (the whole-if torch.where, a print removed, a numpy call renamed). To
apply it, the lines at the break's line number must read as its `before` (compared without the indentation);
(without indentation and comments), they are replaced by `after`, indented as the first of them was. The model is explored before and after, and
the two are compared by what a break costs: graph breaks, graphs, kernels, compile seconds, the whole call's run
time (compiled against eager, taking turns: Note [Call time] in engine/call_time.py), whether the outputs
match eager. The
rewrite is a starting point (torch.where runs both branches), so the comparison is what says it worked.
"""
from __future__ import annotations

import re

from engine.record import Suggestion

BLANK = re.compile(r"<[^<>\n]+>")


class FixError(Exception):
    """The rewrite cannot be applied here (not concrete, or the code no longer reads as its `before`)."""


def concrete(suggestion: Suggestion | None) -> bool:
    return suggestion is not None and not BLANK.search(suggestion.after)


def _code(line: str) -> str:
    """A line without its indentation and trailing comment (suggestions quote the code, not the comment)."""
    return line.split("#", 1)[0].strip()


def apply_fix(source: str, lineno: int, suggestion: Suggestion) -> str:
    """`source` with the rewrite put in at `lineno` (Note [Applying a rewrite])."""
    if not concrete(suggestion):
        raise FixError("this rewrite has blanks to fill in by hand (<...>), so it cannot be applied as it is")
    lines = source.splitlines()
    before = suggestion.before.splitlines()
    start = lineno - 1
    found = lines[start:start + len(before)]
    if start < 0 or [_code(l) for l in found] != [_code(l) for l in before]:
        raise FixError(f"line {lineno} no longer reads as the rewrite's `before` ({before[0].strip()!r})")
    indent = found[0][:len(found[0]) - len(found[0].lstrip())]
    after = [indent + line if line else line for line in suggestion.after.splitlines()]
    ending = "\n" if source.endswith("\n") else ""
    return "\n".join(lines[:start] + after + lines[start + len(before):]) + ending


def summary(record: dict) -> dict:
    """What a graph break costs, from one exploration's record: breaks, graphs, kernels, the compile's seconds
    (every stage but the check against eager), the call's run time when it was timed (`call_time`: ms and
    spread, eager's, and eager / ours judged or too noisy) and whether the outputs match eager."""
    timings = record.get("timings") or {}
    call = record.get("call_time") or {}
    return {"graph_breaks": len(record.get("graph_breaks") or []), "graphs": len(record.get("graphs") or []),
            "kernels": sum(len(g.get("kernels") or []) for g in record.get("graphs") or []),
            "compile_s": round(sum(v for k, v in timings.items() if k not in ("run", "profile")), 3),
            "run_ms": call.get("ms"), "run_iqr_ms": call.get("iqr_ms"), "eager_ms": call.get("eager_ms"),
            "speedup": (call.get("speedup") or {}).get("text"), "run_error": call.get("error") or None,
            "matches_eager": bool((record.get("verify") or {}).get("ok"))}


def run_time_text(side: dict) -> str:
    """One side's run time in words: ours with its spread, eager's, and the ratio (or why it was not timed)."""
    if side.get("run_ms") is None:
        return f"not timed ({side['run_error']})" if side.get("run_error") else "not timed"
    return (f"{side['run_ms']:.3g} ms (spread {side['run_iqr_ms']:.2g}), eager {side['eager_ms']:.3g} ms: "
            f"eager / ours {side['speedup']}")
