"""torchvision's own models through the classes of failure issue 27 found in them (they run in .ci/run's vision
lane, where torchvision and timm are installed beside torch 2.14.1; skipped elsewhere): Swin-T's
relative-position tables, built while tracing, reach the run stage as real tensors (Note [Compiling outside the
fake mode] in engine/pipeline.py), and a segmentation head that resizes back to its input's size compiles
under dynamic shapes with no size expression left unprinted (no whole-graph fallback, matching eager at every
size)."""
import pytest
import torch

import engine

torchvision = pytest.importorskip("torchvision")

pytestmark = [pytest.mark.slow, pytest.mark.vision]


def _no_fallback(record):
    assert not record.errors, [(e.stage, e.message[:300]) for e in record.errors]
    assert all(g.fallback is None for g in record.graphs)
    assert not [k for g in record.graphs for k in g.kernels if k.kind == "fallback"]


def test_swin_t_relative_position_tables_compile():
    torch.manual_seed(0)
    model = torchvision.models.swin_t(weights=None, num_classes=10).eval()
    record = engine.explore(model, (torch.randn(2, 3, 64, 64),))
    _no_fallback(record)
    assert record.verify.verdict == "ok", record.verify.problem


def test_segmentation_head_resized_to_its_input_under_dynamic_shapes():
    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                       num_classes=3).eval()
    record = engine.explore(lambda x: model(x)["out"], (torch.randn(2, 3, 64, 80),), dynamic=True,
                            dynamic_inputs=[(torch.randn(3, 3, 72, 96),)])
    _no_fallback(record)
    assert record.verify.verdict == "ok", record.verify.problem
