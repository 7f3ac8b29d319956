"""The ops protocol: the one small vocabulary every loop body is written in.

A loop body is a Python function `inner_fn(index)` that calls `ops.load(...)`, `ops.add(...)`, ... Which
handler answers those calls decides what running the body means: the IR printer writes text, the C++ and
Triton printers write code, the reference evaluator computes with torch, the access recorder lists loads.
Handlers swap in with `use_handler`. See Note [Op vocabulary].
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch

# Note [Op vocabulary]
# Every handler implements every name below (tests/test_ops_protocol.py checks). Values flowing between ops
# carry a dtype; `result_dtype` says what each op yields so that printers of typed languages agree.
# Arithmetic ops expect operands already cast to one compute dtype: the lowering inserts `to_dtype` where
# torch's type promotion would, and computes float16/bfloat16 in float32.

UNARY = (
    "neg abs exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh "
    "asinh acosh atanh erf erfc erfinv lgamma sigmoid relu floor ceil trunc round sign reciprocal square "
    "logical_not bitwise_not isnan isinf signbit"
).split()
BINARY = (
    "add sub mul truediv floordiv truncdiv remainder fmod pow maximum minimum atan2 hypot copysign "
    "eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor "
    "left_shift right_shift"
).split()
PREDICATES = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
              "isnan", "isinf", "signbit"}
ARITHMETIC = tuple(UNARY) + tuple(BINARY)
# load(buffer_name, index_tuple), constant(value, dtype), index_expr(sympy_expr, dtype),
# to_dtype(x, dtype), where(cond, a, b), indirect(int_value, size) -> a sympy symbol standing for a
# data-dependent index (gather, embedding); negative values wrap around like Python indexing. With size None
# the value is a position already known to lie in range (computed and clamped by the lowering, as an
# interpolation's source row): it is read as is, no wrap (aten._unsafe_index's contract).
SPECIAL = ("load", "constant", "index_expr", "to_dtype", "where", "indirect", "masked")
# Note [Masked loads]
# masked(mask, body, other): `body` is a function of no arguments written in these ops; the result is its
# value where the bool `mask` holds and the value `other` (of the body's dtype) elsewhere, and every load the
# body makes, in memory or through a producer inlined into it, reads only where `mask` holds. Inductor's
# ops.masked takes a number for `other` and a cat then selects again with where(); a value lets a cat chain
# its inputs, masked(first, read a, masked(second, read b, read c)), one select each. cat and
# constant_pad_nd pick their source with it: each output element reads one input, where a where() over
# unmasked loads read them all (a 3-way cat read 3x its bytes). Inside the
# body an index may leave its tensor where the mask is false (cat's position i - start, written
# Bounded(i - start, n): Note [Bounded positions] in indexing.py); the value there is never used, and each
# handler keeps it from being read: Triton masks the load (mask=mask & the block's mask, other=0), the
# evaluator reads element 0 instead, C++ reads at the clamp Bounded prints to and selects after (gcc
# vectorizes a select over unconditional loads; a branch per element it would not). A producer inlined
# into a body computes under its mask (kernel_plan.Inliner keys its values by the mask).
# Note [Kernel structure ops]
# The kernel's own structure is in the vocabulary too, so that a kernel body is fully IR (see
# engine/schedule/kernel_plan.py, Note [Kernel body]):
#   store(buffer_name, index_tuple, value)             the node's value, written where the kernel stores it
#   reduction(dtype, src_dtype, reduction_type, value) `value` (varying along the reduction axis) reduced to
#                                                      one value per row; returns that value
#   store_reduction(buffer_name, index_tuple, value)   a reduction's result, written once per row
#   store_add(buffer_name, index_tuple, value, mask)   `value` added into the buffer at the index, which
#                                                      other elements of the loop may add into too, where
#                                                      the bool `mask` holds (None: everywhere): a Scatter
#                                                      node's store (Note [Accumulating stores])
# What a handler does with them is its own: the IR printer writes them as text, the evaluator writes tensors,
# the code printers emit stores and accumulators (the reduction's update goes into the current pass's loop).
STRUCTURE = ("store", "reduction", "store_reduction", "store_add")
ALL_OPS = SPECIAL + STRUCTURE + ARITHMETIC

REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all")


def result_dtype(op: str, arg_dtypes: list[torch.dtype]) -> torch.dtype:
    """The dtype an op yields given its operands' dtypes (operands already share one compute dtype)."""
    if op in PREDICATES:
        return torch.bool
    if op == "where":
        return arg_dtypes[1]
    return arg_dtypes[0]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision values are computed in float32 and rounded when stored."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def reduction_identity(reduction_type: str, dtype: torch.dtype) -> Any:
    if reduction_type == "sum":
        return False if dtype == torch.bool else 0
    if reduction_type == "prod":
        return 1
    if reduction_type in ("max", "argmax"):
        return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min if dtype != torch.bool else False
    if reduction_type in ("min", "argmin"):
        return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max if dtype != torch.bool else True
    if reduction_type == "any":
        return False
    if reduction_type == "all":
        return True
    raise ValueError(reduction_type)


_state = threading.local()


def current_handler():
    handler = getattr(_state, "handler", None)
    if handler is None:
        raise RuntimeError("ops.* called outside use_handler(): no handler is active")
    return handler


@contextlib.contextmanager
def use_handler(handler) -> Iterator[Any]:
    previous = getattr(_state, "handler", None)
    _state.handler = handler
    try:
        yield handler
    finally:
        _state.handler = previous


class _Ops:
    """`ops.add(a, b)` forwards to the active handler's `add`."""

    def __getattr__(self, name: str):
        if name not in ALL_OPS:
            raise AttributeError(f"'{name}' is not in the op vocabulary (engine/ir/ops.py)")

        def call(*args):  # looked up at call time, so `ops.add` can be passed around as a function
            return getattr(current_handler(), name)(*args)

        call.__name__ = name
        return call


ops = _Ops()
