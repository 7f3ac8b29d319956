"""Dynamic shapes on real models (issue 27): Hugging Face models built from their own code, compiled with
dynamic=True and run at other sequence lengths, batch sizes and resolutions. Each must match eager at every
size, run no graph eagerly, compile once for all sizes, and hold no Fallback op that its static graphs do not
(engine/tools/sweep_explore.py's dynamic row: status "ok")."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # whole real models, each explored twice (Note [Two lanes])

from engine.tools.sweep_explore import run_one  # noqa: E402


@pytest.mark.parametrize("name", [
    "hf_llama",  # rotary positions and a causal mask built from arange over the symbolic length
    "hf_gpt2",  # learned positions sliced to the length
    "hf_deberta-v2",  # relative-position buckets: log, clamp and casts of symbolic sizes
    "hf_bloom",  # ALiBi slopes and a cumsum over the mask
])
def test_real_model_under_dynamic_shapes(name):
    row = run_one(name, train=False, dynamic=True)
    assert row["status"] == "ok", {k: row.get(k) for k in ("status", "message", "extra_fallbacks", "recompiles",
                                                           "runs", "graph_failures", "verdict")}
    assert row["recompiles"] == 0 and not row["extra_fallbacks"] and len(row["runs"]) >= 2
