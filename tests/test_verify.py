"""A verify verdict you can believe (Note [Tolerance policy], Note [Verdicts] in engine/run.py)."""
import pytest
import torch

import engine
from engine import run


def _noisy(reference: torch.Tensor, scale: float, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return reference + scale * torch.randn(reference.shape, generator=generator, dtype=torch.float64)


def test_one_element_far_off_fails_the_fp64_rule_although_the_rms_would_pass():
    reference = torch.randn(1 << 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager = _noisy(reference, 1e-3, 1).float()
    ours = _noisy(reference, 1e-3, 2).float()
    ours[12345] = eager[12345] * 1.75  # one element 75% off
    judged = run.judge_against_fp64(eager, ours, reference, atol=1e-4, rtol=1e-4)
    assert judged["ours_rmse"] <= run.FP64_MULTIPLIER * judged["eager_rmse"]  # the old RMS rule said "ok"
    assert not judged["ok"] and judged["failing_elements"] == 1 and judged["worst_index"] == [12345]


def test_an_error_like_eagers_own_is_not_a_mismatch():
    reference = torch.randn(1 << 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    eager, ours = _noisy(reference, 1e-3, 1).float(), _noisy(reference, 1e-3, 2).float()
    judged = run.judge_against_fp64(eager, ours, reference, atol=1e-4, rtol=1e-4)
    assert judged["ok"] and judged["failing_elements"] == 0


@pytest.mark.slow
def test_verify_with_one_element_75_percent_off_in_a_half_precision_output():
    x = torch.randn(1 << 22, generator=torch.Generator().manual_seed(0)).half()
    model = lambda t: t * 1.1 + 0.3  # noqa: E731 - every op rounds to float16 in eager
    with torch.no_grad():
        wrong = model(x)
    wrong[777] = wrong[777] * 1.75 + 1
    result = run.verify(model, (x,), wrong)
    output = result["outputs"][0]
    assert not result["ok"] and result["verdict"] == "mismatch"
    assert not output["fp64"]["ok"] and output["fp64"]["worst_index"] == [777]


def test_a_model_that_returns_no_tensor_is_not_a_pass():
    result = run.verify(lambda t: ("text", 3), (torch.randn(3),), ("text", 3))
    assert result["verdict"] == "nothing compared" and result["ok"] is False
    assert "nothing was verified" in result["problem"]


def test_compare_tensor_is_the_whole_rule_for_one_tensor():
    x = torch.tensor([1e8, 1.0, -1e8, 1.0] * 256)  # float32 cancels badly; the true sum is 512
    eager = x.sum()
    reference = x.double().sum()
    if float(eager) == 512.0:
        return  # this build's float32 sum happens to be exact: nothing to show
    exact = run.compare_tensor(eager, torch.tensor(512.0), reference)
    assert exact["ok"] and exact["judged_by"] == "fp64"
    assert not run.compare_tensor(eager, torch.tensor(-5000.0), reference)["ok"]
    assert run.compare_tensor(eager, eager.clone())["judged_by"] == "eager"


LAYOUTS = {
    "transposed": lambda: torch.randn(10, 12).t(),
    "expanded": lambda: torch.randn(1, 12).expand(10, 12),
    "offset": lambda: torch.randn(130)[5:65].view(6, 10),
    "every other column": lambda: torch.randn(10, 12)[:, ::2],
}


def test_inputs_keep_the_users_layout():
    for name, make in LAYOUTS.items():
        x = make()
        copy = run.fresh((x,))[0]
        assert copy.stride() == x.stride() and copy.storage_offset() == x.storage_offset(), name
        assert torch.equal(copy, x) and copy.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


@pytest.mark.slow
def test_strided_expanded_and_offset_inputs_are_explored_as_given():
    def model(t):
        return torch.relu(t) * 2 + t.sum(-1, keepdim=True)

    for name, make in LAYOUTS.items():
        exploration = engine.explore(model, (make(),))
        assert "strides" in exploration.inputs, (name, exploration.inputs)
        assert exploration.verify.ok, (name, exploration.verify)
    assert "expanded" in engine.explore(model, (LAYOUTS["expanded"](),)).inputs
    assert "offset 5" in engine.explore(model, (LAYOUTS["offset"](),)).inputs


def test_half_precision_on_the_triton_interpreter_is_judged_by_the_fp64_rule():
    def model(x, w):
        h = torch.nn.functional.layer_norm(x, (x.shape[-1],)) * w
        return torch.softmax(h * 3.0, dim=-1), torch.nn.functional.gelu(h).sum(-1)

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 96, generator=generator).half()
    w = torch.randn(96, generator=generator).half()
    exploration = engine.explore(model, (x, w), backend="triton")
    verify = exploration.verify
    assert verify.ok and verify.verdict == "ok", verify
    for output in verify.outputs:
        assert output.dtype == "float16" and output.fp64["ok"], output
