"""Library calls: matmuls, convolution and attention stay ATen kernels (Extern nodes), fed by our buffers."""
from __future__ import annotations

import torch

from engine.ir.nodes import Extern
from engine.lowering.layout import channels_last_convolution
from engine.lowering.registry import current, register_lowering

aten = torch.ops.aten

EXTERN_OPS = [aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
              aten.convolution.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
              aten._scaled_dot_product_efficient_attention.default,
              aten._scaled_dot_product_flash_attention.default]


def extern_call(*args, **kwargs):
    graph = current()
    if graph.current_node.target is aten.convolution.default and graph.prefers_channels_last():
        return channels_last_convolution(graph, args, kwargs)  # Note [Channels-last convolutions]
    return graph.fallback(graph.current_node.target, args, kwargs, reason="", node_class=Extern)


register_lowering(*EXTERN_OPS)(extern_call)
