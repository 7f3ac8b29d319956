"""Freezing (`freezing=True`, `--freeze`; inference only): weights become constants, constant work is done once.

Note [Freezing]
An inference graph takes its parameters and buffers as inputs (Dynamo lifts them; AOTAutograd marks them
static), so everything computed from them alone -- batch norm's 1/sqrt(var + eps), a weight's cast -- is
recomputed every call. Frozen, those inputs become constants of the graph (their values at compile time), and:
- `freezing`: every node computed from constants only (deterministic ops, not random ones) is evaluated once;
  the frontier of that constant subgraph becomes get_attr constants, the rest of it disappears. Views of
  constants stay views (no copy of a weight is made to transpose it).
- `conv_bn`: a convolution (or a Linear: addmm/mm with a constant weight) followed by a chain of per-channel
  constant add/sub/mul/div -- an eval batch norm after the freezing fold -- becomes one convolution with the
  weight and bias refolded (w * s, (b - mean) * s + beta), computed in float64 and stored in the weight's dtype.
Like Inductor's freezing, the compiled graph keeps the values it saw: changing a parameter afterwards does not
reach it (recompile, or do not freeze a model that is still being trained). Dynamo's graph inputs must map one
to one onto the ATen graph's (no deduplicated inputs), or freezing is refused with the reason.
"""
from __future__ import annotations

import math

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from engine.rewrite.edit import VIEWS, is_call, shape
from engine.rewrite.registry import RewriteGraph, register_rewrite

aten = torch.ops.aten

VIEW_OPS = VIEWS | {aten.permute.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
                    aten.expand.default, aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int}
MAX_FOLDED_BYTES = 1 << 30  # a constant the fold would make bigger than this stays computed (an expand's copy)


@register_rewrite("freezing", "parameters and buffers become constants; constant subgraphs are folded "
                              "(Note [Freezing])", needs_freezing=True)
def freezing(graph: RewriteGraph) -> None:
    placeholders = list(graph.graph.find_nodes(op="placeholder"))
    inputs, static = graph.inputs, graph.static_inputs
    if inputs is None or static is None or len(inputs) != len(placeholders):
        graph.refused(placeholders[:1], "the graph's inputs do not map one to one onto Dynamo's (or AOTAutograd did "
                                        "not say which are parameters): nothing was frozen")
        return
    frozen = []
    for position in sorted(static):
        node, value = placeholders[position], inputs[position]
        if not isinstance(value, torch.Tensor) or isinstance(value, FakeTensor) or not node.users:
            continue
        with unset_fake_temporarily():  # the compile runs under AOTAutograd's fake mode
            value = value.detach()
        with graph.graph.inserting_before(node.next):
            constant = graph.constant_node("param", value, [node])
        node.replace_all_uses_with(constant)
        frozen.append(node)
    if not frozen:
        return
    graph.matched(frozen, [], f"{len(frozen)} parameters and buffers are constants of the graph",
                  "freezing: their values at compile time are baked in (inference only)")
    _fold_constants(graph)


def drop_unused_constants(graph: RewriteGraph) -> None:
    """Constants nothing reads any more (a weight refolded into a new one) leave the graph and the module."""
    for node in list(graph.graph.find_nodes(op="get_attr")):
        if not node.users and node.target in graph.constants:
            graph.graph.erase_node(node)
            del graph.constants[node.target]
            delattr(graph.gm, node.target)


def _deterministic(node: torch.fx.Node) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    tags = getattr(target, "tags", ())
    return torch.Tag.nondeterministic_seeded not in tags and not target._schema.is_mutable


def _fold_constants(graph: RewriteGraph) -> None:
    """Evaluate the constant subgraph once; its frontier (read by a non-constant node) becomes constants."""
    values: dict[torch.fx.Node, torch.Tensor] = {}
    for node in graph.graph.nodes:
        if node.op == "get_attr" and node.target in graph.constants:
            values[node] = graph.constants[node.target]
        elif node.op == "call_function" and _deterministic(node) and node.all_input_nodes and \
                all(arg in values for arg in node.all_input_nodes):
            args, kwargs = torch.utils._pytree.tree_map(lambda a: values.get(a, a) if isinstance(a, torch.fx.Node)
                                                        else a, (node.args, node.kwargs))
            with unset_fake_temporarily():
                result = node.target(*args, **kwargs)
            if isinstance(result, torch.Tensor) and result.numel() * result.element_size() <= MAX_FOLDED_BYTES:
                values[node] = result
    def reaches_outside(node: torch.fx.Node) -> bool:  # read by a non-constant node, through views of it
        return any(user not in values or (user.target in VIEW_OPS and reaches_outside(user)) for user in node.users)

    folded, made = [], []
    for node, value in values.items():
        if node.op != "call_function" or node.target in VIEW_OPS or not reaches_outside(node):
            continue  # a view stays a view of the constant; a node inside the subgraph goes with its users
        with graph.graph.inserting_before(node):
            with unset_fake_temporarily():
                value = value.contiguous()
            constant = graph.constant_node(str(node.name), value, [node])
        node.replace_all_uses_with(constant)
        folded.append(node)
        made.append(constant)
    dead = [node for node in reversed(list(graph.graph.nodes)) if node in values and node.op == "call_function"]
    for node in dead:
        if not node.users:
            graph.graph.erase_node(node)
    drop_unused_constants(graph)
    if folded:
        graph.matched(folded, made, f"{len(folded)} constants computed at compile time: "
                                    + ", ".join(n.name for n in made[:6]) + (" ..." if len(made) > 6 else ""),
                      "constant folding: these values depend on parameters and buffers only")


# --- convolution / linear + per-channel affine (an eval batch norm) --------------------------------------------

AFFINE = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor}


def constant_value(graph: RewriteGraph, node) -> torch.Tensor | None:
    """The value of a constant (a get_attr the freezing made) or of a view of one, evaluated; else None."""
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return torch.tensor(float(node), dtype=torch.float64)
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "get_attr" and node.target in graph.constants:
        return graph.constants[node.target]
    if node.op == "call_function" and node.target in VIEW_OPS and len(node.all_input_nodes) == 1:
        inner = constant_value(graph, node.args[0])
        if inner is None:
            return None
        with unset_fake_temporarily():
            return node.target(inner, *node.args[1:], **node.kwargs)
    return None


def _per_channel(value: torch.Tensor, channels: int, channel_dim: int, ndim: int) -> torch.Tensor | None:
    """`value` as a vector over the output channels, if it broadcasts along them only; else None."""
    if value.dim() == 0:
        return value.reshape(1).expand(channels)
    dims = list(value.shape)
    if len(dims) > ndim:
        return None
    dims = [1] * (ndim - len(dims)) + dims
    if any(size != 1 for d, size in enumerate(dims) if d != channel_dim) or dims[channel_dim] not in (1, channels):
        return None
    return value.reshape(-1).expand(channels)


@register_rewrite("conv_bn", "convolution or linear + per-channel affine (an eval batch norm) -> one "
                             "convolution or linear with refolded weights (Note [Freezing])", needs_freezing=True)
def conv_bn(graph: RewriteGraph) -> None:
    for node in list(graph.graph.nodes):
        if node.op != "call_function" or node._erased:
            continue
        if is_call(node, {aten.convolution.default}) and not node.args[6]:
            weight = constant_value(graph, node.args[1])
            bias = constant_value(graph, node.args[2]) if node.args[2] is not None else None
            if weight is not None and (node.args[2] is None or bias is not None):
                _fold_into(graph, node, weight, bias, channel_dim=1, kind="convolution")
        elif is_call(node, {aten.addmm.default, aten.mm.default}):
            mat = node.args[2] if node.target is aten.addmm.default else node.args[1]
            weight_t = constant_value(graph, mat)
            bias = constant_value(graph, node.args[0]) if node.target is aten.addmm.default else None
            if weight_t is not None and (node.target is aten.mm.default or bias is not None):
                _fold_into(graph, node, weight_t, bias, channel_dim=1, kind="linear")
    drop_unused_constants(graph)


def _fold_into(graph: RewriteGraph, producer: torch.fx.Node, weight: torch.Tensor, bias, channel_dim: int,
               kind: str) -> None:
    out_shape = shape(producer)
    channels = weight.shape[0] if kind == "convolution" else weight.shape[1]
    with unset_fake_temporarily():
        on = {"device": weight.device, "dtype": torch.float64}  # the weight's device: a GPU's, when run there
        scale, shift = torch.ones(channels, **on), torch.zeros(channels, **on)
        chain, node = [], producer
        if len(producer.users) > 1 and any(is_call(user, AFFINE) for user in producer.users):
            others = [user.name for user in producer.users]
            graph.refused([producer], f"the {kind}'s output is read by {len(others)} nodes ({', '.join(others[:4])}): "
                                      "folding a batch norm into it would change what the others read")
            return
        while len(node.users) == 1:
            user = next(iter(node.users))
            if not is_call(user, AFFINE) or len(user.args) != 2 or user.kwargs or user.args[0] is not node:
                break
            value = constant_value(graph, user.args[1])
            vector = _per_channel(value, channels, channel_dim, len(out_shape)) if value is not None else None
            if vector is None or shape(user) != out_shape:
                break
            vector = vector.to(**on)  # a Python scalar's value comes on the CPU
            if user.target is aten.mul.Tensor:
                scale, shift = scale * vector, shift * vector
            elif user.target is aten.div.Tensor:
                scale, shift = scale / vector, shift / vector
            elif user.target is aten.add.Tensor:
                shift = shift + vector
            else:
                shift = shift - vector
            chain.append(user)
            node = user
        if not chain or not all(math.isfinite(v) for v in scale.tolist() + shift.tolist()):
            return
        if kind == "convolution":
            new_weight = (weight.double() * scale.view(-1, *[1] * (weight.dim() - 1))).to(weight.dtype)
        else:  # addmm(b, x, W^T): W^T is (in, out), the channels are its columns
            new_weight = (weight.double() * scale.view(1, -1)).to(weight.dtype)
        old_bias = bias.double().expand(channels) if bias is not None else torch.zeros(channels, **on)
        new_bias = (old_bias * scale + shift).to(weight.dtype).contiguous()
        new_weight = new_weight.contiguous()
    last = chain[-1]
    with graph.graph.inserting_before(last):
        origins = [producer, *chain]
        weight_node = graph.constant_node(f"{kind}_weight", new_weight, origins)
        bias_node = graph.constant_node(f"{kind}_bias", new_bias, origins)
        if kind == "convolution":
            args = (producer.args[0], weight_node, bias_node, *producer.args[3:])
            replacement = graph.add_node(aten.convolution.default, args, {}, origins)
        else:
            replacement = graph.add_node(aten.addmm.default, (bias_node, producer.args[1], weight_node), {}, origins)
    last.replace_all_uses_with(replacement)
    graph.erase_unused([producer, *chain])
    ops = ", ".join(str(n.target).split(".")[1] if "." in str(n.target) else str(n.target) for n in chain)
    graph.matched([producer, *chain], [weight_node, bias_node, replacement],
                  f"{replacement.name} = {kind}(..., refolded weight {weight_node.target}, bias {bias_node.target})",
                  f"{kind} + per-channel {ops} (an eval batch norm) folded into the {kind}'s weight and bias at "
                  "compile time: one kernel fewer and no normalization pass over the output")
