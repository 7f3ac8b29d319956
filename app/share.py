"""Shareable state: the view in the URL, and pasted models stored by content so a link can bring them back.

Note [Shareable URL]
Every choice that decides what the user sees lives in the query string: page, sample, backend, device, mode,
dynamic, stage, side (the side-by-side stage), node (the selected node). A pasted model is stored on the
server under the hash of its text (content-addressed: the same code always gets the same link, and a link
can only ever show the code it was made for) and the URL carries `code=<hash>`. Values read from a URL are
checked against what the app offers; anything else is dropped, never passed on. A link whose code is gone
(another server, a cleaned cache) says so instead of silently showing a sample.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from app import settings
from engine import options as engine_options

KEYS = ("page", "sample", "backend", "device", "mode", "dynamic", "train", "stage", "side", "node", "code")
CHOICES = {**{name: engine_options.infos()[name].choices for name in ("backend", "device", "mode")},
           "dynamic": ("0", "1"), "train": ("0", "1")}  # the options' choices: engine/options.py
_NAME = re.compile(r"^[\w. +\-]{1,80}$")  # page, stage and node names: words, dots, spaces, + and -
_HASH = re.compile(r"^[0-9a-f]{16,64}$")
MAX_SHARED_BYTES = 200_000


def share_dir() -> Path:
    return settings.share_dir()


def clean_state(query: dict, samples: list[str], pages: list[str] | None = None,
                stages: list[str] | None = None) -> dict[str, str]:
    """The valid part of a URL's query (Note [Shareable URL]): unknown keys and values are dropped."""
    state: dict[str, str] = {}
    for key in KEYS:
        value = query.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is None:
            continue
        value = str(value)
        if key in CHOICES and value not in CHOICES[key]:
            continue
        if key == "sample" and value not in samples:
            continue
        if key == "page" and pages is not None and value not in pages:
            continue
        if key in ("stage", "side") and stages is not None and value not in stages:
            continue
        if key == "code" and not _HASH.match(value):
            continue
        if key in ("page", "stage", "side", "node") and not _NAME.match(value):
            continue
        state[key] = value
    return state


def code_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:24]


def store_code(source: str) -> str:
    """Keep a pasted model on the server; its key goes into the URL."""
    data = source.encode("utf-8")
    if len(data) > MAX_SHARED_BYTES:
        raise ValueError(f"the model is {len(data):,} bytes; links can share at most {MAX_SHARED_BYTES:,}")
    key = code_key(source)
    folder = share_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.py"
    if not path.exists():
        temporary = folder / f".{key}.{os.getpid()}.tmp"
        temporary.write_bytes(data)
        temporary.replace(path)  # atomic: a reader never sees half a file
    return key


def load_code(key: str) -> str | None:
    """The stored model for a key, or None when it no longer exists (or the key is not one of ours)."""
    if not _HASH.match(key or ""):
        return None
    path = share_dir() / f"{key}.py"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    return text if code_key(text) == key else None  # content-addressed: a changed file is not that code


# session-state key <- URL key (Note [Shareable URL]); the page itself is the URL's path (st.navigation)
SESSION_KEYS = {"sample": "sample", "backend": "backend", "device": "device", "mode": "mode", "dynamic": "dynamic",
                "train": "train", "stage_left": "stage", "stage_right": "side", "node": "node"}
FLAGS = ("dynamic", "train")  # on/off keys, "1" or "0" in the URL


def session_from_url(query: dict, samples: list[str], stages: list[str]) -> dict:
    """The session-state values a URL asks for, plus "code" (a shared model's text) or "code_missing"."""
    clean = clean_state(query, samples, stages=stages)
    values: dict = {}
    for session_key, url_key in SESSION_KEYS.items():
        if url_key in clean:
            values[session_key] = clean[url_key] == "1" if url_key in FLAGS else clean[url_key]
    if "code" in clean:
        text = load_code(clean["code"])
        if text is None:
            values["code_missing"] = clean["code"]
        else:
            values["code"] = text
    return values


def url_from_session(session: dict, code: str | None = None) -> dict[str, str]:
    """What the URL should say for this session (written back on every run, so it survives page changes)."""
    query = {}
    for session_key, url_key in SESSION_KEYS.items():
        value = session.get(session_key)
        if value is None or value == "":
            continue
        query[url_key] = ("1" if value else "0") if url_key in FLAGS else str(value)
    if code:
        query["code"] = code
        query.pop("sample", None)  # the link is to the code, not to the sample the sidebar still names
    return query
