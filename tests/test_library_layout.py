"""The wrapper's handling of library outputs' layouts (Note [Library output layout])."""
import torch

from engine.runtime.wrapper import with_layout


def test_strides_of_size_one_dims_do_not_make_a_copy():
    nchw = torch.randn(4, 8, 1, 1)  # the strides a library may report for an SE block's convolution output
    promised = (8, 1, 8, 8)  # channels-last, as the fake tensor said
    assert nchw.stride() != promised
    assert with_layout(nchw, (4, 8, 1, 1), promised) is nchw


def test_a_layout_that_moves_addresses_is_copied_into_the_promised_one():
    nchw = torch.randn(2, 3, 4, 5)
    channels_last = (60, 1, 15, 3)
    out = with_layout(nchw, (2, 3, 4, 5), channels_last)
    assert out.stride() == channels_last
    torch.testing.assert_close(out, nchw)


def test_library_calls_go_through_torchs_binding_where_it_is_the_same_overload():
    """Note [Library calls through torch's bindings]."""
    from engine.runtime.wrapper import LibraryCall, public_binding

    aten = torch.ops.aten
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert public_binding(aten.mm.default, (a, b), {}) is torch.mm  # mm.dtype and mm.out need more arguments
    assert public_binding(aten.var.default, (a,), {}) is None  # var.correction could take (a,) too
    assert public_binding(aten.add.Tensor, (a, a), {}) is None  # not a default overload
    call = LibraryCall(aten.mm.default, torch.mm)
    torch.testing.assert_close(call(a, b), a @ b)


def test_a_binding_that_refuses_the_arguments_leaves_the_overload():
    from engine.runtime.wrapper import LibraryCall

    def refuses(*args):
        raise TypeError("mm(): argument 'input' must be Tensor")

    a, b = torch.randn(3, 4), torch.randn(4, 5)
    call = LibraryCall(torch.ops.aten.mm.default, refuses)
    torch.testing.assert_close(call(a, b), a @ b)
    assert call.call is torch.ops.aten.mm.default


def _size_one_strides(t: torch.Tensor) -> tuple:
    return tuple(s for s, n in zip(t.stride(), t.shape) if n == 1)


def test_graph_outputs_give_size_one_dims_eagers_strides():
    """Note [Views for libraries]: a keepdim reduction's output (a saved mean, a logsumexp) leaves the graph
    with the contiguous stride on its size-1 dims, as eager's does, not 0: the next graph may hand it to a
    library that tests that stride (cuDNN's attention backward refused Stats with last stride 0)."""
    import engine

    class Stats(torch.nn.Module):
        def forward(self, x):
            return x.mean(-1, keepdim=True) * 2, torch.logsumexp(x, -1, keepdim=True), x.sum(0, keepdim=True)

    x = torch.randn(4, 8)
    expected = [o.stride() for o in Stats()(x)]
    for backend in ("cpp", "triton"):  # Triton under the interpreter on the CPU
        outputs = engine.compile(Stats(), backend=backend)(x)
        for out, ref in zip(outputs, Stats()(x)):
            torch.testing.assert_close(out, ref)
        assert [o.stride() for o in outputs] == expected, backend


def test_a_refused_layout_is_retried_with_dense_strides_size_one_dims_included():
    """Note [Views for libraries]: `.contiguous()` keeps a size-1 dim's stride 0, so the retry restrides it."""
    from engine.runtime.wrapper import LibraryCall

    seen = []

    def picky(t):
        seen.append(t.stride())
        if t.stride()[-1] != 1:
            raise RuntimeError("The stride for the last dimension should be 1")
        return t * 2

    stats = torch.randn(2, 3, 1)
    zero_stride = stats.as_strided((2, 3, 1), (3, 1, 0))
    assert zero_stride.is_contiguous() and zero_stride.contiguous().stride()[-1] == 0  # what .contiguous() keeps
    call = LibraryCall(picky)
    torch.testing.assert_close(call(zero_stride), stats * 2)
    assert seen == [(3, 1, 0), (3, 1, 1)] and call.copies
