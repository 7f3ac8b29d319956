"""A graph's outputs come back with eager's strides (Note [Channels-last convolutions], its outputs rule): a
channels-last input through elementwise ops, a squeeze-excitation product and a reduction broadcast back gives
channels-last outputs, as eager's elementwise ops follow their input; NCHW inputs stay NCHW. Through the C++
backend and the Triton interpreter, in the default layout and in a graph that is channels-last around a
convolution."""
import pytest
import torch

import engine

CHANNELS_LAST = torch.channels_last


def _se(x):
    return x * torch.sigmoid(x.mean((2, 3), keepdim=True))


def _elementwise(x):
    return torch.relu(x) + 1, x * 2


def _empty_like_filled(x):
    return torch.empty_like(x).fill_(2.0) * x + 1  # empty_like of a channels-last x: aten.empty_permuted


def _conv_then_add(x, w):
    return torch.nn.functional.conv2d(x, w, padding=1) + x


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn,make", [
    (_se, lambda: (torch.randn(2, 8, 5, 5).to(memory_format=CHANNELS_LAST),)),
    (_elementwise, lambda: (torch.randn(2, 6, 4, 3).to(memory_format=CHANNELS_LAST),)),
    (_elementwise, lambda: (torch.randn(2, 6, 4, 3),)),
    (_conv_then_add, lambda: (torch.randn(1, 4, 6, 6).to(memory_format=CHANNELS_LAST), torch.randn(4, 4, 3, 3))),
    (_empty_like_filled, lambda: (torch.randn(2, 3, 4, 5).to(memory_format=CHANNELS_LAST),)),
], ids=["se_channels_last", "elementwise_channels_last", "elementwise_nchw", "conv_add_channels_last",
        "empty_like_channels_last"])
def test_outputs_have_eagers_values_and_strides(backend, fn, make):
    _compiled_outputs_are_eagers(fn, make(), backend)


def _compiled_outputs_are_eagers(fn, inputs, backend):
    """engine.compile's outputs have eager's values and strides."""
    expected = fn(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = engine.compile(fn, backend=backend)(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        # the stride of a size-1 dim says nothing about the layout
        assert [s for s, n in zip(ours.stride(), ours.shape) if n != 1] == \
            [s for s, n in zip(theirs.stride(), theirs.shape) if n != 1], (ours.stride(), theirs.stride())


def test_empty_permuted_is_lowered_not_run_eagerly():
    """empty_like of a channels-last tensor decomposes to aten.empty_permuted (torchvision MobileNetV3's training
    dropout mask, engine/tools/sweep_explore.py): an allocation like empty_strided, so a generated kernel, no Fallback."""
    x = torch.randn(2, 3, 4, 5).to(memory_format=CHANNELS_LAST)
    exploration = engine.explore(_empty_like_filled, (x,), backend="cpp")
    assert exploration.verify.ok, exploration.verify
    assert not [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]


def test_new_empty_and_new_empty_strided_are_lowered_not_run_eagerly():
    """Allocations from a tensor (Falcon's training step allocates with new_empty_strided in its backward,
    engine/tools/sweep_explore.py): generated kernels with eager's values, no Fallback."""
    def fn(x):
        return x.new_empty_strided((4, 3), (1, 4)).fill_(3.0) * x.t(), x.new_empty((3, 4)).fill_(1.0) + x

    x = torch.randn(3, 4)
    exploration = engine.explore(fn, (x,), backend="cpp")
    assert exploration.verify.ok, exploration.verify
    assert not [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]


def test_a_channels_last_output_is_stored_in_place_not_copied():
    """The output's own kernel writes it channels-last: one kernel, and the record lists it as so stored."""
    x = torch.randn(2, 8, 5, 5).to(memory_format=CHANNELS_LAST)
    exploration = engine.explore(lambda t: torch.relu(t) + 1, (x,), backend="cpp")
    assert exploration.verify.ok and not exploration.errors
    (graph,) = exploration.graphs
    assert len(graph.kernels) == 1
    assert graph.memory.layout["buffers"], graph.memory.layout


def _transposed_product(x):
    return x.t() * 2  # eager follows x's transposed layout: strides (1, rows)


def _permuted_and_reduced(x):
    y = x.permute(0, 2, 1) * 3  # returned and also read by the sum
    return y, y.sum(1)


def _channels_last_and_pooled(x):
    y = x * 2 + 1  # ConvNeXt-V2's last hidden state: returned channels-last, and read by the pooler's mean
    return y, y.mean((2, 3))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn,make", [
    (_transposed_product, lambda: (torch.randn(5, 7),)),
    (_permuted_and_reduced, lambda: (torch.randn(3, 5, 7),)),
    (_channels_last_and_pooled, lambda: (torch.randn(2, 6, 4, 3).to(memory_format=CHANNELS_LAST),)),
], ids=["transposed", "permuted_and_reduced", "channels_last_and_pooled"])
def test_every_output_comes_back_in_eagers_strides(backend, fn, make):
    """Note [Outputs in eager's strides]: an output eager returns in a permuted layout comes back so, whether
    or not another kernel reads it too, and the record's verdict is ok (not "layout differs")."""
    inputs = make()
    exploration = engine.explore(fn, inputs, backend=backend)
    assert exploration.verify.verdict == "ok", exploration.verify.problem
    _compiled_outputs_are_eagers(fn, inputs, backend)


def test_an_output_made_only_to_be_returned_is_computed_in_eagers_order():
    """x.t() * 2 is one kernel that writes the transposed layout itself, not a kernel and a copy."""
    exploration = engine.explore(_transposed_product, (torch.randn(5, 7),), backend="cpp")
    assert exploration.verify.verdict == "ok"
    assert sum(len(g.kernels) for g in exploration.graphs) == 1


def _chunk_inputs(b, h, w):
    """Longformer's chunked scores (b * h, chunks, 2w, 2w + 1), the buffer they are written into, b and h."""
    return torch.randn(b * h, 1, 2 * w, 2 * w + 1), torch.randn(b * h, 2, w, 2 * w + 1), b, h


def _matches_eager_at_three_sizes(fn, backend):
    exploration = engine.explore(fn, _chunk_inputs(2, 2, 4), dynamic=True, backend=backend,
                                 dynamic_inputs=[_chunk_inputs(2, 3, 3), _chunk_inputs(3, 1, 5)])
    assert exploration.verify.verdict == "ok", exploration.verify.problem
    assert [run.verify.verdict for run in exploration.runs] == ["ok", "ok"]


def _per_head(stack, b, h):
    w = stack.shape[2]
    return stack.view(b, h, stack.shape[1] * w, 2 * w + 1)


def _write_chunks(x, stack):
    w = stack.shape[2]
    stack[:, :-1, :, w:] = x[:, :, :w, : w + 1]


def _diagonals_seen_per_head(x, stack, b, h):
    """Longformer's sliding-chunk scores (transformers' LED): a slice write into a buffer the caller passed, then
    that buffer viewed as (batch, heads, seq, 2w + 1) and returned transposed. The returned tensor aliases the
    input, so AOTAutograd rebuilds it from the input with the strides our graph returns."""
    _write_chunks(x, stack)
    return _per_head(stack, b, h).transpose(2, 1)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_permuted_output_under_symbolic_strides_keeps_eagers_order(backend):
    """Note [Outputs in eager's strides] under dynamic shapes: eager's strides are symbolic, ordered by their
    example values and proved for every size. A contiguous copy of an output that aliases an input was read
    back by AOTAutograd with eager's view of the input's memory in mind: wrong values, not only a layout."""
    _matches_eager_at_three_sizes(_diagonals_seen_per_head, backend)


def _scores_tail(x, stack, b, h):
    """The same written buffer, returned as a slice of its per-head view: a gapped view with an offset."""
    _write_chunks(x, stack)
    return _per_head(stack, b, h)[:, :, 1:]


def _strided_scores(x, stack, b, h):
    _write_chunks(x, stack)
    return _per_head(stack, b, h).transpose(2, 1)[:, 1:, :, ::2]


def _strided_view_of_input(x, stack, b, h):
    return _per_head(stack, b, h).transpose(2, 1)[:, 1:, :, ::2]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn", [_scores_tail, _strided_scores, _strided_view_of_input])
def test_an_output_that_views_an_input_has_eagers_geometry(backend, fn):
    """Note [Outputs that are views]: a gapped view (a slice, a step) of an input, or of an input the graph
    writes into, under symbolic sizes whose reshape our IR cannot prove strided: eager's as_strided of the base,
    so AOTAutograd's rebuild from the input reads the right elements."""
    _matches_eager_at_three_sizes(fn, backend)
    compiled = engine.compile(fn, backend=backend, dynamic=True)
    for size in ((2, 2, 4), (3, 2, 3)):
        ours, theirs = _chunk_inputs(*size), _chunk_inputs(*size)
        theirs[0].copy_(ours[0]), theirs[1].copy_(ours[1])
        got, expected = compiled(*ours), fn(*theirs)
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride() and got.storage_offset() == expected.storage_offset()
        torch.testing.assert_close(ours[1], theirs[1])  # the write reached the caller's buffer


def test_the_base_of_a_returned_view_lives_as_long_as_it():
    """Note [A view keeps its base alive]: the as_strided output shares its base buffer's memory, so the memory
    plan keeps that buffer to the end (no later kernel may take its memory) and the wrapper does not drop it."""
    def fn(x, stack, b, h):
        y = stack * 2
        return _per_head(y, b, h)[:, :, 1:], stack * y.sum()

    exploration = engine.explore(fn, _chunk_inputs(2, 2, 4), dynamic=True, backend="cpp")
    assert exploration.verify.verdict == "ok", exploration.verify.problem
    (graph,) = exploration.graphs
    views = [k for k in graph.kernels if k.kind == "extern" and "as_strided" in k.source]
    assert views, [(k.kind, k.source) for k in graph.kernels]
    (base,) = [b for b in graph.memory.buffers if b.name in views[0].reads]
    assert base.last == len(graph.kernels)
