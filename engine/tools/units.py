"""Units in CLI text, shared by cli_format.py and train_format.py (which cli_format calls into)."""
from __future__ import annotations


def human_bytes(count) -> str:
    if not isinstance(count, (int, float)):
        return "? B"
    for unit in ("B", "KiB", "MiB"):
        if abs(count) < 1024 or unit == "MiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"
