"""FX graph -> functional ATen graph, through AOTAutograd with core ATen decompositions.

AOTAutograd functionalizes the graph (mutations become copies at the end), lifts parameters to inputs and
traces with fake tensors (symbolic sizes under dynamic shapes). The decomposition table is torch's core
ATen table, plus composite ops we would rather build from simple nodes and fuse ourselves (softmax,
layer norm, batch norm), minus the ops we keep whole: library calls (attention, matmuls) and the embedding's
backward, which we lower whole.
All AOTAutograd private API use lives here.
"""
from __future__ import annotations

import contextlib
import copy
import functools
from typing import Callable

import torch
import torch._decomp
import torch._dynamo.backends.common  # noqa: F401  Dynamo and AOTAutograd import these on first use;
import torch._dynamo.repro.after_dynamo  # noqa: F401  importing them with the engine keeps that cost out
from torch._decomp import get_decompositions  # of the first compile.
from torch._functorch.aot_autograd import aot_module_simplified

aten = torch.ops.aten

# Composite ops broken into reductions + pointwise nodes, which fusion turns back into single kernels.
EXTRA_DECOMPOSITIONS = [
    aten._softmax, aten._log_softmax, aten.native_layer_norm, aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit, aten.native_batch_norm, aten.native_group_norm, aten.hardswish,
    aten.hardsigmoid, aten.softplus, aten.elu, aten.log_sigmoid_forward, aten.mish, aten.addcmul, aten.addcdiv,
    aten.lerp, aten.std, aten.std_mean, aten.linalg_vector_norm, aten._unsafe_index,
    aten.avg_pool2d, aten._adaptive_avg_pool2d,
    aten.masked_fill, aten.flip, aten.roll, aten.tril, aten.triu, aten.logit, aten.xlogy,
    aten.glu, aten.hardshrink, aten.softshrink, aten.prelu, aten.threshold, aten.rrelu_with_noise,
    # found by the OpInfo sweep: torch has a decomposition into ops we lower (`python -m engine sweep opinfo`)
    aten.addmv, aten.ldexp, aten.as_strided_copy,
    aten.grid_sampler_2d, aten.i0, aten._native_batch_norm_legit_functional,
]
# Not decomposed: aten.max_pool2d_with_indices, aten.max_pool3d_with_indices and their backwards, lowered whole
# (Note [Max pooling as our kernel] and Note [Max pooling backward as a gather] in lowering/pooling.py).
# Not decomposed: aten.native_dropout. Its decomposition draws the mask with rand_like, eager's kernel with
# bernoulli_: kept whole (a visible Fallback) it draws the very mask eager draws from the same RNG state, so a
# training step with dropout can be checked against eager (engine/train_verify.py).
# Kept whole: these become Extern library calls.
KEEP_AS_LIBRARY = [
    aten.scaled_dot_product_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten.addmm.default, aten.mm.default, aten.bmm.default,
]
if hasattr(aten, "_scaled_dot_product_cudnn_attention"):
    KEEP_AS_LIBRARY.append(aten._scaled_dot_product_cudnn_attention.default)
# Kept whole and lowered as one node: its decomposition is an index_put over the whole weight (zeros, then the
# tokens' gradients added), with the padding tokens' gradients zeroed by a where() first; whole, the Scatter
# node of Note [Embedding backward as an atomic add] (lowering/backward.py) masks them off instead.
LOWERED_WHOLE = [aten.embedding_dense_backward.default, aten.max_pool2d_with_indices_backward.default,
                 aten.max_pool3d_with_indices_backward.default]
# Note [Interpolation kept whole]
# An inference graph keeps interpolation whole: one gather per output element computing its own source
# positions (Note [Interpolation as one gather] in lowering/interpolation.py), where torch's decompositions
# build index vectors as separate nodes. torch registers those decompositions as Python kernels of the ops'
# Autograd and CompositeImplicitAutograd keys (py_impl), which AOTAutograd's Python dispatcher runs whatever
# the decomposition table says; so while an inference graph is traced they are set aside (and put back
# after), and the ops reach the graph as the .default overloads below (a .vec overload's C++ composite calls
# its .default). A training graph keeps them whole too, and its backward holds ATen's upsample backward ops,
# lowered as gathers (Note [Interpolation backward as a gather] in lowering/interpolation_backward.py), except
# bicubic's, and except in a graph with symbolic sizes (those gathers count their runs at lowering time):
# there torch's decompositions stay, and the decomposed forward's gradient is generated (an index_put that
# accumulates).
INTERPOLATION = [aten.upsample_nearest1d, aten.upsample_nearest2d, aten.upsample_nearest3d,
                 aten._upsample_nearest_exact1d, aten._upsample_nearest_exact2d, aten._upsample_nearest_exact3d,
                 aten.upsample_linear1d, aten.upsample_bilinear2d, aten.upsample_trilinear3d,
                 aten.upsample_bicubic2d]
TRAINED_WHOLE = INTERPOLATION[:-1]  # their backward ops are lowered; bicubic's is not
LOWERED_WHOLE += [packet.default for packet in INTERPOLATION]


def _core_aten_table() -> dict:
    """torch's core ATen decompositions. torch.export's public table adds every CompositeImplicitAutograd op
    of every namespace, which AOTAutograd decomposes on its own while tracing; building it costs ~0.3 s per
    process, the largest part of a warm compile in a fresh process. torch keeps the explicit part as a
    private function (2.6 on); we use it where it exists."""
    explicit = getattr(torch._decomp, "_core_aten_decompositions_post_autograd", None)
    return dict(explicit() if explicit is not None else torch._decomp.core_aten_decompositions())


# Note [repeat in eager's strides]
# Eager's repeat always returns a contiguous tensor, so model code may .view() it (WavLM's position bias:
# `bias.unsqueeze(0).repeat(bsz, 1, 1, 1).view(bsz * heads, t, t)`). torch's reference decomposition clones the
# expanded input and permutes it into place, which gives a permuted result when the input is a permuted view;
# the .view after it then fails while AOTAutograd traces. Ours expands each dim as (repeats, size), clones that
# contiguously and merges the pairs: eager's strides for every input, and still a broadcast copy for lowering.
def _repeat(x: torch.Tensor, repeats) -> torch.Tensor:
    repeats = list(repeats)
    torch._check(len(repeats) >= x.dim(), lambda: "repeat: Number of dimensions of repeat dims can not be smaller "
                                                  "than number of dimensions of tensor")
    sizes = [1] * (len(repeats) - x.dim()) + list(x.shape)
    pairs = x.reshape(sizes)
    for d in range(len(sizes)):  # (..., size, ...) -> (..., 1, size, ...): a view, whatever x's strides
        pairs = pairs.unsqueeze(2 * d)
    tiled = pairs.expand([n for r, size in zip(repeats, sizes) for n in (r, size)])
    return tiled.clone(memory_format=torch.contiguous_format).view([r * size for r, size in zip(repeats, sizes)])


@functools.lru_cache(maxsize=None)
def decomposition_table() -> dict:
    table = _core_aten_table()
    table.update(get_decompositions(EXTRA_DECOMPOSITIONS))
    table[aten.repeat.default] = _repeat
    for op in KEEP_AS_LIBRARY + LOWERED_WHOLE:
        table.pop(op, None)
    return table


def aot_compile(gm: torch.fx.GraphModule, example_inputs, fw_compiler: Callable,
                bw_compiler: Callable | None = None, partition_fn: Callable | None = None,
                inference_compiler: Callable | None = None) -> Callable:
    """Trace `gm` to ATen and hand the graph to `fw_compiler(aten_gm, fake_inputs)`. When a graph needs
    gradients, AOTAutograd traces the joint forward+backward graph instead, `partition_fn` splits it
    (partition.py), and the halves go to `fw_compiler` and `bw_compiler` (the backward on its first use);
    a graph that needs none goes to `inference_compiler`."""
    extra = {"partition_fn": partition_fn} if partition_fn is not None else {}
    training = will_train(example_inputs)
    if not training:
        whole = INTERPOLATION
    else:  # Note [Interpolation kept whole]
        whole = [] if _symbolic_sizes(example_inputs) else TRAINED_WHOLE
    with _interpolation_kept_whole(whole):
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                     inference_compiler=inference_compiler,
                                     decompositions=_training_table(tuple(whole)) if training
                                     else decomposition_table(), keep_inference_input_mutations=True, **extra)


# Note [Input writes after the graph]
# A model that changes a buffer in place (batch norm's running statistics in training: three a layer) leaves
# AOTAutograd two ways to do it: return each new value and copy it into its input after the graph, one
# aten::copy_ launch each (161 in a ResNet-50 training step, a tenth of its launches), or, with
# keep_inference_input_mutations (Inductor's choice), end the graph with `copy_(input, value)` nodes. We take
# the second and lift those nodes off before our stages (`lift_input_writes`): each value becomes an extra
# output of the graph, and the graph's call is followed by one torch._foreach_copy_ into the inputs (a launch or
# two for all of them on a GPU; engine/runtime/wrapper.py's WriteBack), also when the graph runs eagerly after a
# fallback. It runs after every kernel, so no kernel reads an input it already changed; and an input written so
# is never saved for the backward (partition.mutated_primals), which must see its old value.


def input_writes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The `copy_(input, value)` nodes that write a graph input in place (Note [Input writes after the graph])."""
    return [n for n in graph.find_nodes(op="call_function", target=aten.copy_.default)
            if isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder" and not n.users]


def lift_input_writes(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[int], list[str]]:
    """`gm` without its input writes, their values appended to its outputs, and the positions and names of the
    inputs they write, in that order (Note [Input writes after the graph]). `gm` itself is left as it is."""
    if not input_writes(gm.graph):
        return gm, [], []
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    writes = input_writes(gm.graph)
    positions = {node: i for i, node in enumerate(gm.graph.find_nodes(op="placeholder"))}
    output = next(iter(gm.graph.find_nodes(op="output")))
    outputs = output.args[0]
    output.args = ((*outputs, *(n.args[1] for n in writes)),)
    if isinstance(output.meta.get("val"), (list, tuple)):
        output.meta["val"] = (*output.meta["val"], *(n.args[1].meta.get("val") for n in writes))
    targets = [positions[n.args[0]] for n in writes]
    names = [n.args[0].name for n in writes]
    for node in writes:
        gm.graph.erase_node(node)
    gm.recompile()
    return gm, targets, names


def _symbolic_sizes(example_inputs) -> bool:
    return any(isinstance(x, torch.SymInt) or isinstance(x, torch.Tensor)
               and any(isinstance(s, torch.SymInt) for s in x.shape) for x in example_inputs)


@functools.lru_cache(maxsize=None)
def _training_table(whole: tuple) -> dict:
    """The table a training graph is traced with: the interpolation ops not in `whole` decomposed (Note
    [Interpolation kept whole])."""
    table = dict(decomposition_table())
    table.update(get_decompositions([packet.default for packet in INTERPOLATION if packet not in whole]))
    return table


_SET_ASIDE = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)


def _vec_as_default(packet) -> Callable:
    """A .vec overload (output size or scale factors) as a call of its .default overload, the output size
    computed as torch's Python decomposition computes it (symbolic sizes stay symbolic; C++'s composite
    would specialize them)."""
    from torch._decomp.decompositions import upsample_compute_output_size
    linear = "align_corners" in str(packet.default._schema)

    def call(x, output_size, *rest):
        align, scale_factors = (rest[0], rest[1]) if linear else (None, rest[0])
        size = upsample_compute_output_size(x.size(), output_size, scale_factors)
        scales = list(scale_factors) if scale_factors else [None] * len(size)
        return packet.default(x, size, *([align] if linear else []), *scales)

    return call


@contextlib.contextmanager
def _interpolation_kept_whole(packets):
    """torch's Python decompositions of the interpolation ops `packets` set aside while a graph is traced,
    each .vec overload calling its .default (Note [Interpolation kept whole])."""
    saved = []
    for packet in packets:
        for name in ("default", "vec"):
            overload = getattr(packet, name, None)
            if overload is None:
                continue
            saved.append((overload, {key: overload.py_kernels.pop(key) for key in _SET_ASIDE
                                     if key in overload.py_kernels}))
            if name == "vec":
                for key in _SET_ASIDE:
                    overload.py_kernels[key] = _vec_as_default(packet)
            overload._dispatch_cache.clear()
    try:
        yield
    finally:
        for overload, kernels in saved:
            for key in _SET_ASIDE:
                overload.py_kernels.pop(key, None)
            overload.py_kernels.update(kernels)
            overload._dispatch_cache.clear()


def static_inputs(phase: str) -> frozenset[int] | None:
    """Positions of the graph's inputs that stay put from call to call (parameters and buffers), as AOTAutograd
    marks them while it compiles a forward or inference graph; None outside AOTAutograd's compile. A backward's
    inputs are saved activations and incoming gradients: none of them is a parameter (those it needs arrive as
    saved forward outputs), so the answer is the empty set (Note [Which inputs a CUDA graph reads in place])."""
    from torch._guards import TracingContext
    if phase == "backward":
        return frozenset()
    context = TracingContext.try_get()
    indices = getattr(getattr(context, "fw_metadata", None), "static_input_indices", None)
    return frozenset(indices) if indices is not None else None


def split_joint(joint_gm: torch.fx.GraphModule, saved_values: list, saved_sym_nodes: list,
                num_fwd_outputs: int) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The forward and backward graphs of a joint graph, given the values to save (partition.py decides
    which). torch's graph surgery: it orders saved values the way AOTAutograd's runtime expects and drops
    from `saved_values` (in place) any the backward does not read."""
    from torch._functorch.partitioners import _extract_fwd_bwd_modules
    return _extract_fwd_bwd_modules(joint_gm, saved_values, saved_sym_nodes, num_fwd_outputs=num_fwd_outputs)


def will_train(example_inputs) -> bool:
    """Whether AOTAutograd will trace a joint forward+backward graph for these inputs (it does when grad mode is
    on and an input requires grad; parameters are inputs of Dynamo's graphs)."""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def trace_forward(gm: torch.fx.GraphModule, example_inputs) -> torch.fx.GraphModule:
    """Dynamo's graph as a functional ATen graph traced without autograd, with Dynamo's metadata on it, so that
    AOTAutograd can trace the joint graph from it instead of from `gm` (Note [Where rewrites run] in
    engine/rewrite/__init__.py). Raises ValueError(why) where that graph could not stand in for `gm`: it mutates
    an input, returns an alias of one, or takes other inputs than `gm` does."""
    from torch._functorch._aot_autograd.schemas import OutputType
    from torch._guards import TracingContext

    traced: dict = {}

    def keep(aten_gm, _inputs):
        context = TracingContext.try_get()
        traced["gm"], traced["meta"] = aten_gm, getattr(context, "fw_metadata", None)

        def unused(*_):
            raise RuntimeError("the forward traced for the rewrites is never run")

        return unused

    with torch.no_grad():
        aot_module_simplified(gm, list(example_inputs), fw_compiler=keep, inference_compiler=keep,
                              decompositions=decomposition_table())
    forward, meta = traced.get("gm"), traced.get("meta")
    if forward is None or meta is None:
        raise ValueError("AOTAutograd gave no forward graph")
    if any(info.mutates_data or info.mutates_metadata for info in meta.input_info):
        raise ValueError("it mutates an input (a batch norm's running statistics, an in-place update)")
    if any(info.output_type != OutputType.non_alias for info in meta.output_info) or meta.num_intermediate_bases:
        raise ValueError("it returns a view of an input or of another output")
    old = list(gm.graph.find_nodes(op="placeholder"))
    new = list(forward.graph.find_nodes(op="placeholder"))
    if len(old) != len(new) or getattr(meta, "tokens", None):
        raise ValueError(f"its ATen graph takes {len(new)} inputs where Dynamo's takes {len(old)}")
    for before, after in zip(old, new):  # what AOTAutograd reads from a Dynamo graph (static inputs, sources)
        if hasattr(before, "_dynamo_source"):
            after._dynamo_source = before._dynamo_source
        for key in ("tensor_dict", "grapharg", "example_value"):
            if key in before.meta:
                after.meta[key] = before.meta[key]
    for key, value in gm.meta.items():
        forward.meta.setdefault(key, value)
    if hasattr(gm, "_param_name_to_source"):
        forward._param_name_to_source = gm._param_name_to_source
    return forward
