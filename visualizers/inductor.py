"""Inductor's output code (a Python module) taken apart for display: its kernels and its `call` function.

Inductor defines each kernel as `name = async_compile.<kind>(..., '''<source>''', ...)`: C++ for the CPU
(`cpp_pybinding`), Triton (Python) for GPUs. The app shows them beside Glassbox's kernels.
"""
from __future__ import annotations

import re

KERNEL = re.compile(r"^(\w+) = async_compile\.(\w+)\((.*?)'''(.*?)'''", re.MULTILINE | re.DOTALL)
CALL = re.compile(r"^([ \t]*)def call\((self, )?args\):\n", re.MULTILINE)


def kernel_sources(code: str) -> list[dict]:
    """[{"name", "kind", "language", "source"}] for every kernel Inductor's output code defines."""
    kernels = []
    for match in KERNEL.finditer(code or ""):
        name, kind, source = match.group(1), match.group(2), match.group(4)
        language = "python" if kind == "triton" else "cpp"
        kernels.append({"name": name, "kind": kind, "language": language, "source": source.strip("\n")})
    return kernels


def call_function(code: str) -> str:
    """The `call` function of Inductor's wrapper (what runs the kernels), dedented; "" if not found."""
    match = CALL.search(code or "")
    if not match:
        return ""
    indent = len(match.group(1))
    lines = [match.group(0).rstrip("\n")]
    for line in code[match.end():].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(line[indent:] for line in lines)
