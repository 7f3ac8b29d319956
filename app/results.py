"""A bounded, thread-safe LRU of worker results keyed by content hash (shared by every session of the server)."""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any


def content_key(*parts: Any) -> str:
    """sha256 over the JSON of `parts` (source text, options, what kind of result)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResultCache:
    def __init__(self, max_entries: int = 32):
        self.max_entries = max_entries
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def discard(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
