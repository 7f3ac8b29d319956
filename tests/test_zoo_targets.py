"""`bench gpu`'s zoo verdict (engine/tools/bench_gpu.py, Note [Zoo targets]): geomean <= 1.0 per mode, no model above
1.15 of Inductor, every model faster than eager in default mode; --zoo-json joins two runs' JSON into one verdict."""
import json

from engine.tools import bench_gpu as gpu_check


def _row(name, mode, eager, ours, inductor):
    return {"name": name, "mode": mode, "eager_ms": eager, "glassbox_ms": ours, "inductor_ms": inductor,
            "glassbox_ok": True}


def test_targets_name_the_models_that_miss():
    good = [_row("a", "default", 2.0, 1.0, 1.1), _row("b", "default", 2.0, 1.0, 0.95)]
    assert gpu_check.zoo_targets(good)["targets met"]
    slow = good + [_row("c", "default", 1.0, 1.2, 1.0), _row("d (reduce-overhead)", "reduce-overhead", 3, 1, 1)]
    verdict = gpu_check.zoo_targets(slow)
    assert not verdict["targets met"]
    assert verdict["above 1.15 of inductor"] == ["c"] and verdict["not faster than eager (default)"] == ["c"]
    assert abs(verdict["reduce-overhead ours_over_inductor"] - 1.0) < 1e-9


def test_zoo_json_joins_two_runs(tmp_path, capsys):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"zoo": [_row("a", "default", 2.0, 1.0, 1.1)]}))
    second.write_text(json.dumps({"zoo": [_row("b", "default", 2.0, 1.0, 1.0),
                                          {"name": "c", "mode": "default", "error": "RuntimeError: boom"}]}))
    assert gpu_check.joined_zoo([str(first), str(second)]) == 1  # c failed
    printed = capsys.readouterr().out
    assert "a " in printed and "b " in printed and '"failed or wrong": [\n  "c"' in printed
