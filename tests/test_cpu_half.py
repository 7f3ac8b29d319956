"""Half precision through the C++ backend: the conversions are exact, the kernels that use them vectorize (Note
[Branch-free half conversions], Note [Hoisted index divisions]) and whole bf16/fp16 decoders match eager: the
llama_decoder sample (always) and a Hugging Face Qwen3 model (when transformers is installed)."""
import copy
import sys

import pytest
import torch

import engine
from engine.tools.model_file import load_model_file

HALF_TOLERANCE = dict(atol=6e-2, rtol=6e-2)


def _compiled(fn):
    torch._dynamo.reset()
    return engine.compile(fn, backend="cpp")


def test_every_half_converts_exactly():
    """All 65536 fp16 bit patterns to float32, and float32 values around every fp16 boundary (subnormals,
    ties, the overflow threshold, NaN, infinities) back to fp16, bit for bit as torch converts them."""
    every_half = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    widened = _compiled(lambda h: h.float() * 1.0)(every_half)
    numbers = ~every_half.isnan()  # NaN payloads may differ (an arithmetic op quiets a signalling NaN)
    assert torch.equal(widened[numbers].view(torch.int32), every_half.float()[numbers].view(torch.int32))
    assert bool(widened[~numbers].isnan().all())
    exact = every_half.float()[~every_half.isnan()]
    halfway = (exact[:-1] + exact[1:]) / 2  # ties (and their neighbours) round to even
    probes = torch.cat([exact, halfway, halfway.nextafter(torch.tensor(float("inf"))),
                        halfway.nextafter(torch.tensor(float("-inf"))),
                        torch.tensor([65519.0, 65520.0, 65536.0, 1e9, float("nan"), 2.0 ** -25, 2.0 ** -26])])
    narrowed = _compiled(lambda f: (f * 1.0).half())(probes)
    expected = probes.half()
    same = (narrowed.view(torch.int16) == expected.view(torch.int16)) | (narrowed.isnan() & expected.isnan())
    assert bool(same.all()), probes[~same][:8]


def test_permute_of_half_hoists_index_divisions():
    """A permute's read indexes with divisions of the outer loop variable: they are computed above the
    vectorized inner loop (Note [Hoisted index divisions]), and the result matches eager."""
    x, y = torch.randn(2, 16, 8, 8, dtype=torch.float16), torch.randn(2, 8, 8, 16, dtype=torch.float16)
    fn = lambda a, b: a.permute(0, 2, 3, 1) + b  # noqa: E731
    exploration = engine.explore(fn, (x, y), backend="cpp")
    kernels = "\n".join("\n".join(g.code.source.splitlines()[g.code.prelude_lines:]) for g in exploration.graphs)
    inner_loops = kernels.split("#pragma omp simd")[1:]
    assert inner_loops and all("/ " not in block.split("}")[0] for block in inner_loops)
    torch.testing.assert_close(_compiled(fn)(x, y), fn(x, y), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_llama_decoder_sample_in_half_matches_eager(dtype):
    spec = load_model_file("llama_decoder")
    model = copy.deepcopy(spec.model).to(dtype)
    sample = sys.modules.get(type(spec.model).__module__)
    inputs = (sample.prefill_inputs(dtype=dtype) if sample and hasattr(sample, "prefill_inputs")
              else tuple(x.to(dtype) if x.is_floating_point() else x for x in spec.example_inputs))
    with torch.no_grad():
        expected, actual = model(*inputs), _compiled(model)(*inputs)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, **HALF_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_qwen3_decoder_in_half_matches_eager(dtype):
    pytest.importorskip("transformers")
    from engine.tools.zoo import qwen3_model

    model, inputs = qwen3_model(dtype, hidden=128, layers=2, heads=4, vocab=512, seq=16)
    with torch.no_grad():
        expected, actual = model(*inputs), _compiled(model)(*inputs)
    torch.testing.assert_close(actual, expected, **HALF_TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_transposed_reads_are_staged_through_a_tile(dtype):
    """x.t() + y and a ragged permute: the transposed read is copied into a tile first (Note [Staged reads]),
    so the vectorized inner loop reads no strided memory; results match eager, edges of partial tiles too."""
    cases = [(lambda a, b: a.t() + b, (torch.randn(70, 45).to(dtype), torch.randn(45, 70).to(dtype))),
             (lambda a, b: a.permute(0, 2, 3, 1) * b, (torch.randn(2, 40, 5, 7).to(dtype),
                                                       torch.randn(2, 5, 7, 40).to(dtype)))]
    for fn, inputs in cases:
        exploration = engine.explore(fn, inputs, backend="cpp")
        kernels = "\n".join("\n".join(g.code.source.splitlines()[g.code.prelude_lines:]) for g in exploration.graphs)
        assert "stage0[" in kernels
        with torch.no_grad():
            torch.testing.assert_close(_compiled(fn)(*inputs), fn(*inputs), atol=1e-2, rtol=1e-2)
