"""The Exploration record: every stage's artifact as plain data (text, numbers, lists).

The app, the CLI, the tests and reports read this record only; it crosses process boundaries as JSON.
Keys that outside scripts rely on are listed in DESIGN.md (graphs[].kernels[].name/kind/fx_origins,
graph_breaks[], verify, timings, errors[]).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GraphRecord:
    index: int
    fx: list[dict] = field(default_factory=list)  # Dynamo's graph: one dict per node
    aten: list[dict] = field(default_factory=list)  # the functional ATen graph
    ir: dict = field(default_factory=dict)  # {"text", "nodes": [...]}
    fusion: dict = field(default_factory=dict)  # {"decisions": [...], "unused": [IR node names in no kernel]}
    memory: dict = field(default_factory=dict)
    kernels: list[dict] = field(default_factory=list)
    code: dict = field(default_factory=dict)  # {"language", "source", "wrapper", "provenance"}
    timings: dict = field(default_factory=dict)  # seconds per stage for this graph
    cache_hit: bool = False
    profile: dict = field(default_factory=dict)  # with --profile: call_ms, kernels_ms, overhead_ms (engine/profile.py)
    phase: str = "inference"  # "inference", or in training "forward" / "backward" (engine/partition.py)
    partition: dict = field(default_factory=dict)  # forward graph: saved/recomputed values; backward: its forward


@dataclass
class Exploration:
    model: str
    backend: str
    device: str
    source: dict = field(default_factory=dict)  # {"filename", "text"}
    description: str = ""
    inputs: str = ""  # the example inputs, e.g. "float32[64, 1024], float32[1024]"
    options: dict = field(default_factory=dict)
    graphs: list[GraphRecord] = field(default_factory=list)
    graph_breaks: list[dict] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    recompiles: list[dict] = field(default_factory=list)
    verify: dict = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)  # extra input sets (dynamic shapes): shapes + verify
    timings: dict = field(default_factory=dict)
    bench: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)  # with --profile: measured copy GB/s and matmul GFLOP/s (roofline)
    errors: list[dict] = field(default_factory=list)

    def add_time(self, stage: str, seconds: float) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds

    @property
    def kernels(self) -> list[dict]:
        return [k for g in self.graphs for k in g.kernels]

    def to_json(self) -> dict:
        return _plain(dataclasses.asdict(self))

    def dumps(self, **kwargs) -> str:
        return json.dumps(self.to_json(), **kwargs)


def _plain(value: Any) -> Any:
    """Only JSON types: anything else becomes its string."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)
