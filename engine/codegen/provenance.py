"""Provenance: every generated line knows the IR node it computes; the record maps IR node -> ATen nodes ->
FX nodes -> the user's source line."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineTag:
    ir_node: str
