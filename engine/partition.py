"""Training: split AOTAutograd's joint forward+backward graph into a forward and a backward graph.

Note [Min-cut partition]
The joint graph computes the forward outputs from the primals (parameters and inputs) and the gradients
from the primals and the tangents (the gradient of the loss with respect to each forward output). Every
forward value the backward reads must either be *saved* (an extra output of the forward graph, alive until
the backward runs: activation memory) or *recomputed* in the backward from other saved values. Like
Inductor's partitioner, we choose with a minimum cut in a flow graph:

- every forward value v is an edge v_in -> v_out whose capacity is what saving v costs: its bytes. A
  parameter or input costs (almost) nothing: the caller keeps it alive anyway;
- v_out -> u_in for every user u (infinite: dataflow cannot be cut, only values);
- source -> p_in for every primal: the inputs exist;
- source -> v_in for a value we refuse to recompute (a matmul, a reduction, a random or mutating op: see
  `recompute_ban`): it is computed once, in the forward;
- u_in -> sink for every backward node (one that reads a tangent): the backward must get there.

A finite cut separates what the forward computes from what the backward computes, and its cut edges are the
saved values; the cheapest cut saves the fewest bytes. The forward values on the sink side are recomputed
in the backward: cheap pointwise ops and views whose inputs are saved anyway (a relu's input is saved for
the matmul after it; the relu itself is then recomputed instead of saved). "Saved all" is the plain
partition for comparison: every forward value the backward reads directly, nothing recomputed.

Note [Backward provenance]
AOTAutograd gives each backward node the `seq_nr` of the forward autograd node it differentiates, but not
the forward node's `from_node` (the Dynamo FX node) and often no stack trace. Before splitting we copy those
from the forward node with the same seq_nr, and name it in meta['differentiates'], so the backward graph's
kernels trace back to the FX node and the user's source line their gradient belongs to (report.py reads
from_node and stack_trace as for any graph).

Note [Saved values keep eager's strides]
The backward graph is compiled for the strides AOTAutograd traced for its saved inputs: eager's. An
elementwise op on a transposed tensor keeps the transpose's layout in eager (TensorIterator follows its
input), so Hugging Face Llama's key after the rotary embedding, (B, kv heads, T, D) viewed from (B, T, kv
heads, D), is traced with strides (T*kv*D, D, kv*D, 1). Our kernels store a value row-major in its own shape,
so the forward handed the backward the same numbers in another order and every kernel of the backward that
read them indexed by eager's strides: with grouped-query attention (repeat_kv copies the key and value, a
kernel of ours, where the attention call itself reads the tensor it is given), every gradient before the
attention was wrong (the tiny Llama of `bench train`: relative errors up to 2e4). Inductor keeps
every graph output's traced strides for the same reason (keep_output_stride). So the forward graph hands a
saved value over in eager's layout: where the storage it views is computed by one of our kernels and traced
in another order than row-major, its readers in the forward graph read permute(clone(permute(v, order)),
inverse) instead, the clone stored in eager's memory order (the same bytes, fused with v's own kernel), and
the views saved from it have eager's strides. Values our kernels cannot produce in eager's strides
(symbolic strides, overlapping or gapped layouts) stay as they were.

Note [Saved values in the forward's strides]
The forward may also hand a saved value over in strides of its own choosing: channels-last around convolutions
(Note [Channels-last training graphs] in lowering/layout.py). The partition marks the outputs that are only
saved (mark_saved: a user's output keeps eager's strides), the forward's compile reports the strides it returns
them in to AOTAutograd (report_saved_strides: TracingContext's output strides, the channel Inductor uses;
None where they are eager's), AOTAutograd restrides the backward's example inputs by them, and the backward's
placeholders take those strides before it is lowered (restride_saved_inputs). So the halves agree without a
copy: the backward's kernels and library calls read the saved tensors as they are. Should the forward fall back
to eager on its first run, its outputs are copied into the reported strides (FirstRunGuard), since the backward
was compiled for them.

Note [Operands the backward stores]
The min cut weighs memory only: a cheap value recomputed in the backward is taken to cost nothing. It costs a
store when a library call of the backward reads it: a Linear's weight gradient reads the Linear's input, so a
recomputed layer norm or GELU output is written to memory again for that matmul, bytes the forward already
wrote when it stored the same value for its own matmul (saving it costs no traffic, only memory). Inductor bans
such recomputation ("materialized in backward", torch/_functorch/partitioners.py). On the CPU samples the cut
recomputes three such values in transformer_block (ln1's, ln2's and the GELU's outputs); saving them instead
saved Inductor's bytes (`bench train` on the CPU: transformer_block 0.24 MB, gpt_decoder 0.66, the
tiny llama_small 0.33, each Inductor's figure, against 0.14, 0.46 and 0.23 for the cut), and a little more in
the tiny Hugging Face Llama (0.56 MB, Inductor 0.55, the cut 0.35). On the H200 block our 176.6 MiB is
Inductor's 240.6 less 64 MiB, the size of the GELU's output (B*T*4D in bf16): a 64 MiB store the backward makes
again, ~15 us at 4 TB/s of a 1.6 ms step (not measured). The default keeps the memory, which the issue also
asks for and which is measured; GLASSBOX_PARTITION=save-library-operands bans the recomputation instead, so
that one GPU run measures the trade (`bench train --partition`): saved bytes and step time, both ways.
"""
from __future__ import annotations

import math
import operator
import os
from typing import Callable

import networkx
import torch

from engine.decompose import input_writes, split_joint
# Note [Saved values in the forward's strides]
from engine.lowering.declined import RANDOM_OPS
from engine.lowering.layout import FORWARD_STRIDES, SAVED_FOR_BACKWARD, graph_outputs
from engine.options import PARTITIONS  # Note [Operands the backward stores]
from engine.record import JointNode, PartitionRecord, RecomputedValue, SavedValue

aten = torch.ops.aten

# Views and shape ops: recomputing them moves no data.
VIEW_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default, aten.t.default,
    aten.transpose.int, aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.slice.Tensor, aten.select.int, aten.alias.default, aten.as_strided.default,
    aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
}
# Constants made from nothing.
CREATION_OPS = {aten.scalar_tensor.default, aten.full.default, aten.zeros.default, aten.ones.default,
                aten.arange.default, aten.arange.start, aten.arange.start_step, aten.full_like.default,
                aten.zeros_like.default, aten.ones_like.default}
PRIMAL_COST = 1  # Note [Min-cut partition]: a saved input or parameter costs no activation memory


def is_primal(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("primals")


def is_tangent(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("tangents")


def value_bytes(node: torch.fx.Node) -> int | None:
    """Bytes of a tensor value (size hints under dynamic shapes); None for a non-tensor (tuple, SymInt)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    numel = val.numel()
    if isinstance(numel, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import optimization_hint
        numel = optimization_hint(numel, fallback=0)
    return int(numel) * val.dtype.itemsize


def is_sym(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool))


LIBRARY_MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}


def is_library_call(node: torch.fx.Node) -> bool:
    """A matmul, convolution or attention (forward or backward): a library kernel that reads its operands from
    memory."""
    return node.op == "call_function" and (node.target in LIBRARY_MATMULS or "convolution" in str(node.target)
                                           or "scaled_dot_product" in str(node.target))


def partition_policy(option: str | None = None) -> str:
    """The partition's policy: the option (Options.partition), else the GLASSBOX_PARTITION override, else
    min-memory."""
    policy = option or os.environ.get("GLASSBOX_PARTITION") or "min-memory"
    if policy not in PARTITIONS:
        raise ValueError(f"GLASSBOX_PARTITION={policy!r}: choose one of {', '.join(PARTITIONS)}")
    return policy


def read_by_backward_library(node: torch.fx.Node, backward: set) -> bool:
    """Note [Operands the backward stores]: does a library call of the backward read `node`, itself or
    through views?"""
    stack, seen = list(node.users), set()
    while stack:
        user = stack.pop()
        if user in seen:
            continue
        seen.add(user)
        if user in backward and is_library_call(user):
            return True
        if user.op == "call_function" and user.target in VIEW_OPS:
            stack.extend(user.users)
    return False


def recompute_ban(node: torch.fx.Node) -> str | None:
    """Why `node` must not be recomputed in the backward (None: it may be)."""
    target = node.target
    if node.op != "call_function":
        return None
    if target in RANDOM_OPS or (isinstance(target, torch._ops.OpOverload) and target.is_view is False
                                and torch.Tag.nondeterministic_seeded in target.tags):
        return "random: recomputing it would draw different numbers"
    if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        return "mutates its input (e.g. batch norm's running stats): it runs once, in the forward"
    if target in VIEW_OPS or target in CREATION_OPS or target is operator.getitem:
        return None
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
        return None
    if is_library_call(node):
        return "library call (matmul, convolution, attention): too many FLOPs to compute twice"
    if "sum" in str(target) or "amax" in str(target) or "mean" in str(target) or "var" in str(target):
        return "reduction: recomputing it reads its whole input again"
    return "not a cheap pointwise or view op"


def _forward_region(graph: torch.fx.Graph, num_fwd_outputs: int) -> tuple[set, list]:
    """Nodes the forward outputs need (ancestors), and the forward outputs."""
    output = next(iter(graph.find_nodes(op="output")))
    outputs = torch.utils._pytree.arg_tree_leaves(*output.args)
    forward_outputs = [o for o in outputs[:num_fwd_outputs] if isinstance(o, torch.fx.Node)]
    needed, stack = set(), list(forward_outputs)
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack.extend(node.all_input_nodes)
    return needed, forward_outputs


def _backward_region(graph: torch.fx.Graph) -> set:
    """Tangents, every node that reads one (transitively), and the nodes AOTAutograd traced for the backward
    that read no tangent (threshold_backward's `relu <= 0`): what the backward pass itself computes."""
    region = set()
    for node in graph.nodes:
        if node.op == "output":
            continue  # it returns forward outputs too: reading it is not the backward's work
        if is_tangent(node) or any(i in region for i in node.all_input_nodes) or (
                node.op == "call_function" and node.meta.get("partitioner_tag") == "is_backward"):
            region.add(node)
    return region


def _storage_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose memory a chain of views reads."""
    while node.op == "call_function" and node.all_input_nodes and (
            node.target in VIEW_OPS or node.target is operator.getitem and node.all_input_nodes[0].target in VIEW_OPS):
        node = node.all_input_nodes[0]
    return node


def annotate_backward_provenance(graph: torch.fx.Graph) -> None:
    """Note [Backward provenance]."""
    forward_by_seq: dict[int, torch.fx.Node] = {}
    for node in graph.nodes:
        seq = node.meta.get("seq_nr")
        if seq is None or node.op != "call_function":
            continue
        if node.meta.get("partitioner_tag") != "is_backward":
            if node.meta.get("from_node") and seq not in forward_by_seq:
                forward_by_seq[seq] = node
            continue
        forward = forward_by_seq.get(seq)
        if forward is None:
            continue
        node.meta["differentiates"] = forward.name
        if not node.meta.get("from_node"):
            node.meta["from_node"] = forward.meta["from_node"]
        if not node.meta.get("stack_trace") and forward.meta.get("stack_trace"):
            node.meta["stack_trace"] = forward.meta["stack_trace"]


def mutated_primals(graph: torch.fx.Graph) -> set:
    """Inputs the model changes in place: their new value is copied into the input after the forward (by
    AOTAutograd, from a forward output, or by us, Note [Input writes after the graph] in decompose.py), so the
    input's old value is gone by the backward: it cannot be saved."""
    output = next(iter(graph.find_nodes(op="output")))
    mutated = [getattr(d, "mutated_input", None) for d in output.meta.get("desc") or ()]
    return {n for n in graph.find_nodes(op="placeholder") if n.meta.get("desc") is not None
            and any(m == n.meta["desc"] for m in mutated if m is not None)} | {n.args[0] for n in input_writes(graph)}


def choose_saved(graph: torch.fx.Graph, num_fwd_outputs: int, policy: str = "min-memory") -> dict:
    """Note [Min-cut partition]: which forward values to save; every decision with its reason."""
    forward, _ = _forward_region(graph, num_fwd_outputs)
    backward = _backward_region(graph)
    unsaveable = mutated_primals(graph)
    save_operands = policy == "save-library-operands"
    note = ""
    flow = networkx.DiGraph()
    bans = {}
    for node in graph.nodes:
        if node.op == "output":
            continue
        if node in backward:
            flow.add_edge(node.name + "_in", "sink")  # no capacity attribute: infinite
            continue
        if is_primal(node):
            flow.add_edge("source", node.name + "_in")
        ban = recompute_ban(node)
        if ban is None and save_operands and node.op == "call_function" and node.target not in VIEW_OPS \
                and node.target is not operator.getitem and value_bytes(node) is not None \
                and read_by_backward_library(node, backward):
            ban = ("a library call of the backward reads it: recomputed, it would be stored again for that call "
                   "(Note [Operands the backward stores], GLASSBOX_PARTITION=save-library-operands)")
        if ban is not None:
            bans[node.name] = ban
            flow.add_edge("source", node.name + "_in")
        size = value_bytes(node)
        if node in unsaveable:
            cost = math.inf
        elif is_primal(node):
            cost = PRIMAL_COST
        elif size is not None:
            cost = max(size, 1)
        elif is_sym(node):
            cost = 1
        else:
            cost = math.inf  # a tuple cannot be saved: its items (getitem) are
        if cost == math.inf:
            flow.add_edge(node.name + "_in", node.name + "_out")
        else:
            flow.add_edge(node.name + "_in", node.name + "_out", capacity=cost)
        for user in node.users:
            if user.op != "output":
                flow.add_edge(node.name + "_out", user.name + "_in")
    if "sink" not in flow or "source" not in flow:  # no backward work, or nothing from the inputs
        reachable = {n.name + "_in" for n in graph.nodes if n not in backward} | \
                    {n.name + "_out" for n in graph.nodes if n not in backward}
    else:
        try:
            _, (reachable, _) = networkx.minimum_cut(flow, "source", "sink")
        except networkx.NetworkXUnbounded:  # the backward reads a value that can be neither saved nor recomputed
            note = ("no finite cut (the backward reads a value that cannot be saved, e.g. a tuple): every forward "
                    "value the backward reads is saved, nothing is recomputed")
            reachable = {n.name + "_in" for n in graph.nodes if n not in backward} | {
                n.name + "_out" for n in graph.nodes if n not in backward and not any(u in backward for u in n.users)}
    saved = [n for n in graph.nodes if n.name + "_in" in reachable and n.name + "_out" not in reachable
             and n not in backward]
    computed_in_forward = {n for n in graph.nodes if n.name + "_in" in reachable}
    saved_all = [n for n in graph.nodes if n not in backward and n.op != "output"
                 and any(u in backward for u in n.users)]
    return {"saved": saved, "bans": bans, "computed_in_forward": computed_in_forward, "saved_all": saved_all,
            "forward": forward, "backward": backward, "note": note}


def _describe(node: torch.fx.Node) -> dict:
    val = node.meta.get("val")
    shape = [str(s) for s in val.shape] if isinstance(val, torch.Tensor) else []
    dtype = str(val.dtype).replace("torch.", "") if isinstance(val, torch.Tensor) else type(val).__name__
    target = node.target if node.op == "placeholder" else getattr(node.target, "__name__", str(node.target))
    return {"name": node.name, "op": str(target), "shape": shape, "dtype": dtype}


def _activation_bytes(nodes) -> int:
    """Memory kept for the backward: each storage once; views of inputs and parameters cost nothing."""
    roots = {_storage_root(n) for n in nodes}
    return sum(value_bytes(n) or 0 for n in roots if not is_primal(n))


def partition_record(joint_gm: torch.fx.GraphModule, choice: dict, bw_gm: torch.fx.GraphModule) -> PartitionRecord:
    """The partition as plain data: saved and recomputed values with reasons, activation bytes both ways,
    and the joint graph's nodes with the side each ended on (for drawing)."""
    saved_names = {n.name for n in choice["saved"]}
    bw_names = {n.name for n in bw_gm.graph.nodes if n.op == "call_function"}
    forward_side = choice["computed_in_forward"]
    saved = []
    for node in choice["saved"]:
        free = is_primal(_storage_root(node))
        if free:
            reason = "an input or parameter: the caller keeps it alive, saving it costs no memory"
        elif node.name in choice["bans"]:
            reason = f"not recomputed ({choice['bans'][node.name]}); the backward reads it"
        elif is_sym(node):
            reason = "a size the backward needs"
        else:
            reason = ("cheapest cut: recomputing it in the backward would need values costing "
                      "more bytes to save than it does")
        saved.append(SavedValue(**_describe(node), bytes=0 if free else (value_bytes(node) or 0), reason=reason))
    recomputed = []
    for node in joint_gm.graph.nodes:
        if node.name in bw_names and node not in choice["backward"] and node.op == "call_function":
            inputs = [i.name for i in node.all_input_nodes]
            recomputed.append(RecomputedValue(**_describe(node), bytes=value_bytes(node) or 0, inputs=inputs,
                                              reason="cheap (pointwise or view): recomputed in the backward from "
                                                     f"{', '.join(inputs) or 'nothing'} instead of saved"))
    joint = []
    for node in joint_gm.graph.nodes:
        if node.op == "output":
            continue
        side = ("backward" if node in choice["backward"] else
                "recomputed" if node.name in bw_names else
                "forward" if node in forward_side or node in choice["forward"] else "backward")
        joint.append(JointNode(**_describe(node), args=[a.name for a in node.all_input_nodes], side=side,
                               saved=node.name in saved_names, ban=choice["bans"].get(node.name)))
    return PartitionRecord(
        saved=saved, recomputed=recomputed,
        saved_bytes=_activation_bytes(choice["saved"]),
        saved_all_bytes=_activation_bytes(choice["saved_all"]),
        saved_all=[n.name for n in choice["saved_all"]],
        note=choice["note"],
        # storages handed to the backward in eager's layout (Note [Saved values keep eager's strides])
        eager_layout=list(choice.get("eager_layout", [])),
        joint=joint)


def _kernel_computed(node: torch.fx.Node) -> bool:
    """Is `node` a value one of our kernels computes and stores row-major (an elementwise op, a reduction or a
    clone), not a library call's output (whose promised strides the wrapper keeps) or an input?"""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or target in VIEW_OPS:
        return False
    ban = recompute_ban(node)
    return torch.Tag.pointwise in target.tags or target is aten.clone.default or (
        ban is not None and ban.startswith("reduction"))


def _eager_order(val: torch.Tensor) -> list[int] | None:
    """The dims of `val` from the outermost in memory to the innermost, when its strides are static and a
    permutation of a row-major layout (size-1 dims anywhere); None otherwise."""
    sizes, strides = val.shape, val.stride()
    if not all(isinstance(v, int) for v in (*sizes, *strides)):
        return None
    order = sorted(range(val.dim()), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def keep_saved_layouts(fw_gm: torch.fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    """Note [Saved values keep eager's strides]: the roots of the forward graph's saved values that our kernels
    would store in another layout are read in eager's; returns their names."""
    graph = fw_gm.graph
    output = next(iter(graph.find_nodes(op="output")))
    saved = [v for v in torch.utils._pytree.arg_tree_leaves(*output.args)[num_fwd_outputs:]
             if isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), torch.Tensor)]
    fixed = []
    for root in dict.fromkeys(_storage_root(v) for v in saved):
        val = root.meta.get("val")
        if not _kernel_computed(root) or not isinstance(val, torch.Tensor) or val.is_contiguous():
            continue
        order = _eager_order(val)
        if order is None:
            continue
        inverse = sorted(range(len(order)), key=order.__getitem__)
        users = [u for u in root.users]
        with graph.inserting_after(root):
            inward = graph.call_function(aten.permute.default, (root, order))
        with graph.inserting_after(inward):
            stored = graph.call_function(aten.clone.default, (inward,), {"memory_format": torch.contiguous_format})
        with graph.inserting_after(stored):
            back = graph.call_function(aten.permute.default, (stored, inverse))
        inward.meta["val"] = val.permute(order)
        stored.meta["val"] = inward.meta["val"].clone(memory_format=torch.contiguous_format)
        back.meta["val"] = stored.meta["val"].permute(inverse)
        for node in (inward, stored, back):
            for key in ("stack_trace", "from_node", "seq_nr"):
                if key in root.meta:
                    node.meta[key] = root.meta[key]
        for user in users:
            user.replace_input_with(root, back)
        fixed.append(root.name)
    if fixed:
        graph.lint()
        fw_gm.recompile()
    return fixed


def mark_saved(fw_gm: torch.fx.GraphModule, num_fwd_outputs: int) -> None:
    """Note [Saved values in the forward's strides]: marks the forward's outputs returned only to be saved for
    the backward (after the first num_fwd_outputs), whose strides its compile may choose."""
    outputs = graph_outputs(fw_gm)
    user = set(outputs[:num_fwd_outputs])
    for node in outputs[num_fwd_outputs:]:
        if isinstance(node, torch.fx.Node) and node not in user:
            node.meta[SAVED_FOR_BACKWARD] = True


def restride_saved_inputs(bw_gm: torch.fx.GraphModule, example_inputs) -> None:
    """Note [Saved values in the forward's strides]: the backward's placeholders take the strides of the inputs
    AOTAutograd compiles it for, where it restrided them to the forward's."""
    for node, example in zip(bw_gm.graph.find_nodes(op="placeholder"), example_inputs):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and isinstance(example, torch.Tensor) and \
                tuple(example.stride()) != tuple(val.stride()):
            node.meta["val"], node.meta[FORWARD_STRIDES] = example, True


def report_saved_strides(strides: list) -> None:
    """Note [Saved values in the forward's strides]: the forward's output strides (None: eager's) to AOTAutograd,
    which restrides the backward's placeholders by them (as Inductor reports its own)."""
    context = torch._guards.TracingContext.try_get()
    if context is not None and context.output_strides is not None and any(s is not None for s in strides):
        context.output_strides.extend(strides)


def make_partition_fn(on_partition: Callable[[PartitionRecord], None] | None = None,
                      option: str | None = None) -> Callable:
    """AOTAutograd's partition_fn: our min cut under the policy (partition_policy(option)), then torch's graph
    surgery (decompose.split_joint)."""

    def partition(joint_gm: torch.fx.GraphModule, joint_inputs, *, num_fwd_outputs: int, **_):
        annotate_backward_provenance(joint_gm.graph)
        choice = choose_saved(joint_gm.graph, num_fwd_outputs, partition_policy(option))
        values = [n for n in choice["saved"] if not is_sym(n)]
        symbols = [n for n in choice["saved"] if is_sym(n)]
        fw_gm, bw_gm = split_joint(joint_gm, values, symbols, num_fwd_outputs)
        choice["saved"] = values + symbols  # the split drops values the backward turned out not to read
        choice["eager_layout"] = keep_saved_layouts(fw_gm, num_fwd_outputs)
        mark_saved(fw_gm, num_fwd_outputs)
        if on_partition is not None:
            on_partition(partition_record(joint_gm, choice, bw_gm))
        return fw_gm, bw_gm

    return partition
