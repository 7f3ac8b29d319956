"""Note [Recomputed in each reader] (engine/schedule/policy.py): a kernel that does not fuse with a producer's
kernel recomputes the cheap elementwise nodes it reads of it instead of reading them back, and the producer's
kernel stops storing them. Layer norm's backward is the case: its column kernel (the weight's and the bias's
gradients) recomputes dy cast up to float32 and xhat from dy, x and the per-row statistics, so the row kernel
stores neither. Every case matches eager in training (loss and every gradient), through both backends."""
import pytest
import sympy
import torch
from torch import nn

import engine
from engine.ir.nodes import Pointwise
from engine.schedule import policy
from engine.schedule.groups import Group

RULE = "recompute_in_reader"


def _explore(model, inputs, backend, train=False, **options):
    torch._dynamo.reset()
    exploration = engine.explore(model, inputs, backend=backend, train=train, **options)
    verify = exploration.verify
    entries = [verify.loss, *(verify.gradients or [])] if train else [verify]
    assert verify.ok, [e for e in entries if e and e.ok is False] or verify
    return exploration


def _graph(exploration, phase):
    return next(g for g in exploration.graphs if g.phase == phase)


def _full_size_writes(graph, numel, dtype=None):
    """The buffers of `numel` elements (of `dtype`) that loop kernels write."""
    nodes = {n.name: n for n in graph.ir.nodes}
    found = []
    for kernel in graph.kernels:
        if kernel.kind not in ("pointwise", "reduction"):
            continue
        for name in kernel.writes:
            node = nodes.get(name)
            if node is None:
                continue  # a split's workspace
            if sympy.prod([sympy.sympify(s) for s in node.size]) == numel and dtype in (None, node.dtype):
                found.append((kernel.name, name, node.dtype))
    return found


def _stored_only_for_libraries_and_outputs(graph, numel):
    """A full-size buffer is stored only for a library call (the linear's weight gradient reads the norm's
    output) or as the graph's output (the input's gradient), never for another loop kernel to read back."""
    for kernel, name, _ in _full_size_writes(graph, numel):
        readers = [k.kind for k in graph.kernels if name in k.reads]
        assert not readers or set(readers) - {"pointwise", "reduction"}, (kernel, name, readers)


# -- layer norm's backward -------------------------------------------------------------------------------------

class NormThenLinear(nn.Module):
    """A pre-norm block's first steps: the norm's output gradient comes from a matmul, as in a transformer."""

    def __init__(self, features, norm):
        super().__init__()
        self.norm = norm
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        return self.fc(self.norm(x)) + x


class RMSNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _layer_norm(features):
    norm = nn.LayerNorm(features)
    with torch.no_grad():  # affine weights away from 1 and 0, so a gradient mixed up with another would show
        norm.weight.copy_(torch.randn(features))
        norm.bias.copy_(torch.randn(features))
    return norm


# the Triton interpreter runs every program in Python: small shapes there
SHAPES = {"cpp": (4, 32, 64), "triton": (2, 16, 64)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_layer_norm_backward_stores_neither_the_cast_nor_xhat(backend, dtype):
    torch.manual_seed(0)
    shape = SHAPES[backend]
    # in bf16 the norm keeps its initial affine weights: with random ones the bf16 forward's loss (a sum of
    # bf16 outputs) is off eager's by more than the tolerance through the Triton interpreter, on main too
    norm = _layer_norm(shape[-1]) if dtype == torch.float32 else nn.LayerNorm(shape[-1])
    model = NormThenLinear(shape[-1], norm).to(dtype)
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    # templates off: the matmul is a library call, as on the GPU at the block's sizes (a CPU template would
    # take dy's cast into its epilogue, another question)
    backward = _graph(_explore(model, (x,), backend, train=True, templates="off"), "backward")
    numel = shape[0] * shape[1] * shape[2]
    loops = [k for k in backward.kernels if k.kind in ("pointwise", "reduction") and not k.name.endswith("_partials")]
    # the linear's bias gradient, the norm's row kernel, its column kernel: main's count
    assert len(loops) == 3, [(k.name, k.ir_nodes) for k in loops]
    _stored_only_for_libraries_and_outputs(backward, numel)
    if dtype == torch.bfloat16:  # and in bf16 none of them is float32
        assert _full_size_writes(backward, numel, "float32") == []
    recomputed = [d for d in backward.fusion.decisions if d.rule == RULE and d.fused]
    assert recomputed, [(d.rule, d.reason) for d in backward.fusion.decisions]
    nodes = {n.name: n for n in backward.ir.nodes}
    for decision in recomputed:  # the recomputed nodes are in the column kernel, which stores the two gradients
        (columns,) = [k for k in loops if set(decision.consumer.split("+")) & set(k.ir_nodes)]
        assert set(decision.producer.split("+")) <= set(columns.ir_nodes)
        assert [nodes[w].size for w in columns.writes] == [[str(shape[-1])]] * 2, columns.writes


@pytest.mark.slow
def test_split_column_kernel_recomputes_in_its_first_stage():
    """On Triton a long column reduction splits (Note [Column splits]); the recomputed nodes are the first
    stage's prologue, and it reads dy and x instead of the row kernel's stores."""
    torch.manual_seed(0)
    model = NormThenLinear(128, _layer_norm(128))
    x = torch.randn(2, 2048, 128, requires_grad=True)
    backward = _graph(_explore(model, (x,), "triton", train=True, templates="off"), "backward")
    (first,) = [k for k in backward.kernels if k.name.endswith("_partials") and len(k.writes) == 2]
    assert first.tiling.choice == "split", first.tiling
    # it reads dy (a matmul's result), x and the per-row statistics (the forward's), nothing a loop kernel wrote
    written = {n for k in backward.kernels if k.kind in ("pointwise", "reduction") for n in k.writes}
    assert not set(first.reads) & written, first.reads
    _stored_only_for_libraries_and_outputs(backward, x.numel())


def test_the_record_says_what_is_recomputed_and_why():
    torch.manual_seed(0)
    model = NormThenLinear(64, _layer_norm(64)).to(torch.bfloat16)
    x = torch.randn(4, 32, 64, dtype=torch.bfloat16, requires_grad=True)
    backward = _graph(_explore(model, (x,), "cpp", train=True, templates="off"), "backward")
    (both, cast) = [d for d in backward.fusion.decisions if d.rule == RULE]
    # the weight's gradient recomputes the cast and xhat (3 nodes: a view of x, minus the mean, times rstd),
    # the bias's the cast alone; each reason gives the bytes
    assert both.fused and len(both.producer.split("+")) == 4 and "bytes loaded per element" in both.reason
    assert cast.fused and len(cast.producer.split("+")) == 1 and "2 bytes loaded per element" in cast.reason


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_rms_norm_backward_matches_eager(backend):
    torch.manual_seed(0)
    shape = SHAPES[backend]
    model = NormThenLinear(shape[-1], RMSNorm(shape[-1]))
    _explore(model, (torch.randn(*shape, requires_grad=True),), backend, train=True)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_bias_gelu_backward_matches_eager_and_stores_what_the_matmuls_read(backend):
    torch.manual_seed(0)
    shape = SHAPES[backend]
    model = nn.Sequential(nn.Linear(shape[-1], 2 * shape[-1]), nn.GELU(), nn.Linear(2 * shape[-1], shape[-1]))
    backward = _graph(_explore(model, (torch.randn(*shape, requires_grad=True),), backend, train=True), "backward")
    # the GELU's input gradient is read by the matmuls (library calls or templates): stored, not recomputed
    assert not any(d.fused for d in backward.fusion.decisions if d.rule == RULE)


# -- the mechanism on small graphs ------------------------------------------------------------------------------

def _rows_then_columns(a):
    p = a * 2 + 1
    return p.sum(1), p.sum(0)


def _columns_then_rows(a):
    p = a * 2 + 1
    return p.sum(0), p.sum(1)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn", [_rows_then_columns, _columns_then_rows])
def test_a_value_summed_along_both_axes_is_stored_by_neither(backend, fn):
    exploration = _explore(fn, (torch.randn(32, 48),), backend)
    graph = exploration.graphs[0]
    loops = [k for k in graph.kernels if k.kind == "reduction"]
    assert len(loops) == 2, [(k.name, k.ir_nodes) for k in loops]
    assert _full_size_writes(graph, 32 * 48) == []
    assert any(d.rule == RULE and d.fused for d in graph.fusion.decisions)


def _bias_grad_like(a, w):
    p = a * 2 + 1
    return p @ w, p.sum(0)  # the GEMM reads p: stored once, and its column sum reads it back


def test_a_value_a_library_call_reads_is_stored_once_and_read_back():
    """The qkv gradient of Note [Stored prologues of column reductions]: stored for its GEMM, read back by its
    bias gradient, not recomputed there."""
    graph = _explore(_bias_grad_like, (torch.randn(64, 32), torch.randn(32, 16)), "cpp", templates="off").graphs[0]
    writers = [k.name for k in graph.kernels for n in k.writes if n in _full_size_names(graph, 64 * 32)]
    assert len(writers) == 1, writers
    refused = [d for d in graph.fusion.decisions if d.rule == RULE]
    assert refused and not any(d.fused for d in refused) and "stored anyway" in refused[0].reason, refused


def _full_size_names(graph, numel):
    return [name for _, name, _ in _full_size_writes(graph, numel)]


# -- the rule on hand-made facts --------------------------------------------------------------------------------

def _group(name, *dims):
    node = Pointwise(name=name, size=tuple(map(sympy.Integer, dims)), dtype=torch.float32, device="cpu")
    return Group.of(node, 0, False)


def _facts(**changes):
    producer, consumer = _group("p", 8, 16), _group("c", 8, 16)
    facts = dict(producer=producer, consumer=consumer, roots=producer.nodes, nodes=producer.nodes, inputs=["x"],
                 blocker=None, stored_for=None, loaded_bytes=2.0, read_bytes=4, ops=1)
    facts.update(changes)
    return policy.Recomputation(**facts)


def test_rule_recomputes_cheap_elementwise_values():
    verdict = policy.recompute_in_reader(_facts())
    assert verdict.fuse and verdict.recompute and verdict.rule == RULE and "from x" in verdict.reason


@pytest.mark.parametrize("changes,why", [
    ({"blocker": "they read r, a reduction of their kernel"}, "a reduction"),
    ({"stored_for": "p is stored anyway for buf3 (a library call)"}, "costs no more"),
    ({"loaded_bytes": 12.0}, "more than the 8 it saves"),
    ({"ops": policy.MAX_RECOMPUTED_OPS + 1}, "arithmetic ops"),
    ({"nodes": [_group(f"n{i}", 8, 16).nodes[0] for i in range(policy.MAX_RECOMPUTED_NODES + 1)]}, "nodes"),
    ({"knobs": policy.FusionKnobs(max_nodes=1)}, "max_nodes"),  # 1 node and its 1 copy
])
def test_rule_refusals_say_why(changes, why):
    verdict = policy.recompute_in_reader(_facts(**changes))
    assert not verdict.fuse and not verdict.recompute and verdict.rule == RULE and why in verdict.reason, verdict


def test_fusion_off_recomputes_nothing():
    assert policy.recompute_in_reader(_facts(knobs=policy.FusionKnobs(enabled=False))) is None
