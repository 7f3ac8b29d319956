"""engine compare: settings parsing (errors name the valid keys and values), kernel matching across two
compiles (Note [Matching kernels across two compiles]), and a real what-if."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tools.compare import Side, SettingError, compare, kernel_diff, parse_side

ROOT = Path(__file__).resolve().parents[1]


def test_parse_side_reads_every_key():
    side = parse_side(["backend=triton", "dynamic=true", "fusion=off", "max_nodes=3", "mode=max-autotune"])
    assert side == Side(backend="triton", dynamic=True, fusion=False, max_nodes=3, mode="max-autotune")
    assert parse_side([]) == Side()
    assert "fusion=off" in side.label() and parse_side([]).label() == "defaults"


@pytest.mark.parametrize("setting, named", [
    ("colour=red", ["backend", "fusion", "max_nodes", "compiler"]),
    ("backend=cuda", ["cpp", "triton"]),
    ("fusion=maybe", ["on", "off"]),
    ("max_nodes=0", ["positive integer"]),
    ("backend", ["KEY=VALUE"]),
])
def test_bad_settings_name_the_valid_ones(setting, named):
    with pytest.raises(SettingError) as error:
        parse_side([setting])
    assert all(word in str(error.value) for word in named)


def _record(*kernels):
    return {"graphs": [{"index": 0, "kernels": [{"name": n, "aten_origins": o} for n, o in kernels]}]}


def test_kernel_diff_finds_same_merged_split_added_removed():
    a = _record(("k0", ["mul"]), ("k1", ["add"]), ("k2", ["relu"]), ("k3", ["exp"]))
    b = _record(("j0", ["mul", "add"]), ("j1", ["relu"]), ("j2", ["sin"]))
    diff = kernel_diff(a, b)
    assert diff["count"] == [4, 3]
    assert [(m["a"], m["b"]) for m in diff["merged"]] == [(["k0", "k1"], "j0")]
    assert [(s["a"], s["b"]) for s in diff["same"]] == [("k2", "j1")]
    assert [r["a"] for r in diff["removed"]] == ["k3"] and [x["b"] for x in diff["added"]] == ["j2"]
    reverse = kernel_diff(b, a)
    assert [(s["a"], s["b"]) for s in reverse["split"]] == [("j0", ["k0", "k1"])]


def test_kernels_that_share_nodes_pair_as_changed():
    # the same addmm alone in A and with its epilogue in B (a template), and an unrelated kernel on each side
    a = _record(("extern_0", ["addmm"]), ("kernel_1", ["relu"]), ("kernel_2", ["exp"]))
    b = _record(("template_0", ["addmm", "relu", "mul"]), ("kernel_1", ["sin"]))
    diff = kernel_diff(a, b)
    (changed,) = diff["changed"]
    assert (changed["a"], changed["b"]) == ("extern_0", "template_0")
    assert changed["ops"] == ["addmm"] and changed["only_b"] == ["mul", "relu"]
    assert {r["a"] for r in diff["removed"]} == {"kernel_1", "kernel_2"} and [x["b"] for x in diff["added"]] == ["kernel_1"]


def test_the_same_nodes_computed_another_way_pair_as_changed_and_say_how():
    def kernel(name, kind, source, *ops):
        return {"name": name, "kind": kind, "source": source, "aten_origins": list(ops)}

    a = {"graphs": [{"kernels": [kernel("template_0", "template", "gemm", "addmm"),
                                 kernel("kernel_1", "pointwise", "buf3[i] = tmp0 * 2.0f;", "mul"),
                                 kernel("kernel_2", "pointwise", "void kernel_2() { buf4[i] = buf3[i]; }", "relu")]}]}
    b = {"graphs": [{"kernels": [kernel("extern_0", "extern", "extern aten.addmm", "addmm"),
                                 kernel("kernel_1", "pointwise", "buf3[i] = tmp0 * 3.0f;", "mul"),
                                 kernel("kernel_5", "pointwise", "void kernel_5() { buf9[i] = buf8[i]; }", "relu")]}]}
    diff = kernel_diff(a, b)
    how = {(c["a"], c["b"]): c["how"] for c in diff["changed"]}
    assert how == {("template_0", "extern_0"): "a GEMM template in A, a library call in B",
                   ("kernel_1", "kernel_1"): "its code differs"}
    assert [(s["a"], s["b"]) for s in diff["same"]] == [("kernel_2", "kernel_5")]  # renumbered, not changed


def test_fusion_off_splits_the_fused_kernel_and_the_code_differs():
    comparison = compare("scale_bias_relu", Side(), Side(fusion=False), profile=False)
    kernels = comparison.kernels
    assert kernels["count"][0] == 1 and kernels["count"][1] >= 3
    assert len(kernels["split"]) == 1 and kernels["split"][0]["a"] == "kernel_0"
    assert comparison.code_diff.startswith("--- A (defaults)")
    assert comparison.record_a["verify"]["ok"] and comparison.record_b["verify"]["ok"]
    decisions = comparison.record_b["graphs"][0]["fusion"]["decisions"]
    assert decisions and all("fusion is switched off" in d["reason"] for d in decisions)
    json.dumps(comparison.to_json())


def test_max_nodes_caps_kernel_size():
    comparison = compare("softmax", Side(), Side(max_nodes=2), profile=False)
    for graph in comparison.record_b["graphs"]:
        assert all(len(k["ir_nodes"]) <= 2 for k in graph["kernels"])
    assert comparison.record_b["verify"]["ok"]


def cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_cli_compare_json_and_errors():
    result = cli("compare", "scale_bias_relu", "--a", "backend=cpp", "--b", "fusion=off", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["kernels"]["count"][0] == 1 and document["timing"]["a_ms"] > 0
    assert document["a"]["record"]["graphs"] and "speedup_b_over_a" in document["timing"]
    bad = cli("compare", "scale_bias_relu", "--a", "colour=red", "--b")
    assert bad.returncode == 2 and "valid keys" in bad.stderr and "backend" in bad.stderr


def test_compare_times_carry_spreads_and_a_wide_spread_is_not_judged():
    from engine.tools.compare import compare_records

    def profiled(ms, spread):
        return {"graphs": [{"index": 0, "profile": {"call_ms": ms, "call_iqr_ms": spread}, "kernels": []}]}
    steady = compare_records(Side(), Side(fusion=False), profiled(0.52, 0.01), profiled(0.26, 0.01)).timing
    assert steady["verdict"]["judged"] and steady["verdict"]["ratio"] == pytest.approx(2.0)
    assert steady["a_iqr_ms"] == 0.01
    noisy = compare_records(Side(), Side(fusion=False), profiled(0.52, 12.4), profiled(0.81, 942.0)).timing
    assert not noisy["verdict"]["judged"] and "too noisy" in noisy["verdict"]["text"]
