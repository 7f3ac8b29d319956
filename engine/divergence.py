"""Numerics bisect: where on the graph our values first leave eager's, and how the error grows after it.

Note [Numerics bisect]
When an exploration's outputs are not exactly eager's, each graph is run once more on the arguments of its first
call, twice: eager, the ATen graph op by op (torch.fx.Interpreter, every node's value kept), and ours, the
unchanged wrapper with each kernel's namespace entry swapped for a proxy (Note [Stand-ins in the wrapper's
namespace]) that copies what the kernel wrote: a generated kernel's stored buffers read
from the wrapper's frame after it returns, a library or eager call's result. Every output buffer that is the
whole value of an ATen node (engine/reproducer.py's rule) is compared with that node's eager value under the
project's tolerance (engine/run.py's compare_tensor, with the node's value from a float64 run of the graph
when there is one): exact, within tolerance, or diverging. A kernel's inputs' error is the worst error of the
buffers it reads. The first culprit is the first kernel, in launch order, with a diverging output whose inputs
are all exact or within tolerance: the error starts there. Later diverging kernels that read diverging
buffers are where it grows. A buffer that cannot be compared (an intermediate, a tuple's part) counts as
its kernel's inputs do, so an error passes through it. A graph whose every comparable buffer is exact or within tolerance is clean.
Training steps are not bisected (their backward graphs read the forward's saved values; said in the record).
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import torch
import torch.fx

from engine.record import BisectCulprit, BisectKernel, BisectOutput, BisectRecord, VerifyRecord
from engine.reproducer import _value_node
from engine.run import compare_tensor
from engine.runtime.stand_ins import kernel_entries, swapped, wrapper_function

EXACT, WITHIN, DIVERGING = "exact", "within tolerance", "diverging"
_ORDER = {EXACT: 0, WITHIN: 1, DIVERGING: 2}


def _entries(compiled) -> dict[str, tuple[str, list[str], bool]]:
    """Namespace key -> (kernel name, the buffers it writes, whether they come back as its result)."""
    kernels = {kernel.name: kernel for kernel in compiled.schedule.kernels}
    return {key: (name, list(kernels[name].stored), False) if key == name else (name, [key[len("op_"):]], True)
            for key, name in kernel_entries(compiled.schedule.kernels).items()}


class _Copying:
    """Stands in for one kernel: calls it, then copies what it wrote into `sink` (Note [Numerics bisect])."""

    def __init__(self, function, kernel: str, buffers: list[str], returned: bool, sink: dict, order: list):
        self.function, self.kernel, self.buffers, self.returned = function, kernel, buffers, returned
        self.sink, self.order = sink, order

    def _after(self, result):
        if self.kernel not in self.order:
            self.order.append(self.kernel)
        if self.returned:
            if isinstance(result, torch.Tensor) and len(self.buffers) == 1:
                self.sink[self.buffers[0]] = result.detach().clone()
            return result
        frame = sys._getframe(2)  # the wrapper's `call` (it called __call__ or run, which called this)
        for name in self.buffers:
            value = frame.f_locals.get(name)
            if isinstance(value, torch.Tensor):
                self.sink[name] = value.detach().clone()
        return result

    def __call__(self, *args, **kwargs):
        return self._after(self.function(*args, **kwargs))

    def run(self, *args, **kwargs):  # Triton's launch path
        return self._after(self.function.run(*args, **kwargs))


def _our_values(compiled, args: list) -> tuple[dict, list[str]]:
    function = wrapper_function(compiled.call)
    entries = _entries(compiled)
    values: dict = {}
    order: list = []

    def copying(key, original):
        return _Copying(original, *entries[key], values, order)

    with swapped(function.__globals__, entries, copying), torch.no_grad():
        function(list(args))
    return values, order


def _eager_values(aten_gm: torch.fx.GraphModule, args: list, upcast: bool) -> dict | None:
    """Every ATen node's value, op by op (in float64 when `upcast`; None when the graph will not run so)."""
    values: dict = {}

    class Keeping(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            values[node.name] = result
            return result

    def cast(value):
        if upcast and isinstance(value, torch.Tensor) and value.dtype in (torch.float32, torch.float16, torch.bfloat16):
            return value.detach().to(torch.float64)
        return value.clone() if isinstance(value, torch.Tensor) else value

    try:
        with torch.no_grad():
            Keeping(aten_gm).run(*[cast(a) for a in args])
    except Exception:  # noqa: BLE001 - an op with no float64 kernel: the comparison goes without fp64
        if upcast:
            return None
        raise
    return values


def _error(eager: torch.Tensor, ours: torch.Tensor, fp64: torch.Tensor | None) -> tuple[str, float, float]:
    if eager.shape != ours.shape:
        return DIVERGING, float("inf"), float("inf")
    if torch.equal(eager.cpu(), ours.cpu()) or (eager.dtype.is_floating_point and bool(
            torch.equal(eager.isnan(), ours.isnan())) and torch.equal(eager.nan_to_num(0), ours.nan_to_num(0))):
        return EXACT, 0.0, 0.0
    result = compare_tensor(eager, ours, fp64 if isinstance(fp64, torch.Tensor) and fp64.shape == eager.shape else None)
    return (WITHIN if result["ok"] else DIVERGING), float(result["max_abs_err"]), float(result["max_rel_err"])


def bisect_graph(graph_record, compiled, aten_gm: torch.fx.GraphModule, args: list, hints: dict) -> BisectRecord:
    """The record's graphs[].bisect for one graph (Note [Numerics bisect])."""
    ours, order = _our_values(compiled, args)
    eager = _eager_values(aten_gm, args, upcast=False)
    fp64 = _eager_values(aten_gm, args, upcast=True) or {}
    buffers = compiled.lowered.buffers
    nodes = {n.name: n for n in aten_gm.graph.nodes}
    aten_records = {n.name: n for n in graph_record.aten}
    buffer_status: dict[str, tuple[str, float]] = {}
    for buffer in buffers.values():
        if buffer.kind in ("input", "constant"):
            buffer_status[buffer.name] = (EXACT, 0.0)
    kernels_out = []
    node_status = {n.name: EXACT for n in aten_gm.graph.nodes if n.op == "placeholder"}  # the same arguments
    culprit = None
    by_name = {k.name: k for k in compiled.schedule.kernels}
    for name in order + [k.name for k in compiled.schedule.kernels if k.name not in order]:
        kernel = by_name[name]
        stored = [n.name for n in kernel.nodes] if kernel.kind in ("extern", "fallback") else list(kernel.stored)
        reads = [r for r in kernel.reads if r in buffer_status]
        input_err = max((buffer_status[r][1] for r in reads), default=0.0)
        input_status = max((buffer_status[r][0] for r in reads), key=_ORDER.get, default=EXACT)
        outputs = []
        for buffer_name in stored:
            value = ours.get(buffer_name)
            node = _value_node(buffers[buffer_name], nodes, hints) if buffer_name in buffers else None
            if value is None or node is None or node.name not in eager or not isinstance(eager[node.name], torch.Tensor):
                continue
            status, abs_err, rel_err = _error(eager[node.name], value, fp64.get(node.name))
            buffer_status[buffer_name] = (status, abs_err)
            node_status[node.name] = status
            outputs.append(BisectOutput(buffer=buffer_name, node=node.name, status=status, max_abs_err=abs_err,
                                        max_rel_err=rel_err))
        for buffer_name in stored:  # not comparable: as good as its inputs, at best
            buffer_status.setdefault(buffer_name, (input_status, input_err))
        status = max((o.status for o in outputs), key=_ORDER.get, default="not compared")
        entry = BisectKernel(kernel=name, kind=kernel.kind, status=status, outputs=outputs,
                             input_status=input_status, input_max_abs_err=input_err,
                             max_abs_err=max((o.max_abs_err for o in outputs), default=0.0))
        kernels_out.append(entry)
        if culprit is None and status == DIVERGING and input_status != DIVERGING:
            record = next((k for k in graph_record.kernels if k.name == name), None)
            sources = [aten_records[o.node].source for o in outputs if o.node in aten_records]
            line = next((s for s in sources if s is not None), None)
            culprit = BisectCulprit(kernel=name, kind=kernel.kind, ops=list(record.ops) if record else [],
                                    max_abs_err=entry.max_abs_err, input_max_abs_err=input_err,
                                    nodes=[o.node for o in outputs if o.status == DIVERGING], user_line=line)
    diverging = [k for k in kernels_out if k.status == DIVERGING]
    return BisectRecord(status="diverges" if diverging else "clean", culprit=culprit, kernels=kernels_out,
                        nodes=node_status, compared=sum(len(k.outputs) for k in kernels_out), fp64=bool(fp64))


class Bisector:
    """Keeps each graph's first arguments during an exploration, to bisect after the run if its outputs are not
    exactly eager's (Note [Numerics bisect])."""

    def __init__(self):
        self.graphs: list = []  # (graph record, compiled, ATen graph, hints, kept args)

    def watch(self, graph_record, compiled, aten_gm, hints: dict, call: Callable) -> Callable:
        kept: list = []
        self.graphs.append((graph_record, compiled, aten_gm, hints, kept))

        def watched(args):
            if not kept:
                kept.extend(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
            return call(args)

        watched._boxed_call = True
        return watched

    def run(self, exploration) -> None:
        for graph_record, compiled, aten_gm, hints, kept in self.graphs:
            if not kept or not any(g is graph_record for g in exploration.graphs):
                continue
            start = time.perf_counter()
            try:
                graph_record.bisect = bisect_graph(graph_record, compiled, aten_gm, kept, hints)
            except Exception as error:  # noqa: BLE001 - failures as data: the bisect says it could not run
                graph_record.bisect = BisectRecord(status="failed", reason=f"{type(error).__name__}: {error}")
            graph_record.bisect.seconds = time.perf_counter() - start


def should_bisect(verify: VerifyRecord) -> bool:
    """Not exactly eager's: a mismatch, or any error at all (Note [Numerics bisect])."""
    return verify.ok is not None and (not verify.ok or (verify.max_abs_err or 0) != 0)
