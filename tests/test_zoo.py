"""The model zoo (engine/tools/zoo.py, Note [Zoo]) at its tiny CPU sizes: every model whose library is installed
explores through the C++ backend and matches eager; models of missing libraries are skipped, never an error."""
import pytest
import torch

import engine
from engine.tools.bench import load_cases
from engine.tools.zoo import missing_library, zoo_cases, zoo_specs

pytestmark = pytest.mark.slow  # the model zoo's sweep (Note [Two lanes], tests/conftest.py)

CASES = zoo_cases()


def test_every_zoo_case_is_runnable_or_skipped_with_a_reason():
    specs, skipped = zoo_specs("cpu", wanted={"tv_resnet50", "hf_llama_decode"})
    names = {s.name for s in specs} | {s["name"] for s in skipped}
    assert names == {"tv_resnet50", "hf_llama_decode"}
    assert all("not installed" in s["skipped"] for s in skipped)


VISION = ("torchvision", "timm")  # Note [Vision lane] in tests/conftest.py


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.vision] if c.library in VISION else [])
                                  for c in CASES], ids=[c.name for c in CASES])
def test_zoo_model_explores_and_matches_eager_on_cpu(case):
    reason = missing_library(case)
    if reason:
        pytest.skip(reason)
    [spec], _ = zoo_specs("cpu", wanted={case.name})
    torch._dynamo.reset()
    record = engine.explore(spec.model, spec.example_inputs, tolerance=spec.tolerance)
    assert record.graphs and not record.errors, record.errors
    assert record.verify.ok, record.verify


def test_bench_loads_the_zoo_by_name():
    cases = load_cases("zoo", "cpu")
    assert all(c.filename.endswith("zoo.py") for c in cases)


def test_a_zoo_case_is_built_again_by_its_key_in_another_process():
    """bench's fresh-process compile (Note [Fresh-process warm compile]) rebuilds a case from case_key: a zoo
    case by its name (it has no model file to import; `bench zoo` failed every case on the CPU that way)."""
    from engine.tools.bench import case_key, load_case
    from engine.tools.fresh_compile import measure

    available = [case for case in CASES if missing_library(case) is None]
    if not available:
        pytest.skip("no zoo library (transformers, torchvision, timm) is installed")
    [spec], _ = zoo_specs("cpu", wanted={available[0].name})
    assert case_key(spec) == spec.name and load_case(case_key(spec)).name == spec.name
    torch._dynamo.reset()
    assert measure(case_key(spec))["first_call_s"] > 0
