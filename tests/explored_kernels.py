"""Test helpers: the pointwise and reduction kernels that one exploration generated, after checking that its
outputs matched eager (and, for `without_fallbacks`, that nothing failed and no op ran eagerly)."""
import torch

import engine


def explored_kernels(fn, inputs, backend: str, name: str = "model") -> list[dict]:
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name=name)
    assert exploration.verify.ok, exploration.verify
    return [k for k in exploration.kernels if k.kind in ("pointwise", "reduction")]


def without_fallbacks(fn, inputs, backend: str, name: str = "model", dynamic: bool = False):
    """The exploration and its generated kernels, once it compiled with no error, matched eager and ran no op
    eagerly (a fallback kernel)."""
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name=name, dynamic=dynamic)
    assert not exploration.errors, exploration.errors[0].traceback[-3000:]
    assert exploration.verify.ok, exploration.verify
    fallbacks = [k for k in exploration.kernels if k.kind == "fallback"]
    assert not fallbacks, [k.reason for k in fallbacks]
    return exploration, [k for k in exploration.kernels if k.kind in ("pointwise", "reduction")]
