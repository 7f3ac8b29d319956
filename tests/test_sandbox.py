"""The sandboxed worker keeps the caller safe: limits stop runaway models, the environment is clean."""
import json
import os
import sys
import textwrap

import pytest

from engine.sandbox import Limits, explore_command, run_sandboxed


def _model_file(tmp_path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_infinite_loop_is_stopped_by_the_time_limit(tmp_path):
    target = _model_file(tmp_path, """
        import torch
        def model(x):
            while True:
                x = x + 1
        example_inputs = (torch.randn(3),)
    """)
    result = run_sandboxed(explore_command(target, []), Limits(timeout_s=8))
    assert result.limit_hit == "time" and "stopped" in result.explain()


def test_memory_bomb_is_stopped_by_the_memory_limit(tmp_path):
    target = _model_file(tmp_path, """
        import torch
        hoard = []
        def model(x):
            while True:
                hoard.append(torch.ones(2 ** 25))
        example_inputs = (torch.randn(3),)
    """)
    result = run_sandboxed(explore_command(target, []), Limits(timeout_s=60, memory_mb=1200))
    assert result.limit_hit == "memory" and "memory" in result.explain()


def test_worker_sees_no_inherited_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_TEST_SECRET", "hunter2")
    result = run_sandboxed([sys.executable, "-c", "import os; print(sorted(os.environ))"], Limits(timeout_s=30))
    assert result.ok and "GLASSBOX_TEST_SECRET" not in result.stdout


def test_a_sample_explores_through_the_sandbox():
    result = run_sandboxed(explore_command("scale_bias_relu", []), Limits(timeout_s=180))
    assert result.ok, result.explain()
    record = json.loads(result.stdout)
    assert record["verify"]["ok"] and record["graphs"][0]["kernels"]
