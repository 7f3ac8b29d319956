"""Glassbox: a see-through compiler for PyTorch. `compile(model)` and `explore(model, inputs)`."""
from engine.pipeline import compile, explore  # noqa: F401
