"""Importing this module fills the lowering registry."""
from engine.lowering import (backward, creation, declined, extern, gather, histogram, interpolation,  # noqa: F401
                             interpolation_backward, pooling, pointwise, reductions, scatters, sorting,
                             views)
