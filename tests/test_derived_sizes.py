"""Sizes and scalars that torch computes through float arithmetic under dynamic shapes (Note [Derived sizes] in
engine/ir/derived.py): compiled, run and checked at several sizes on both backends, never a whole-graph fallback."""
import math

import pytest
import sympy
import torch
import torch.nn.functional as F

import engine
from engine.ir import derived

BACKENDS = ["cpp", "triton"]


def _explore_clean(fn, inputs, others, backend):
    exploration = engine.explore(fn, inputs, backend=backend, dynamic=True, dynamic_inputs=others)
    assert not exploration.errors, [e.message for e in exploration.errors]
    assert all(g.fallback is None for g in exploration.graphs)
    assert exploration.verify.ok, exploration.verify
    assert exploration.runs and all(run.verify.ok for run in exploration.runs)
    assert all(run.new_graphs == 0 for run in exploration.runs), "one compile serves every size"
    return exploration


def _resize_back(x):  # a segmentation head's pattern: down by a float factor, back to the input's size; the
    # second resize's scale is a float derived size (in_size / out_size), wrong if a kernel truncated it
    y = F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False)
    return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False) + x


def _scale_from_shape(x):  # attention's 1/sqrt(d) written from the shape, a Python float under dynamic shapes
    return (x * 0.125).to(torch.float16).float() * (x.shape[-1] ** -0.5)


def _third(x):  # a size whose float arithmetic rounds: int(s * (1/3)) is not always s // 3
    return F.interpolate(x, scale_factor=1 / 3, mode="nearest") * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, shapes", [
    (_resize_back, [(2, 3, 16, 20), (3, 3, 20, 24), (2, 2, 9, 13)]),  # distinct sizes first: no duck sizing
    (_scale_from_shape, [(4, 8), (4, 12), (3, 33)]),
    (_third, [(2, 3, 9, 12), (2, 3, 10, 30), (3, 2, 31, 7)]),
])
def test_float_sizes_compile_and_match_eager_at_every_size(backend, fn, shapes):
    torch.manual_seed(0)
    first, *rest = [(torch.randn(shape),) for shape in shapes]
    exploration = _explore_clean(fn, first, rest, backend)
    assert not [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]


def test_the_python_spelling_is_torchs_own_arithmetic():
    from torch.utils._sympy.functions import IntTrueDiv, ToFloat, TruncToInt

    s = sympy.Symbol("s0", integer=True, positive=True)
    expr = TruncToInt(sympy.Float(0.3) * ToFloat(s))
    assert derived.needs_name(expr) and not derived.needs_name(s * 2 + 1)
    for n in (1, 7, 10, 30, 1000, 12345):
        assert derived.evaluate(expr, {"s0": n}) == int(0.3 * float(n))
    ratio = IntTrueDiv(s, s + 1)
    assert math.isclose(derived.evaluate(ratio, {"s0": 9}), 0.9)
    assert derived.new_symbol(0, expr).is_integer and derived.is_float(derived.new_symbol(1, ratio))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cast_under_dynamic_shapes_is_lowered(backend):
    # prims.convert_element_type appears in graphs traced with dynamic shapes (a size made a tensor, then cast)
    def scale_by_length(x):
        return x * torch.tensor(x.shape[-1], dtype=torch.float32).rsqrt()

    exploration = _explore_clean(scale_by_length, (torch.randn(3, 8),), [(torch.randn(3, 20),)], backend)
    assert not [k.reason for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]


def _scaled(x, scale: float):  # under dynamic shapes Dynamo passes the float as a 0-d float64 CPU tensor
    return torch.relu(x) * scale + 1.0


def test_a_cpu_scalar_of_a_gpu_graph_is_read_on_the_host():
    # CPU stand-in for Note [CPU scalars on the GPU]: lowered for "cuda", the scalar is an InputItem derived
    # value, no kernel reads its tensor, and the IR (run by the reference evaluator) gives eager's values.
    from torch.fx.experimental.proxy_tensor import make_fx

    from engine.ir.evaluator import evaluate_graph
    from engine.lowering.graph import lower

    x, scale = torch.randn(4, 8), torch.tensor(0.5, dtype=torch.float64)
    gm = make_fx(lambda x, s: torch.ops.aten.add(torch.ops.aten.mul(torch.ops.aten.relu(x), s), 1.0),
                 tracing_mode="fake")(x, scale)
    lowered = lower(gm, "cuda")
    assert derived.input_items(lowered.derived_sizes) == [1] and lowered.key_positions()[-1] == (1, None)
    for value in (0.5, -3.25):
        scale = torch.tensor(value, dtype=torch.float64)
        (out,) = evaluate_graph(lowered, [x, scale])
        torch.testing.assert_close(out, _scaled(x, value))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_float_argument_of_a_dynamic_gpu_graph_changes_between_calls(mode):
    x = torch.randn(64, 128, device="cuda")
    compiled = engine.compile(_scaled, backend="triton", device="cuda", dynamic=True, mode=mode)
    for value in (0.5, 2.0, 0.5, -1.5):  # a new value is honoured, also by a replayed CUDA graph
        torch.testing.assert_close(compiled(x, value), _scaled(x, value))
    exploration = engine.explore(_scaled, (x, 0.5), backend="triton", device="cuda", dynamic=True)
    assert exploration.verify.ok and not exploration.errors, exploration.errors
    assert "args[3].item()" in exploration.graphs[0].code.wrapper  # read on the host, not copied to the GPU
