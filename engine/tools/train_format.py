"""CLI text for training explorations: a graph's phase and partition, the gradient checks (cli_format calls in)."""
from __future__ import annotations

from engine.record import GraphRecord, VerifyRecord
from engine.tools.units import human_bytes


def _bytes(count) -> str:
    return human_bytes(count)


def partition_lines(graph: GraphRecord, verbose: bool) -> list[str]:
    """Under a forward graph: what it saves for the backward and what the backward recomputes."""
    partition = graph.partition
    if graph.phase == "backward":
        forward = partition.forward_graph
        return [f"  Backward of graph {'?' if forward is None else forward}"]
    if partition.saved is None:
        return []
    saved, recomputed = partition.saved, partition.recomputed or []
    lines = [f"  Partition: saves {len(saved)} values, {_bytes(partition.saved_bytes)} of activations "
             f"(saving all the backward reads: {_bytes(partition.saved_all_bytes)}); "
             f"recomputes {len(recomputed)} ops in the backward"]
    if verbose:
        lines += [f"    saved {s.name} {s.dtype}{s.shape} [{_bytes(s.bytes)}]: {s.reason}" for s in saved]
        lines += [f"    recomputed {r.name} ({r.op}): {r.reason}" for r in recomputed]
    return lines


def gradient_lines(verify: VerifyRecord) -> list[str]:
    """Loss, gradients and buffers that failed, and what was skipped."""
    if verify.gradients is None:
        return []
    checked = ([verify.loss] if verify.loss else []) + verify.gradients + (verify.buffers or [])
    failed = [e for e in checked if not e.ok]
    lines = [f"  Training step: loss and {len(verify.gradients)} gradients checked, {len(failed)} failed"]
    for entry in failed:
        lines.append(f"    {entry.name}: max abs err {entry.max_abs_err} {entry.problem or ''}")
    lines += [f"  Note: {note}" for note in verify.notes or []]
    return lines


def bench_lines(cases: list[dict]) -> list[str]:
    """Under a bench table: what each training step's forward saves for its backward (engine/tools/train_bench.py)."""
    lines = []
    for case in cases:
        saved = case.get("saved_bytes") or {}
        if case.get("train") and saved:
            mode = case.get("mode", "default")
            lines.append(f"{case.get('name', '?')}{'' if mode == 'default' else f' ({mode})'}: training step; "
                         "activations saved for the backward: "
                         + ", ".join(f"{who} {_bytes(count)}" for who, count in saved.items()))
    if lines:
        lines.append("a training step: gradients cleared, forward, loss, backward; every gradient checked first")
    return lines
