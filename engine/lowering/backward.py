"""Backward ops that stay whole in training graphs: library calls, and the embedding's weight gradient.

Most backward ops of a joint graph leave AOTAutograd already decomposed by the core ATen table into pointwise
ops and reductions we lower and fuse (threshold_backward becomes `where(x <= 0, 0, grad)`,
native_layer_norm_backward and native_batch_norm_backward become reductions + pointwise, gelu_backward pointwise
math). What is left is the gradient of a library call: a convolution's gradient is two more convolutions (input
and weight), attention's gradient is the attention kernel's own backward. These are Extern nodes like their
forward ops (extern.py): an ATen kernel fed by our buffers, shown as a library call, never a Fallback. And
embedding_dense_backward, which we generate (below).

Note [Embedding backward as an atomic add]
An embedding's weight gradient adds each token's output gradient into the row of its token id: a scatter-add.
Decomposed, it is an index_put with accumulation, and as a search (Note [Scatter as a search] in scatters.py)
every weight element would look through all the tokens for its id, vocab x tokens x dim work where the
scatter is tokens x dim (on the gpt_decoder sample that search was the slowest backward kernel; at a Llama
vocabulary it is thousands of times the work). So decompose.py keeps the op whole and it is lowered here as a
Scatter node (Note [Accumulating stores] in ir/nodes.py): the wrapper zeroes a float32 buffer, one kernel over
the tokens and the embedding dim adds each gradient element into row `id` (an atomic add; the gradient's
elementwise producers computed inside it), and a pointwise node rounds to the weight's dtype: Inductor's
three kernels. Before, the op was ATen's library call: on an H200, a bf16 Llama-style training step (vocab
8192, 4096 tokens) spent 0.51 ms of host time per step in it and ~12 launches (CUDA sorts the ids with cub,
then reduces runs of equal ids), where the step is host-bound.
- padding_idx: its tokens add nothing (masked off, as eager skips them);
- ids outside [0, num_weights) are ignored (masked off: never an address outside the buffer); eager's forward
  already raised for them;
- scale_grad_by_freq=True divides each token's gradient by its id's count in the batch, a second scatter
  whose result the first reads: that stays ATen's library call (rare in models, and counted in one kernel there);
- under torch.use_deterministic_algorithms(True) it is the library call too (float atomics add in no fixed
  order; ATen's kernel is deterministic).
"""
from __future__ import annotations

import torch

from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import load_as, out_dtype, out_size, pointwise_node
from engine.lowering.extern import extern_call
from engine.lowering.layout import channels_last_convolution_backward
from engine.lowering.registry import current, register_lowering
from engine.lowering.scatters import ATOMIC_ADD_DTYPES, checked_position, scatter_node

aten = torch.ops.aten

BACKWARD_LIBRARY_OPS = [  # and convolution_backward (below)
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_flash_attention_backward.default,
]
if hasattr(aten, "_scaled_dot_product_cudnn_attention_backward"):
    BACKWARD_LIBRARY_OPS.append(aten._scaled_dot_product_cudnn_attention_backward.default)

register_lowering(*BACKWARD_LIBRARY_OPS)(extern_call)


@register_lowering(aten.convolution_backward.default)
def convolution_backward(*args, **kwargs):
    graph = current()
    if graph.prefers_channels_last():  # Note [Channels-last training graphs]
        return channels_last_convolution_backward(graph, args, kwargs)
    return extern_call(*args, **kwargs)


@register_lowering(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """Note [Embedding backward as an atomic add]: weight_grad[indices[t], d] += grad[t, d]."""
    result_dtype = out_dtype()
    acc = compute_dtype(result_dtype)
    if scale_grad_by_freq or acc not in ATOMIC_ADD_DTYPES or torch.are_deterministic_algorithms_enabled():
        return extern_call(grad, indices, num_weights, padding_idx, scale_grad_by_freq)
    size = out_size()
    k = indices.ndim

    def body(index):
        token = indices.load(list(index[:k]))
        row, keep = checked_position(token, size[0], wrap=False)
        if isinstance(padding_idx, int) and padding_idx >= 0:
            keep = ops.logical_and(keep, ops.ne(token if token.dtype == torch.int64 else
                                                ops.to_dtype(token, torch.int64),
                                                ops.constant(padding_idx, torch.int64)))
        return [row, index[k]], load_as(grad, index, acc), keep

    added = scatter_node(size, acc, grad.size, body)
    if acc == result_dtype:
        return added
    return pointwise_node(lambda index: added.load(index))  # rounded to the gradient's dtype
