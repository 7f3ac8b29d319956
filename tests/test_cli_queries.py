"""The CLI's questions to one exploration: `asm` (a Triton kernel's TTIR..SASS, no GPU needed) and `provenance`
(what a source line or a node became, down to the generated lines of its kernels, not the shared helpers)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # CLI processes, each exploring (Note [Two lanes], tests/conftest.py)
SOFTMAX_LINE = 14  # samples/softmax.py: return torch.softmax(x, dim=-1)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_asm_prints_one_kernels_lowering_and_names_the_kernels_on_a_wrong_name():
    result = cli("asm", "softmax", "--kernel", "kernel_0", "--level", "ttir", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)
    assert document["kernel"] == "kernel_0" and document["level"] == "ttir" and "tt.func" in document["text"]
    wrong = cli("asm", "softmax", "--kernel", "kernel_99")
    assert wrong.returncode == 2 and "kernel_0" in wrong.stderr  # says which kernels there are


def test_provenance_of_a_line_and_of_a_node_reach_the_kernel_lines_not_the_helpers():
    result = cli("provenance", "softmax", "--line", str(SOFTMAX_LINE), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    (graph,) = json.loads(result.stdout)["graphs"]
    assert graph["user_lines"] == [SOFTMAX_LINE] and graph["fx"] == ["softmax"] and graph["kernels"] == ["kernel_0"]
    record = json.loads(cli("explore", "softmax", "--json").stdout)
    code = record["graphs"][0]["code"]
    first, last = record["graphs"][0]["kernels"][0]["lines"]
    lines = [entry["line"] for entry in graph["generated_lines"]]
    assert lines and all(code["prelude_lines"] < n and first <= n <= last for n in lines)
    by_node = json.loads(cli("provenance", "softmax", "--node", "softmax", "--json").stdout)
    assert by_node["graphs"][0]["generated_lines"] == graph["generated_lines"]
    assert cli("provenance", "softmax", "--line", "1").returncode == 2  # nothing comes from line 1: said
