"""Few outputs over a long leading dim run as column tiles whose reduction chunks are shared by the threads
(Note [Split column tiles in C++] in engine/codegen/cpp/reduction.py); results equal eager's, NaN included,
on one thread and on two, and equal each other (the chunks are folded in one order)."""
import pytest
import torch

import engine

CASES = {
    "mean": (lambda x: x.mean(0), lambda: torch.randn(100000, 16)),
    "amax_nan": (lambda x: x.amax(0), lambda: torch.randn(100003, 5).index_fill(0, torch.tensor([777]), float("nan"))),
    "amin_inf": (lambda x: x.amin(0), lambda: torch.randn(70001, 3).index_fill(0, torch.tensor([5]), float("-inf"))),
    "sum_bf16_epilogue": (lambda x: x.sum(0) * 2, lambda: torch.randn(90001, 12).bfloat16()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_split_column_tiles_match_eager_on_any_thread_count(case):
    fn, make = CASES[case]
    x = make()
    results = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            torch._dynamo.reset()
            exploration = engine.explore(fn, (x,), backend="cpp", name="split_columns")
            assert exploration.verify.ok, exploration.verify
            kernel = next(k for k in exploration.kernels if k.kind == "reduction")
            assert "Split column tiles in C++" in kernel.tiling.reason, kernel.tiling
            torch._dynamo.reset()
            results.append(engine.compile(fn, backend="cpp")(x))
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0, equal_nan=True)
