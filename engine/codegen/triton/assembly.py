"""A generated Triton kernel's lowerings as text, for display: TTIR, TTGIR, LLIR, PTX and SASS for sm_90 (an
H100/H200), on any machine. triton.compile is given the target explicitly, and ptxas and cuobjdump come with
the Triton wheel, so no GPU is needed; nothing is launched.

This file knows what to compile (which kernels of a record, with which constexprs and warps); importing the
generated module and caching the results is the caller's (engine/tools/assembly.py wires the runtime's loader
and cache), so codegen stays a printer (Note [Backends print, the runtime runs] in codegen/backend.py).
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.record import Exploration, KernelRecord

SM90 = ("cuda", 90, 32)  # the display target: an H100/H200
STAGES = ("ttir", "ttgir", "llir", "ptx")  # triton.compile's text stages, in order; SASS comes from the cubin


@dataclass
class AssemblyRequest:
    """One kernel to lower: where its result goes (`entry.asm`) and what triton.compile needs."""
    entry: KernelRecord
    source: str  # the graph's generated module
    kernel_name: str
    signature: dict
    constants: dict
    num_warps: int


def nvidia_tool(name: str) -> str | None:
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if bundled.exists():
        return str(bundled)
    return shutil.which(name)


def ptxas_available() -> bool:
    return nvidia_tool("ptxas") is not None


def requests(record: Exploration, kernel_names: list[str] | None = None) -> list[AssemblyRequest]:
    """The Triton kernels of an Exploration to lower, with the config each launches with on a GPU: a GEMM
    template's display config, else the tuned or GPU config (a CPU record's own config is the interpreter's)."""
    found = []
    for graph in record.graphs:
        code = graph.code
        if code is None or code.language != "triton":
            continue
        for entry in graph.kernels:
            if kernel_names is not None and entry.name not in kernel_names:
                continue
            display = entry.template.display if entry.template is not None else None
            if display:  # a GEMM template: its GPU config's constexprs (triton/gemm.py)
                found.append(AssemblyRequest(entry, code.source, entry.name, entry.template.signature,
                                             display["constants"], display["num_warps"]))
                continue
            info = entry.triton
            if info is None:
                continue
            config = (info.autotune.best if info.autotune else None) or info.gpu_config or info.config
            constants = {k: v for k, v in config.items() if k in ("XBLOCK", "YBLOCK", "RBLOCK")}
            found.append(AssemblyRequest(entry, code.source, entry.name, info.signature, constants,
                                         config.get("num_warps", 4)))
    return found


def compile_for_display(fn, signature: dict, constants: dict, num_warps: int = 4, target: tuple = SM90) -> dict:
    """{"ttir", "ttgir", "llir", "ptx", "sass", "target", "error"?, "sass_note"?} of the jit function `fn`
    compiled for `target`."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    result: dict[str, Any] = {"target": f"{target[0]} sm_{target[1]}"}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*")}  # pointers from torch's allocator are 16-byte aligned
    compiled = None
    errors = []
    for attempt in (attrs, None):  # the attrs format changed between Triton versions: fall back to none
        try:
            src = ASTSource(fn, dict(signature), constexprs=dict(constants), attrs=attempt)
            compiled = triton.compile(src, target=GPUTarget(*target),
                                      options={"num_warps": num_warps, "enable_fp_fusion": True})
            break
        except Exception as error:  # noqa: BLE001 - shown to the user as the reason there is no assembly
            errors.append(f"{type(error).__name__}: {error}")
    if compiled is None:
        result["error"] = errors[-1][:2000]
        return result
    for stage in STAGES:
        text = compiled.asm.get(stage)
        result[stage] = text if isinstance(text, str) else ""
    cubin = compiled.asm.get("cubin")
    result["sass"] = disassemble(cubin) if isinstance(cubin, bytes) else ""
    if not result["sass"]:
        result["sass_note"] = "no SASS: ptxas or cuobjdump was not found"
    return result


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin, with cuobjdump (or nvdisasm) from the Triton wheel."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        for tool, flags in (("cuobjdump", ["-sass"]), ("nvdisasm", ["-c"])):
            binary = nvidia_tool(tool)
            if binary is None:
                continue
            run = subprocess.run([binary, *flags, str(path)], capture_output=True, text=True)
            if run.returncode == 0 and run.stdout.strip():
                return run.stdout
    return ""
