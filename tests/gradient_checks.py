"""Test helpers for generated gradients: a training step explored with a loss whose gradient differs per
output element, checked against eager (the input's gradient included) with no op run eagerly."""
import torch

import engine


def weighted_sum(output, *inputs):
    """A loss whose gradient differs per output element: a sum's all-ones gradient would hide a window (or a
    source pixel) that adds another one's gradient, or reads it at the wrong output position."""
    weight = torch.randn(output.shape, generator=torch.Generator().manual_seed(1), dtype=output.dtype)
    return (output * weight).sum()


def backward_ops(exploration) -> str:
    """The backward graphs' ATen targets, as one string to search."""
    return " ".join(str(n.target) for g in exploration.graphs if g.phase == "backward" for n in g.aten)


def train_checked(fn, x, backend, **kwargs):
    """Explore one training step of fn on x; its outputs and gradients match eager and nothing fell back."""
    torch._dynamo.reset()
    exploration = engine.explore(fn, (x,), backend=backend, train=True, loss_fn=weighted_sum, **kwargs)
    assert not exploration.errors, exploration.errors[0].message
    verify = exploration.verify
    assert verify.ok, [(e.name, e.max_abs_err) for e in verify.gradients if not e.ok]
    assert any(e.name == "input[0]" for e in verify.gradients), "the input's gradient was not checked"
    fallbacks = [k.ops for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]
    assert not fallbacks, fallbacks
    return exploration
