"""Test helper: the pointwise and reduction kernels that one exploration generated, after checking that its
outputs matched eager."""
import torch

import engine


def explored_kernels(fn, inputs, backend: str, name: str = "model") -> list[dict]:
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name=name)
    assert exploration.verify["ok"], exploration.verify
    return [k for k in exploration.kernels if k["kind"] in ("pointwise", "reduction")]
