"""Ops real models run that we decline to generate, each with the reason its Fallback shows (issue 29's
held-out sweep: mixture-of-experts routing). Registered so that the reason is ours, not 'no lowering'.

Note [Sorting runs eagerly]
sort, argsort (sort.stable) and topk give each output element a value that depends on the order of its whole
row: neither an elementwise node, a reduction (one value per row) nor a scan (a running value in index order)
expresses it. A generated sort needs a node of its own: a bitonic network over a row held in one block
(Triton's tl.sort, power-of-two rows) and a per-row std::stable_sort in C++, with the row's indices carried
for argsort and topk's k first. Until that node exists ATen's sort runs (Inductor, too, falls back for rows
that do not fit a block, and for topk always). MoE routers call topk over the experts of each token
(8-64 values a row): a few microseconds of a step.
histc has a lowering of its own (Note [Histogram as a reduction per bin] in lowering/histogram.py).
"""
from __future__ import annotations

import torch

from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten


@register_lowering(aten.sort.default, aten.sort.stable, aten.topk.default)
def sort(*args, **kwargs):
    raise Unsupported("sorting (sort, argsort, topk) has no generated form: each output depends on the order "
                      "of its whole row, which no elementwise, reduction or scan node expresses; ATen's sort "
                      "runs (Note [Sorting runs eagerly] in engine/lowering/declined.py)")


# Note [Custom ops run as written]
# An op registered through torch.library by a library (a namespace other than aten and prims) reaches the
# graph as one call: Dynamo and AOTAutograd do not trace into its body, so there is nothing to lower and its
# own implementation runs. transformers' grouped_mm_fallback (mixture-of-experts layers whose weights are
# not bfloat16, or torch without grouped_mm) is such an op on purpose: a loop over experts, each a matmul
# over the rows offs assigns it, with offs read on the host (a device sync); its backward is a second
# custom op. A generated form would be a grouped GEMM whose row blocks find their expert from offs at run
# time: no template of ours does that yet.
CUSTOM_OP_REASONS = {
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
