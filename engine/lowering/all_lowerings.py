"""Importing this module fills the lowering registry."""
from engine.lowering import creation, extern, gather, pooling, pointwise, reductions, scatters, views  # noqa: F401
