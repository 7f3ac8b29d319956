"""Triton kernels' TTIR..SASS for display, on request (`python -m engine asm`, the app's assembly pane): what
to compile is codegen's (engine/codegen/triton/assembly.py); importing the generated module and the cache of
results are the runtime's (engine/runtime/triton_build.py, build.cache_dir). Each kernel takes a second or two
to compile, so results are cached by content hash.
"""
from __future__ import annotations

import json

from engine.codegen.triton.assembly import SM90, compile_for_display, ptxas_available, requests
from engine.record import AssemblyRecord, Exploration
from engine.runtime.build import cache_dir
from engine.runtime.triton_build import load_source, source_key, write_once

__all__ = ["add_assembly", "kernel_assembly", "ptxas_available"]


def kernel_assembly(source: str, kernel_name: str, signature: dict, constants: dict, num_warps: int = 4,
                    target: tuple = SM90) -> dict:
    """One kernel of a generated module compiled for `target` (default sm_90), its stages as text:
    {"ttir", "ttgir", "llir", "ptx", "sass", "target", "error"?}."""
    import triton

    key = source_key(json.dumps([source, kernel_name, signature, constants, num_warps, list(target),
                                 triton.__version__]))
    path = cache_dir() / "triton" / "asm" / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    module, _ = load_source(source, interpret=False)
    result = compile_for_display(getattr(module, kernel_name), signature, constants, num_warps, target)
    if not result.get("error"):
        write_once(path, json.dumps(result))
    return result


def add_assembly(record: Exploration, kernel_names: list[str] | None = None) -> int:
    """Fill `asm` into the Triton kernels of an Exploration; returns how many."""
    found = requests(record, kernel_names)
    for request in found:
        request.entry.asm = AssemblyRecord.from_json(kernel_assembly(
            request.source, request.kernel_name, request.signature, request.constants, request.num_warps))
    return len(found)
