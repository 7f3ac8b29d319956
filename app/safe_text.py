"""Record text on the page: every field of a record is data from a worker that ran user code, so it is escaped
before it reaches Markdown or HTML (README, "Security").

Note [Record text]
Streamlit renders Markdown (st.markdown, st.caption, st.warning, ...): a record string used as Markdown could
load a remote image (`![](https://...)`, which tells a third party who looks at what), draw links, or
inject HTML where a call allows it. So a record field is shown through `md_text` (literal text: every
Markdown and Streamlit directive character escaped), `md_code` (a code span) or `html_text` (HTML-escaped) — except a model's
description, which is meant as Markdown: `description_markdown` keeps its formatting but drops images and
raw HTML, so a description never loads anything.
"""
from __future__ import annotations

import html
import re

MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:=^\"'&])")
IMAGE = re.compile(r"!\[([^\]]*)\]\s*(\([^)]*\)|\[[^\]]*\])")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*\S+.*$", re.MULTILINE)
TAG = re.compile(r"<[^>]*>")


def md_text(value) -> str:
    """A record value as literal Markdown text (nothing in it renders as Markdown, HTML or a directive)."""
    text = "" if value is None else str(value)
    return MARKDOWN_SPECIALS.sub(r"\\\1", text).replace("\n", "  \n")


def md_code(value) -> str:
    """A record value as a Markdown code span: shown as it is (a code span renders nothing inside it, and escapes
    would show as backslashes), fenced by more backticks than any run in it, on one line."""
    text = " ".join(("" if value is None else str(value)).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def html_text(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def description_markdown(text) -> str:
    """A model's description as Markdown that loads nothing: images become their alt text, reference
    definitions (which images may point to) and raw HTML tags are dropped."""
    text = "" if text is None else str(text)
    text = IMAGE.sub(lambda match: match.group(1), text)
    text = REFERENCE_DEFINITION.sub("", text)
    return TAG.sub("", text)


UNSAFE_FILE_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]+")


def file_name(*parts) -> str:
    """A download's file name from record values: letters, digits, '_', '.' and '-' only (a model's name is
    a worker's data, and a browser shows and saves the name it is given)."""
    text = "_".join("" if part is None else str(part) for part in parts)
    return UNSAFE_FILE_CHARACTERS.sub("_", text).strip("._") or "model"
