"""GPU diagnosis of the column form (engine/codegen/triton/config.py): every column-form kernel of a few
reductions over a non-innermost axis, timed with triton.testing.do_bench (as `bench gpu` times whole calls)
under a grid of launch configs, beside the heuristic's config and Inductor's whole call. It decides the
column form's config heuristic from measurements instead of guesses:

    python scripts/column_sweep.py [--only nchw_sum_dim1,...]
    python scripts/column_sweep.py --only bias_grad_bf16_4096 --row-bytes 16384,32768,65536,131072 --most 2

Each line: the config (XBLOCK, RBLOCK, num_warps, num_stages), its median ms and GB/s of the kernel's input
bytes; the heuristic's config is marked. Each case ends with the sum of its column kernels' times at the
heuristic's configs (a split's two stages). --row-bytes compiles each case again for each value of
engine/schedule/policy.COLUMN_ROW_BYTES (the width in bytes below which a column reduction splits, and the
width of its stage 1's rows: Note [Column splits by bytes]), to time other part counts. Without a GPU it
says so and stops.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

F32, BF16, CHANNELS_LAST = torch.float32, torch.bfloat16, torch.channels_last
CASES = {  # name -> (model, input shape, dtype[, memory format]): the column classes of issue 10, neighbours
    "nchw_sum_dim1": (lambda x: x.sum(1), (32, 256, 56, 56), F32),
    "nchw_sum_dim1_c1024": (lambda x: x.sum(1), (32, 1024, 14, 14), F32),
    "nchw_sum_dim1_c32": (lambda x: x.sum(1), (32, 32, 112, 112), F32),
    "column_sum": (lambda x: x.sum(0), (8192, 8192), F32),
    "se_channels_last": (lambda x: x * x.mean((2, 3), keepdim=True), (32, 256, 56, 56), F32, CHANNELS_LAST),
    # the bias gradients of the bf16 transformer block's backward (B*T = 8192 rows): split by bytes into a
    # column stage 1 and a combine (Note [Column splits by bytes]); both stages are swept
    "bias_grad_bf16_4096": (lambda x: x.sum(0), (8192, 4096), BF16),
    "bias_grad_bf16_3072": (lambda x: x.sum(0), (8192, 3072), BF16),
    "bias_grad_bf16_1024": (lambda x: x.sum(0), (8192, 1024), BF16),
}


def sweep_configs(rows: int, red: int, masked_x: bool, masked_r: bool):
    """(XBLOCK, RBLOCK, num_warps, num_stages) with 4..16 values a thread a step; blocks must divide an
    unmasked axis (the source has no mask there)."""
    configs = []
    for x in (16, 32, 64, 128):
        for r in (4, 8, 16, 32, 64):
            for warps in (2, 4, 8):
                per_thread = x * r // (32 * warps)
                if not 4 <= per_thread <= 16:
                    continue
                if (not masked_x and rows % x) or (not masked_r and red % r) or r > red:
                    continue
                configs.append((x, r, warps, 1))
    return configs


def kernel_tensors(kernel, graph, inputs: list, device: str) -> list:
    names = {buffer.name: inputs[buffer.position] for buffer in graph.inputs if buffer is not None}
    tensors = []
    for name in kernel.args:
        if name in names:
            tensors.append(names[name])
            continue
        buffer = graph.buffers[name]
        shape = [int(s) for s in buffer.size]
        tensors.append(torch.randn(shape, device=device).to(buffer.dtype) if buffer.dtype.is_floating_point
                       else torch.zeros(shape, device=device, dtype=buffer.dtype))
    return tensors


def load_module(source: str):
    path = Path(tempfile.mkdtemp()) / "column_sweep_kernels.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("column_sweep_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_case(name: str, model, shape, dtype, memory_format, do_bench, device: str, most: int | None) -> float:
    """Sweep each column kernel of model(x); the sum of their times at the heuristic's configs."""
    from engine.pipeline import AtenGraph, Options, stage_named
    from engine.tools.aten_graphs import capture_aten

    x = torch.randn(shape, device=device).to(dtype=dtype, memory_format=memory_format)
    if device == "cuda":
        inductor = torch.compile(model)
        inductor(x)
        whole = do_bench(lambda: inductor(x), warmup=10, rep=100, return_mode="median")
        print(f"== {name} {tuple(shape)} {dtype}: Inductor whole call {whole:.4f} ms", flush=True)
    options = Options(backend="triton", device=device)
    total = 0.0
    for gm, fake_inputs in capture_aten(model, x):
        artifact = AtenGraph(gm, list(fake_inputs))
        for stage in ("lower", "schedule", "codegen"):
            artifact = stage_named(stage).fn(artifact, options)
        graph, module = artifact.scheduled.lowered.graph, artifact.module
        jit_module = load_module(module.source)
        for kernel in module.kernels:
            if getattr(kernel, "form", None) != "column" or kernel.size_args:
                continue
            rows, red = int(kernel.rows), int(kernel.red)
            tensors = kernel_tensors(kernel, graph, [x], device)
            moved = sum(t.numel() * t.element_size() for t in tensors)
            function = getattr(jit_module, kernel.name)
            heuristic = (kernel.config.XBLOCK, kernel.config.RBLOCK, kernel.config.num_warps, 3)
            print(f"  {kernel.name}: rows {rows}, red {red}, {moved / 1e6:.1f} MB, heuristic {heuristic}", flush=True)
            masked = ("xmask" in kernel.source, "rmask" in kernel.source)
            results = []
            configs = [heuristic, heuristic[:3] + (1,)] + sweep_configs(rows, red, *masked)
            for xb, rb, warps, stages in configs[:most]:
                grid = (-(-rows // xb),)

                def launch(xb=xb, rb=rb, warps=warps, stages=stages):
                    function[grid](*tensors, XBLOCK=xb, RBLOCK=rb, num_warps=warps, num_stages=stages)
                try:
                    launch()
                    ms = do_bench(launch, warmup=5, rep=25, return_mode="median")
                except Exception as error:  # noqa: BLE001 - a config that does not compile is reported, not fatal
                    print(f"    {(xb, rb, warps, stages)} failed: {str(error)[:120]}")
                    continue
                results.append((ms, (xb, rb, warps, stages)))
            total += next((ms for ms, config in results if config == heuristic), 0.0)
            best = sorted(results)[:8]
            for ms, config in best + [r for r in results if r[1] == heuristic and r not in best]:
                mark = "  <- heuristic" if config == heuristic else ""
                print(f"    {str(config):22s} {ms:.4f} ms  {moved / ms / 1e6:7.0f} GB/s{mark}", flush=True)
    print(f"  {name}: column kernels at the heuristic's configs {total:.4f} ms", flush=True)
    return total


def dry_bench(fn, warmup, rep, return_mode) -> float:
    import time

    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: 16-wide shapes, 3 configs, interpreter")
    parser.add_argument("--row-bytes", help="comma-separated values of policy.COLUMN_ROW_BYTES to compile with")
    parser.add_argument("--most", type=int, default=None, help="time at most this many configs a kernel")
    args = parser.parse_args()
    if args.dry_run:
        import os
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("column_sweep: CUDA is not available here; --dry-run checks the script on the CPU.")
        return 2
    from triton.testing import do_bench

    if args.dry_run:
        do_bench = dry_bench  # noqa: F811 - the interpreter has no device timer

    wanted = args.only.split(",") if args.only else list(CASES)
    if set(wanted) - set(CASES):
        parser.error(f"unknown cases {sorted(set(wanted) - set(CASES))}; choose from {', '.join(CASES)}")
    from engine.schedule import policy

    widths = [int(w) for w in args.row_bytes.split(",")] if args.row_bytes else [policy.COLUMN_ROW_BYTES]
    for width in widths:
        policy.COLUMN_ROW_BYTES = width  # read at each call of policy.wants_column_split and split.split_parts
        if args.row_bytes:
            print(f"=== COLUMN_ROW_BYTES {width}", flush=True)
        for name in wanted:
            model, shape, dtype, *memory_format = CASES[name]
            shape = tuple(min(d, 16) for d in shape) if args.dry_run else shape
            torch._dynamo.reset()
            with torch.no_grad():
                sweep_case(name, model, shape, dtype, (memory_format or [torch.contiguous_format])[0], do_bench,
                           "cpu" if args.dry_run else "cuda", args.most or (3 if args.dry_run else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
