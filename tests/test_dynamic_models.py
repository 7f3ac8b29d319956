"""Dynamic shapes on real models (issue 27): Hugging Face models built from their own code, compiled with
dynamic=True and run at other sequence lengths, batch sizes and resolutions. Each must match eager at every
size, run no graph eagerly, compile once for all sizes, and hold no Fallback op that its static graphs do not
(engine/tools/sweep_explore.py's dynamic row: status "ok")."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # whole real models, each explored twice (Note [Two lanes])

import torch  # noqa: E402

from engine import pipeline  # noqa: E402
from engine.tools.sweep_explore import build_hf, dynamic_summary, dynamo_recompiles, run_one  # noqa: E402


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


def test_swin_under_dynamic_shapes():
    # shifted windows over a patch grid padded up to the window: pads are expressions of the sizes (Note
    # [Symbolic pads]). The sizes keep Dynamo's own branches (pad or not, shrink the window or not) and are not
    # square (duck sizing), so Dynamo alone compiles once (Note [Dynamo's own recompiles]) and so must we.
    model, _ = build_hf("swin")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    sets = [(torch.randn(b, 3, h, w, generator=gen),) for b, h, w in ((2, 40, 56), (3, 56, 72), (2, 72, 40))]
    assert dynamo_recompiles(model, sets) == 0
    exploration = pipeline.explore(model, sets[0], backend="cpp", device="cpu", name="hf_swin", dynamic=True,
                                   dynamic_inputs=sets[1:])
    row = dynamic_summary({"fallbacks": {}}, exploration, dynamo=0)  # no Fallback op at all, no recompile
    assert row["status"] == "ok", {k: row.get(k) for k in ("status", "extra_fallbacks", "recompiles", "runs",
                                                           "graph_failures", "failed_guards", "verdict")}
    assert row["recompiles"] == 0 and len(row["runs"]) == 2 and all(run["ok"] for run in row["runs"])
