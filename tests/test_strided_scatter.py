"""as_strided_scatter is generated where the view's dims nest (Note [Inverting a strided view] in
engine/lowering/scatters.py): AOTAutograd writes an as_strided view's gradient with it (torchvision ConvNeXt's
training step, found by engine/tools/sweep_explore.py). Outputs equal eager's through C++ and Triton; an overlapping
view runs eagerly and says why."""
import pytest
import torch

import engine

CASES = [  # (self's shape, view size, view stride, storage offset)
    ((1536,), (2, 768), (768, 1), 0),  # ConvNeXt's: the whole of a flat gradient
    ((4, 6), (2, 3), (6, 2), 1),  # a strided corner, offset
    ((4, 6), (3, 2), (1, 12), 0),  # transposed strides
    ((24,), (2, 2, 3), (12, 1, 4), 0),  # strides that do not divide each other
    ((10,), (3,), (2,), 3),
    ((3, 4), (1, 2), (5, 2), 6),  # a size-1 dim
]


def _fallbacks(exploration):
    return [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("shape,size,stride,offset", CASES)
def test_as_strided_scatter_is_generated_and_matches_eager(backend, shape, size, stride, offset):
    def fn(x, src):
        return torch.as_strided_scatter(x * 2, src + 1, size, stride, offset)

    inputs = (torch.randn(shape), torch.randn(size))
    exploration = engine.explore(fn, inputs, backend=backend)
    assert exploration.verify.ok, exploration.verify
    assert not _fallbacks(exploration)
    torch.testing.assert_close(engine.compile(fn, backend=backend)(*inputs), fn(*inputs))


def test_an_overlapping_view_runs_eagerly_with_its_reason():
    def fn(x, src):
        return torch.as_strided_scatter(x, src, (2, 2), (1, 1), 0)

    exploration = engine.explore(fn, (torch.randn(5, 5), torch.randn(2, 2)), backend="cpp")
    assert exploration.verify.ok, exploration.verify
    (fallback,) = _fallbacks(exploration)
    assert "overlapping" in fallback.reason
