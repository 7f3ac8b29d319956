"""C++ cat kernels are split into one loop nest per input (Note [Cat pieces] in engine/codegen/cpp/module.py): the
output matches eager, and the kernel's record says how it was cut and which inputs each piece reads."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.record import CatPieces

r = torch.randn
h, bf = torch.float16, torch.bfloat16


def _pieces(exploration) -> list[CatPieces]:
    assert exploration.verify.ok, exploration.verify
    return [k.tiling.pieces for k in exploration.kernels
            if k.kind == "pointwise" and k.tiling is not None and k.tiling.pieces is not None]


def _explore(fn, inputs):
    return engine.explore(fn, inputs, backend="cpp", name="cat")


# name: (fn, inputs, dim the output is cut along, extents of the pieces along it)
CASES = {
    "two_outer": (lambda a, b: torch.cat([a, b], 0), (r(40, 70), r(24, 70)), 0, [40, 24]),
    "three_middle": (lambda a, b, c: torch.cat([a, b, c], 1), (r(4, 5, 33), r(4, 2, 33), r(4, 9, 33)), 1, [5, 2, 9]),
    "four_inner": (lambda a, b, c, d: torch.cat([a, b, c, d], -1), tuple(r(16, 8, k) for k in (3, 64, 1, 20)),
                   2, [3, 64, 1, 20]),
    "five_middle": (lambda *xs: torch.cat(xs, 1), tuple(r(3, k, 50) for k in (1, 2, 3, 4, 5)), 1, [1, 2, 3, 4, 5]),
    "fused_producers_and_consumer": (lambda a, b, c: torch.relu(torch.cat([a * 2, b.exp(), c + 1], 1)) - 0.5,
                                     (r(8, 16, 40), r(8, 4, 40), r(8, 12, 40)), 1, [16, 4, 12]),
    "strided_and_broadcast_inputs": (lambda a, b, c: torch.cat([a[::2, 1::3], b.expand(32, 5), c[:, 3:9]], 1),
                                     (r(64, 30), r(1, 5), r(32, 12)), 1, [10, 5, 6]),
    "bf16": (lambda a, b: torch.cat([a, b * 2], -1), (r(64, 48, dtype=bf), r(64, 80, dtype=bf)), 1, [48, 80]),
    "fp16_rows": (lambda a, b: torch.cat([a, b], 1) + 1, (r(8, 3, 2048, dtype=h), r(8, 1, 2048, dtype=h)), 1, [3, 1]),
    "mixed_dtypes": (lambda a, b, c: torch.cat([a, b, c], 1),
                     (torch.arange(60).view(6, 10), r(6, 7, dtype=torch.float64), torch.rand(6, 2) > 0.5), 1, [10, 7, 2]),
    "zero_sized_inputs": (lambda a, b, c, d: torch.cat([a, b, c, d], 1) * 3,
                          (r(5, 6), r(5, 0), torch.tensor([]), r(5, 9)), 1, [6, 9]),
    "stack": (lambda a, b, c: torch.stack([a, b, c], 1) + 1, tuple(r(16, 40) for _ in range(3)), 1, [1, 1, 1]),
    "densenet_channels": (lambda x, y, z: torch.cat([x, F.relu(y), z], 1),
                          (r(2, 16, 7, 7), r(2, 8, 7, 7), r(2, 8, 7, 7)), 1, [16, 8, 8]),
}


@pytest.mark.parametrize("case", CASES)
def test_cat_is_split_per_input_and_matches_eager(case):
    fn, inputs, dim, extents = CASES[case]
    (cut,) = _pieces(_explore(fn, inputs))
    assert cut.dim == dim, cut
    assert [end - start for start, end in (p.range for p in cut.pieces)] == extents, cut
    reads = [p.reads for p in cut.pieces]
    assert all(len(read) == 1 for read in reads) and len({read[0] for read in reads}) == len(reads), reads


def test_cat_read_by_a_product_is_split_with_its_consumer():
    """Rotary embeddings: the cat is inlined into x * cos + rotate_half(x) * sin; each half of the output reads
    x, cos and sin and no test is left in its body."""
    def rotary(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin
    exploration = _explore(rotary, (r(4, 32, 64), r(32, 64), r(32, 64)))
    (cut,) = _pieces(exploration)
    assert cut.dim == 2 and [p.range for p in cut.pieces] == [[0, 32], [32, 64]], cut
    (kernel,) = [k for k in exploration.kernels if k.kind == "pointwise"]
    assert " ? " not in kernel.source and "gb_max_i" not in kernel.source, kernel.source


def test_pad_is_split_at_its_edges():
    """A pad's edges are cuts too: the padding slabs store the constant, the middle copies the input."""
    (cut,) = _pieces(_explore(lambda x: F.pad(x, (0, 0, 2, 3), value=1.5) * 2, (r(4, 10, 32),)))
    assert cut.dim == 1 and [p.range for p in cut.pieces] == [[0, 2], [2, 12], [12, 15]], cut
    assert [len(p.reads) for p in cut.pieces] == [0, 1, 0], cut


def test_kernel_without_index_tests_is_not_split():
    assert not _pieces(_explore(lambda a, b: a + b, (r(8, 8), r(8, 8))))


def test_large_cat_matches_eager_on_threads():
    """Big enough for the parallel region (its pieces are `omp for nowait` loops)."""
    fn = lambda a, b, c: torch.cat([a, b.sin(), c], 1)
    inputs = (r(16, 64, 128), r(16, 32, 128), r(16, 96, 128))
    (cut,) = _pieces(_explore(fn, inputs))
    assert len(cut.pieces) == 3
    compiled = engine.compile(fn, backend="cpp")
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))
