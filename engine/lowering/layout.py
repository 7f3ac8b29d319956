"""The memory layout of a graph's 4D tensors: NCHW as eager has them, or channels-last around convolutions (and
of its 5D outputs: eager's, channels_last_3d where eager returns that).

Note [Channels-last convolutions]
cuDNN's fast convolution kernels (depthwise ones especially) are NHWC kernels: handed NCHW tensors, ATen picks
slower NCHW kernels or converts each argument with a transform kernel of its own, both ways and every call.
So on CUDA a graph with 2D convolutions can store the tensors around them channels-last (C the innermost
dimension), as Inductor's layout optimization does:
- the decision (`decide_layout`) is per graph, from the convolutions' shapes (the rule below, facts from
  Inductor's measurements: grouped convolutions with more than one input channel per group run slower
  channels-last, most others faster); it is recorded with its reason on the graph's memory plan;
- the preferred tensors (`preferred_nodes`) are the convolutions, the 4D values that feed one through
  ops that keep the shape (batch norm, activations, residual adds: so conv -> bn -> relu -> conv needs no
  conversion in between) and the same-shape 4D values computed from a convolution's output;
- such a value, computed by one of our kernels, is a node whose loop runs over N, H, W, C (`store_channels_last`):
  its buffer is contiguous in that order and readers see it through a permutation (Note [Views are index
  maps]), so our elementwise kernels walk and write the tensor in memory order, no transposing store;
- a convolution's output is promised channels-last, and its weight is converted once and kept while the
  parameter is unchanged (ChannelsLastWeight), so cuDNN sees NHWC arguments and needs no transform kernels;
- the graph's outputs keep eager's strides where nothing else reads them (their values are stored
  channels-last when eager returns them so: `eager_order`, in any graph, as eager's elementwise
  ops and max pools follow a channels-last input; a 5D output likewise, channels_last_3d (N, D, H, W, C);
  stored NCHW instead, x * x.mean((2, 3)) over a channels-last x came back
  with other strides than eager's, through a transposing store that made it 1.2x Inductor's time on the H200
  and 1.3-1.5x on the CPU). An output that another kernel also reads is stored NCHW for its readers: the column
  reduction that reads it (y and y.mean((2, 3)), a squeeze-excitation's input) fuses it as a stored prologue by
  the order of its logical dims (policy.stored_prologue_of_column), and a channels-last y would fall out of it;
  the output is then a copy in eager's strides (Note [Outputs in eager's strides]); and views
  (permute, reshape) never carry the preference across: convnext's permute to NHWC for its layer norm
  already is a channels-last view of a channels-last convolution output.

Note [Channels-last training graphs]
A training step is two graphs that share the forward's saved tensors (partition.py), and the backward holds the
convolutions' gradients (convolution_backward: the input's and the weight's, two more cuDNN convolutions). So on
CUDA both halves are channels-last or neither, as with Inductor's layout optimization:
- the forward decides by the rule below, as an inference graph does; its user-visible outputs keep eager's
  strides, but the tensors it saves for the backward (marked SAVED_FOR_BACKWARD by the partition) are no
  user's: they stay channels-last, no copy back to NCHW, and the forward tells AOTAutograd their real strides
  (`handed_over_strides`, TracingContext's output strides, Inductor's channel), which restrides the backward's
  placeholders before the backward compiles (partition.restride_saved_inputs);
- the backward follows its forward: it goes channels-last when saved 4D tensors arrive channels-last, and
  its convolution_backward calls then get NHWC gradients, inputs and weights and return the input's gradient
  channels-last into the pointwise kernels around them; the gradients it returns (a conv weight's .grad
  above all) keep eager's strides, as every graph output (the wrapper copies a library's channels-last weight
  gradient into them: Note [Library output layout]);
- input writes (batch norm's running stats) are 1D and unchanged.
Nothing is handed over in other strides where they are not static integers (AOTAutograd restrides with ints).

Note [Channels-last and TF32]
Eager's verdict is our oracle. With torch.backends.cudnn.allow_tf32 on (PyTorch's default), cuDNN runs float32
NHWC convolutions in TF32 while the NCHW ones eager picks for the same shapes stay in float32: measured on the
H200, the resnet_block, unet_block and vit samples went from errors of ~3e-7 to ~3e-4 (20% relative), less
accurate than eager against float64. So `auto` keeps float32 graphs NCHW unless TF32 is off; half-precision
convolutions (the models that gain most) are unaffected, and `channels_last` still forces it.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import sympy
import torch
import torch.fx

from engine.ir.nodes import Buffer, Extern, Pointwise, Reduction, TensorValue
from engine.lowering.common import realize

aten = torch.ops.aten

# Measured speed of channels-last over NCHW per class of convolution (Inductor's benchmark of torchbench
# convolutions; < 1 is a speedup). A graph goes channels-last when its FLOP-weighted average is a speedup.
SLOWDOWN = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}
FEW_CONVS = 300  # a graph of more than this many nodes per convolution is not about its convolutions
# node meta keys (partition.py): a forward's value returned only to be saved for the backward; a backward's
# placeholder that arrives in the strides its forward reported, not eager's
SAVED_FOR_BACKWARD = "saved_for_backward"
FORWARD_STRIDES = "forward_strides"
# per convolution op: (the weight's argument, the groups' argument, the 4D arguments read in the layout)
CONVOLUTIONS = {aten.convolution.default: (1, 8, (0,)), aten.convolution_backward.default: (2, 9, (0, 1))}


@dataclass(frozen=True)
class LayoutDecision:
    channels_last: bool
    reason: str
    preferred: frozenset = frozenset()  # FX node names whose values prefer channels-last

    def record(self, stored: list[str], converted: dict[str, str]) -> dict:
        """For the memory plan's record: the layout, why, the buffers stored channels-last, and those of them
        that are copies of another value made for a library call (buffer -> the FX node it copies)."""
        return {"format": "channels_last" if self.channels_last else "contiguous", "reason": self.reason,
                "buffers": list(stored), "converted": dict(converted)}


def _weight(node: torch.fx.Node):
    return node.args[CONVOLUTIONS[node.target][0]].meta.get("val")


def conv2d_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The 2D convolutions and their gradients (convolution_backward)."""
    return [n for n in gm.graph.nodes if n.target in CONVOLUTIONS
            and isinstance(_weight(n), torch.Tensor) and _weight(n).dim() == 4]


def _conv_class(node: torch.fx.Node) -> str:
    weight = _weight(node)
    out_channels, in_per_group, kernel_h = weight.shape[0], weight.shape[1], weight.shape[2]
    if node.args[CONVOLUTIONS[node.target][1]] > 1 and in_per_group > 1:
        return "grouped"  # depthwise (one input channel per group) is not: it gains most from NHWC
    if out_channels <= 64 and in_per_group <= 64:
        return "small"
    if out_channels * 2 <= in_per_group and kernel_h > 1:
        return "in_out"
    return "default"


def _conv_flops(node: torch.fx.Node) -> int:
    out, weight = node.meta["val"], node.args[1].meta["val"]
    return 2 * out.numel() * math.prod(weight.shape[1:])  # a multiply-add per output and weight of its group


def decide_layout(gm: torch.fx.GraphModule, device: str, phase: str, option: str = "auto") -> LayoutDecision:
    """Channels-last or NCHW for this graph, and why (Note [Channels-last convolutions]; a training graph's
    halves: Note [Channels-last training graphs])."""
    convs = conv2d_nodes(gm)
    if option == "contiguous":
        return LayoutDecision(False, "NCHW (eager's layout): forced (Options.layout='contiguous')")
    if not convs:
        return LayoutDecision(False, "NCHW (eager's layout): the graph has no 2D convolution")
    if option == "channels_last":
        return LayoutDecision(True, f"channels-last around {len(convs)} convolution(s): forced "
                                    f"(Options.layout='channels_last'){_handover(phase)}", preferred_nodes(gm, convs))
    if not device.startswith("cuda"):
        return LayoutDecision(False, "NCHW (eager's layout): channels-last is chosen for cuDNN's NHWC kernels; "
                                     "on the CPU it has not been measured to pay here")
    if phase == "backward":
        return _follow_forward(gm, convs)
    decision = _by_flops(gm, convs)
    if not decision.channels_last:
        return decision
    return LayoutDecision(True, decision.reason + _handover(phase), preferred_nodes(gm, convs))


def _handover(phase: str) -> str:
    """What a training graph's layout means for the tensors its halves share (Note [Channels-last training
    graphs])."""
    if phase == "forward":
        return ("; the tensors saved for the backward stay channels-last, their strides told to the backward "
                "(no copy between the halves)")
    if phase == "backward":
        return "; the saved tensors are read in the strides the forward handed them over in"
    return ""


def _follow_forward(gm: torch.fx.GraphModule, convs: list[torch.fx.Node]) -> LayoutDecision:
    """A backward graph takes its forward's layout: channels-last when saved tensors arrive so (Note
    [Channels-last training graphs])."""
    arriving = received(gm)
    if not arriving:
        return LayoutDecision(False, "NCHW (eager's layout): the forward handed its saved tensors over in eager's "
                                     "strides (it kept NCHW)")
    return LayoutDecision(True, f"channels-last around {len(convs)} convolution gradient(s): as the forward, which "
                                f"handed {len(arriving)} saved tensor(s) over channels-last{_handover('backward')}",
                          preferred_nodes(gm, convs))


def _by_flops(gm: torch.fx.GraphModule, convs: list[torch.fx.Node]) -> LayoutDecision:
    """Inductor's rule for a graph of convolutions (the decision's `preferred` left empty)."""
    shapes = [t for n in convs for t in (n.args[0].meta.get("val"), n.args[1].meta["val"])]
    if any(not isinstance(t, torch.Tensor) or any(isinstance(s, torch.SymInt) for s in t.shape) for t in shapes):
        return LayoutDecision(False, "NCHW (eager's layout): the convolutions have symbolic shapes")
    tf32 = [n for n in convs if n.args[0].meta["val"].dtype == torch.float32]
    if tf32 and torch.backends.cudnn.allow_tf32:
        return LayoutDecision(False, f"NCHW (eager's layout): {len(tf32)} float32 convolution(s), and cuDNN's NHWC "
                                     f"kernels for float32 compute in TF32 (torch.backends.cudnn.allow_tf32), "
                                     f"less accurately than eager's NCHW ones (Note [Channels-last and TF32])")
    if len(gm.graph.nodes) >= FEW_CONVS * len(convs):
        return LayoutDecision(False, f"NCHW (eager's layout): {len(convs)} convolution(s) among "
                                     f"{len(gm.graph.nodes)} nodes are not what the graph spends its time on")
    flops: dict[str, int] = {}
    for node in convs:
        flops[_conv_class(node)] = flops.get(_conv_class(node), 0) + _conv_flops(node)
    total = sum(flops.values())
    weighted = sum(SLOWDOWN[kind] * f for kind, f in flops.items())
    shares = ", ".join(f"{kind} {f / total:.0%}" for kind, f in sorted(flops.items(), key=lambda kv: -kv[1]))
    if weighted > total:
        return LayoutDecision(False, f"NCHW (eager's layout): by FLOPs ({shares}) the convolutions would run "
                                     f"{weighted / total:.2f}x as long channels-last (grouped ones are slower)")
    return LayoutDecision(True, f"channels-last around {len(convs)} convolution(s): by FLOPs ({shares}) cuDNN's "
                                f"NHWC kernels take {weighted / total:.2f}x the NCHW time, and the tensors "
                                f"between convolutions need no conversion")


def _is_channels_last_val(val) -> bool:
    """A 4D tensor of static shape in channels-last strides that are not also NCHW's."""
    if not isinstance(val, torch.Tensor) or val.dim() != 4 or \
            not all(isinstance(s, int) for s in (*val.shape, *val.stride())):
        return False
    return not _trivial(val.shape) and _channels_last_strides(val.shape, val.stride())


def received(gm: torch.fx.GraphModule) -> list[str]:
    """A backward graph's saved tensors that its forward handed over channels-last (a channels-last input of
    the user's, saved as it is, does not count: the forward may have kept NCHW)."""
    return [n.name for n in gm.graph.find_nodes(op="placeholder")
            if n.meta.get(FORWARD_STRIDES) and _is_channels_last_val(n.meta.get("val"))]


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) and val.dim() == 4 else None


def _keeps_shape(producer: torch.fx.Node, user: torch.fx.Node) -> bool:
    """The preference passes between these two: same 4D shape, and `user` is no view (Note [Channels-last
    convolutions])."""
    return (_shape(producer) is not None and _shape(producer) == _shape(user)
            and not getattr(user.target, "is_view", False))


def preferred_nodes(gm: torch.fx.GraphModule, convs: list[torch.fx.Node]) -> frozenset:
    """FX node names whose 4D values prefer channels-last: the convolutions, what feeds them (through
    shape-keeping ops) and what is computed from them the same way; never an output a user sees."""
    preferred = {n for n in convs}
    for node in reversed(gm.graph.nodes):  # upstream: a value some preferred op reads
        if node in preferred or _shape(node) is None or getattr(node.target, "is_view", False):
            continue
        if any(u in preferred and (node in _conv_activations(u) or _keeps_shape(node, u)) for u in node.users):
            preferred.add(node)
    for node in gm.graph.nodes:  # downstream: the same-shape values computed from a preferred one
        if node in preferred:
            preferred.update(u for u in node.users if u.op == "call_function" and _keeps_shape(node, u))
            preferred.update(_input_gradient(node))
    # an op of several results (max pooling's values and indices) is lowered as one: it stores the results
    # whose getitem nodes prefer channels-last that way (store_preferred)
    preferred.update(p for n in list(preferred) if n.target is operator.getitem
                     for p in n.args[:1] if isinstance(p, torch.fx.Node))
    seen = user_visible(gm)
    return frozenset(n.name for n in preferred if n not in seen)


def _conv_activations(node: torch.fx.Node) -> list:
    """The 4D tensors a convolution (or its gradient) reads besides the weight."""
    return [node.args[i] for i in CONVOLUTIONS[node.target][2]] if node.target in CONVOLUTIONS else []


def _input_gradient(node: torch.fx.Node) -> list[torch.fx.Node]:
    """A convolution_backward's input gradient (its getitem 0), which cuDNN returns in its arguments' layout."""
    if node.target is not aten.convolution_backward.default:
        return []
    return [u for u in node.users if u.target is operator.getitem and u.args[1] == 0]


def user_visible(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The graph's outputs that keep eager's strides: all but those a training forward returns only to save them
    for its backward (Note [Channels-last training graphs])."""
    return {n for n in graph_outputs(gm) if isinstance(n, torch.fx.Node) and not handed_over(n)}


def graph_outputs(gm: torch.fx.GraphModule) -> list:
    """The graph's outputs in order (FX nodes, or constants and None)."""
    return torch.utils._pytree.arg_tree_leaves(*next(iter(gm.graph.find_nodes(op="output"))).args)


def handed_over(node: torch.fx.Node) -> bool:
    """A value returned only to be saved for the backward, in strides the forward may report (static ones)."""
    val = node.meta.get("val")
    return bool(node.meta.get(SAVED_FOR_BACKWARD)) and isinstance(val, torch.Tensor) and \
        all(isinstance(s, int) for s in val.shape)


def handed_over_strides(gm: torch.fx.GraphModule, outputs: list) -> list[tuple[int, ...] | None]:
    """Per output of the graph, the strides it is returned in where the backward must be told them: a saved
    tensor stored in others than eager's (None otherwise, and for non-tensors: AOTAutograd keeps eager's)."""
    return [_strides_if_not_eager(node, value) for node, value in zip(graph_outputs(gm), outputs)]


def shared_tensors(gm: torch.fx.GraphModule, outputs: list) -> dict:
    """For a training graph's record: the saved tensors it hands over in other strides than eager's (forward)
    and those it receives channels-last (backward), by name (Note [Channels-last training graphs])."""
    handed = [n.name for n, s in zip(graph_outputs(gm), handed_over_strides(gm, outputs)) if s is not None]
    return {"handed_over": handed, "received": received(gm)}


def _strides_if_not_eager(node, value) -> tuple[int, ...] | None:
    if not isinstance(node, torch.fx.Node) or not handed_over(node) or not isinstance(value, TensorValue):
        return None
    layout, eager = value.strided_layout(), node.meta["val"].stride()
    if layout is None or not all(sympy.sympify(s).is_Integer for s in layout[0]):
        return None
    ours = tuple(int(s) if n != 1 else e for s, e, n in zip(layout[0], eager, node.meta["val"].shape))
    return ours if ours != tuple(eager) else None


def channels_last_strides(size) -> tuple:
    """The strides of channels_last (4D) or channels_last_3d (5D): C innermost, then the spatial dims."""
    _, c, *spatial = size
    strides = [c]
    for s in reversed(spatial[1:]):
        strides.insert(0, strides[0] * s)
    return (strides[0] * spatial[0], sympy.Integer(1), *strides)


def _trivial(size) -> bool:
    """Channels-last is the contiguous layout when C or the spatial dims' product (H*W, D*H*W) is 1."""
    _, c, *spatial = (sympy.sympify(s) for s in size)
    return c == 1 or math.prod(spatial) == 1


def _only_returned(node: torch.fx.Node) -> bool:
    return bool(node.users) and all(u.op == "output" for u in node.users)


# Note [Outputs in eager's strides]
# A graph output comes back in the strides eager gives it, as Inductor's do: code that reads an output's memory
# (.view, a C extension, data_ptr arithmetic) must see eager's data. Eager's elementwise ops follow their
# inputs' layout, so x.t() * 2 is returned transposed and ConvNeXt-V2's last hidden state (a residual add over
# a channels-last convolution) channels-last. An output that nothing else reads is computed in that order where
# it is made (`eager_order`, store_permuted: one kernel, as for channels-last outputs); one that other kernels
# also read keeps the layout they were lowered against, and the output is a copy in eager's order
# (`in_eager_strides`). A saved tensor a training forward hands over keeps its own strides: the backward is told
# them (Note [Channels-last training graphs]).
# Under dynamic shapes it is a matter of values, not only layout: an output that aliases a graph input is
# rebuilt by AOTAutograd from that input with the size and strides our graph returns (its view replay is off
# for symbolic views), so a contiguous copy of a transposed view reads the input's memory in the wrong order
# (LED's sliding-chunk scores). Symbolic strides are ordered by their example values and the order is then
# proved for every size (`dense_order`).


def dense_order(size, stride) -> tuple[int, ...] | None:
    """The dims from outermost to innermost in memory when `stride` lays `size` out densely, with no gap and no
    overlap (a permutation of the contiguous layout); None when it does not, or when symbolic strides cannot be
    ordered."""
    hinted_size, hinted_stride = _hints(size), _hints(stride)
    size, stride = [sympy.sympify(s) for s in size], [sympy.sympify(s) for s in stride]
    candidates = [tuple(range(len(size)))]
    if len(size) in (4, 5):
        candidates.append((0, *range(2, len(size)), 1))
    if hinted_size is not None and hinted_stride is not None:
        # outermost first by the strides' values (a symbolic stride by its example value: the order is then
        # proved for every size below); a size-1 dim's stride says nothing, so it goes last
        candidates.append(tuple(sorted(range(len(size)),
                                       key=lambda d: (hinted_size[d] == 1, -hinted_stride[d], d))))
    for order in candidates:
        if same_strides(size, stride, permuted_strides(size, order)):
            return order
    return None


def _hints(values) -> list[int] | None:
    """Example values of sizes or strides: a SymInt's hint (the value it had when traced), an int as it is; None
    when one has no hint (a sympy expression, an unbacked size)."""
    hints = []
    for v in values:
        if isinstance(v, torch.SymInt):
            v = getattr(v.node, "hint", None)
        elif isinstance(v, sympy.Basic) and v.is_Integer:
            v = int(v)
        if not isinstance(v, int):
            return None
        hints.append(v)
    return hints


def permuted_strides(size, order) -> tuple:
    """The strides of `size` stored densely with its dims in memory in `order` (outermost first)."""
    strides, step = [sympy.Integer(0)] * len(size), sympy.Integer(1)
    for d in reversed(order):
        strides[d] = step
        step = step * sympy.sympify(size[d])
    return tuple(strides)


def same_strides(size, a, b) -> bool:
    """Strides `a` and `b` of `size` are the same, but for the strides of size-1 dims (which say nothing)."""
    return all(sympy.expand(x - y) == 0 for x, y, n in zip(a, b, size) if sympy.sympify(n) != 1)


def eager_order(node: torch.fx.Node, val) -> tuple[int, ...] | None:
    """The order to compute `node` in when it is a graph output, read by nothing else, that eager returns in
    strides other than contiguous ones (Note [Outputs in eager's strides]); None otherwise."""
    if not isinstance(val, torch.Tensor) or val.dim() < 2 or not _only_returned(node):
        return None
    order = dense_order(val.shape, val.stride())
    return None if order is None or order == tuple(range(val.dim())) else order


def in_eager_strides(value, val, nodes: list[Buffer]):
    """A graph output in eager's strides (Note [Outputs in eager's strides]): `value` where it already is (or
    eager's strides are no dense layout), else a copy of it stored in eager's order."""
    if not isinstance(value, TensorValue) or not isinstance(val, torch.Tensor) or val.dim() < 2:
        return value
    layout = value.strided_layout()
    eager = [sympy.sympify(s) for s in val.stride()]
    if layout is not None and same_strides(value.size, layout[0], eager):
        return value
    order = dense_order(val.shape, val.stride())
    if order is None:
        return value
    first_new = len(nodes)
    return store_permuted(realize(value), order, first_new, nodes)


def store_preferred(node: torch.fx.Node, result, first_new: int, nodes: list[Buffer], preferred: frozenset):
    """(the lowering's result of `node` with its preferred values stored channels-last (store_channels_last),
    the names of the nodes so stored). Of a tuple result, the values whose getitem nodes are preferred."""
    if node.name not in preferred:
        return result, []
    if isinstance(result, tuple):
        wanted = {u.args[1] for u in node.users if u.target is operator.getitem and u.name in preferred}
        placed = tuple(store_channels_last(v, first_new, nodes) if i in wanted else v for i, v in enumerate(result))
    else:
        placed = store_channels_last(result, first_new, nodes)
    pairs = zip(placed, result) if isinstance(result, tuple) else [(placed, result)]
    return placed, [new.node.name for new, old in pairs if new is not old]


def store_channels_last(value, first_new: int, nodes: list[Buffer]):
    """The lowering's result as a node whose loop runs over N, H, W, C (N, D, H, W, C in 5D), seen through a
    permutation; unchanged when it is no new node of ours (a view, an input, a library call) or channels-last is
    NCHW for its shape."""
    if not isinstance(value, TensorValue) or value.ndim not in (4, 5) or _trivial(value.size):
        return value
    return store_permuted(value, (0, *range(2, value.ndim), 1), first_new, nodes)


def store_permuted(value, order: tuple[int, ...], first_new: int, nodes: list[Buffer]):
    """The lowering's result as a node whose loop runs over its dims in `order` (outermost first), so its buffer
    is dense in that order, seen through the permutation; unchanged when it is no new node of ours (a view, an
    input, a library call)."""
    if not isinstance(value, TensorValue) or value.index_map is not None:
        return value
    node = value.node
    if not isinstance(node, (Pointwise, Reduction)) or node not in nodes[first_new:] or \
            tuple(value.size) != tuple(node.size) or order == tuple(range(len(order))):
        return value
    size, body = tuple(node.size), node.inner_fn
    node.size = tuple(size[d] for d in order)
    where = {d: i for i, d in enumerate(order)}

    def logical(index):  # memory order -> the tensor's dims
        return [index[where[d]] for d in range(len(order))]
    if isinstance(node, Pointwise):
        node.inner_fn = lambda index: body(logical(index))
    else:
        node.inner_fn = lambda index, rindex: body(logical(index), rindex)
    return TensorValue(node, size, lambda index: [index[d] for d in order])


class ChannelsLastWeight:
    """A convolution weight in channels-last strides, converted once and reused while it is the same tensor,
    unmodified (same object, same version counter). Inside a CUDA graph capture it converts every time: the
    copy is then part of the replay and follows in-place updates of the parameter."""

    def __init__(self):
        self.source = self.version = self.converted = None

    def __call__(self, weight: torch.Tensor) -> torch.Tensor:
        capturing = weight.is_cuda and torch.cuda.is_current_stream_capturing()
        if weight is self.source and weight._version == self.version and not capturing:
            return self.converted
        converted = torch.empty_strided(weight.shape, [int(s) for s in channels_last_strides(weight.shape)],
                                        dtype=weight.dtype, device=weight.device).copy_(weight)
        if not capturing:
            self.source, self.version, self.converted = weight, weight._version, converted
        return converted

    def __repr__(self):
        return "channels_last_weight"


def channels_last_weight(graph, weight):
    """The weight as a channels-last buffer: a conversion kept while the parameter is unchanged
    (ChannelsLastWeight), or the tensor itself when it already is channels-last."""
    if not isinstance(weight, TensorValue) or weight.ndim != 4:
        return weight
    arg = graph.as_tensor_arg(weight)
    strides = channels_last_strides(arg.size)
    if arg.offset == 0 and all(a == b for a, b, s in zip(arg.stride, strides, arg.size) if sympy.sympify(s) != 1):
        return weight
    node = Extern(name=graph.new_name(), size=tuple(arg.size), dtype=weight.dtype, device=graph.device,
                  origins=graph.origins(), target=ChannelsLastWeight(), args=(arg,), kwargs={}, out_stride=strides)
    graph.register(node)
    return TensorValue(node, node.size)


# Note [Converting a convolution's input ourselves]
# Given a channels-last weight and an NCHW input (the graph's input image, mostly), cuDNN and mkldnn convert the
# input to NHWC themselves, every call: an ATen copy kernel (ResNet-50's stem on the H200: 28 us, one of the five
# aten::copy_ a call, plus the copy's host time). So such an input is converted by a kernel of ours instead, a
# pointwise copy stored channels-last (Note [Channels-last convolutions]), which the tiling reads as the
# transpose it is and into which a producer that only feeds the convolution is fused. Not for a 1x1 convolution:
# it may become a GEMM template (Note [1x1 convolutions as GEMMs]), which reads an NCHW input in place.


def _channels_last_strides(size, stride) -> bool:
    """Whether `stride` is channels-last's for `size` on every dim that is not a 1."""
    return all(a == b for a, b, n in zip(stride, channels_last_strides(size), size) if sympy.sympify(n) != 1)


def _is_channels_last(value: TensorValue) -> bool:
    layout = value.strided_layout()
    return layout is not None and _channels_last_strides(value.size, layout[0])


def channels_last_input(graph, x, weight):
    """The convolution's input, converted to channels-last by our own kernel where the library would convert it
    (Note [Converting a convolution's input ourselves])."""
    if not isinstance(weight, TensorValue) or all(sympy.sympify(k) == 1 for k in weight.size[2:]):
        return x
    return _converted(graph, x)


def _converted(graph, x):
    """`x` stored channels-last by a kernel of ours, unless it already is (or is no 4D tensor, or trivially so)."""
    if not isinstance(x, TensorValue) or x.ndim != 4 or _trivial(x.size) or _is_channels_last(x):
        return x
    first_new = len(graph.nodes)
    placed = store_channels_last(realize(x), first_new, graph.nodes)
    if placed.node in graph.nodes[first_new:]:
        graph.channels_last.append(placed.node.name)
        graph.converted[placed.node.name] = x.node.origins[0] if x.node.origins else x.node.name
    return placed


def channels_last_convolution(graph, args: tuple, kwargs: dict) -> TensorValue:
    """The library convolution on a channels-last weight and input (converted by our kernels where they are
    not: Note [Converting a convolution's input ourselves]), promised to return channels-last: cuDNN and mkldnn
    follow their arguments' format, and the wrapper converts should a library decide otherwise (Note [Library
    output layout])."""
    args = (channels_last_input(graph, args[0], args[1]), channels_last_weight(graph, args[1]), *args[2:])
    value = graph.fallback(aten.convolution.default, args, kwargs, reason="", node_class=Extern)
    if not _trivial(value.node.size):
        value.node.out_stride = channels_last_strides(value.node.size)
    return value


def channels_last_convolution_backward(graph, args: tuple, kwargs: dict) -> tuple:
    """A convolution's gradients by the library on channels-last arguments (the saved input arrives so; the
    incoming gradient, stored so by our kernels, or converted), the input's gradient promised channels-last where
    our kernels read it (Note [Channels-last training graphs]); the weight's keeps eager's strides, a graph
    output (the wrapper copies should the library return it channels-last: Note [Library output layout])."""
    grad, x, weight = args[:3]
    args = (_converted(graph, grad), _converted(graph, x), channels_last_weight(graph, weight), *args[3:])
    results = graph.fallback(aten.convolution_backward.default, args, kwargs, reason="", node_class=Extern)
    wanted = {u.name for u in _input_gradient(graph.current_node)} & graph.layout.preferred
    if wanted and results[0] is not None and not _trivial(results[0].node.size):
        results[0].node.out_stride = channels_last_strides(results[0].node.size)
    return results
