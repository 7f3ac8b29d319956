#!/usr/bin/env python3
"""The host cost of our generated CUDA wrapper for zoo models at their GPU sizes, measured on any machine.

    python scripts/wrapper_cost.py tv_resnet50,timm_efficientnet_b0 [--mode default]

A model that is host bound on a GPU (ResNet-50 in default mode: ~120 library calls and launches a call) spends
its time in the wrapper's Python, the library calls' host side and the kernels' launches. This script measures
the first part without a GPU: the zoo model at its real size and dtype is captured, lowered and generated for
CUDA (lower, schedule, codegen: no build), then its wrapper runs on meta tensors with every generated kernel a
no-op, every library or eager call a stub returning a tensor of the promised size and strides, and every
allocation a lookup (counted, not timed: _allocation_stub). What is left is the wrapper's own work per call:
views, layout checks, argument passing, frees, the Python of each statement. The figure moves with every change
to the wrapper; it prints the count of each kind of wrapper statement too.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

CALLS, ROUNDS = 100, 5


def aten_graphs(model, inputs) -> list:
    """(functional ATen graph, fake inputs) of each inference graph Dynamo captures from the model."""
    from engine.decompose import aot_compile

    graphs = []

    def backend(gm, example_inputs):
        def inference(aten_gm, fake_inputs):
            graphs.append((aten_gm, fake_inputs))
            return aten_gm
        return aot_compile(gm, example_inputs, inference, None, None, inference_compiler=inference)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(*inputs)
    return graphs


def _stub(node):
    """A library call's stand-in: the promised output (a meta tensor), allocated once."""
    from engine.ir.nodes import MultiOutput

    out = torch.empty_strided([int(s) for s in node.size], [int(s) for s in node.stride], dtype=node.dtype,
                              device="meta") if node.size else None
    return lambda *args, **kwargs: out if not isinstance(node, MultiOutput) else None


def _allocation_stub():
    """Allocations as lookups of tensors made once: the meta device's empty_strided goes through a slower path
    than the CUDA caching allocator's fast one (and is slower still for channels-last strides), so the figure
    leaves allocation out and counts the allocations instead."""
    made: dict = {}

    def allocate(size, stride, dtype):
        key = (size, stride, dtype)
        if key not in made:
            made[key] = torch.empty_strided(size, stride, dtype=dtype, device="meta")
        return made[key]
    return allocate


def wrapper_us(gm, fake_inputs, mode: str) -> tuple[float, dict]:
    """(median microseconds of one wrapper call with kernels and library calls stubbed, statement counts)."""
    from engine.pipeline import AtenGraph, Options, stage_named
    from engine.runtime.wrapper import wrapper_namespace

    options = Options(backend="triton", device="cuda", mode=mode)
    artifact = AtenGraph(gm, list(fake_inputs))
    for stage in ("lower", "schedule", "codegen"):
        artifact = stage_named(stage).fn(artifact, options)
    graph = artifact.scheduled.lowered.graph
    # captured on the meta device, the inputs are "on another device" than the kernels: on a GPU they are not
    source = "\n".join(line for line in artifact.wrapper.source.splitlines()
                       if "input read by a kernel on" not in line) + "\n"
    namespace = wrapper_namespace(artifact.wrapper)
    namespace["empty_strided_cuda"] = _allocation_stub()
    namespace["raw_stream"] = lambda index: 0
    for kernel in artifact.module.kernels:
        namespace[kernel.name] = lambda *args: None
    for node in graph.nodes:
        if f"op_{node.name}" in namespace:
            namespace[f"op_{node.name}"] = _stub(node)
    exec(compile(source, "<wrapper>", "exec"), namespace)
    call = namespace["call"]
    args = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor)
            else t for t in fake_inputs]
    rounds = []  # the fastest round's median: a busy machine slows some rounds, never speeds one up
    for _ in range(ROUNDS):
        times = []
        for _ in range(CALLS):
            start = time.perf_counter()
            call(list(args))
            times.append(time.perf_counter() - start)
        rounds.append(sorted(times)[len(times) // 2])
    body = source.splitlines()
    counts = {"statements": len([line for line in body if line.startswith("    ") and not line.strip().startswith("#")]),
              "allocations": sum("empty_strided_cuda(" in line for line in body),
              "strided_views": sum(len(re.findall(r"strided_view\(", line)) for line in body),
              "with_layout": sum("with_layout(" in line for line in body),
              "library_or_eager_calls": sum(bool(re.search(r"= op_buf\d+\(", line)) for line in body),
              "kernel_launches": len(artifact.module.kernels)}
    return min(rounds) * 1e6, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", help="comma-separated zoo case names (engine/tools/zoo.py)")
    parser.add_argument("--mode", default="default")
    args = parser.parse_args()
    from engine.tools.zoo import missing_library, zoo_cases

    for case in zoo_cases():
        if case.name not in args.names.split(","):
            continue
        if missing_library(case):
            print(f"{case.name}: skipped, {missing_library(case)}")
            continue
        torch.manual_seed(0)
        model, inputs = case.build(False)  # the GPU's sizes
        # on the meta device: capture runs the model without computing anything
        model = model.to(device="meta", dtype=case.dtype).eval()
        inputs = tuple(x.to(device="meta", dtype=case.dtype if x.is_floating_point() else x.dtype) for x in inputs)
        for index, (gm, fake_inputs) in enumerate(aten_graphs(model, inputs)):
            us, counts = wrapper_us(gm, fake_inputs, args.mode)
            print(f"{case.name} graph {index} ({args.mode}): wrapper {us:.1f} us per call, {counts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
