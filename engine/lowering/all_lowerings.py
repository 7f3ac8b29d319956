"""Importing this module fills the lowering registry."""
from engine.lowering import backward, creation, declined, extern, gather, interpolation, pooling, pointwise, reductions, scatters, views  # noqa: F401
