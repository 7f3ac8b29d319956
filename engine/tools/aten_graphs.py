"""The ATen graphs our backend would receive for a call, without compiling them (for scripts and tests that
look at one compiler stage at a time)."""
from __future__ import annotations

from typing import Callable

import torch

from engine.decompose import aot_compile


def capture_aten(fn: Callable, *inputs) -> list[tuple[torch.fx.GraphModule, list]]:
    """(ATen graph, its fake inputs) for each graph Dynamo + AOTAutograd make of fn(*inputs); fn runs once,
    each graph eagerly."""
    graphs = []

    def backend(gm, example_inputs):
        def fw_compiler(aten_gm, aten_inputs):
            graphs.append((aten_gm, aten_inputs))
            return aten_gm

        return aot_compile(gm, example_inputs, fw_compiler)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=backend)(*inputs)
    return graphs
