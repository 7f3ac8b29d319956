"""The attention rewrite: matmul -> scale -> mask -> softmax -> dropout -> matmul becomes one library call.

Note [Attention as one call]
Written out, attention is two batched matmuls around a softmax: the (L x S) score matrix of every head is
written to memory, read by the softmax and written again, and read by the second matmul. One
scaled_dot_product_attention call (a flash or memory-efficient kernel on CUDA, the flash kernel on the CPU)
never stores it. After AOTAutograd and our decompositions every spelling of attention in real code -- Hugging
Face's eager attention, timm's and torchvision's unfused paths, a hand-written `softmax(q @ k.T * s + mask) @ v`
-- is the same few ATen nodes: bmm over expand/view (matmul's batching), a mul or div by a number (the scale,
on the scores or on the query), an add of a mask or a where() (masked_fill, a boolean mask), the softmax's
amax/sub/exp/sum/div (with casts around it when it runs in float32), an optional dropout, and the second bmm.
The pass anchors on the second bmm and walks up; each node it walks through must be read only inside the
pattern (a graph that also returns the attention weights keeps them).

Legality, each refusal recorded with its reason:
- the softmax runs over the keys (the last dim), the scale is a number known at compile time;
- the mask broadcasts to the scores (SDPA broadcasts it the same way); a where() mask becomes the additive
  mask where(cond, fill, 0), which equals where(cond, fill, scores) when the fill absorbs any score (-inf, or
  at most -1e30), so a fully masked row gives eager's answer (NaN for -inf, uniform for the lowest float);
- dropout in training is refused: SDPA draws its dropout mask from the generator in another order than
  native_dropout, so the step could not be checked against eager (Note [Training step]); p = 0 or eval is fine;
- query, key and value share a floating dtype, and the output is in it.
The key is the transpose of the second operand of the first matmul, however it was spelled (a permute, a
transpose, or the head split's own permute): SDPA takes (..., S, E), so the replacement permutes it back.
"""
from __future__ import annotations

import math
import operator

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from engine.rewrite.edit import CLONES, VIEWS, add_node, is_call, shape, strip_casts, val
from engine.rewrite.registry import RewriteGraph, register_rewrite

aten = torch.ops.aten

SDPA = aten.scaled_dot_product_attention.default
ABSORBING_FILL = -1e30  # a where() mask's fill must be at most this (or -inf): Note [Attention as one call]


class Refused(Exception):
    """The pattern is attention but the rewrite is not legal here: the message is the refusal's reason."""


@register_rewrite("attention", "matmul -> scale -> mask -> softmax -> dropout -> matmul  =>  "
                               "scaled_dot_product_attention (Note [Attention as one call])", before_joint=True)
def attention(graph: RewriteGraph) -> None:
    for node in list(graph.graph.nodes):
        if node.graph is graph.graph and is_call(node, {aten.bmm.default}) and not node._erased:
            _rewrite_at(graph, node)


def _rewrite_at(graph: RewriteGraph, second: torch.fx.Node) -> None:
    matched: list[torch.fx.Node] = [second]
    out = second
    if len(second.users) == 1 and is_call(next(iter(second.users)), VIEWS):
        out = next(iter(second.users))  # bmm's (B*H, L, E) back to (B, H, L, E)
        matched.append(out)
    probs, _ = _logical(second.args[0], matched)
    value, _ = _logical(second.args[1], matched)  # its batching views die with the matmul
    probs = strip_casts(probs, matched)
    dropout_p, dropout_train = 0.0, False
    if is_call(probs, {operator.getitem}) and is_call(probs.args[0], {aten.native_dropout.default}) \
            and probs.args[1] == 0:
        dropout = probs.args[0]
        matched += [probs, dropout]
        dropout_p, dropout_train = float(dropout.args[1]), dropout.args[2] is not False
        probs = strip_casts(dropout.args[0], matched)
    softmax = _softmax(probs)
    if softmax is None:
        return  # not attention: a plain batched matmul
    scores, softmax_nodes, dim = softmax
    matched += softmax_nodes
    try:
        if dim != -1:
            raise Refused(f"the softmax runs over dim {dim}, not over the keys (the scores' last dim)")
        if dropout_train and dropout_p > 0:
            raise Refused(f"dropout in training (p={dropout_p}): SDPA draws its dropout mask in another order "
                          "than native_dropout, so the step could not be checked against eager with the same "
                          "generator state")
        scores = strip_casts(scores, matched)
        mask, scores = _mask(graph, scores, matched)
        scores = strip_casts(scores, matched)
        scale, scores = _scale(scores, matched, graph.gm)
        scores = strip_casts(scores, matched)
        query, key_t, scale = _first_matmul(scores, matched, scale, graph.gm)
        q_val, kt_val, v_val = val(query), val(key_t), val(value)
        scores_shape = shape(scores)
        _check_shapes(q_val, kt_val, v_val, scores_shape, mask)
        expected = (*q_val.shape[:-1], v_val.shape[-1])
        if out is not second and shape(out) != expected:
            matched.remove(out)  # the user's own reshape of the output: it stays, reading the call
            out = second
        if shape(out) != expected:
            raise Refused(f"the output {list(shape(out))} is not attention's {list(expected)}")
        if q_val.dtype != v_val.dtype or q_val.dtype != kt_val.dtype or not q_val.dtype.is_floating_point:
            raise Refused(f"query, key and value have dtypes {q_val.dtype}, {kt_val.dtype}, {v_val.dtype}: SDPA "
                          "takes one floating dtype")
        if val(out).dtype != q_val.dtype:
            raise Refused(f"the output is {val(out).dtype} where the query is {q_val.dtype}")
        _read_only_inside(matched, out)
    except Refused as why:
        graph.refused(_ordered(graph, matched), str(why))
        return
    with graph.graph.inserting_before(out):
        origins = _ordered(graph, matched)
        ndim = len(kt_val.shape)
        key = add_node(graph.graph, aten.permute.default, (key_t, [*range(ndim - 2), ndim - 1, ndim - 2]), {},
                       origins)
        replacement = [key]
        attn_mask = None
        if mask is not None:
            attn_mask = mask if isinstance(mask, torch.fx.Node) else _additive_mask(graph, mask, origins)
            if val(attn_mask).dtype not in (q_val.dtype, torch.bool):  # SDPA adds the mask in the query's dtype
                attn_mask = add_node(graph.graph, torch.ops.prims.convert_element_type.default,
                                     (attn_mask, q_val.dtype), {}, origins)
            if attn_mask is not mask:
                replacement.append(attn_mask)
        kwargs = {"attn_mask": attn_mask, "dropout_p": dropout_p if dropout_train else 0.0, "is_causal": False,
                  "scale": scale}
        sdpa = add_node(graph.graph, SDPA, (query, key, value), kwargs, origins)
        replacement.append(sdpa)
    out.replace_all_uses_with(sdpa)
    graph.erase_unused(matched)
    mask_text = "none" if attn_mask is None else attn_mask.name
    text = (f"{sdpa.name} = scaled_dot_product_attention({query.name}, {key.name} (= {key_t.name} transposed back), "
            f"{value.name}, attn_mask={mask_text}, scale={scale:g})")
    graph.matched(origins, replacement, text,
                  f"{len(origins)} nodes (two batched matmuls, the scale, {'a mask, ' if mask is not None else ''}"
                  f"the softmax{', dropout' if dropout_p else ''}) compute attention; one library call never "
                  f"stores the {'x'.join(str(s) for s in scores_shape[-2:])} scores of each head")


def _ordered(graph: RewriteGraph, nodes) -> list[torch.fx.Node]:
    order = graph._order()
    return sorted(dict.fromkeys(n for n in nodes if n in order), key=order.__getitem__)


def _logical(operand: torch.fx.Node, path: list) -> tuple[torch.fx.Node, list]:
    """The N-d tensor behind a bmm operand: matmul batches `x` as view(clone?(expand(x, S)), (prod(batch), m, n)).
    Walks up through that spelling only (a view over an expand, clones, a no-op expand), never further: a
    reshape that is the user's own (repeat_kv's, or a 3-d bmm's operand) stays part of the operand."""
    walked, node = [], operand
    if is_call(node, VIEWS):
        walked.append(node)
        node = node.args[0]
        while is_call(node, CLONES):
            walked.append(node)
            node = node.args[0]
        if not is_call(node, {aten.expand.default}):
            return operand, path  # a view that is not matmul's batching
    if is_call(node, {aten.expand.default}) and shape(node.args[0]) == shape(node):
        walked.append(node)
        node = node.args[0]
    while is_call(node, CLONES):
        walked.append(node)
        node = node.args[0]
    path.extend(walked)
    return node, path


def _softmax(node: torch.fx.Node):
    """div(exp(x - amax(x)), sum(exp(...))) -> (x, its nodes, the dim as -1 or the index) or None."""
    if not is_call(node, {aten.div.Tensor}):
        return None
    exp, total = node.args
    if not (is_call(exp, {aten.exp.default}) and is_call(total, {aten.sum.dim_IntList}) and total.args[0] is exp):
        return None
    sub = exp.args[0]
    if not (is_call(sub, {aten.sub.Tensor}) and is_call(sub.args[1], {aten.amax.default})
            and sub.args[1].args[0] is sub.args[0]):
        return None
    amax, x = sub.args[1], sub.args[0]
    ndim = len(shape(x) or ())
    dims = {d % ndim for d in total.args[1]} | {d % ndim for d in amax.args[1]}
    dim = -1 if dims == {ndim - 1} else sorted(dims)
    return x, [node, exp, total, sub, amax], dim


def _number(node, gm: torch.fx.GraphModule | None = None) -> float | None:
    """A scalar known at compile time: a Python number, a 0-d full()/scalar_tensor() of one, or a 0-d constant
    of the graph (torch.tensor(x) in the model: a get_attr, lifted by lift_fresh_copy)."""
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return float(node)
    if is_call(node, {aten.lift_fresh_copy.default, aten.clone.default}):
        return _number(node.args[0], gm)
    if isinstance(node, torch.fx.Node) and node.op == "get_attr" and gm is not None:
        constant = getattr(gm, node.target, None)
        if isinstance(constant, torch.Tensor) and constant.dim() == 0 and not constant.is_meta:
            with unset_fake_temporarily():  # the compile runs under AOTAutograd's fake mode
                return float(constant)
    if is_call(node, {aten.full.default}) and len(node.args[0]) == 0 and isinstance(node.args[1], (int, float)):
        return float(node.args[1])
    if is_call(node, {aten.scalar_tensor.default}) and isinstance(node.args[0], (int, float)):
        return float(node.args[0])
    return None


def _mask(graph: RewriteGraph, node: torch.fx.Node, matched: list):
    """An additive mask (scores + m), a where() mask, or none: (mask, the scores under it). A where() mask is
    returned as (cond, fill, scores_first) for _additive_mask to build."""
    if is_call(node, {aten.add.Tensor}) and len(node.args) == 2 and not node.kwargs:
        left, right = node.args
        scores_side = 0 if _leads_to_matmul(left) else 1 if _leads_to_matmul(right) else None
        if scores_side is not None:
            mask = node.args[1 - scores_side]
            if not isinstance(mask, torch.fx.Node):
                raise Refused(f"the mask is the number {mask}, not a tensor")
            matched.append(node)
            return mask, node.args[scores_side]
    if is_call(node, {aten.where.self}):
        cond, a, b = node.args
        for fill, scores, keeps_when_true in ((a, b, False), (b, a, True)):
            value = _number(fill, graph.gm)
            if value is not None and _leads_to_matmul(scores):
                if not (value == -math.inf or value <= ABSORBING_FILL):
                    raise Refused(f"a boolean mask filled with {value}: added to the scores it would not absorb "
                                  f"them (a fully masked row would differ from eager); only -inf or a fill of at "
                                  f"most {ABSORBING_FILL:g} rewrites")
                matched.append(node)
                if not isinstance(fill, torch.fx.Node):
                    raise Refused("a where() mask whose fill is a Python number, not a tensor")
                return (cond, fill, keeps_when_true), scores
    return None, node


def _leads_to_matmul(node) -> bool:
    """Whether `node` is the scores (possibly scaled and cast): a bmm's output within a few steps."""
    for _ in range(6):
        if not isinstance(node, torch.fx.Node):
            return False
        if is_call(node, {aten.bmm.default}):
            return True
        if is_call(node, VIEWS | {aten.mul.Tensor, aten.div.Tensor, torch.ops.prims.convert_element_type.default,
                                  aten._to_copy.default}):
            node = node.args[0]
            continue
        return False
    return False


def _scale(node: torch.fx.Node, matched: list, gm) -> tuple[float | None, torch.fx.Node]:
    if is_call(node, {aten.mul.Tensor, aten.div.Tensor}) and len(node.args) == 2:
        for side in (1, 0) if node.target is aten.mul.Tensor else (1,):
            number = _number(node.args[side], gm)
            if number is not None and _leads_to_matmul(node.args[1 - side]):
                matched.append(node)
                if isinstance(node.args[side], torch.fx.Node):
                    matched.append(node.args[side])
                if number == 0:
                    raise Refused("the scores are scaled by 0")
                return (number if node.target is aten.mul.Tensor else 1.0 / number), node.args[1 - side]
        other = node.args[1]
        if isinstance(other, torch.fx.Node) and shape(other) == ():
            raise Refused(f"the scale is the 0-d tensor {other.name}, whose value is not known at compile time")
    return None, node


def _first_matmul(scores: torch.fx.Node, matched: list, scale: float | None, gm):
    """scores = bmm(q, k^T) viewed back to N-d: (query, key transposed, scale with a query's own scale folded)."""
    if is_call(scores, VIEWS) and is_call(scores.args[0], {aten.bmm.default}):
        matched.append(scores)
        first = scores.args[0]
    elif is_call(scores, {aten.bmm.default}):
        first = scores
    else:
        raise Refused(f"the softmax's input is not a matmul of the query and the key (it is {_what(scores)})")
    matched.append(first)
    query, _ = _logical(first.args[0], matched)
    key_t, _ = _logical(first.args[1], matched)
    if is_call(query, {aten.mul.Tensor}) and len(query.users) == 1 and _number(query.args[1], gm) is not None:
        matched.append(query)  # timm scales the query before the matmul
        scale = (scale if scale is not None else 1.0) * _number(query.args[1], gm)
        query = query.args[0]
    return query, key_t, scale if scale is not None else 1.0


def _what(node) -> str:
    return f"{node.target}" if isinstance(node, torch.fx.Node) and node.op == "call_function" else str(node)


def _check_shapes(q, kt, v, scores_shape, mask) -> None:
    if mask is not None:
        mask_shape = shape(mask if isinstance(mask, torch.fx.Node) else mask[0])
        try:
            broadcast = torch.broadcast_shapes(mask_shape, scores_shape)
        except RuntimeError:
            broadcast = None
        if broadcast is None or tuple(broadcast) != tuple(scores_shape):
            raise Refused(f"mask {list(mask_shape)} is not broadcastable to the scores {list(scores_shape)}")
    if q.dim() < 3 or kt.dim() != q.dim() or v.dim() != q.dim():
        raise Refused(f"query, key and value have {q.dim()}, {kt.dim()}, {v.dim()} dims: SDPA takes (..., L, E) "
                      "with one batch shape")
    if tuple(q.shape[:-2]) != tuple(kt.shape[:-2]) or tuple(q.shape[:-2]) != tuple(v.shape[:-2]):
        raise Refused(f"query {list(q.shape)}, key^T {list(kt.shape)} and value {list(v.shape)} differ in their "
                      "batch dims (SDPA would broadcast them where the matmuls did not)")
    if tuple(scores_shape) != (*q.shape[:-1], kt.shape[-1]):
        raise Refused(f"the scores {list(scores_shape)} are reshaped between the matmul and the softmax")
    if kt.shape[-1] != v.shape[-2]:
        raise Refused(f"the key has {kt.shape[-1]} positions and the value {v.shape[-2]}")


def _read_only_inside(matched: list, out: torch.fx.Node) -> None:
    inside = set(matched)
    for node in matched:
        if node is out:
            continue
        outside = [user for user in node.users if user not in inside]
        if outside:
            raise Refused(f"{node.name} ({node.target}) is also read by {outside[0].name}, outside the attention "
                          "pattern (the weights or scores are used elsewhere)")


def _additive_mask(graph: RewriteGraph, where_mask, origins) -> torch.fx.Node:
    """where(cond, fill, scores) -> scores + where(cond, fill, 0): Note [Attention as one call]."""
    cond, fill, keeps_when_true = where_mask
    fill_val = val(fill)
    zero = add_node(graph.graph, aten.full.default, ([], 0.0),
                    {"dtype": fill_val.dtype, "layout": torch.strided, "device": fill_val.device,
                     "pin_memory": False}, origins)
    args = (cond, zero, fill) if keeps_when_true else (cond, fill, zero)
    return add_node(graph.graph, aten.where.self, args, {}, origins)
