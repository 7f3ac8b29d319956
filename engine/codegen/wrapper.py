"""The wrapper: a short generated Python function `call(args)` that runs one graph.

It binds size symbols from the inputs, allocates (or reuses, per the memory plan) each kernel's outputs,
launches kernels in order, calls library and eager ops, drops dead buffers and returns the outputs.
Kernels are referenced by name from a namespace the runtime fills (ctypes functions, Triton launchers); the
library calls and the allocator are data here (engine/ir/artifacts.py) that the runtime binds at load.

Note [Lean wrapper]
Small models are launch bound, so the wrapper's own work per call is kept to what cannot be done at load:
every kernel is bound once when it loads (ctypes argtypes in C++; the compiled launcher, its function handle
and metadata in Triton: Note [Bound Triton launches]), grids and block sizes are literals or size arithmetic in
the source, the CUDA stream is read once per call, and buffers come from torch's allocator fast paths
(torch._C._dynamo.guards._empty_strided_cpu/_cuda skip the dispatcher's argument parsing: 0.6 us against 2.2 us
for torch.empty_strided on the CPU), views from _reinterpret_tensor. Where a torch lacks those, the wrapper binds
the ordinary functions under the same names. The wrapper's measured cost per call is in the record
(measure_overhead, Note [Wrapper overhead] in engine/runtime/wrapper.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy
import torch

from engine.ir import derived
from engine.ir.artifacts import Allocator, LibraryOp
from engine.ir.indexing import contiguous_strides, py_index
from engine.ir.nodes import Extern, Fallback, MultiOutput, Scatter, TensorArg, TensorValue
from engine.ir.graph import LoweredGraph
from engine.lowering.layout import channels_last_strides
from engine.schedule.fusion import Kernel
from engine.schedule.memory import MemoryPlan
from engine.schedule.templates import MATMULS


GENERATED = ("pointwise", "reduction", "template")  # kernels we generate (the others are library/eager calls)


@dataclass
class WrapperSource:
    source: str
    constants: dict  # names the source refers to, other than kernels


def _py(expr) -> str:
    return py_index(sympy.sympify(expr))


def _shape(values) -> str:
    items = ", ".join(_py(v) for v in values)
    return f"({items},)" if len(values) == 1 else f"({items})"


# Note [Views for libraries]
# A view handed to a library call says the stride of a size-1 dimension as the contiguous layout would have
# it: that stride never moves an address, but libraries test it literally (a decode step of batch 1 and
# sequence 1 is full of size-1 dims whose fake-tensor stride is 0, and cuBLAS reads such a stride as the
# leading dimension; its addmm refuses a bias whose last stride is not 1). A library that still refuses an
# argument's layout gets contiguous copies of its tensor arguments: LibraryCall retries once that way and
# keeps doing so for that call, so a layout problem costs a copy, never a failed model. `.contiguous()` alone
# does not make such copies: torch calls a tensor contiguous whatever its size-1 strides are and returns it
# as it is, so the retry restrides size-1 dims itself (a view, no copy).
# A graph's outputs are views of the same kind, because an output is often the next graph's library argument:
# a training forward's saved tensors are its backward's inputs, handed to the library as they arrive. The
# logsumexp that cuDNN's attention forward returns (B, H, T, 1) was returned with stride 0 on its last dim;
# cuDNN's attention backward tests that stride literally ("the stride for the last dimension ... should be 1
# for Stats"), so the backward fell back to eager, where the same call crashed the process on an H200.


def _library_stride(size, stride) -> tuple:
    contiguous = contiguous_strides(size)
    return tuple(c if sympy.sympify(n) == 1 else s for n, s, c in zip(size, stride, contiguous))


# Note [Buffers as the wrapper holds them]
# A wrapper call spends microseconds on every view it makes (torch's _reinterpret_tensor: ~1-3 us of host time),
# and a host-bound model makes hundreds: ResNet-50's wrapper made 91 a call, one per convolution input and
# weight. So each buffer is held in the form its readers want where that costs nothing, and handed over by
# name when an argument is the whole buffer as held:
# - a buffer our kernels store channels-last (its loop runs over N, H, W, C) is allocated as the NCHW-shaped
#   tensor with channels-last strides that the convolutions reading it take (Note [Channels-last
#   convolutions]); kernels see only its address;
# - an argument equal to the held tensor but for the strides of size-1 dims is that tensor where the held
#   strides are known (inputs, whose strides Dynamo guards, and our own buffers) and already are the ones
#   Note [Views for libraries] asks for; a library call's output keeps the view (the library picks the
#   strides of its size-1 dims as it pleases).
# A buffer that reuses another's memory in another form is a view of it.


def held_layouts(graph: LoweredGraph) -> dict:
    """name -> (size, stride) of the tensor the wrapper holds for each buffer (Note [Buffers as the wrapper
    holds them])."""
    held = {name: (tuple(node.size), tuple(node.stride)) for name, node in graph.buffers.items()}
    for name in (graph.layout or {}).get("buffers", ()):
        n, *spatial, c = graph.buffers[name].size  # N, (D,) H, W, C
        held[name] = ((n, c, *spatial), channels_last_strides((n, c, *spatial)))
    return held


def _whole(arg: TensorArg, held: tuple, exact: bool) -> bool:
    size, stride = held
    if tuple(arg.size) != tuple(size) or arg.offset != 0:
        return False
    return tuple(arg.stride) == tuple(stride) if exact else \
        all(a == b for a, b, n in zip(arg.stride, stride, size) if sympy.sympify(n) != 1)


def _tensor_arg(arg: TensorArg, buffers, held: dict, library: bool = True) -> str:
    """The argument as wrapper source: the buffer's name, or a view of it (for a library call, with the
    strides of Note [Views for libraries]; Note [Buffers as the wrapper holds them])."""
    node = buffers[arg.name]
    stride = _library_stride(arg.size, arg.stride) if library else tuple(arg.stride)
    layout = held.get(arg.name, (tuple(node.size), tuple(node.stride)))
    known = not isinstance(node, (Extern, MultiOutput)) or not any(sympy.sympify(n) == 1 for n in layout[0])
    if _whole(arg, layout, exact=not library) and (not library or known and tuple(layout[1]) == stride):
        return arg.name
    return f"strided_view({arg.name}, {_shape(arg.size)}, {_shape(stride)}, {_py(arg.offset)})"


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


def _call_args(value, buffers, constants: dict, held: dict) -> str:
    if isinstance(value, TensorArg):
        return _tensor_arg(value, buffers, held)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_call_args(v, buffers, constants, held) for v in value)
        return f"[{inner}]"
    if isinstance(value, sympy.Expr):
        return _py(value)
    return _value_source(value, constants)


def generate_wrapper(graph: LoweredGraph, kernels: list[Kernel], memory: MemoryPlan,
                     launch: dict[str, str], prologue: list[str] = ()) -> WrapperSource:
    """`launch[kernel.name]` is the call text for a generated kernel (backend specific); `prologue`, lines the
    backend runs once per call before any kernel (C++: the thread count, Note [Kernel threads])."""
    lines = ["def call(args):"]
    body: list[str] = []
    constants: dict = {}
    held = held_layouts(graph)
    for position, buf in enumerate(graph.inputs):
        if buf is not None:
            body.append(f"{buf.name} = args[{position}]")
    for symbol, (position, dim) in graph.size_vars.items():
        body.append(f"{symbol} = args[{position}]" + (f".size({dim})" if dim is not None else ""))
    for symbol, expr in graph.derived_sizes.items():  # Note [Derived sizes]
        body.append(f"{symbol} = {derived.py_value(expr)}")
    device = graph.device
    kernel_reads = {n for k in kernels if k.kind in GENERATED for n in k.reads}
    for const in graph.constants:
        constants[const.name] = _on_kernel_device(const, device, kernel_reads)
    for buf in graph.inputs:
        if buf is not None and buf.name in kernel_reads and buf.input_device and \
                not same_device(buf.input_device, device):
            # Note [Tensors on another device]: an input cannot be moved at load; it is copied per call
            body.append(f"{buf.name} = {buf.name}.to({_literal(torch.device(device))})  # a {buf.input_device} "
                        f"input read by a kernel on {device}")
    body.append("args.clear()")
    if any(k.kind in GENERATED for k in kernels):
        body.extend(prologue)
    allocator = f"empty_strided_{torch.device(device).type}"
    constants[allocator] = Allocator(str(device))
    if str(device).startswith("cuda") and any(k.kind in GENERATED for k in kernels):
        body.append(f"stream = raw_stream({torch.device(device).index or 0})  # Triton launches go on this stream")
    for index, kernel in enumerate(kernels):
        body.append(f"# {kernel.name}: {kernel.kind} ({', '.join(n.name for n in kernel.nodes)})")
        if kernel.kind in GENERATED:
            for name in kernel.stored:
                node = graph.buffers[name]
                reused = memory.reuse_of(name)
                size, stride = held[name]
                if reused and held[reused] == held[name]:
                    body.append(f"{name} = {reused}  # reuses {reused}'s memory")
                elif reused:
                    body.append(f"{name} = strided_view({reused}, {_shape(size)}, {_shape(stride)}, 0)  # reuses "
                                f"{reused}'s memory")
                else:
                    body.append(f"{name} = {allocator}({_shape(size)}, {_shape(stride)}, {node.dtype})")
                if isinstance(node, Scatter):
                    body.append(f"{name}.zero_()  # the kernel adds into it (Note [Accumulating stores])")
            body.append(launch[kernel.name])
        else:
            for node in kernel.nodes:
                if isinstance(node, MultiOutput):
                    body.append(f"{node.name} = {node.parent}[{node.index}]")
                else:
                    target_name = f"op_{node.name}"
                    library = isinstance(node, Extern) and not isinstance(node, Fallback)
                    if library:
                        constants[target_name] = LibraryOp(node.target, len(node.args), tuple(node.kwargs))
                    else:
                        constants[target_name] = node.target
                    args = ", ".join([_call_args(a, graph.buffers, constants, held) for a in node.args] +
                                     [f"{k}={_call_args(v, graph.buffers, constants, held)}"
                                      for k, v in node.kwargs.items()])
                    body.append(f"{node.name} = {target_name}({args})")
                if (node.size or not isinstance(node, Extern) or isinstance(node, MultiOutput)) and \
                        not _layout_certain(node):
                    # Note [Library output layout]: kernels index this buffer with the strides the fake
                    # tensor promised; a library may pick another layout at run time.
                    body.append(f"{node.name} = with_layout({node.name}, {_shape(node.size)}, {_shape(node.stride)})")
        dead = [n for n in memory.free_after.get(index, []) if not _reused_later(n, memory, index)]
        if dead:
            body.append(f"del {', '.join(dead)}")
    body.append(f"return [{', '.join(_output(v, graph, constants, held) for v in graph.outputs)}]")
    lines += ["    " + line for line in body]
    return WrapperSource("\n".join(lines) + "\n", constants)


# Note [Library output layout]
# Kernels index a library call's output with the strides its fake tensor promised, so where the library
# chose another layout at run time the output is copied into the promised one. Only strides that move an
# address count: the stride of a size-1 dimension is multiplied by 0 in every index, and libraries report
# it as they please (cuDNN gives an SE block's (N, C, 1, 1) convolution output the strides of NCHW where the
# fake tensor says channels-last): comparing it literally cost MobileNetV3 18 copies a call.


def _layout_certain(node) -> bool:
    """Whether the library is known to return `node`'s promised layout (Note [Library output layout]): the
    matmuls (mm, addmm, bmm, baddbmm) allocate their result themselves, always row-major, so a promise of that
    layout needs no check. In a Llama-style training step (87 matmuls) the check was a Python call each, on a
    host-bound step."""
    return isinstance(node, Extern) and not isinstance(node, (Fallback, MultiOutput)) and \
        node.target in MATMULS and tuple(node.stride) == tuple(contiguous_strides(tuple(node.size)))


# Note [Tensors on another device]
# Real models keep tensors on the CPU that their GPU kernels read: a constant Dynamo captured from a tensor
# built in forward without a device, a buffer that was never moved. A generated kernel can only read memory
# on its own device (Triton: "Pointer argument cannot be accessed from Triton (cpu tensor?)"), so a constant
# that a kernel reads is moved to the kernel's device once, when the wrapper is made, and such an input is
# copied at the start of each call (an input may change between calls). Library and eager calls get the
# tensors as they are, as eagerly (torch's own ops accept a CPU scalar tensor beside CUDA ones).
# Devices are compared as devices, not as names: a model compiled for "cuda" gets inputs that report "cuda:0",
# and comparing the names made every CUDA wrapper copy each input its kernels read at the start of every call
# (a no-op `.to()`, ~1.5 us of host time each: 213 calls per ResNet-50 call, its batch norms' parameters).


def same_device(a, b) -> bool:
    """Whether two device names name one device: "cuda" is the current CUDA device, the one a tensor made on
    "cuda" reports as "cuda:0" (Note [Tensors on another device])."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    current = (torch.cuda.current_device() if torch.cuda.is_available() else 0) if a.type == "cuda" else 0
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


def _on_kernel_device(const, device: str, kernel_reads: set):
    value = const.value
    if isinstance(value, torch.Tensor) and const.name in kernel_reads and not same_device(value.device, device):
        return value.to(device)
    return value


def _reused_later(name: str, memory: MemoryPlan, index: int) -> bool:
    """Whether a kernel after `index` takes `name`'s memory (so its name must stay bound). A kernel writing in
    place into it (Note [In-place epilogues]) is kernel `index` itself: the name goes after that kernel."""
    return any(life.reuses == name and life.first > index for life in memory.lives)


def _output(value, graph: LoweredGraph, constants: dict, held: dict) -> str:
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
        # size-1 dims with the strides of Note [Views for libraries]: the next graph may hand it to a library
        return _tensor_arg(TensorArg(value.node.name, tuple(value.size), stride, offset), graph.buffers, held)
    return _value_source(value, constants)
