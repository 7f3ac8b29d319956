"""cat and constant_pad_nd read each element from one input (Note [Cat and pad read one input]), and the scatters
into a region read self or src: they match eager through the IR evaluator, C++ and Triton (interpreter) for many
input kinds, in training too, and the Triton kernel of a 3-way cat has one masked load per input (its source, its
TTIR and PTX for sm_90)."""
import ast
import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch import nn

import engine
from engine.tools import assembly
from engine.ir.evaluator import TorchEvaluator
from engine.ir.handlers import IRPrinter
from engine.ir.indexing import Bounded, FloorDiv, ModIndex, loop_var, simplify_index
from engine.ir.nodes import Pointwise
from engine.ir.ops import ops, use_handler
from engine.pipeline import compile_reference

BACKENDS = ["reference", "cpp", "triton"]


def _check(fn, *inputs, backend, atol=1e-5, rtol=1e-5):
    compiled = compile_reference(fn) if backend == "reference" else engine.compile(fn, backend=backend)
    with torch.no_grad():
        expected, actual = fn(*inputs), compiled(*inputs)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True)


def _qkv(q, k, v):  # a (B, H, T, hd) attention's q, k, v back to (B, T, 3*H*hd), as its backward concatenates
    b, h, t, d = q.shape
    return torch.cat([x.permute(0, 2, 1, 3).reshape(b, t, h * d) for x in (q, k, v)], -1)


def _rotate_half(x):  # rotary embeddings: the cat is read by the product that follows (inlined into it)
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


r = torch.randn
CATS = {
    "two_first_dim": (lambda a, b: torch.cat([a, b], 0), (r(2, 3), r(5, 3))),
    "three_middle_dim": (lambda a, b, c: torch.cat([a, b, c], 1) * 2, (r(2, 3, 4), r(2, 1, 4), r(2, 5, 4))),
    "four_last_dim": (lambda a, b, c, d: torch.cat([a, b, c, d], -1), (r(3, 2), r(3, 7), r(3, 1), r(3, 4))),
    "broadcast_strided_permuted": (lambda a, b, c: torch.cat([a.expand(4, 3), b[::2, 1::2], c.t()], 1),
                                   (r(1, 3), r(8, 6), r(5, 4))),
    "scalar_input": (lambda a, s: torch.cat([a, s.expand(3, 2)], 1), (r(3, 2), r(1, 1))),  # one address per lane
    "mixed_dtypes": (lambda a, b, c: torch.cat([a, b, c], 1),
                     (torch.arange(6).view(2, 3), r(2, 2, dtype=torch.float64), torch.tensor([[True], [False]]))),
    "ints_and_bools": (lambda a, b: torch.cat([a, b], 0), (torch.tensor([True, False]), torch.arange(3))),
    "empty_inputs": (lambda a, b, c, d: torch.cat([a, b, c, d, a], 1) + 1,
                     (r(3, 2), r(3, 0), torch.tensor([]), r(3, 1))),
    "bf16": (lambda a, b: torch.cat([a, b * 2], -1), (r(4, 6, dtype=torch.bfloat16), r(4, 3, dtype=torch.bfloat16))),
    "fp16_and_float": (lambda a, b: torch.cat([a, b], 0), (r(2, 5, dtype=torch.float16), r(3, 5))),
    "qkv_gradient": (_qkv, tuple(r(2, 16, 4, 64, dtype=torch.bfloat16) for _ in range(3))),
    "rotary": (lambda x, cos, sin: x * cos + _rotate_half(x) * sin, (r(2, 3, 8), r(3, 8), r(3, 8))),
    "cat_then_sum": (lambda a, b: torch.cat([a.exp(), b], 1).sum(1), (r(4, 3), r(4, 9))),
    "pad_of_cat": (lambda a, b: F.pad(torch.cat([a, b], -1), (1, 2), value=-1.0), (r(3, 2), r(3, 3))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CATS)
def test_cat_matches_eager(case, backend):
    fn, inputs = CATS[case]
    _check(fn, *inputs, backend=backend, atol=1e-2 if case == "bf16" else 1e-5)


PADS = {
    "last_dim": (lambda x: F.pad(x, (2, 1)), (r(3, 4),)),
    "two_dims_with_value": (lambda x: F.pad(x, (1, 0, 0, 3), value=2.5), (r(2, 3, 4),)),
    "only_after": (lambda x: F.pad(x, (0, 2)) * 3, (r(4, 5),)),
    "bf16": (lambda x: F.pad(x, (1, 1, 1, 1), value=-float("inf")), (r(2, 3, dtype=torch.bfloat16),)),
    "empty": (lambda x: F.pad(x, (1, 1, 2, 1), value=2.0), (r(0, 3),)),
    "permuted_input": (lambda x: F.pad(x.transpose(0, 1), (3, 0)), (r(5, 2),)),
    "cat_of_pads": (lambda a, b: torch.cat([F.pad(a, (1, 0)), F.pad(b, (0, 2), value=1.0)], 1), (r(2, 3), r(2, 1))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", PADS)
def test_pad_matches_eager(case, backend):
    fn, inputs = PADS[case]
    _check(fn, *inputs, backend=backend)


def _pad_to_window(x):  # Swin's maybe_pad: right and bottom up to a multiple of the window, (w - W % w) % w
    _, h, w, _ = x.shape
    return F.pad(x, (0, 0, 0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4), value=-1.0) * 2


def _pad_to_multiple(x):  # the idiom -W % n: Python's modulo of a negative size
    return F.pad(x, (0, -x.shape[-1] % 4)) + 1


def _crop_or_pad(x):  # a pad that is positive at some sizes and a crop at others: 5 - W
    return F.pad(x, (1, 5 - x.shape[-1])) + 1


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn, shapes", [
    (_pad_to_window, [(2, 9, 13, 3), (2, 7, 6, 3), (3, 5, 11, 2)]),
    (_pad_to_multiple, [(3, 5), (2, 10), (4, 7)]),
    (_crop_or_pad, [(3, 2), (4, 9), (2, 5)]),
])
def test_symbolic_pads_match_eager_at_every_size(backend, fn, shapes):
    # Note [Symbolic pads]: pads are expressions of the size symbols under dynamic=True; one compile, our kernels
    torch.manual_seed(0)
    first, *rest = [(r(*shape),) for shape in shapes]
    exploration = engine.explore(fn, first, backend=backend, dynamic=True, dynamic_inputs=rest)
    assert not exploration.errors, [e.message for e in exploration.errors]
    assert all(g.fallback is None for g in exploration.graphs)
    assert not [k.reason for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]
    assert exploration.verify.ok, exploration.verify
    assert exploration.runs and all(run.verify.ok and run.new_graphs == 0 for run in exploration.runs)


SCATTERS = {  # the same masked form picks self or src (engine/lowering/scatters.py)
    "slice": (lambda x, s: torch.slice_scatter(x, s, 1, 2, 5), (r(3, 6), r(3, 3))),
    "slice_step": (lambda x, s: torch.slice_scatter(x, s, 0, 1, 8, 3), (r(9, 2), r(3, 2))),
    "slice_into_zeros": (lambda s: torch.slice_scatter(torch.zeros(4, 8), s * 2, 1, 4), (r(4, 4),)),
    "select": (lambda x, s: torch.select_scatter(x, s, 1, -1), (r(3, 4, 2), r(3, 2))),
    "diagonal": (lambda x, s: torch.diagonal_scatter(x, s, 1), (r(4, 5), r(4))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", SCATTERS)
def test_scatter_matches_eager(case, backend):
    fn, inputs = SCATTERS[case]
    _check(fn, *inputs, backend=backend)


POOLS = {  # padded windows read under their mask too (engine/lowering/pooling.py)
    "avg_pool_padded": (lambda x: F.avg_pool2d(x, 3, 2, 1), (r(2, 3, 7, 6),)),
    "avg_pool_without_pad_count": (lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False), (r(1, 2, 5, 5),)),
    "max_pool_padded_with_indices": (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), (r(2, 3, 7, 6),)),
    "max_pool_of_negatives": (lambda x: F.max_pool2d(-x.abs() - 1, 2, 2, 1), (r(1, 2, 5, 4),)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", POOLS)
def test_pool_matches_eager(case, backend):
    fn, inputs = POOLS[case]
    _check(fn, *inputs, backend=backend)


h = torch.float16
TILED = {  # shapes big enough for C++'s 2D tiles, staged transposed reads and fp16 half rows (masked or not)
    "transposed_fp16_last_dim": (lambda a, b: torch.cat([a.t(), b.t()], 1) * 2, (r(96, 64, dtype=h), r(40, 64, dtype=h))),
    "transposed_fp16_first_dim": (lambda a, b: torch.cat([a.t(), b], 0) + 1, (r(96, 64, dtype=h), r(33, 96, dtype=h))),
    "pad_transposed_bf16": (lambda a: F.pad(a.t(), (3, 5, 1, 2)) * 3, (r(128, 72, dtype=torch.bfloat16),)),
    "scatter_transposed_fp16": (lambda x, s: torch.slice_scatter(x.t(), s, 1, 7, 71), (r(100, 48, dtype=h), r(48, 64, dtype=h))),
}


@pytest.mark.parametrize("case", TILED)
def test_tiled_cpp_kernels_match_eager(case):
    fn, inputs = TILED[case]
    _check(fn, *inputs, backend="cpp", atol=1e-2)


# --- structure -----------------------------------------------------------------------------------------------


def _loads(source: str, kernel: str) -> list[ast.Call]:
    """The tl.load calls of one kernel of a generated Triton module."""
    function = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == kernel)
    return [n for n in ast.walk(function) if isinstance(n, ast.Call) and ast.unparse(n.func) == "tl.load"]


def _pointer(load: ast.Call) -> str:
    return ast.unparse(load.args[0]).split(" + ")[0]


def _masks(load: ast.Call) -> list[str]:
    return [ast.unparse(k.value) for k in load.keywords if k.arg == "mask"]


def test_three_way_cat_has_one_masked_load_per_input():
    """The backward's concatenation of dq, dk, dv: three loads, one of each input, each under its own mask
    (so where a lane takes another input, this one is not read)."""
    exploration = engine.explore(_qkv, CATS["qkv_gradient"][1], backend="triton", name="qkv")
    assert exploration.verify.ok, exploration.verify
    (kernel,) = [k for k in exploration.kernels if k.kind == "pointwise"]
    loads = _loads(exploration.graphs[0].code.source, kernel.name)
    assert len(loads) == 3 and len({_pointer(load) for load in loads}) == 3, [ast.unparse(x) for x in loads]
    masks = [_masks(load) for load in loads]
    assert all(len(m) == 1 for m in masks) and len({m[0] for m in masks}) == 3, masks


def test_three_way_cat_ttir_for_sm90_loads_each_input_once():
    """The same kernel compiled for sm_90 (no GPU needed): three tt.load, each with a mask operand, and in PTX
    every global load is a vector load (no clamp in the address hides its contiguity from Triton: with one,
    each thread read its 8 bf16 of each input as 8 scalar 16-bit loads)."""
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel (triton/backends/nvidia/bin) nor on PATH")
    exploration = engine.explore(_qkv, CATS["qkv_gradient"][1], backend="triton", name="qkv")
    (kernel,) = [k for k in exploration.kernels if k.kind == "pointwise"]
    assert assembly.add_assembly(exploration, [kernel.name]) == 1
    asm = kernel.asm
    assert not asm.error, asm.error
    loads = [line for line in asm.ttir.splitlines() if "tt.load" in line]
    assert len(loads) == 3, loads
    assert all(len(line.split("tt.load", 1)[1].split(":", 1)[0].split(",")) >= 2 for line in loads), loads
    global_loads = re.findall(r"ld\.global[.\w]*", asm.ptx)
    assert global_loads and all(".v" in load for load in global_loads), global_loads


def test_rotary_cat_inlined_into_its_consumer_reads_under_masks():
    """Note [Inlining under a mask]: the cat is computed inside the kernel that multiplies it, and the negated
    half is a producer inlined into the masked body: every load of x in the cat's bodies is masked."""
    fn, inputs = CATS["rotary"]
    exploration = engine.explore(fn, inputs, backend="triton", name="rotary")
    assert exploration.verify.ok, exploration.verify
    (kernel,) = [k for k in exploration.kernels if k.kind == "pointwise"]
    loads = _loads(exploration.graphs[0].code.source, kernel.name)
    masked = [load for load in loads if any("&" in m for m in _masks(load))]
    assert len(masked) == 2, [ast.unparse(x) for x in loads]


def test_bounded_position_simplifies_the_views_divisions():
    """Note [Bounded positions]: the third input of the (8, T, 3072) cat, read through its (8, T, 16, 64) view:
    with the position bounded by 1024 the divisions by T*1024 and the remainders by 1024 vanish."""
    x = loop_var("x", 0)
    t = ModIndex(FloorDiv(x, 3072), 1024)
    p = Bounded(ModIndex(x, 3072) - 2048, 1024)
    index = 1048576 * FloorDiv(x, 3145728) + 1048576 * FloorDiv(1024 * t + p, 1048576) + \
        1024 * ModIndex(FloorDiv(p, 1024) + t, 1024) + ModIndex(p, 1024)
    assert simplify_index(index, {x: 8 * 1024 * 3072}) == 1024 * FloorDiv(x, 3072) + p
    assert p.subs(x, 5) == -2043  # a probe at a point is the number itself


def _buffer(size=4):
    return Pointwise("buf0", (sympy.Integer(size),), torch.float32, "cpu", inner_fn=lambda index: None)


def test_evaluator_does_not_read_where_the_mask_is_false():
    """A masked body's index may leave the tensor where its mask is false: the evaluator gives `other` there."""
    i = loop_var("i", 0)
    evaluator = TorchEvaluator({"buf0": torch.arange(4.0)}, {"buf0": _buffer()}, {"i0": torch.arange(6)}, [6])
    with use_handler(evaluator):
        inside = ops.lt(ops.index_expr(i, torch.int64), ops.constant(4, torch.int64))
        value = ops.masked(inside, lambda: ops.load("buf0", (Bounded(i, 4),)), ops.constant(-1.0, torch.float32))
    assert value.tolist() == [0.0, 1.0, 2.0, 3.0, -1.0, -1.0]


def test_ir_printer_shows_the_guard_of_each_masked_load():
    i = loop_var("i", 0)
    printer = IRPrinter({"buf0": _buffer()})
    with use_handler(printer):
        inside = ops.ge(ops.index_expr(i, torch.int64), ops.constant(2, torch.int64))
        ops.masked(inside, lambda: ops.load("buf0", (Bounded(i - 2, 4),)), ops.constant(0.0, torch.float32))
    loads = [line for line in printer.lines if "load buf0" in line]
    assert len(loads) == 1 and loads[0].endswith(f"if {inside}"), printer.lines


# --- training ------------------------------------------------------------------------------------------------


class Rotary(nn.Module):
    """Rotary embeddings: the backward of the cat's slices scatters their gradients back (slice_scatter)."""

    def __init__(self, dim=16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cos, sin):
        y = self.proj(x)
        return (y * cos + _rotate_half(y) * sin).square().sum()


class QKVAttention(nn.Module):
    """q, k, v split from one projection: the projection's output gradient is the cat of dq, dk, dv."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).split(d, -1))
        attention = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
        return self.out((attention @ v).transpose(1, 2).reshape(b, t, d)).sum()


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_qkv_split_trains_like_eager(backend):
    torch.manual_seed(0)
    exploration = engine.explore(QKVAttention(), (torch.randn(2, 8, 32),), backend=backend, train=True,
                                 name="qkv_attention")
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
    backward = next(g for g in exploration.graphs if g.phase == "backward")
    assert any("cat" in op for k in backward.kernels for op in k.ops), [k.ops for k in backward.kernels]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_rotary_trains_like_eager(backend):
    torch.manual_seed(0)
    exploration = engine.explore(Rotary(), (torch.randn(2, 5, 16), torch.randn(5, 16), torch.randn(5, 16)),
                                 backend=backend, train=True, name="rotary")
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
