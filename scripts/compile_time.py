#!/usr/bin/env python3
"""Where a catalog model's compile time goes on the GPU path, measured on any machine (reports/compile_time.md).

    python scripts/compile_time.py tv_maxvit_t[,tv_swin_v2_t,...] [--ptx] [--out FILE]

The model is built at its real size and dtype on the meta device (capture computes nothing, as in
scripts/wrapper_cost.py), captured by Dynamo and AOTAutograd (`capture_s`), then each inference graph goes
through our lower, schedule and codegen stages for the Triton backend on "cuda" (no build): each stage's wall
and CPU seconds. With --ptx, every generated kernel is then compiled for sm_90 as the GPU's first call does,
one after another (triton.compile with an explicit target, ptxas from the Triton wheel: Triton's MLIR passes
plus ptxas, no GPU needed; a fresh TRITON_CACHE_DIR makes it cold), and the seconds are summed. Prints one
JSON object per model; the machine's load average goes with it, since CPU seconds grow on a busy machine too.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from wrapper_cost import aten_graphs  # noqa: E402  (scripts/ is this file's folder)


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds; CPU counts finished child processes too (ptxas)."""
    return time.perf_counter(), sum(os.times()[:4])


def since(start: tuple[float, float]) -> dict:
    wall, cpu = clocks()
    return {"wall_s": round(wall - start[0], 2), "cpu_s": round(cpu - start[1], 2)}


def compile_requests(module) -> list[tuple]:
    """(kernel, signature, constants, num_warps) of each kernel as the GPU launches it by default."""
    found = []
    for kernel in module.kernels:
        fields = kernel.record_fields()
        if "template" in fields:
            record = fields["template"]
            found.append((kernel, record.signature, record.display["constants"], record.display["num_warps"]))
        elif "triton" in fields:
            config = fields["triton"].gpu_config
            constants = {k: v for k, v in config.items() if k in ("XBLOCK", "YBLOCK", "RBLOCK")}
            found.append((kernel, fields["triton"].signature, constants, config.get("num_warps", 4)))
    return found


def ptx_seconds(module) -> dict:
    """Each kernel through triton.compile for sm_90, as engine/codegen/triton/assembly.py does for display, less
    the disassembly: the build a GPU's first launch waits for."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from engine.codegen.triton.assembly import SM90
    from engine.runtime.triton_build import load_source

    imported, _ = load_source(module.source, interpret=False)
    start, errors = clocks(), 0
    for kernel, signature, constants, num_warps in compile_requests(module):
        aligned = {(i,): [["tt.divisibility", 16]] for i, kind in enumerate(signature.values()) if kind.startswith("*")}
        try:
            source = ASTSource(getattr(imported, kernel.name), dict(signature), constexprs=dict(constants),
                               attrs=aligned)
            triton.compile(source, target=GPUTarget(*SM90), options={"num_warps": num_warps, "enable_fp_fusion": True})
        except Exception:  # noqa: BLE001 - counted: this is a measurement, not a build
            errors += 1
    return {**since(start), "kernels": len(module.kernels), "errors": errors}


def measure(name: str, ptx: bool) -> dict:
    from engine.pipeline import AtenGraph, Options, stage_named
    from engine.tools import model_catalog

    entry = model_catalog.by_name()[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model, inputs = entry.build(model_catalog.REAL)
    model = model.to(device="meta", dtype=entry.dtype).eval()
    inputs = tuple(x.to(device="meta", dtype=entry.dtype if x.is_floating_point() else x.dtype) for x in inputs)
    start = clocks()
    graphs = aten_graphs(model, inputs)
    result = {"model": name, "capture": since(start), "graphs": len(graphs), "stages": {}, "kernels": 0}
    options, sources = Options(backend="triton", device="cuda"), hashlib.sha256()
    for gm, fake_inputs in graphs:
        artifact = AtenGraph(gm, list(fake_inputs))
        for stage in ("rewrite", "lower", "schedule", "codegen"):
            start = clocks()
            artifact = stage_named(stage).fn(artifact, options)
            spent = result["stages"].setdefault(stage, {"wall_s": 0.0, "cpu_s": 0.0})
            for key, value in since(start).items():
                spent[key] = round(spent[key] + value, 2)
        result["kernels"] += len(artifact.module.kernels)
        sources.update((artifact.module.source + artifact.wrapper.source).encode())  # same code, same digest
        if ptx:
            for key, value in ptx_seconds(artifact.module).items():
                result.setdefault("ptx", {})[key] = round(result.get("ptx", {}).get(key, 0) + value, 2)
    result["source_sha"] = sources.hexdigest()[:16]
    result["load"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", help="catalog model names, comma-separated")
    parser.add_argument("--ptx", action="store_true", help="also compile every kernel for sm_90, one at a time")
    parser.add_argument("--out", help="append each model's JSON line to this file")
    args = parser.parse_args()
    for name in args.names.split(","):
        line = json.dumps(measure(name, args.ptx))
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as handle:
                handle.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
