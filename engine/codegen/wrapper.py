"""The wrapper: a short generated Python function `call(args)` that runs one graph.

It binds size symbols from the inputs, allocates (or reuses, per the memory plan) each kernel's outputs,
launches kernels in order, calls library and eager ops, drops dead buffers and returns the outputs.
Kernels are referenced by name from a namespace the backend fills (ctypes functions, Triton launchers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy
import torch

from engine.ir.indexing import py_index
from engine.ir.nodes import Extern, MultiOutput, TensorArg, TensorValue
from engine.lowering.graph import LoweredGraph
from engine.schedule.fusion import Kernel
from engine.schedule.memory import MemoryPlan


@dataclass
class WrapperSource:
    source: str
    constants: dict  # names the source refers to, other than kernels


def _py(expr) -> str:
    return py_index(sympy.sympify(expr))


def _shape(values) -> str:
    items = ", ".join(_py(v) for v in values)
    return f"({items},)" if len(values) == 1 else f"({items})"


def _tensor_arg(arg: TensorArg, buffers) -> str:
    node = buffers[arg.name]
    if tuple(arg.size) == tuple(node.size) and tuple(arg.stride) == tuple(node.stride) and arg.offset == 0:
        return arg.name
    return f"strided_view({arg.name}, {_shape(arg.size)}, {_shape(arg.stride)}, {_py(arg.offset)})"


# Note [Wrapper arguments]
# An argument of a library or eager call is written into the wrapper as Python source only when it has an
# exact spelling there: None, bools, ints, strings, finite floats, sizes (sympy), dtypes and devices. Anything
# else (an ATen op passed as an argument, a Python function, a generator, inf and nan, whose reprs are not
# valid source) is bound by name: the value goes into the wrapper's namespace and the source says its name.


def _literal(value) -> str | None:
    """Python source that evaluates to `value`, or None if it has no exact spelling (Note [Wrapper arguments])."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    return None


def _value_source(value, constants: dict) -> str:
    """`value` as wrapper source: its literal spelling, or a fresh name bound to it in the wrapper's namespace."""
    text = _literal(value)
    if text is not None:
        return text
    name = f"value{len(constants)}"
    while name in constants:
        name += "_"
    constants[name] = value
    return name


def _call_args(value, buffers, constants: dict) -> str:
    if isinstance(value, TensorArg):
        return _tensor_arg(value, buffers)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_call_args(v, buffers, constants) for v in value)
        return f"[{inner}]"
    if isinstance(value, sympy.Expr):
        return _py(value)
    return _value_source(value, constants)


def generate_wrapper(graph: LoweredGraph, kernels: list[Kernel], memory: MemoryPlan,
                     launch: dict[str, str]) -> WrapperSource:
    """`launch[kernel.name]` is the call text for a generated kernel (backend specific)."""
    lines = ["def call(args):"]
    body: list[str] = []
    constants: dict = {}
    for position, buf in enumerate(graph.inputs):
        if buf is not None:
            body.append(f"{buf.name} = args[{position}]")
    for symbol, (position, dim) in graph.size_vars.items():
        body.append(f"{symbol} = args[{position}]" + (f".size({dim})" if dim is not None else ""))
    for const in graph.constants:
        constants[const.name] = const.value
    body.append("args.clear()")
    device = graph.device
    for index, kernel in enumerate(kernels):
        body.append(f"# {kernel.name}: {kernel.kind} ({', '.join(n.name for n in kernel.nodes)})")
        if kernel.kind in ("pointwise", "reduction", "template"):
            for name in kernel.stored:
                node = graph.buffers[name]
                reused = memory.reuse_of(name)
                if reused:
                    body.append(f"{name} = {reused}  # reuses {reused}'s memory")
                else:
                    body.append(f"{name} = empty_strided({_shape(node.size)}, {_shape(node.stride)}, "
                                f"dtype={node.dtype}, device={device!r})")
            body.append(launch[kernel.name])
        else:
            for node in kernel.nodes:
                if isinstance(node, MultiOutput):
                    body.append(f"{node.name} = {node.parent}[{node.index}]")
                else:
                    target_name = f"op_{node.name}"
                    constants[target_name] = node.target
                    args = ", ".join([_call_args(a, graph.buffers, constants) for a in node.args] +
                                     [f"{k}={_call_args(v, graph.buffers, constants)}"
                                      for k, v in node.kwargs.items()])
                    body.append(f"{node.name} = {target_name}({args})")
                if node.size or not isinstance(node, Extern) or isinstance(node, MultiOutput):
                    # Note [Library output layout]: kernels index this buffer with the strides the fake
                    # tensor promised; a library may pick another layout at run time.
                    body.append(f"{node.name} = with_layout({node.name}, {_shape(node.size)}, {_shape(node.stride)})")
        dead = [n for n in memory.free_after.get(index, []) if not _reused_later(n, memory)]
        if dead:
            body.append(f"del {', '.join(dead)}")
    body.append(f"return [{', '.join(_output(v, graph, constants) for v in graph.outputs)}]")
    lines += ["    " + line for line in body]
    return WrapperSource("\n".join(lines) + "\n", constants)


def strided_view(tensor, size, stride, offset):
    """A view whose offset counts from the tensor's first element (as_strided counts from its storage's)."""
    return tensor.as_strided(size, stride, tensor.storage_offset() + offset)


def with_layout(tensor, size, stride):
    """The tensor in exactly this layout (a copy only when the library chose another one)."""
    if not isinstance(tensor, torch.Tensor) or tensor.stride() == stride or tensor.numel() <= 1:
        return tensor
    return torch.empty_strided(size, stride, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def _reused_later(name: str, memory: MemoryPlan) -> bool:
    return any(life.reuses == name for life in memory.lives)


def _output(value, graph: LoweredGraph, constants: dict) -> str:
    if isinstance(value, sympy.Expr):
        return _py(value)
    if isinstance(value, TensorValue):
        layout = value.strided_layout()
        if layout is None:
            # lowering copies such a view into a buffer of its own (GraphLowering.output); the wrapper has
            # no way to: it only launches kernels and hands back (views of) buffers
            raise ValueError(f"graph output {value.node.name}{list(value.size)} is a view with no strides "
                             f"(its index map is not affine); it must be realized into a buffer before codegen")
        stride, offset = layout
        return _tensor_arg(TensorArg(value.node.name, tuple(value.size), stride, offset), graph.buffers)
    return _value_source(value, constants)
