"""A verdict with teeth in both directions (issue 33; Note [Tolerance policy], Note [Verdicts] in
engine/verdict.py): per-element allowances no noisy element can inflate, every leaf compared, strides
reported, tolerances validated, "random" said as random; and healthy half-precision models pass."""
import pytest
import torch

import engine
from engine import run, verdict
from engine.tools.model_file import ModelFileError, load_model_file


def _one_element_75_percent_off_beside_noisy_ones(n: int, noisy: int):
    generator = torch.Generator().manual_seed(n)
    reference = torch.randn(n, dtype=torch.float64, generator=generator) + 3.0  # away from zero
    eager = (reference + 1e-7 * torch.randn(n, dtype=torch.float64, generator=generator)).float()
    ours = (reference + 1e-7 * torch.randn(n, dtype=torch.float64, generator=generator)).float()
    eager[:noisy] += 50.0  # cancellation-heavy elements: eager is far off there (ours is exact)
    ours[:noisy] = reference[:noisy].float()
    ours[n - 1] = ours[n - 1] * 1.75
    return eager, ours, reference


@pytest.mark.parametrize("n, noisy", [(65, 1), (20_200, 202)])
def test_one_element_75_percent_off_fails_whatever_the_noisy_elements(n, noisy):
    eager, ours, reference = _one_element_75_percent_off_beside_noisy_ones(n, noisy)
    entry = verdict.compare_tensor(eager, ours, reference)
    assert not entry["ok"], entry
    assert entry["fp64"]["failing_elements"] == 1 and entry["fp64"]["worst_index"] == [n - 1]
    ours[n - 1] = reference[n - 1].float()  # and without it, the noisy elements alone do not fail us
    assert verdict.compare_tensor(eager, ours, reference)["judged_by"] == "fp64"


def test_a_python_number_75_percent_off_fails():
    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) + 2

    def model(t):
        return t * 2, (t.sum()).item()

    with torch.no_grad():
        good, total = model(x)
    result = run.verify(model, (x,), (good, total * 1.75))
    assert not result["ok"] and result["verdict"] == "mismatch", result
    failing = [o for o in result["outputs"] if not o["ok"]]
    assert [o["path"] for o in failing] == ["output[1]"] and failing[0]["dtype"] == "float"
    assert run.verify(model, (x,), (good, total))["ok"]


@pytest.mark.parametrize("key, wrong", [("flag", True), ("name", "forged"), ("name", None), ("extra", 4),
                                        ("extra", 3.0), ("extra", ("a", 1))])
def test_every_leaf_is_compared(key, wrong):
    def model(t):
        return {"y": t + 1, "flag": False, "name": "ok", "extra": 3}

    x = torch.randn(4)
    with torch.no_grad():
        honest = model(x)
    assert run.verify(model, (x,), honest)["verdict"] == "ok"
    result = run.verify(model, (x,), dict(honest, **{key: wrong}))
    assert not result["ok"] and result["verdict"] == "mismatch" and "problem" in result, result


@pytest.mark.parametrize("tolerance", [{"atol": float("inf")}, {"rtol": float("nan")}, {"atol": -1.0},
                                       {"atol": True}, {"tol": 1e-3}])
def test_a_tolerance_that_would_pass_anything_is_refused(tolerance, tmp_path):
    x = torch.randn(3)
    with pytest.raises(verdict.ToleranceError, match="tolerance"):
        run.verify(lambda t: t + 1, (x,), x + 1000, tolerance=tolerance)
    path = tmp_path / "m.py"
    path.write_text(f"import torch\nmodel = lambda t: t + 1\nexample_inputs = (torch.randn(3),)\n"
                    f"tolerance = {tolerance!r}\n".replace("inf", "float('inf')").replace("nan", "float('nan')"))
    with pytest.raises(ModelFileError):
        load_model_file(str(path))


def test_strides_other_than_eagers_are_a_named_finding():
    x = torch.randn(12, 10).t()  # eager's elementwise ops keep the transposed layout

    def model(t):
        return t * 2

    with torch.no_grad():
        contiguous = model(x).contiguous()
    result = run.verify(model, (x,), contiguous)
    assert result["verdict"] == "layout differs" and "layout" in result["problem"], result
    assert result["findings"] == [{"kind": "layout", "path": "output", "eager": [1, 10], "ours": [12, 1]}]
    assert run.verify(model, (x,), model(x))["verdict"] == "ok"


def test_a_random_model_is_said_to_be_random_not_wrong():
    result = run.verify(lambda t: t + torch.rand(t.shape), (torch.zeros(100),), torch.zeros(100))
    assert result["verdict"] == "random" and not result["ok"] and "random" in result["problem"]


def test_every_verdict_says_which_reference_judged_it():
    x = torch.randn(32).half()
    result = run.verify(lambda t: t * 3, (x,), x * 3)
    assert result["outputs"][0]["judged_by"] == "fp64"  # half precision: eager's own error is the allowance
    assert "float64" in result["reference"]
    result = run.verify(lambda t: t * 3, (x.float(),), x.float() * 3)
    assert result["outputs"][0]["judged_by"] == "eager" and "eager" in result["reference"]


def test_a_training_step_gets_the_fp64_opinion():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).half()
    record = engine.explore(model, (torch.randn(8, 32).half(),), train=True)
    verify = record.verify
    assert verify.ok and verify.verdict == "ok", verify
    assert all(g.judged_by in ("fp64", "eager") and g.fp64 is not None for g in verify.gradients), verify.gradients
    assert "float64" in verify.reference


# --- healthy half-precision models pass (issue 33: they were reported as mismatches) ------------------------

@pytest.mark.slow
def test_hugging_face_gpt2_in_float16_passes_judged_by_fp64():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=8191, n_positions=256)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval().half()
    ids = torch.randint(0, 8191, (2, 128))
    record = engine.explore(lambda i: model(input_ids=i, use_cache=False).logits, (ids,))  # a function: its
    verify = record.verify                                                                   # module found
    assert verify.ok and verify.verdict == "ok", verify
    assert verify.outputs[0].judged_by == "fp64" and "float64" in verify.reference
    assert next(model.parameters()).dtype == torch.float16  # given back as it was


@pytest.mark.slow
def test_a_transformers_llama_decoder_in_bfloat16_passes():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().to(torch.bfloat16)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).logits

    record = engine.explore(Logits(), (torch.randint(0, 4096, (2, 64)),))
    assert record.verify.ok and record.verify.verdict == "ok", record.verify
    assert record.verify.outputs[0].judged_by == "fp64" and "float64" in record.verify.reference  # the rule named


def test_a_discontinuity_eager_crossed_is_explained_and_still_fails():
    # eager lands on the wrong side of a ReLU within rounding at one element (a jump of 0.5), ours further off
    generator = torch.Generator().manual_seed(3)
    reference = torch.randn(1000, dtype=torch.float64, generator=generator)
    eager = (reference + 1e-7 * torch.randn(1000, dtype=torch.float64, generator=generator)).float()
    ours = (reference + 1e-7 * torch.randn(1000, dtype=torch.float64, generator=generator)).float()
    eager[10] = reference[10] + 0.5
    ours[10] = reference[10] - 1.5  # ours went another way again, further than eager's own error allows
    entry = verdict.compare_tensor(eager, ours, reference)
    assert not entry["ok"] and "within rounding" in entry["fp64"]["note"]
    ours[10], eager[10] = reference[10] + 0.7, reference[10]  # where eager is stable, no such words
    assert "note" not in verdict.compare_tensor(eager, ours, reference)["fp64"]
