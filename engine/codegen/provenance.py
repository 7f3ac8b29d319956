"""Provenance: every generated line knows the IR node it computes; the record maps IR node -> ATen nodes ->
FX nodes -> the user's source line."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineTag:
    ir_node: str


def line_map(tags: list, first_line: int = 1) -> list[dict]:
    """[{line, ir_node}] for the tagged lines of a generated source (1-based line numbers)."""
    return [{"line": first_line + i, "ir_node": tag.ir_node} for i, tag in enumerate(tags) if tag is not None]
