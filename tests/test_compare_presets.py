"""The compare page's presets (Note [Compare presets] in app/compare_presets.py) end to end through engine
compare: each preset is two valid sides on one backend and device that differ in the preset's one setting;
GEMM templates on and off pair each template with the library call that replaced it; an edit pairs the
kernels it changed, says how, and shows the edited line in the code diff, while untouched kernels stay the same."""
from __future__ import annotations

import dataclasses
import re
import textwrap

import pytest

from app import compare_presets
from engine.tools.compare import Side, compare, parse_side
from visualizers import compare as compare_view

CHANGED_SETTING = {compare_presets.FUSION: {"fusion"}, compare_presets.TEMPLATES: {"templates"},
                   compare_presets.INDUCTOR: {"compiler"}, compare_presets.EDIT: set()}


@pytest.mark.parametrize("preset", [p for p in compare_presets.PRESETS if p != compare_presets.CUSTOM])
@pytest.mark.parametrize("backend, device", [("cpp", "cpu"), ("triton", "cuda")])
def test_a_preset_is_two_sides_on_one_device_that_differ_in_its_setting(preset, backend, device):
    side_a, side_b = compare_presets.sides(preset, backend, device)
    a, b = parse_side(side_a), parse_side(side_b)
    assert a.device == b.device == device and a.backend == backend
    differ = {f.name for f in dataclasses.fields(Side) if getattr(a, f.name) != getattr(b, f.name)}
    if preset == compare_presets.INDUCTOR:  # an Inductor side has no backend of ours: only the device follows
        assert b.compiler == "inductor"
        differ.discard("backend")
    assert differ == CHANGED_SETTING[preset], differ
    assert compare_presets.sides(compare_presets.CUSTOM, backend, device) is None


def test_templates_on_and_off_pair_each_template_with_its_library_call():
    a, b = (parse_side(side) for side in compare_presets.sides(compare_presets.TEMPLATES, "cpp", "cpu"))
    comparison = compare("mlp", a, b, profile=False)
    kinds = {side: [k["kind"] for g in record["graphs"] for k in g["kernels"]]
             for side, record in (("a", comparison.record_a), ("b", comparison.record_b))}
    assert kinds["a"].count("template") == 2 and "template" not in kinds["b"] and "extern" in kinds["b"]
    view = compare_view.Comparison.from_json(comparison.to_json())
    templates = {k.name for k in view.records["a"].kernels if k.kind == "template"}
    paired = [p for p in view.pairings if set(p.a) & templates]
    assert {n for p in paired for n in p.a} == templates  # every template paired with what replaced it
    assert all(p.change in ("changed", "split") for p in paired), paired  # none of them called the same
    swapped = [p for p in paired if p.change == "changed"]
    assert swapped and all(p.how == "a GEMM template in A, a library call in B" for p in swapped), swapped
    rows = compare_view.kernel_diff_rows(view)
    assert any(row["what differs"] == "a GEMM template in A, a library call in B" for row in rows), rows
    assert comparison.record_a["verify"]["ok"] and comparison.record_b["verify"]["ok"]


BEFORE = textwrap.dedent('''\
    import torch


    def model(x, y):
        return torch.relu(x * 2.0 + 1.0), y.sum(dim=1)


    example_inputs = (torch.randn(16, 32), torch.randn(16, 32))
''')


def test_an_edit_pairs_the_changed_kernel_says_how_and_keeps_the_rest_the_same(tmp_path):
    before, after = tmp_path / "model.py", tmp_path / "edited.py"
    before.write_text(BEFORE)
    after.write_text(BEFORE.replace("x * 2.0", "x * 3.0"))
    side_a, side_b = compare_presets.sides(compare_presets.EDIT, "cpp", "cpu")
    b = parse_side(side_b + [f"file={after}"])  # as the app's worker hands B the edited code
    assert b.file == str(after)
    comparison = compare(str(before), parse_side(side_a), b, profile=False)
    kernels = comparison.kernels
    assert kernels["count"][0] == kernels["count"][1] == 2
    (changed,) = kernels["changed"]
    assert changed["how"] == "its code differs" and "mul" in changed["ops"]
    (same,) = kernels["same"]
    assert "sum" in " ".join(same["ops"]) and not kernels["added"] and not kernels["removed"]
    assert comparison.code_diff.splitlines()[1] == "+++ B (file=edited.py)"  # named, not the worker's path
    edited = [line for line in comparison.code_diff.splitlines() if line[:1] in "+-" and line[:3] not in "+++---"]
    assert any(line.startswith("-") and "2.0" in line for line in edited), edited
    assert any(line.startswith("+") and "3.0" in line for line in edited), edited
    assert comparison.record_b["verify"]["ok"]


def test_an_inductor_side_with_library_calls_claims_no_speedup():
    """Inductor's profile times its own kernels, not its library calls: their sum against our whole call once
    gave "B is 14x the speed of A" for an MLP whose matmuls B's sum left out."""
    from engine.tools.compare import compare_records

    ours = {"graphs": [{"index": 0, "profile": {"call_ms": 0.07, "call_iqr_ms": 0.001},
                        "kernels": [{"name": "extern_0", "kind": "extern", "aten_origins": ["addmm"]}]}]}
    inductor = {"inductor": True, "untimed_calls": ["extern_kernels.addmm", "aten.convolution.default"],
                "graphs": [{"index": 0, "kernels": [{"name": "cpp_fused_relu_0", "time_ms": 0.005}]}]}
    a, b = (parse_side(side) for side in compare_presets.sides(compare_presets.INDUCTOR, "cpp", "cpu"))
    comparison = compare_records(a, b, ours, inductor)
    assert comparison.timing["speedup_b_over_a"] is None and comparison.timing["b_ms"] is None
    view = compare_view.Comparison.from_json(comparison.to_json(records=False))
    sentence = compare_view.speedup_sentence(view.timing)
    assert "library calls (addmm, convolution)" in sentence and not re.search(r"\d\s*x\b", sentence), sentence


@pytest.mark.parametrize("low, high, range_shown", [(0.0, 4975.2, False), (0.8, 1.3, True)])
def test_a_noisy_speedup_shows_its_range_only_when_it_says_something(low, high, range_shown):
    timing = compare_view.CompareTiming(a_ms=0.43, b_ms=0.66, a_iqr_ms=5.75, b_iqr_ms=7.06, speedup_b_over_a=0.65,
                                        verdict=compare_view.Ratio(0.65, low, high, False, "too noisy"))
    sentence = compare_view.speedup_sentence(timing)
    assert "too noisy to judge" in sentence and ("anywhere from" in sentence) == range_shown, sentence
    assert "4975" not in sentence


@pytest.mark.parametrize("low, high, same", [(0.92, 1.17, True), (1.21, 1.40, False)])
def test_a_judged_speedup_within_its_spread_says_no_difference(low, high, same):
    # 0.0066 +-0.0006 against 0.0064 +-0.0005 ms was called "1.04x ... faster"
    timing = compare_view.CompareTiming(a_ms=0.0066, b_ms=0.0064, a_iqr_ms=0.0006, b_iqr_ms=0.0005,
                                        speedup_b_over_a=1.04, verdict=compare_view.Ratio(1.04, low, high, True, ""))
    sentence = compare_view.speedup_sentence(timing)
    assert ("no difference beyond the spread" in sentence) == same and ("faster" in sentence) != same, sentence
