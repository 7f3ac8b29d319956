"""A stable sort as our kernels (Note [Stable sort as ranks] in engine/lowering/sorting.py): values and indices
equal eager's over either direction, any dim, integers full of ties, NaN, -0.0 and 0.0, non-contiguous and
size-1 rows, and its gradient in training; what runs eagerly says why (topk, an unstable sort, a row too long
or of symbolic length). Through the Triton interpreter and the C++ backend."""
import pytest
import torch

import engine
from explored_kernels import without_fallbacks

BACKENDS = ["cpp", "triton"]
NAN = float("nan")

CASES = {  # name: (fn, input)
    "rows_ascending": (lambda x: torch.sort(x, stable=True), lambda: torch.randn(4, 9)),
    "columns_descending": (lambda x: torch.sort(x, dim=0, descending=True, stable=True), lambda: torch.randn(7, 3)),
    "argsort_of_ties": (lambda x: torch.argsort(x.flatten(), stable=True), lambda: torch.randint(0, 4, (16, 2))),
    "argsort_of_ties_descending": (lambda x: torch.argsort(x, dim=1, descending=True, stable=True),
                                   lambda: torch.randint(0, 3, (3, 12))),
    "nan_and_signed_zeros": (lambda x: torch.sort(x, stable=True),
                             lambda: torch.tensor([[1.0, NAN, -0.0, 0.0, 2.0, NAN, 1.0, -3.0]])),
    "nan_and_signed_zeros_descending": (lambda x: torch.sort(x, stable=True, descending=True),
                                        lambda: torch.tensor([[1.0, NAN, -0.0, 0.0, 2.0, NAN, 1.0, -3.0]])),
    "non_contiguous": (lambda x: torch.sort(x.t() * 2, stable=True), lambda: torch.randn(6, 5)),
    "size_one_rows": (lambda x: torch.sort(x, stable=True), lambda: torch.randn(5, 1)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_indices_equal_eager(backend, case):
    fn, make = CASES[case]
    torch.manual_seed(0)
    without_fallbacks(fn, (make(),), backend, "sort")


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_through_the_sorted_values(backend):
    torch.manual_seed(0)
    x = torch.randn(3, 8, requires_grad=True)
    exploration = engine.explore(lambda t: torch.sort(t * 3, stable=True).values[:, :4], (x,), backend=backend,
                                 train=True, loss_fn=lambda out, *a: (out * torch.arange(out.numel()).view(out.shape)).sum())
    assert not exploration.errors and exploration.verify.ok, exploration.verify
    assert not [k for k in exploration.kernels if k.kind == "fallback"]


def _reasons(fn, inputs, backend, **kwargs) -> list[str]:
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="sort", **kwargs)
    assert not exploration.errors and exploration.verify.ok, exploration.verify
    return [k.reason or "" for k in exploration.kernels if k.kind == "fallback"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_runs_eagerly_says_why(backend):
    x = torch.randn(4, 8)
    for fn in (lambda t: torch.topk(t, 2), lambda t: torch.sort(t)):
        reasons = _reasons(fn, (x,), backend)
        assert len(reasons) == 1 and "ties" in reasons[0], reasons
    reasons = _reasons(lambda t: torch.sort(t, stable=True), (torch.randn(2, 1025),), backend)
    assert len(reasons) == 1 and "1025" in reasons[0], reasons
    reasons = _reasons(lambda t: torch.sort(t, stable=True), (torch.randn(2, 9),), backend, dynamic=True)
    assert len(reasons) == 1 and "stable sort over rows of" in reasons[0], reasons
