"""A strided view of a buffer, as the loop IR's TensorArg describes it (size, stride, offset): used by the
generated wrapper (codegen/wrapper.py) and by the IR reference evaluator."""
from __future__ import annotations


def strided_view(tensor, size, stride, offset):
    """A view whose offset counts from the tensor's first element (as_strided counts from its storage's)."""
    return tensor.as_strided(size, stride, tensor.storage_offset() + offset)
