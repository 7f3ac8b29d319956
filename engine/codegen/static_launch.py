"""Launching a compiled Triton kernel straight through the CUDA driver, from torch's own C launcher.

Note [Static launches]
A bound launch (Note [Bound Triton launches], triton_build.py) still goes through Triton's Python launcher
object, CompiledKernel.run: on Triton 3.6 that call defines two closures, asks Triton's allocator knobs for
scratch memory the kernel does not use and then calls the C launcher, 8.7-9.5 us a launch on the H200's host
(measured, 3000 launches of a 4- and a 12-argument kernel; JITFunction.run: 19-21 us). A training step of the
Llama-style model launches about 160 kernels, and its step is host-bound: the launches were a quarter of it.
torch carries a C launcher of its own for exactly this (torch._C._StaticCudaLauncher, which Inductor uses):
it loads a kernel's cubin once and launches it with cuLaunchKernel from a tuple of arguments and a string of
their C types. Here a bound kernel is loaded into it when it can be, and the wrapper's generated launcher then
calls it directly.

What the C launcher takes (its contract, read from torch's source): the cubin as a file, the kernel's name,
its dynamic shared memory and device, which load it (a handle back, with the registers and spills); then per launch the function handle, the grid, the warp
count, the shared memory, one type character per argument ("O" a pointer, given as a tensor, an int or None;
"i"/"l" 32/64-bit integers; "f"/"d" float/double) and the arguments, with no constexprs and no parameters
Triton specialized into constants (an integer equal to 1), but with a None for each scratch pointer the
compiled kernel's signature ends with (Triton 3.3+ adds a global scratch, 3.5+ a profile scratch, both
unused when their size is 0).

A kernel stays on the bound path when the C launcher cannot launch it as Triton would: scratch memory of
non-zero size, more than one CTA per program (clusters), a cooperative grid or programmatic dependent launch,
tensor-descriptor (TMA) arguments, a type without a character, no cubin (another backend), or no
_StaticCudaLauncher in this torch (a CPU build). GLASSBOX_TRITON_STATIC_LAUNCH=0 turns the path off.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from engine.build import cache_dir

STATIC_LAUNCH = os.environ.get("GLASSBOX_TRITON_STATIC_LAUNCH", "1") != "0"

# Triton's signature types -> the C launcher's argument characters
TYPE_CHARS = {"i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "I", "u8": "B", "u16": "H",
              "u32": "I", "u64": "K", "fp16": "f", "bf16": "f", "fp32": "f", "f32": "f", "fp64": "d"}


class NotStatic(Exception):
    """This compiled kernel must keep Triton's launcher (the reason is the message)."""


@dataclass(frozen=True)
class StaticKernel:
    """A cubin loaded into torch's C launcher: what a launch passes besides the grid, stream and arguments."""
    launch: object  # _StaticCudaLauncher._launch_kernel
    function: int
    num_warps: int
    shared: int
    arg_types: str  # one character per kept argument, then "O" per scratch pointer
    kept: tuple[int, ...]  # positions of the kernel's parameters (constexprs included) that are passed
    scratch: int  # trailing None pointers

    def arguments(self, args: tuple) -> tuple:
        return tuple(args[i] for i in self.kept) + (None,) * self.scratch


def _launcher():
    import torch

    launcher = getattr(torch._C, "_StaticCudaLauncher", None)
    if launcher is None:
        raise NotStatic("this torch has no _StaticCudaLauncher")
    return launcher


def _current_device() -> int:
    import torch

    return torch.cuda.current_device()


def _position(key, names: list[str]) -> int:
    if isinstance(key, str):
        return names.index(key)
    return key[0] if isinstance(key, tuple) else int(key)


def describe(compiled) -> tuple[str, tuple[int, ...], int]:
    """(argument characters, kept parameter positions, scratch pointers) of a CompiledKernel, or NotStatic."""
    src, meta = compiled.src, compiled.metadata
    names = list(src.fn.arg_names)
    constants = {_position(k, names) for k in (getattr(src, "constants", None) or {})}
    signature = {_position(k, names): ty for k, ty in src.signature.items()}
    chars, kept = [], []
    for i in sorted(signature):
        ty = signature[i]
        if ty == "constexpr" or i in constants:
            continue
        if ty.startswith("*"):
            chars.append("O")
        elif ty in TYPE_CHARS:
            chars.append(TYPE_CHARS[ty])
        else:
            raise NotStatic(f"argument {names[i]} of type {ty}")
        kept.append(i)
    scratch = 0
    for size in ("global_scratch_size", "profile_scratch_size"):
        if hasattr(meta, size):
            if getattr(meta, size):
                raise NotStatic(f"{size} {getattr(meta, size)}")
            scratch += 1
    for flag in ("launch_cooperative_grid", "launch_pdl"):
        if getattr(meta, flag, False):
            raise NotStatic(flag)
    if getattr(meta, "num_ctas", 1) != 1 or tuple(getattr(meta, "cluster_dims", (1, 1, 1)) or (1, 1, 1)) != (1, 1, 1):
        raise NotStatic("clusters")
    if getattr(meta, "tensordesc_meta", None):
        raise NotStatic("tensor descriptors")
    return "".join(chars) + "O" * scratch, tuple(kept), scratch


def load(compiled) -> StaticKernel:
    """`compiled` (a CompiledKernel) loaded into torch's C launcher for the current device, or NotStatic with
    the reason."""
    if not STATIC_LAUNCH:
        raise NotStatic("GLASSBOX_TRITON_STATIC_LAUNCH=0")
    cubin = (getattr(compiled, "asm", None) or {}).get("cubin")
    if not isinstance(cubin, (bytes, bytearray)):
        raise NotStatic("no cubin")
    arg_types, kept, scratch = describe(compiled)
    launcher = _launcher()
    meta = compiled.metadata
    name = getattr(meta, "name", None) or compiled.src.fn.__name__
    path = cache_dir() / "triton" / "cubin" / f"{compiled.hash}.cubin"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(bytes(cubin))
        os.replace(tmp, path)
    shared = int(getattr(compiled, "shared", None) or getattr(meta, "shared", 0) or 0)
    device = _current_device()
    loaded = launcher._load_kernel(str(path), name, shared, device)
    # (function, registers, spills) up to torch 2.12; 2.13 puts the module handle first (for unloading)
    function = loaded[-3]
    if not isinstance(function, int) or not function:
        raise NotStatic(f"_load_kernel gave {loaded!r}")
    return StaticKernel(launcher._launch_kernel, function, int(meta.num_warps), shared, arg_types, kept, scratch)
