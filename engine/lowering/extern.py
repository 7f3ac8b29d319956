"""Library calls: matmuls, convolution and attention stay ATen kernels (Extern nodes), fed by our buffers."""
from __future__ import annotations

import torch

from engine.ir.nodes import Extern, TensorValue
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import load_as, pointwise_node
from engine.lowering.layout import channels_last_convolution
from engine.lowering.registry import current, register_lowering

aten = torch.ops.aten

EXTERN_OPS = [aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
              aten.convolution.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
              aten._scaled_dot_product_efficient_attention.default,
              aten._scaled_dot_product_flash_attention.default,
              aten.scaled_dot_product_attention.default]  # made by the attention rewrite (engine/rewrite/attention.py)
if hasattr(aten, "_scaled_dot_product_cudnn_attention"):  # what SDPA dispatches to under dynamic shapes on CUDA
    EXTERN_OPS.append(aten._scaled_dot_product_cudnn_attention.default)
if hasattr(aten, "_grouped_mm"):  # Note [Grouped GEMMs are library calls]
    EXTERN_OPS.append(aten._grouped_mm.default)

# Note [Grouped GEMMs are library calls]
# Mixture-of-experts layers (transformers' grouped experts, bfloat16 on CUDA) multiply each expert's rows by
# its weight in one aten._grouped_mm: a grouped GEMM whose group boundaries are the `offs` tensor, data known
# only at run time. Our GEMM template tiles static shapes, so the call stays the library's kernel (CUTLASS on
# sm90), fed by our buffers, as mm stays cuBLAS's: recorded as a library call, not as eager work.


# Note [Convolution bias in the epilogue]
# On CUDA, ATen runs a convolution with a bias as two kernels: cuDNN's convolution, then an elementwise add_
# of the bias (an ATen kernel of its own, ~2 us on the H200 and a launch's host time). An EfficientNet-B0 call
# had 32 of them (its squeeze-excitation convolutions), a MobileNetV3-Small call 18. So a CUDA convolution
# with a bias is lowered as the convolution without it plus a pointwise add of the bias along the channels,
# which fusion puts into the kernel that reads the convolution's output anyway, as Inductor does. The values
# are eager's: it rounds the convolution's result to its dtype before adding the bias, and so do we. On the
# CPU the libraries add the bias inside the convolution, so it stays there.


def extern_call(*args, **kwargs):
    graph = current()
    if graph.current_node.target is aten.convolution.default:
        bias = args[2]
        if str(graph.device).startswith("cuda") and isinstance(bias, TensorValue) and \
                graph.out_meta.dim() == args[1].ndim:  # batched: the channels are dim 1
            return _add_channel_bias(_convolution(graph, (*args[:2], None, *args[3:]), kwargs), bias)
        return _convolution(graph, args, kwargs)
    return graph.fallback(graph.current_node.target, args, kwargs, reason="", node_class=Extern)


def _convolution(graph, args, kwargs) -> TensorValue:
    if graph.prefers_channels_last():
        return channels_last_convolution(graph, args, kwargs)  # Note [Channels-last convolutions]
    return graph.fallback(aten.convolution.default, args, kwargs, reason="", node_class=Extern)


def _add_channel_bias(out: TensorValue, bias: TensorValue) -> TensorValue:
    """out + bias[c] over out's (N, C, ...) (Note [Convolution bias in the epilogue])."""
    compute = compute_dtype(out.dtype)
    return pointwise_node(lambda index: ops.add(load_as(out, index, compute), load_as(bias, [index[1]], compute)),
                          size=out.size, dtype=out.dtype, computed_in=compute)


register_lowering(*EXTERN_OPS)(extern_call)
