"""Online softmax (Note [Online softmax]): long rows' max and sum of exp(x - max) run in one pass on Triton's
looped form, with the choice in the record's tiling reason; C++ keeps two passes and says why. Every case
matches eager through both backends (Triton under the interpreter)."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.schedule.policy import SPLIT_MAX_OUTPUTS

BACKENDS = ["cpp", "triton"]


def _explore(fn, inputs, backend):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="online")
    assert exploration.verify.ok, exploration.verify
    return [k for k in exploration.kernels if k.kind == "reduction"]


def _rows_kernel(kernels):
    """The kernel over the long rows (cross-entropy has a second one: the mean over the rows)."""
    return max(kernels, key=lambda k: k.source.count("roffset"))


CASES = {
    "softmax": (lambda t: t.softmax(-1), 2),  # reads of each row: the online pass, the stores
    "log_softmax": (lambda t: t.log_softmax(-1), 2),
    "cross_entropy": (None, 1),  # the online pass only: the target's logit is one load per row
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", [8193, 50257])
@pytest.mark.parametrize("case", list(CASES))
def test_long_rows_run_online(backend, row, case):
    fn, loops = CASES[case]
    # more rows than a few-rows split takes on Triton (Note [Few long rows]; the test below)
    x = torch.randn(SPLIT_MAX_OUTPUTS + 1, row) * 4
    if case == "cross_entropy":
        fn, inputs = (lambda a, b: F.cross_entropy(a, b)), (x, torch.randint(0, row, (x.shape[0],)))
    else:
        inputs = (x,)
    kernel = _rows_kernel(_explore(fn, inputs, backend))
    reason = kernel.tiling.reason
    if backend == "triton":
        assert kernel.triton.form == "looped"
        assert "online softmax" in reason and "gb_online_softmax_combine" in kernel.source
        assert kernel.source.count("for roffset in range") == loops
        assert f"{loops} read(s) of each row" in reason
    else:
        assert "no online softmax" in reason


def test_few_long_rows_split_their_passes_on_triton():
    """Note [Few long rows]: 3 rows of 32768 would run on 3 programs; on Triton each pass splits over the SMs
    instead of one online kernel (C++ is unchanged)."""
    kernels = _explore(lambda t: t.softmax(-1), (torch.randn(3, 32768) * 4,), "triton")
    assert sum(k.name.endswith("_partials") for k in kernels) == 2, [(k.name, k.tiling.reason) for k in kernels]
    assert not any("gb_online_softmax_combine" in k.source for k in kernels)


SPECIAL_ROWS = {
    "masked": lambda x: x.masked_fill(torch.arange(x.shape[1]) % 3 == 0, float("-inf")),
    "all_masked_row": lambda x: x.index_fill(0, torch.tensor([1]), float("-inf")),
    "nan": lambda x: x.index_put((torch.tensor([0]), torch.tensor([5000])), torch.tensor(float("nan"))),
    "positive_infinity": lambda x: x.index_put((torch.tensor([2, 2, 0]), torch.tensor([77, 6000, 8192])),
                                               torch.tensor(float("inf"))),  # eager: NaN rows, not finite sums
    "large": lambda x: x * 1000,  # exp overflows without the max taken out first
    "growing": lambda x: x + torch.arange(x.shape[1]) * 0.01,  # the max grows all along: many rescales
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("special", list(SPECIAL_ROWS))
def test_online_softmax_special_values_match_eager(backend, special):
    x = SPECIAL_ROWS[special](torch.randn(3, 8193))
    _explore(lambda t: (t.softmax(-1), t.log_softmax(-1)), (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sums_that_are_not_exp_of_the_difference_stay_separate_passes(backend):
    """sum(exp(x - max)) beside a sum of (x - max) in the same pass: the pass cannot go, nothing merges."""
    def fn(t):
        shifted = t - t.amax(-1, keepdim=True)
        return shifted.exp().sum(-1), shifted.sum(-1), (shifted * 2).exp().sum(-1)

    kernel = _rows_kernel(_explore(fn, (torch.randn(2, 8193),), backend))
    assert "online softmax (" not in kernel.tiling.reason


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_long_rows_run_online(dtype):
    """Half-precision loads computed in float32 (the ops protocol types exp(x - max) as the load)."""
    x = torch.randn(2, 8193, dtype=dtype)
    kernel = _rows_kernel(_explore(lambda t: t.softmax(-1), (x,), "triton"))
    assert "online softmax" in kernel.tiling.reason

