"""Note [In-place epilogues]: a pointwise kernel that reads a library call's output only where it writes, and is
its last reader, writes into it (no allocation); a kernel that reads a window of it (a max pool) does not.
Outputs equal eager. Triton only (the interpreter here); the C++ backend allocates as before."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from engine.pipeline import Options, compile_graph


def _convs(x, w1, w2):
    return F.conv2d(torch.relu(F.conv2d(x, w1, padding=1) * 2 + 1), w2) + 1


def _mlp(x, w1, b1, w2):
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2 - 1


def _pooled(x, w1, w2):
    return F.conv2d(F.max_pool2d(F.conv2d(x, w1, padding=1), 2), w2) + 1


CASES = {  # name: (function, inputs, allocations a call (contiguous, channels-last))
    "convolution_epilogue": (_convs, lambda: [torch.randn(2, 3, 6, 7), torch.randn(8, 3, 3, 3),
                                              torch.randn(4, 8, 1, 1)], (1, 2)),
    "matmul_epilogue": (_mlp, lambda: [torch.randn(16, 32), torch.randn(32, 64), torch.randn(64),
                                       torch.randn(64, 8)], (1, 1)),
    "window_reader": (_pooled, lambda: [torch.randn(2, 3, 6, 8), torch.randn(8, 3, 3, 3),
                                        torch.randn(4, 8, 1, 1)], (2, 3)),
}
# allocations a call (contiguous, channels-last): the graph's output, for the window reader the pool, and in
# channels-last the NCHW input's conversion (Note [Converting a convolution's input ourselves]); no epilogue


@pytest.mark.parametrize("case", sorted(CASES))
def test_epilogues_write_into_library_outputs(case):
    fn, make_inputs, expected_allocations = CASES[case]
    torch.manual_seed(0)
    inputs = make_inputs()
    for layout, allocations in zip(("contiguous", "channels_last"), expected_allocations):
        options = Options(backend="triton", layout=layout, templates="off")
        gm = make_fx(fn, tracing_mode="fake")(*inputs)
        compiled = compile_graph(gm, inputs, options)
        namespace, made = compiled.call.__globals__, []
        allocate = namespace["empty_strided_cpu"]
        namespace["empty_strided_cpu"] = lambda size, stride, dtype: made.append(size) or allocate(size, stride, dtype)
        (out,) = compiled.call(list(inputs))
        torch.testing.assert_close(out, fn(*inputs), atol=1e-4, rtol=1e-4)
        assert len(made) == allocations, (layout, made)


def test_cpp_kernels_do_not_write_in_place():
    torch.manual_seed(0)
    inputs = CASES["convolution_epilogue"][1]()
    gm = make_fx(_convs, tracing_mode="fake")(*inputs)
    compiled = compile_graph(gm, inputs, Options(backend="cpp", templates="off"))
    assert not any(life.reuses for life in compiled.memory.lives), compiled.memory.lives
    (out,) = compiled.call(list(inputs))
    torch.testing.assert_close(out, _convs(*inputs), atol=1e-4, rtol=1e-4)


def _transposed_sibling(a, b, c):
    y = a @ b
    return torch.relu(y) @ c + (y.t() + 1) @ c  # one kernel stores both: relu(y) at y's address, y.t() + 1


def test_a_sibling_output_reading_the_source_elsewhere_keeps_it_whole():
    """Two outputs of one kernel: relu(y) could be written over y, but y.t() + 1 reads y transposed, so programs
    would read elements others already overwrote (at 256 x 256 the interpreter runs two programs, in turn)."""
    torch.manual_seed(0)
    inputs = [torch.randn(256, 256) for _ in range(3)]
    gm = make_fx(_transposed_sibling, tracing_mode="fake")(*inputs)
    compiled = compile_graph(gm, inputs, Options(backend="triton", templates="off"))
    (kernel,) = [k for k in compiled.schedule.kernels if k.kind == "pointwise" and len(k.stored) == 2]
    reused = {life.name: life.reuses for life in compiled.memory.lives}
    assert not any(reused[name] for name in kernel.stored), reused
    (out,) = compiled.call(list(inputs))
    torch.testing.assert_close(out, _transposed_sibling(*inputs), atol=1e-3, rtol=1e-4)
