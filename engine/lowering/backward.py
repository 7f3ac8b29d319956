"""Backward ops that stay library calls in training graphs.

Most backward ops of a joint graph leave AOTAutograd already decomposed by the core ATen table into pointwise
ops and reductions we lower and fuse (threshold_backward becomes `where(x <= 0, 0, grad)`,
native_layer_norm_backward and native_batch_norm_backward become reductions + pointwise, gelu_backward pointwise
math). What is left is the gradient of a library call: a convolution's gradient is two more convolutions (input
and weight), attention's gradient is the attention kernel's own backward; and embedding_dense_backward (below).
These are Extern nodes like their forward ops (extern.py): an ATen kernel fed by our buffers, shown as a library
call, never a Fallback.

Note [Embedding backward as a library call]
An embedding's weight gradient adds each token's output gradient into the row of its token id: a scatter-add.
Decomposed, it is an index_put with accumulation, which we generate as a search (Note [Scatter as a search] in
scatters.py): every weight element looks through all the tokens for its id, vocab x tokens x dim work, where
the scatter is tokens x dim. On the gpt_decoder sample that search was the slowest backward kernel (a quarter of
the backward's kernel time on the CPU), and at a Llama vocabulary it would be thousands of times the work. A
loop over the output cannot scatter without atomics, which our kernels do not have; ATen's kernel scatters
(sorting the ids on CUDA), so decompose.py keeps the op whole and it runs as a library call.
"""
from __future__ import annotations

import torch

from engine.lowering.extern import extern_call
from engine.lowering.registry import register_lowering

aten = torch.ops.aten

BACKWARD_LIBRARY_OPS = [
    aten.convolution_backward.default,
    aten.embedding_dense_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_flash_attention_backward.default,
]
if hasattr(aten, "_scaled_dot_product_cudnn_attention_backward"):
    BACKWARD_LIBRARY_OPS.append(aten._scaled_dot_product_cudnn_attention_backward.default)

register_lowering(*BACKWARD_LIBRARY_OPS)(extern_call)
