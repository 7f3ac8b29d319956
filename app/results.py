"""A bounded, thread-safe LRU of worker results keyed by content hash (shared by every session of the server).

Note [Result cache in bytes]
The cache is bounded by count and by bytes: a count alone let 32 large records (one 100 MB record held 589 MB
resident) take the server's memory. Each value's size is estimated once, when it is put, from its JSON: what
each character, string, element, object and array of it takes at most as Python objects (estimated_bytes).
A fixed factor of the JSON's length (6, measured on a typical record) was not a bound: a bench document is the
job's own JSON, and one of empty lists or dicts takes 16 to 18 times its text (a job's 40 MB of `[],` would
have held 640 MB against an estimate of 240 MB). The estimate is above the measured size for every shape
(tests/test_app.py; the hostile suite's row "a job's document of tiny containers in the result cache"), about
2.5 times a typical record's. A value larger than the whole budget is not kept (the session that asked for it
still gets it).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from app import settings


def content_key(*parts: Any) -> str:
    """sha256 over the JSON of `parts` (source text, options, what kind of result)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# what one JSON character or token of a value takes at most as Python objects, in bytes (Note [Result cache in
# bytes]): a character (long strings, digits), a string (its object and its slot), an element (a slot, and the
# int or float it may be), an object (a dict, or a record's dataclass instance) and an array (a list)
PER_CHARACTER, PER_QUOTE, PER_ELEMENT, PER_OBJECT, PER_ARRAY = 2, 64, 48, 240, 88
MAX_BYTES = settings.CACHE_MB << 20


def estimated_bytes(value: Any) -> int:
    """What a value holds in memory, at most, estimated from its JSON (Note [Result cache in bytes])."""
    def plain(item):
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
        return getattr(item, "__dict__", None) or str(item)
    try:
        try:
            text = json.dumps(value, default=plain)
        except (TypeError, ValueError):
            text = repr(value)
    except RecursionError:
        return 1 << 62  # too deep to measure: never kept
    return (PER_CHARACTER * len(text) + PER_QUOTE * text.count('"') + PER_ELEMENT * text.count(",")
            + PER_OBJECT * text.count("{") + PER_ARRAY * text.count("[") + 64)


class ResultCache:
    def __init__(self, max_entries: int = 32, max_bytes: int = MAX_BYTES):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: str, value: Any, size: int | None = None) -> None:
        size = estimated_bytes(value) if size is None else size
        with self._lock:
            self._items.pop(key, None)
            self._sizes.pop(key, None)
            if size > self.max_bytes:
                return  # larger than the whole budget: not kept
            self._items[key], self._sizes[key] = value, size
            while len(self._items) > self.max_entries or sum(self._sizes.values()) > self.max_bytes:
                oldest, _ = self._items.popitem(last=False)
                self._sizes.pop(oldest, None)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def discard(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)
            self._sizes.pop(key, None)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
