"""Ops real models run that we decline to generate, each with the reason its Fallback shows (issue 29's
held-out sweep: mixture-of-experts routing). Registered so that the reason is ours, not 'no lowering'.

Note [Sorting runs eagerly]
A stable sort is generated as ranks (Note [Stable sort as ranks] in lowering/sorting.py). topk and an
unstable sort (torch.sort's default, which MoE layers call on their expert ids) are not: ranks give ties
in their positions' order, and eager's CPU kernels leave ties in their algorithm's order (a partial sort
for topk, introsort for sort): over 400 rows of small integers (ties everywhere) eager's indices differed
from the positions' order in 388. The values would be eager's, the indices equally valid but not eager's,
and a model that returns or compares them could not be checked. MoE routers call topk over the experts of
each token (8-64 values a row): a few microseconds of a step. Inductor falls back for topk too.
histc has a lowering of its own (Note [Histogram as a reduction per bin] in lowering/histogram.py).
"""
from __future__ import annotations

import torch

from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten


@register_lowering(aten.sort.default, aten.topk.default)
def sort(*args, **kwargs):
    raise Unsupported("sorting (topk, or sort without stable=True) runs eagerly: eager leaves ties in its "
                      "algorithm's order, which generated ranks (positions' order) would not reproduce, so "
                      "the indices could not be checked against eager; a stable sort is generated (Note "
                      "[Sorting runs eagerly] in engine/lowering/declined.py)")


# Note [Random numbers run eagerly]
# A random op (rand, randn, bernoulli, dropout's mask, ...) runs eager's kernel on eager's generator, in the
# graph's order, which is the model's: the compiled model then draws the very numbers eager draws from the same
# state, so its outputs and a training step's gradients can be checked against eager (Note [Same RNG state] in
# engine/train_verify.py). Generated random numbers (Inductor's Philox streams) would be other numbers, and a
# model using them could only be called random, never verified. The draws are a small part of any model's time.
RANDOM_OPS = {aten.rand.default, aten.rand_like.default, aten.randn.default, aten.randn_like.default,
              aten.bernoulli.default, aten.bernoulli.p, aten.native_dropout.default, aten.randint.default,
              aten.randint.low, aten.randint_like.default, aten.normal.Tensor_float, aten.normal.float_Tensor,
              aten.normal.Tensor_Tensor, aten.normal.float_float, aten.uniform.default, aten.exponential.default,
              aten.multinomial.default, aten.randperm.default}


@register_lowering(*RANDOM_OPS)
def random_numbers(*args, **kwargs):
    raise Unsupported("random numbers are drawn by eager's kernel from eager's generator, so the compiled model "
                      "draws the numbers eager draws and can be checked against it (Note [Random numbers run "
                      "eagerly] in engine/lowering/declined.py)")


# Note [Custom ops run as written]
# An op registered through torch.library by a library (a namespace other than aten and prims) reaches the
# graph as one call: Dynamo and AOTAutograd do not trace into its body, so there is nothing to lower and its
# own implementation runs. transformers' grouped_mm_fallback (mixture-of-experts layers whose weights are
# not bfloat16, or torch without grouped_mm) is such an op on purpose: a loop over experts, each a matmul
# over the rows offs assigns it, with offs read on the host (a device sync); its backward is a second
# custom op. A generated form would be a grouped GEMM whose row blocks find their expert from offs at run
# time: no template of ours does that yet.
CUSTOM_OP_REASONS = {  # the bfloat16 CUDA path calls aten._grouped_mm: Note [Grouped GEMMs are library calls]
    "transformers::grouped_mm_fallback": "a loop of one matmul per expert over the rows offs assigns it, offs "
                                         "read on the host; a grouped GEMM that reads offs at run time is not "
                                         "generated",
    "transformers::grouped_mm_fallback_backward": "the gradient of that per-expert loop of matmuls, a loop too",
}


def unlowered_reason(target) -> str:
    """Why `target`, which has no lowering, runs eagerly: a library's custom op says so (Note [Custom ops run
    as written])."""
    schema = getattr(target, "_schema", None)
    name = getattr(schema, "name", "")
    namespace = name.split("::")[0] if "::" in name else ""
    if namespace and namespace not in ("aten", "prims"):
        why = CUSTOM_OP_REASONS.get(name, "its body is the library's own code, opaque to tracing")
        return (f"{name} is a custom op (torch.library) that runs as written: {why} (Note [Custom ops run as "
                f"written] in engine/lowering/declined.py)")
    return f"no lowering registered for {target}"
