"""Real-model scale, read without touching a control: a 24-layer Hugging Face Llama and a ResNet-50 (transformers'
own ResNet, depths 3-4-6-3; torchvision is not in the test environment), each built from a config with random
weights and pasted as a model file. The first ATen view folds by module path into tens of boxes (one per Llama
layer, one per ResNet bottleneck block) and the viewer's search finds a node folded inside a module. Widths and
inputs are tiny: readability depends on the layer count, not the width, and the compile stays quick. With
GLASSBOX_SHOTS=DIR, screenshots are saved there."""
from __future__ import annotations

import os
import re
import tempfile
import textwrap
from dataclasses import dataclass

import pytest

# the app server (started by the fixture below) and this test share one folder of shared code
os.environ.setdefault("GLASSBOX_SHARE_DIR", tempfile.mkdtemp(prefix="glassbox-share-"))

from test_browser import server  # noqa: E402,F401 - the app server fixture
from test_browser_explorer import browser, shot  # noqa: E402,F401
# pytestmark: slow, and skipped without Chromium
from test_browser_scale import llama_source, open_aten_view, pytestmark  # noqa: E402,F401

from app import share  # noqa: E402

pytest.importorskip("transformers")

LLAMA_24 = llama_source(vocab=64, hidden=16, layers=24, heads=2, kv_heads=1, tokens=4)

RESNET_50 = textwrap.dedent('''\
    import torch
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64], depths=[3, 4, 6, 3],
                          layer_type="bottleneck")
    net = ResNetModel(config).eval()


    def model(pixel_values):
        return net(pixel_values=pixel_values).pooler_output


    example_inputs = (torch.randn(1, 3, 32, 32),)
''')


@dataclass(frozen=True)
class Case:
    name: str
    code: str
    boxes: tuple[str, ...]  # module paths the first view draws as boxes
    search: str  # a word found only inside folded modules (a member's name or module path)
    folded_in: str  # a module box the search must mark


RESNET_BLOCKS = tuple(f"encoder.stages.{stage}.layers.{block}"
                      for stage, blocks in enumerate((3, 4, 6, 3)) for block in range(blocks))
CASES = [
    Case("llama24", LLAMA_24, tuple(f"model.layers.{layer}" for layer in range(24)), "gate_proj",
         "model.layers.17"),
    Case("resnet50", RESNET_50, ("embedder.embedder.convolution", "pooler") + RESNET_BLOCKS,
         "stages.2.layers.4.layer.1.convolution", "encoder.stages.2.layers.4"),
]


def box_titles(viewer) -> list[str]:
    """The drawn boxes' visible labels, one text per box."""
    return viewer.locator("svg g.node").evaluate_all("(ns) => ns.map(n => [...n.querySelectorAll('text')]"
                                                     ".map(t => t.textContent).join(' '))")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_real_model_reads_by_module_without_touching_a_control(browser, server, case):  # noqa: F811
    page, viewer = open_aten_view(browser, server, share.store_code(case.code))
    titles = box_titles(viewer)
    assert 10 <= len(titles) <= 80, titles  # tens of boxes
    for path in case.boxes:  # each box named by its module path, not Dynamo's G['net']
        assert any(re.search(rf"(^|\s){re.escape(path)}(\s|$)", title) for title in titles), (path, titles)
    assert not any("G[" in title for title in titles), titles
    shot(page, f"scale_{case.name}_aten")

    viewer.locator("#q").fill(case.search)  # the search reaches into the folded modules
    hits = viewer.locator("#hits")
    hits.wait_for()
    found = re.search(r"(\d+) match", hits.inner_text())
    assert found and int(found.group(1)) > 0 and "inside folded modules" in hits.inner_text(), hits.inner_text()
    marked = viewer.locator("svg g.node.hit").evaluate_all("(ns) => ns.map(n => n.textContent)")
    assert any(case.folded_in in text for text in marked), marked
    shot(page, f"scale_{case.name}_search")
    page.close()
