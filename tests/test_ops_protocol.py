"""Every handler of the ops protocol implements every op (Note [Op vocabulary])."""
import pytest
import sympy
import torch

from engine.codegen.cpp import CppPrinter
from engine.ir.evaluator import TorchEvaluator
from engine.ir.handlers import AccessRecorder, IRPrinter, Var
from engine.ir.ops import ALL_OPS, BINARY, UNARY
from engine.schedule.kernel_plan import KernelPlan

HANDLERS = [IRPrinter, AccessRecorder, CppPrinter, TorchEvaluator]


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.__name__)
def test_handler_has_every_op(handler):
    missing = [op for op in ALL_OPS if not hasattr(handler, op) and op not in ("load",)]
    if handler is AccessRecorder:  # answers arithmetic through __getattr__
        missing = [op for op in missing if op not in UNARY and op not in BINARY]
    assert not missing, f"{handler.__name__} lacks {missing}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_cpp_printer_writes_every_op(dtype):
    plan = KernelPlan([], sympy.Integer(1), sympy.Integer(1))
    printer = CppPrinter(plan, {}, sympy.Symbol("r0"), {})
    a, b = Var("a", dtype), Var("b", dtype)
    for op in UNARY:
        assert getattr(printer, op)(a).name
    for op in BINARY:
        if dtype == torch.bool and op in ("left_shift", "right_shift", "floordiv", "remainder", "pow"):
            continue  # torch rejects these for bool tensors; lowering never emits them
        assert getattr(printer, op)(a, b).name


def test_evaluator_computes_every_unary_op():
    evaluator = TorchEvaluator({}, {}, {})
    x = torch.rand(4) * 0.5 + 0.25
    for op in UNARY:
        value = x > 0.5 if op in ("logical_not",) else (x * 4).long() if op == "bitwise_not" else x
        assert isinstance(getattr(evaluator, op)(value), torch.Tensor)
