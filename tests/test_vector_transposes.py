"""Staged transposed reads copy whole tiles in 8x8 register transposes (Note [Vector transposes] in
cpp/prelude.h), partial tiles element by element: copies are exact, for 32-bit and 16-bit storage, at sizes
with and without partial tiles, through the C++ backend."""
import pytest
import torch

from explored_kernels import explored_kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("shape", [(64, 96), (70, 45)], ids=["whole_tiles", "partial_tiles"])
def test_transposed_copy_is_exact(dtype, shape):
    x = (torch.randn(*shape) * 100).to(dtype)
    kernels = explored_kernels(lambda t: t.t().contiguous(), (x,), "cpp", name="transpose")
    assert [k.tiling.choice for k in kernels] == ["2d"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_permute_add_and_channels_last_scale_match_eager(dtype):
    x, y = torch.randn(2, 40, 9, 33, dtype=dtype), torch.randn(2, 9, 33, 40, dtype=dtype)
    explored_kernels(lambda a, b: a.permute(0, 2, 3, 1) + b, (x, y), "cpp", name="permute_add")
    cl = torch.randn(2, 64, 16, 8).to(memory_format=torch.channels_last).to(dtype)
    explored_kernels(lambda a: a * a.mean((2, 3), keepdim=True), (cl,), "cpp", name="scale_by_mean")
