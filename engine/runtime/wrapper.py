"""The generated wrapper at run time: its namespace and loading, the library calls and views it makes, the
guard on a graph's first call and the measurement of the wrapper's own cost. (The wrapper's text is printed by
engine/codegen/wrapper.py.)

Note [Internal failure falls back to eager] (the rule FirstRunGuard keeps) is in engine/pipeline.py.
"""
from __future__ import annotations

import builtins
import math
import os
import time
from functools import partial
from typing import Any, Callable

import torch

from engine.ir.artifacts import Allocator, LibraryOp
from engine.ir.indexing import contiguous_strides
from engine.runtime.stand_ins import swapped, wrapper_function

# Note [Library calls through torch's bindings]
# Calling an ATen overload object (torch.ops.aten.mm.default) costs about a microsecond more per call than
# torch's own binding of the same function (torch.mm): the overload's __call__ is a Python frame, and its
# arguments are matched against the schema by the generic operator path instead of torch's generated parser.
# A real model makes dozens of library calls per run (MobileNetV3-Small: 55 convolutions), so a library call
# goes through the binding where that provably reaches the same overload: the overload is the `default` one
# of an aten op that has a binding in torch's namespace, and no other overload of that op could take the
# call's arguments (each lacks one of its required arguments in this call: mm.dtype needs out_dtype, mm.out
# needs out=), so the binding's parser has only this overload to pick. Otherwise, or if the binding refuses
# the arguments (TypeError), the overload object is called, as before.


def public_binding(target, args: tuple, kwargs: dict):
    """torch's binding of `target` where it must reach the same overload for this call's arguments, else None
    (Note [Library calls through torch's bindings])."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten" or \
            target._overloadname != "default":
        return None
    packet = target.overloadpacket
    binding = getattr(torch._C._VariableFunctions, packet.__name__, None)
    if binding is None:
        return None
    for name in packet.overloads():
        if name != "default" and _could_take(getattr(packet, name)._schema, len(args), set(kwargs)):
            return None
    return binding


def _could_take(schema, positional: int, names: set) -> bool:
    """Whether every required argument of `schema` is given by `positional` arguments and `names`."""
    return all(i < positional and not a.kwarg_only or a.name in names
               for i, a in enumerate(schema.arguments) if not a.has_default_value())


class LibraryCall:
    """A library call whose arguments' layouts the library may refuse (Note [Views for libraries] in
    engine/codegen/wrapper.py), through torch's binding where that is the same call (Note [Library calls
    through torch's bindings])."""

    def __init__(self, target, binding=None):
        self.target = target
        self.call = binding or target
        self.copies = False  # set once the library refused a layout: from then on, contiguous copies

    def __call__(self, *args, **kwargs):
        if self.copies:
            return self.call(*_contiguous(args), **_contiguous(kwargs))
        try:
            return self.call(*args, **kwargs)
        except TypeError:
            if self.call is self.target:
                raise
            self.call = self.target  # the binding did not take these arguments: the overload does
            return self(*args, **kwargs)
        except RuntimeError as error:
            if "contiguous" not in str(error) and "stride" not in str(error):
                raise
            self.copies = True
            return self.call(*_contiguous(args), **_contiguous(kwargs))

    def __repr__(self):
        return f"LibraryCall({self.target})"


def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t` in the contiguous layout, size-1 dims included (Note [Views for libraries], codegen/wrapper.py)."""
    t = t.contiguous()
    strides = tuple(int(s) for s in contiguous_strides(tuple(t.shape)))  # the retry's path only: sympy is fine
    return t if t.stride() == strides else t.as_strided(t.shape, strides, t.storage_offset())


def _contiguous(tree):
    return torch.utils._pytree.tree_map(lambda v: _dense(v) if isinstance(v, torch.Tensor) else v, tree)


def _strided_view(tensor, size, stride, offset):
    """A view whose offset counts from the tensor's first element (as_strided counts from its storage's)."""
    return tensor.as_strided(size, stride, tensor.storage_offset() + offset)


_FAST = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
strided_view = getattr(_FAST, "_reinterpret_tensor", None) or _strided_view  # the same meaning, in C++


def empty_strided_for(device: str):
    """`allocate(size, stride, dtype)` on `device` (Note [Lean wrapper] in engine/codegen/wrapper.py). The CUDA
    fast path allocates on the current device, so it is used only where there is one GPU; elsewhere the device
    is named each time."""
    device = torch.device(device)
    fast = getattr(_FAST, f"_empty_strided_{device.type}", None)
    if fast is not None and (device.type == "cpu" or device.type == "cuda" and torch.cuda.device_count() == 1):
        return fast
    return partial(_empty_strided, device=device)


def _empty_strided(size, stride, dtype, device):
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def raw_stream(index: int) -> int:
    """The current CUDA stream of device `index`, as the integer handle Triton's launchers take."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return get(index) if get is not None else torch.cuda.current_stream(index).cuda_stream


def with_layout(tensor, size, stride):
    """The tensor in this layout (a copy only when the library chose another one that moves addresses)."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    actual = tensor.stride()
    if actual == stride or tensor.numel() <= 1 or all(a == s or n == 1 for n, a, s in zip(size, actual, stride)):
        return tensor
    return torch.empty_strided(size, stride, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def eager_call(aten_gm: torch.fx.GraphModule, strides: list | None = None) -> Callable:
    """The ATen graph run op by op by PyTorch: a graph's fallback (Note [Internal failure falls back to eager]),
    its outputs copied into `strides` where one is given (not None)."""
    def call(args: list):
        values = list(args)
        args.clear()
        outputs = aten_gm(*values)
        if not strides:
            return outputs
        padded = list(strides) + [None] * (len(outputs) - len(strides))
        return [out if stride is None else with_layout(out, tuple(out.shape), tuple(stride))
                for out, stride in zip(outputs, padded)]

    call._boxed_call = True
    return call


class FirstRunGuard:
    """Our compiled call, until its first run succeeds; if that raises, the eager ATen graph from then on, its
    outputs in `strides` where given (a training forward's saved tensors in the strides its backward was told:
    Note [Saved values in the forward's strides] in engine/partition.py)."""

    def __init__(self, call: Callable, aten_gm: torch.fx.GraphModule, on_failure: Callable[[BaseException], None],
                 strides: list | None = None):
        self.call, self._aten_gm, self._on_failure = call, aten_gm, on_failure
        self._strides = strides or []
        self._boxed_call = True

    def __call__(self, args: list):
        if self._aten_gm is None:
            return self.call(args)
        kept = list(args)  # our call clears the list (the boxed convention): keep the inputs for eager
        try:
            outputs = self.call(args)
        except Exception as error:  # Note [Internal failure falls back to eager]
            self._on_failure(error)
            self.call = eager_call(self._aten_gm, self._strides)
            args.clear()
            outputs = self.call(kept)
        self._aten_gm = None
        return outputs


class WriteBack:
    """`call`, whose last outputs are new values of some of its inputs: it writes them into those inputs, in one
    torch._foreach_copy_, and returns the outputs before them (Note [Input writes after the graph] in
    engine/decompose.py)."""

    def __init__(self, call: Callable, positions: list[int]):
        self.call, self.positions = call, positions
        self._boxed_call = True

    def __call__(self, args: list):
        targets = [args[i] for i in self.positions]  # the call clears `args` (the boxed convention)
        outputs = self.call(args)
        kept = len(outputs) - len(self.positions)
        torch._foreach_copy_(targets, list(outputs[kept:]))
        return outputs[:kept]


def wrapper_namespace(wrapper) -> dict[str, Any]:
    """The names the wrapper's source refers to, other than kernels: what codegen left as data (library calls,
    allocators: engine/ir/artifacts.py) bound to the runtime's objects."""
    namespace: dict[str, Any] = {"torch": torch, "math": math, "empty_strided": torch.empty_strided,
                                 "with_layout": with_layout, "strided_view": strided_view, "raw_stream": raw_stream}
    namespace.update((name, _bound(value)) for name, value in wrapper.constants.items())
    return namespace


def _bound(value):
    if isinstance(value, LibraryOp):
        binding = public_binding(value.target, (None,) * value.positional, dict.fromkeys(value.keywords))
        return LibraryCall(value.target, binding)
    if isinstance(value, Allocator):
        return empty_strided_for(value.device)
    return value


def load_wrapper(wrapper, namespace: dict) -> Callable:
    exec(builtins.compile(wrapper.source, "<glassbox wrapper>", "exec"), namespace)
    call = namespace["call"]
    call._boxed_call = True  # AOTAutograd passes a list and lets us free its items early
    return call


# Note [Wrapper overhead]
# The record shows what one call of a graph costs on the host and how much of it is the wrapper itself:
#   call_us              a call as the model makes it (on the CPU that includes the kernels' run time; on a GPU
#                        it is the host side, synchronized once at the end of the measurement)
#   wrapper_overhead_us  the same call with every generated kernel replaced by a Python no-op: allocations,
#                        argument passing, size arithmetic and library/eager calls (which run for real, on
#                        whatever the stubbed kernels left in their buffers), without any kernel's launch or work
# Both are medians over a few calls within a small time budget, measured once, after the graph's first call in
# an exploration, on copies of that call's arguments (a graph may write into its inputs). A stubbed call that
# raises (a library call refusing the garbage a stub left behind, say) records why instead of a figure.

# The budget is a wall-clock bound per loop (at least one call each): GLASSBOX_MEASURE_BUDGET_MS overrides it
# (the test suite takes 10 ms: reports/test_lanes.md).

MEASURE_CALLS = 25
MEASURE_BUDGET_S = float(os.environ.get("GLASSBOX_MEASURE_BUDGET_MS", "200")) / 1000


def _no_op(*args, **kwargs):
    return None


def _median_us(fn, args: list, budget_s: float) -> tuple[float, int]:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < MEASURE_CALLS and (not times or time.perf_counter() - start < budget_s):
        begin = time.perf_counter()
        fn(list(args))
        times.append(time.perf_counter() - begin)
    times.sort()
    return times[len(times) // 2] * 1e6, len(times)


def measure_overhead(call, kernel_names: list[str], args: list) -> dict:
    """Note [Wrapper overhead]: {call_us, wrapper_overhead_us, calls, kernels} for one graph's `call`."""
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    devices = {a.device for a in copies if isinstance(a, torch.Tensor) and a.device.type == "cuda"}
    sync = (lambda: [torch.cuda.synchronize(d) for d in devices]) if devices else (lambda: None)
    result: dict = {"kernels": len(kernel_names)}
    sync()
    result["call_us"], result["calls"] = _median_us(call, copies, MEASURE_BUDGET_S)
    sync()
    wrapper = wrapper_function(call)
    namespace = getattr(wrapper, "__globals__", None)
    if namespace is None:
        result["wrapper_overhead_error"] = "the call is not a generated wrapper"
        return result
    try:
        with swapped(namespace, kernel_names, lambda key, original: _no_op):
            result["wrapper_overhead_us"], _ = _median_us(wrapper, copies, MEASURE_BUDGET_S)
    except Exception as error:  # noqa: BLE001 - Note [Wrapper overhead]: the reason instead of a figure
        result["wrapper_overhead_error"] = f"{type(error).__name__}: {str(error)[:200]}"
    finally:
        sync()
    return result


class MeasuredFirstCall:
    """`call`, after whose first call the graph's `measured` call (the wrapper, or its CUDA graph replay) is
    measured once (Note [Wrapper overhead]); the figures go into `into`."""

    def __init__(self, call, measured, kernel_names: list[str], into: dict):
        self.call, self.measured, self.kernel_names, self.into = call, measured, kernel_names, into
        self._boxed_call = True
        self.done = False

    def __call__(self, args: list):
        if self.done:
            return self.call(args)
        kept = list(args)
        outputs = self.call(args)
        self.done = True
        try:
            self.into.update(measure_overhead(self.measured, self.kernel_names, kept))
        except Exception as error:  # noqa: BLE001 - measuring must never break the run it measures
            self.into["wrapper_overhead_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        return outputs
