"""How the engine's own stages scale with graph size: lower, schedule (fusion + memory plan) and codegen.

    python scripts/scale_bench.py                      # chains of 100/500/2000 ops, a long epilogue, 24 layers
    python scripts/scale_bench.py --chain 2000 --layers 0 --no-codegen
    python scripts/scale_bench.py --chain 0 --layers 24 --model swin

Each case is captured once (Dynamo + AOTAutograd, not timed), then every stage runs on that one ATen graph and
is timed with perf_counter. These are compiler costs, so one run per case is enough to see a superlinear stage;
absolute seconds depend on the machine. The 24-layer model is a BERT-style encoder (samples/bert_encoder.py's
layer, stacked); `--model swin` is Hugging Face's SwinModel from a small random config instead.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))

from engine import codegen  # noqa: E402
from engine.lowering.graph import lower  # noqa: E402
from engine.pipeline import size_hints  # noqa: E402
from engine.schedule.fusion import schedule  # noqa: E402
from engine.schedule.memory import plan_memory  # noqa: E402
from engine.tools.aten_graphs import capture_aten  # noqa: E402


def _alternate(x, n: int):
    for _ in range(n // 2):
        x = x * 1.0001
        x = x + 0.001
    return x


def chain(n: int):
    """n pointwise ATen ops in a row (alternating mul and add), one input."""
    return (lambda x: _alternate(x, n)), (torch.randn(64, 128),)


def epilogue(n: int):
    """A row sum, then n elementwise ops on every element that read it: one reduction kernel with a long epilogue."""
    return (lambda x: _alternate(x - x.sum(-1, keepdim=True), n)), (torch.randn(64, 128),)


def encoder(layers: int):
    from samples.bert_encoder import EncoderLayer

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(EncoderLayer(64, 4) for _ in range(layers))

        def forward(self, x):
            keep = torch.ones(1, 1, 1, x.shape[1], dtype=torch.bool)
            for layer in self.layers:
                x = layer(x, keep)
            return x

    torch.manual_seed(0)
    return Encoder().eval(), (torch.randn(2, 32, 64),)


def swin(layers: int):
    from transformers import SwinConfig, SwinModel
    depths = [2, 2, max(layers - 6, 2), 2]
    config = SwinConfig(image_size=224, patch_size=4, embed_dim=32, depths=depths, num_heads=[1, 2, 4, 8],
                        window_size=7)  # swin_t's geometry (56x56 patches, 7x7 windows), narrower
    torch.manual_seed(0)
    model = SwinModel(config).eval()
    return (lambda pixel_values: model(pixel_values).last_hidden_state), (torch.randn(1, 3, 224, 224),)


def time_stages(graphs, backend_name: str, with_codegen: bool) -> dict:
    backend = codegen.backend(backend_name)
    times = {"lower": 0.0, "schedule": 0.0, "codegen": 0.0}
    counts = {"ir_nodes": 0, "kernels": 0}
    for aten_gm, aten_inputs in graphs:
        start = time.process_time()
        lowered = lower(aten_gm, "cpu")
        times["lower"] += time.process_time() - start
        start = time.process_time()
        scheduled = schedule(lowered)
        plan_memory(scheduled.kernels, lowered, size_hints(lowered, aten_inputs))
        times["schedule"] += time.process_time() - start
        counts["ir_nodes"] += len(lowered.nodes)
        counts["kernels"] += len(scheduled.kernels)
        if with_codegen:
            start = time.process_time()
            try:
                backend.generate_module(scheduled.kernels, lowered.buffers, list(lowered.size_vars))
            except RecursionError:
                times["codegen"] = float("nan")
            else:
                times["codegen"] += time.process_time() - start
    if not with_codegen:
        times.pop("codegen")
    return {**counts, **{k: round(v, 3) for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", type=int, nargs="*", default=[100, 500, 2000], help="chain lengths (ops)")
    parser.add_argument("--epilogue", type=int, nargs="*", default=[500], help="epilogue lengths after a reduction")
    parser.add_argument("--layers", type=int, default=24, help="layers of the model case (0: none)")
    parser.add_argument("--model", choices=["encoder", "swin"], default="encoder")
    parser.add_argument("--backend", choices=["cpp", "triton"], default="cpp")
    parser.add_argument("--no-codegen", action="store_true", help="time lower and schedule only")
    args = parser.parse_args()
    cases = [(f"chain_{n}", chain(n)) for n in args.chain if n] + \
        [(f"sum_then_{n}_ops", epilogue(n)) for n in args.epilogue if n]
    if args.layers:
        cases.append((f"{args.model}_{args.layers}_layers", (encoder if args.model == "encoder" else swin)(args.layers)))
    for name, (model, inputs) in cases:
        graphs = capture_aten(model, *inputs)
        result = time_stages(graphs, args.backend, not args.no_codegen)
        print(name, " ".join(f"{k}={v}" for k, v in result.items()), flush=True)


if __name__ == "__main__":
    main()
