"""The lowered graph: the loop IR of one graph, as lowering (engine/lowering/) leaves it for schedule and codegen."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from engine.ir import derived
from engine.ir.nodes import Buffer, Constant, InputBuffer


@dataclass
class LoweredGraph:
    """The loop IR of one graph: inputs, computed nodes in program order, and outputs."""
    inputs: list[InputBuffer | None]  # per placeholder; None for SymInt placeholders
    constants: list[Constant]
    nodes: list[Buffer]
    buffers: dict[str, Buffer]
    outputs: list[Any]  # TensorValue, sympy expr or None, in the graph's output order
    size_vars: dict[sympy.Symbol, tuple[int, int | None]]  # symbol -> (placeholder position, dim or None)
    device: str
    layout: dict = field(default_factory=dict)  # the 4D tensors' layout and why (lowering/layout.py)
    derived_sizes: dict[sympy.Symbol, Any] = field(default_factory=dict)  # symbol -> expr (Note [Derived sizes])
    host_reads_inputs: bool = False  # Note [Host work under CUDA graphs] in lowering/graph.py

    def key_positions(self) -> list[tuple[int, int | None]]:
        """(input position, dim or None) of every value a call's code depends on beyond its tensors' contents:
        the sizes, and the host scalars read by .item() (Note [CPU scalars on the GPU])."""
        return list(self.size_vars.values()) + [(p, None) for p in derived.input_items(self.derived_sizes)]

    def host_nodes(self) -> list[str]:
        """The nodes of a GPU graph computed on the CPU, as eager does (Note [Host tensors of a GPU graph] in
        lowering/graph.py)."""
        return [n.name for n in self.nodes if n.device == "cpu" and self.device != "cpu"]

    def size_symbols(self) -> list[sympy.Symbol]:
        """Every symbol a kernel may take as a size argument: the inputs' sizes, then the derived ones."""
        return list(self.size_vars) + list(self.derived_sizes)
