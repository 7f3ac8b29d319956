"""Importing this module fills the lowering registry."""
from engine.lowering import creation, extern, gather, pointwise, reductions, views  # noqa: F401
