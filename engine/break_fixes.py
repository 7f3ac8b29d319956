"""Suggested rewrites of the user's line for graph breaks with a known cure (text in, text out).

Note [Suggested rewrites]
Dynamo's hints say what to do in general ("Use torch.cond to express dynamic control flow"); a suggestion
here applies it to the user's own line, so the fix is concrete. Each rule recognises a pattern from the break
(Dynamo's graph-break type and reason) and the line's text, and returns the line before, a rewritten line
(or a small block) after, and why it helps. The rewrite is a starting point to edit, not a guaranteed
equivalent: `torch.where` evaluates both branches; `capture_scalar_outputs` keeps `.item()` in the graph as
a symbolic number. Lines we do not recognise get no suggestion (Dynamo's hints still apply).
"""
from __future__ import annotations

import ast
import re
import textwrap

from engine.record import Suggestion

_IF = re.compile(r"^(?P<indent>\s*)(?:el)?if\s+(?P<condition>.+?)\s*:\s*(?:#.*)?$")
_WHILE = re.compile(r"^(?P<indent>\s*)while\s+(?P<condition>.+?)\s*:\s*(?:#.*)?$")
_PRINT = re.compile(r"^(?P<indent>\s*)print\((?P<args>.*)\)\s*(?:#.*)?$")
_ITEM = re.compile(r"\.item\(\)")
_TOLIST = re.compile(r"\.tolist\(\)")
_NUMPY_CALL = re.compile(r"\b(np|numpy)\.(?P<name>\w+)\(")
_TO_NUMPY = re.compile(r"\.(?:cpu\(\)\.)?numpy\(\)")
# numpy functions spelled the same in torch (a rename is the whole rewrite)
_SAME_IN_TORCH = {"abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "ones", "zeros", "arange", "maximum",
                  "minimum", "where", "sum", "mean", "matmul", "clip", "concatenate", "stack", "zeros_like",
                  "ones_like", "argmax", "argmin", "sort", "flip", "cumsum", "einsum", "exp2", "floor", "ceil"}
_RENAMED = {"concatenate": "cat", "clip": "clamp"}


def _code(line: str) -> str:
    return line.split("#", 1)[0].rstrip()


def _where_rewrite(source: str, lineno: int) -> tuple[str, str] | None:
    """For an `if` at `lineno` whose branches each assign one name (the same one): the whole statement and
    `name = torch.where(cond, then_value, else_value)` (a missing else keeps the name's old value)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno == lineno:
            branches = [node.body, node.orelse]
            targets, values = [], []
            for branch in branches:
                if not branch:
                    continue
                if len(branch) != 1 or not isinstance(branch[0], ast.Assign) or len(branch[0].targets) != 1 \
                        or not isinstance(branch[0].targets[0], ast.Name):
                    return None
                targets.append(branch[0].targets[0].id)
                values.append(ast.get_source_segment(source, branch[0].value))
            if not targets or len(set(targets)) != 1 or None in values:
                return None
            name = targets[0]
            otherwise = values[1] if node.orelse else name
            condition = ast.get_source_segment(source, node.test)
            statement = "\n".join(source.splitlines()[node.lineno - 1:node.end_lineno])
            return statement, f"{name} = torch.where({condition}, {values[0]}, {otherwise})"
    return None


def suggest(reason: str, gb_type: str, line: str, source: str = "", lineno: int | None = None) -> Suggestion | None:
    """A Suggestion (pattern, why, before, after) for the break's line, or None (Note [Suggested rewrites]). With the
    file's `source` and the line number, an `if` whose branches assign one name becomes that torch.where."""
    text = f"{gb_type} {reason}".lower()
    code = _code(line)
    if not code.strip():
        return None
    if "data-dependent branching" in text or "generic_jump" in text or "data dependent" in text:
        match = _IF.match(code) or _WHILE.match(code)
        whole = _where_rewrite(source, lineno) if source and lineno and _IF.match(code) else None
        if whole:
            return Suggestion(pattern="data-dependent if",
                              why="a Python `if` on a tensor's value needs the value while tracing. Both "
                                  "branches assign one name, so compute both and select element-wise with "
                                  "torch.where: one graph, no break (both branches run; torch.cond runs one, "
                                  "when the branches are costly).",
                              before=textwrap.dedent(whole[0]),
                              after=whole[1])
        if match and _IF.match(code):
            condition = match["condition"]
            return Suggestion(pattern="data-dependent if",
                              why="a Python `if` on a tensor's value needs the value while tracing. Compute "
                                  "both branches and select element-wise with torch.where (both run; no graph "
                                  "break), or keep real branches with torch.cond (both are traced; one runs).",
                              before=code.strip(),
                              after=(f"result = torch.where({condition}, <value if true>, <value if false>)\n"
                                     f"# or: result = torch.cond({condition}, lambda args: <then>, "
                                     f"lambda args: <else>, (args,))"))
        if match:
            return Suggestion(pattern="data-dependent while",
                              why="a Python loop whose condition is a tensor's value cannot be traced; use a "
                                  "fixed trip count, or torch._higher_order_ops.while_loop.",
                              before=code.strip(), after="for _ in range(<fixed count>):  # or while_loop(...)")
    if "print" in text and _PRINT.match(code):
        return Suggestion(pattern="print",
                          why="print() is a side effect Dynamo will not put into a graph. Remove it from the compiled "
                              "code, or let Dynamo move it after the graph: "
                              "torch._dynamo.config.reorderable_logging_functions.add(print).",
                          before=code.strip(),
                          after=f"# {code.strip()}  (removed; or, before compiling: "
                                f"torch._dynamo.config.reorderable_logging_functions.add(print))")
    if _ITEM.search(code) and ("item" in text or "scalar" in text or "_local_scalar_dense" in text):
        return Suggestion(pattern=".item()",
                          why="tensor.item() turns a tensor into a Python number. Keep it a 0-d tensor (drop "
                              ".item()), or let the graph hold it symbolically: "
                              "torch._dynamo.config.capture_scalar_outputs = True.",
                          before=code.strip(),
                          after=_ITEM.sub("", code.strip()) + "  # stays a 0-d tensor; or set "
                                                              "torch._dynamo.config.capture_scalar_outputs = True")
    if _TOLIST.search(code):
        return Suggestion(pattern=".tolist()",
                          why="tolist() leaves the graph for Python lists; index the tensor instead.",
                          before=code.strip(), after=_TOLIST.sub("", code.strip()) + "  # stays a tensor")
    if _NUMPY_CALL.search(code) or _TO_NUMPY.search(code):
        def rename(match: re.Match) -> str:
            name = match["name"]
            return f"torch.{_RENAMED.get(name, name)}(" if name in _SAME_IN_TORCH else match.group(0)
        after = _TO_NUMPY.sub("", _NUMPY_CALL.sub(rename, code.strip()))
        if after != code.strip():
            return Suggestion(pattern="numpy",
                              why="numpy calls on tensors leave the graph (or go through Dynamo's numpy tracing); the "
                                  "same functions in torch stay in it.",
                              before=code.strip(), after=after)
    if "graph_break" in code:
        return Suggestion(pattern="explicit graph_break()",
                          why="torch._dynamo.graph_break() asks for the break; remove it to let the two graphs fuse.",
                          before=code.strip(), after=f"# {code.strip()}  (removed)")
    return None
