"""Fusion policy: which groups may share a kernel, and why not. Mechanism lives in fusion.py.

Each rule returns a reason in words; the app shows them as "why (not) fused".
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from engine.ir.nodes import Buffer, Extern, Fallback, MultiOutput, Reduction, Template
from engine.schedule.kernel_plan import describe_size, group_shape
from engine.schedule.templates import epilogue_verdict

MAX_REDUCTION_PASSES = 4  # more passes over a row than this re-read it too often to pay off


def _library_kind(node: Buffer) -> str | None:
    if isinstance(node, Fallback):
        return f"{node.name} runs eagerly ({_target_name(node)})"
    if isinstance(node, (Extern, MultiOutput)):
        return f"{node.name} is a library call ({_target_name(node)})"
    return None


def _target_name(node: Buffer) -> str:
    target = getattr(node, "target", None)
    return str(target).replace("aten.", "").replace(".default", "") if target is not None else node.kind


def _shape_text(nodes: list[Buffer]) -> str:
    rows, red = group_shape(nodes)
    reductions = [n for n in nodes if isinstance(n, Reduction)]
    if reductions:
        return f"{rows} rows x reduction {red}"
    return f"{describe_size(nodes[-1].size)}"


def is_library(group: list[Buffer]) -> bool:
    return any(_library_kind(n) for n in group)


def fusion_verdict(first: list[Buffer], second: list[Buffer], kind: str) -> tuple[bool, str]:
    """May the nodes of two groups run as one kernel? `kind` is vertical or horizontal."""
    if any(isinstance(n, Template) for n in first + second):
        return template_epilogue(first, second, kind)
    for group in (first, second):
        for node in group:
            library = _library_kind(node)
            if library:
                return False, f"{library}: library and eager calls are not fused"
    rows_a, red_a = group_shape(first)
    rows_b, red_b = group_shape(second)
    has_red_a = any(isinstance(n, Reduction) for n in first)
    has_red_b = any(isinstance(n, Reduction) for n in second)
    same = lambda a, b: sympy.expand(a - b) == 0
    if has_red_a and has_red_b:
        if same(rows_a, rows_b) and same(red_a, red_b):
            return True, f"both reduce {red_a} elements over the same {rows_a} rows"
        return False, f"different reductions: {_shape_text(first)} vs {_shape_text(second)}"
    if not has_red_a and not has_red_b:
        if same(rows_a, rows_b):
            how = "elementwise over the same" if kind == "vertical" else "siblings over the same"
            return True, f"{how} {rows_a} elements"
        return False, f"different iteration space {_shape_text(first)} vs {_shape_text(second)}"
    reduction_group, pointwise_group = (first, second) if has_red_a else (second, first)
    rows, red = group_shape(reduction_group)
    numel = pointwise_group[0].numel
    for node in pointwise_group[1:]:
        if not same(node.numel, numel):
            return False, "the elementwise group mixes sizes"
    if same(numel, rows * red):
        where = "prologue (computed inside the reduction loop)" if pointwise_group is first else \
            "epilogue over the same rows"
        return True, f"{where}: {describe_size(pointwise_group[-1].size)} = {rows} rows x {red}"
    if same(numel, rows):
        return True, f"per-row {'input' if pointwise_group is first else 'epilogue'} over the same {rows} rows"
    return False, f"different iteration space {_shape_text(pointwise_group)} vs {_shape_text(reduction_group)}"


def template_epilogue(first: list[Buffer], second: list[Buffer], kind: str) -> tuple[bool, str]:
    """Rule: a GEMM template fuses elementwise consumers of its output as its epilogue (Note [GEMM templates])."""
    if any(isinstance(n, Template) for n in second):
        if any(isinstance(n, Template) for n in first):
            return False, "two templates cannot share a kernel"
        return False, "a template fuses consumers of its output (its epilogue), not producers of its inputs"
    if kind != "vertical":
        return False, "a template kernel fuses only its epilogue, no siblings"
    for node in second:
        library = _library_kind(node)
        if library:
            return False, f"{library}: library and eager calls are not fused"
    template = next(n for n in first if isinstance(n, Template))
    return epilogue_verdict(template, second)


def too_many_passes(reduction_depth: int) -> str | None:
    if reduction_depth > MAX_REDUCTION_PASSES:
        return f"would need {reduction_depth} passes over each row (limit {MAX_REDUCTION_PASSES})"
    return None


@dataclass(frozen=True)
class FusionKnobs:
    """What-if switches (engine compare, the app's compare page): fusion off, or a cap on nodes per kernel."""
    enabled: bool = True
    max_nodes: int | None = None  # at most this many IR nodes in one kernel; None: no cap


def knob_refusal(knobs: FusionKnobs, first: list[Buffer], second: list[Buffer]) -> str | None:
    if not knobs.enabled:
        return "fusion is switched off (fusion=off): every IR node is its own kernel"
    if knobs.max_nodes is not None and len(first) + len(second) > knobs.max_nodes:
        return f"the kernel would hold {len(first) + len(second)} IR nodes, over the cap of {knobs.max_nodes} (max_nodes)"
    return None
