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
histc counts elements into equal-width bins: a scatter that adds 1 at a data-dependent bin (our Scatter
node could do it), but with min == max (the default 0, 0) the range is the data's own min and max, two
reductions that must finish before any element is binned, and eager's CPU and CUDA kernels compute the bin
with different float expressions, so an element at a bin edge lands by the device's rule. It runs eagerly.
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


@register_lowering(aten.histc.default)
def histc(*args, **kwargs):
    raise Unsupported("histc runs eagerly: its default range (min == max) is the data's own min and max, "
                      "reduced before binning, and eager's CPU and CUDA kernels round a bin edge differently "
                      "(Note [Sorting runs eagerly] in engine/lowering/declined.py)")
