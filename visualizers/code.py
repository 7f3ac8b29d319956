"""Code and loop IR as highlighted HTML (pygments), with line numbers, highlighted lines and cropping.

The HTML uses inline styles only (no stylesheet to inject), so it renders the same in st.html, a report or a
notebook. The loop IR gets its own small lexer so it reads like a textbook: loads, reductions, loop variables,
buffers and temporaries each in their own colour.
"""
from __future__ import annotations

import html
import re

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexer, bygroups
from pygments.lexers import CppLexer, DiffLexer, LlvmLexer, PtxLexer, PythonLexer, TextLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace

from engine.record import GraphRecord

STYLE = "friendly"
HIGHLIGHT_COLOUR = "#fde68a"


class LoopIRLexer(RegexLexer):
    """Glassbox's loop IR as engine/report.py prints it (see docs/design.md, "The loop IR")."""
    name = "Glassbox loop IR"
    aliases = ["glassbox-ir"]
    tokens = {
        "root": [
            (r"#.*$", Comment.Single),
            (r"\s+", Whitespace),
            (r"\b(for|in|over|return|if|else)\b", Keyword),
            (r"\b(load|store|reduce_\w+|extern|fallback|index_expr|constant|to_dtype|where|masked)\b", Keyword.Pseudo),
            (r"\(eager\)", Comment.Special),
            (r"\b(buf\d+|arg\d+\w*)\b", Name.Class),
            (r"\b(tmp\d+|acc\w*)\b", Name.Variable),
            (r"\b([ir]\d+|s\d+)\b", Name.Builtin),
            (r"\b(aten|torch|prims)(\.[\w.]+)", bygroups(Name.Namespace, Name.Function)),
            (r"\b([A-Za-z_]\w*)(?=\()", Name.Function),
            (r"\b\d+\.\d*(e[+-]?\d+)?|\b\d+(e[+-]?\d+)?\b", Number),
            (r"(-?inf|nan)\b", Number),
            (r"'[^']*'|\"[^\"]*\"", String),
            (r"[=+\-*/%<>!&|^~]+", Operator),
            (r"[\[\](){},:;.]", Punctuation),
            (r"[A-Za-z_]\w*", Name),
            (r".", Text),
        ],
    }


class SassLexer(RegexLexer):
    """NVIDIA SASS as cuobjdump prints it: enough to tell opcodes, registers and comments apart."""
    name = "SASS"
    aliases = ["sass"]
    tokens = {
        "root": [
            (r"/\*[^*]*\*/", Comment.Multiline),
            (r"//.*$", Comment.Single),
            (r"\s+", Whitespace),
            (r"\b[RPU]?[RZ]\d*\b|\bP[T\d]\b|\bSR_\w+", Name.Variable),
            (r"\bc\[0x[0-9a-f]+\]\[0x[0-9a-f]+\]", Name.Constant),
            (r"\b[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*\b", Keyword),
            (r"0x[0-9a-fA-F]+|\b\d+\b", Number),
            (r"[\[\](){},;.@!|+-]", Punctuation),
            (r".", Text),
        ],
    }


class MlirLexer(RegexLexer):
    """Triton's TTIR/TTGIR (MLIR): pygments' LLVM lexer marks MLIR's dialect ops, `#blocked` layouts and
    `loc(...)` as errors (red boxes), so these get a small lexer of their own whose catch-all is plain text:
    it never produces an error token."""
    name = "MLIR"
    aliases = ["mlir", "ttir", "ttgir"]
    tokens = {
        "root": [
            (r"//.*$", Comment.Single),
            (r"\s+", Whitespace),
            (r'"[^"]*"', String),
            (r"#[\w.]+", Name.Decorator),  # attribute aliases: #blocked, #loc
            (r"%[\w.#]+|\^\w+", Name.Variable),  # SSA values, block labels
            (r"@[\w.$]+", Name.Function),
            (r"\b(tt|ttg|ttng|arith|math|scf|cf|gpu|nvvm|llvm|builtin|func)\.[\w.]+", Keyword),
            (r"\b(module|func|return|loc|attributes|tensor|ptr|i1|i8|i16|i32|i64|f16|bf16|f32|f64|index)\b",
             Keyword.Type),
            (r"-?\d+\.\d*(e[+-]?\d+)?|-?\d+|0x[0-9a-fA-F]+", Number),
            (r"[=:<>\[\](){},*+\-!?|]", Punctuation),
            (r"[A-Za-z_][\w.]*", Name),
            (r".", Text),
        ],
    }


LEXERS = {
    "python": PythonLexer, "triton": PythonLexer, "wrapper": PythonLexer,
    "cpp": CppLexer, "c++": CppLexer,
    "ir": LoopIRLexer, "glassbox-ir": LoopIRLexer,
    "ttir": MlirLexer, "ttgir": MlirLexer, "mlir": MlirLexer, "llir": LlvmLexer, "llvm": LlvmLexer,
    "ptx": PtxLexer, "sass": SassLexer, "diff": DiffLexer,
}


def lexer_for(language: str):
    # stripnl=False: pygments drops leading and trailing blank lines by default, which shifts every line
    # number (and every highlighted line) of code that starts with blank lines.
    return LEXERS.get((language or "").lower(), TextLexer)(stripnl=False)


def highlight_html(code: str, language: str, *, hl_lines=(), first_line: int = 1, max_height: int | None = 520,
                   line_numbers: bool = True, caption: str | None = None, anchors: str | None = None) -> str:
    """Highlighted HTML for `code`; `hl_lines` and `first_line` use the numbering the reader sees. `anchors`:
    give every line the id "<anchors>-<number>" (links into the code, e.g. from provenance)."""
    code = (code or "").replace("\r\n", "\n").replace("\r", "\n")  # pygments' own newline rule, applied first
    relative = sorted({line - first_line + 1 for line in hl_lines if line - first_line + 1 >= 1})
    formatter = HtmlFormatter(style=STYLE, noclasses=True, nobackground=True,
                              linenos="inline" if line_numbers else False, linenostart=first_line,
                              hl_lines=relative, wrapcode=True, cssclass="gb-highlight",
                              lineanchors=anchors or "", anchorlinenos=bool(anchors))
    formatter.style.highlight_color = HIGHLIGHT_COLOUR
    body = highlight(code, lexer_for(language), formatter)
    height = f"max-height:{max_height}px;" if max_height else ""
    top = (f'<div style="font-size:0.78rem;color:#6b7280;padding:2px 8px;border-bottom:1px solid #e5e7eb;'
           f'background:#f9fafb">{html.escape(caption)}</div>' if caption else "")
    return (f'<div class="gb-code" data-language="{html.escape(language or "text")}" style="border:1px solid #e5e7eb;'
            f'border-radius:6px;background:#fcfcfd;overflow:hidden;margin-bottom:0.6rem">{top}'
            f'<div style="{height}overflow:auto;font-size:12.5px;line-height:1.45;padding:4px 0">'
            # long lines wrap instead of running out of the box: a horizontal scrollbar is easy to miss
            # (overlay scrollbars), and a clipped line reads like a wrong one
            f'<style>.gb-code pre{{margin:0;padding:0 8px;background:transparent;white-space:pre-wrap;overflow-wrap:anywhere}}</style>'
            f"{body}</div></div>")


_GUARD = re.compile(r"^\s*#ifndef\s+(GB_\w+)\s*$")
_NOTE_COMMENT = re.compile(r"^\s*(//|#)\s.*Note \[")


def helper_spans(source: str) -> list[tuple[int, int, str]]:
    """The shared helpers inside a generated module's kernel text: (first, last, name) line spans (1-based) of
    each `#ifndef GB_X / #define GB_X ... #endif` block (a GEMM template's macros and vector helpers, emitted
    with the first kernel that needs them)."""
    lines, spans, number = (source or "").splitlines(), [], 0
    while number < len(lines):
        guard = _GUARD.match(lines[number])
        if guard and number + 1 < len(lines) and lines[number + 1].strip().startswith(f"#define {guard.group(1)}"):
            depth, end = 0, number
            for end in range(number, len(lines)):
                text = lines[end].strip()
                depth += text.startswith("#if")
                depth -= text.startswith("#endif")
                if depth == 0:
                    break
            spans.append((number + 1, end + 1, guard.group(1)))
            number = end + 1
            continue
        number += 1
    return spans


def helper_lines(source: str) -> set[int]:
    """Every line of helper_spans: what a kernel's provenance does not highlight."""
    return {n for first, last, _ in helper_spans(source) for n in range(first, last + 1)}


def fold_helpers(source: str, first_line: int = 1) -> str:
    """Kernel text for reading: each helper block folded to one comment line, the engine's own Note comments
    left out (the whole module keeps both)."""
    lines = (source or "").splitlines()
    folded = {first - first_line: (last - first_line, name) for first, last, name in helper_spans(source)}
    shown, number = [], 0
    while number < len(lines):
        if number in folded:
            last, name = folded[number]
            shown.append(f"// [{last - number + 1} lines of shared helpers ({name}) folded: see 'whole module']")
            number = last + 1
            continue
        if not _NOTE_COMMENT.match(lines[number]):
            shown.append(lines[number])
        number += 1
    return "\n".join(shown)


def crop(code: str, lines_wanted, context: int = 6, first_line: int = 1) -> tuple[str, int]:
    """The part of `code` around `lines_wanted` (numbered from `first_line`): (text, its first line's number)."""
    lines = (code or "").splitlines()
    wanted = [n for n in lines_wanted if first_line <= n < first_line + len(lines)]
    if not wanted:
        return code, first_line
    start = max(min(wanted) - context, first_line)
    end = min(max(wanted) + context, first_line + len(lines) - 1)
    return "\n".join(lines[start - first_line:end - first_line + 1]), start


def ir_listing(graph: GraphRecord) -> tuple[str, dict[str, list[int]]]:
    """The graph's loop IR grouped by kernel, with a comment line per kernel; and IR node -> its line numbers."""
    ir_nodes = {n.name: n for n in (graph.ir.nodes if graph.ir else [])}
    lines: list[str] = []
    where: dict[str, list[int]] = {}
    placed = set()

    def add_node(name: str) -> None:
        node = ir_nodes[name]
        start = len(lines) + 1
        text = node.text or [name]
        lines.extend(text)
        where[name] = list(range(start, len(lines) + 1))
        placed.add(name)

    inputs = graph.ir.inputs if graph.ir else []
    if inputs:
        lines.append(f"# inputs: {', '.join(inputs)}")
    for kernel in graph.kernels:
        members = [n for n in kernel.ir_nodes if n in ir_nodes and n not in placed]
        if not members:
            continue
        if lines:
            lines.append("")
        ops = ", ".join(kernel.ops)
        lines.append(f"# {kernel.name} ({kernel.kind}): {ops}")
        for name in members:
            add_node(name)
    rest = [n for n in ir_nodes if n not in placed]
    if rest:
        lines.append("")
        lines.append("# not in any kernel")
        for name in rest:
            add_node(name)
    return "\n".join(lines), where


SASS_ENCODING_LINE = re.compile(r"^\s*/\* 0x[0-9a-f]{16} \*/\s*$")
SASS_TRAILING_ENCODING = re.compile(r"\s*/\* 0x[0-9a-f]{16} \*/\s*$")


def tidy_sass(text: str) -> str:
    """cuobjdump's SASS without the instruction-encoding comments (every instruction carries one or two)."""
    lines = []
    for line in (text or "").splitlines():
        if SASS_ENCODING_LINE.match(line):
            continue
        lines.append(SASS_TRAILING_ENCODING.sub("", line).rstrip())
    return "\n".join(lines)


def plain_text_html(text: str) -> str:
    """Preformatted text (for messages with source excerpts), escaped."""
    return (f'<pre style="white-space:pre-wrap;font-size:0.85rem;margin:0">{html.escape(text or "")}</pre>')
