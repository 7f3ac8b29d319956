"""Glassbox: a see-through compiler for PyTorch. `compile(model)` and `explore(model, inputs)`;
`FallbackWarning` is what compile() warns with when part of a model ran eagerly.

The two entry points are imported on first use (PEP 562): `import engine.tools.sandbox` in the app's server must not
import torch, which takes seconds and hundreds of MB there for nothing (the server never runs a model)."""


def __getattr__(name: str):
    if name in ("compile", "explore"):
        from engine import pipeline
        return getattr(pipeline, name)
    if name == "FallbackWarning":  # Note [A fallback is loud]
        from engine.fallbacks import FallbackWarning
        return FallbackWarning
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
