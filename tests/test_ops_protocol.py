"""Every handler of the ops protocol implements every op (Note [Op vocabulary], Note [Spelling tables]).

A printer gets one method per entry of its own spelling table and nothing generic, so a spelling missing from
the C++ or Triton table, the evaluator's torch table or the IR printer is a missing method here; and every
spelling is run on sample operands, so one that raises is caught too."""
import pytest
import sympy
import torch

from engine.codegen.cpp.module import CppPrinter
from engine.codegen.provenance import LineTag
from engine.codegen.triton.printer import TritonPrinter, TVar, X, triton_index
from engine.ir.evaluator import TorchEvaluator
from engine.ir.handlers import AccessRecorder, IRPrinter, TextHandler, Var
from engine.ir.indexing import c_index, py_index
from engine.ir.ops import ALL_OPS, ARITHMETIC, BINARY, STRUCTURE, UNARY
from engine.ir.nodes import Pointwise
from engine.schedule.kernel_plan import KernelPlan

HANDLERS = [IRPrinter, CppPrinter, TritonPrinter, TorchEvaluator]


def _defined(cls, op: str) -> bool:
    """`op` is a method of the class itself or a base other than the generic TextHandler/object (which spells
    `indirect` through each printer's `declare_indirect`)."""
    if issubclass(cls, TextHandler) and op == "indirect":
        op = "declare_indirect"
    return any(op in klass.__dict__ for klass in cls.__mro__ if klass not in (TextHandler, object))


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.__name__)
def test_handler_has_every_op(handler):
    missing = [op for op in ALL_OPS if not _defined(handler, op)]
    assert not missing, f"{handler.__name__} lacks {missing}"


def test_access_recorder_has_every_non_arithmetic_op():
    """The recorder answers arithmetic generically (it only lists loads); everything else it spells."""
    missing = [op for op in ALL_OPS if op not in ARITHMETIC and not _defined(AccessRecorder, op)]
    assert not missing


def test_a_printer_without_a_spelling_lacks_that_op():
    """The check above can fail: a printer whose table misses an op has no method for it."""
    class Partial(TextHandler):
        SPELLINGS = {op: spell for op, spell in CppPrinter.SPELLINGS.items() if op != "hypot"}

    assert not _defined(Partial, "hypot") and _defined(Partial, "atan2")


def _buffers():
    node = Pointwise("buf0", (sympy.Integer(4),), torch.float32, "cpu", inner_fn=lambda index: None)
    return {"buf0": node}


SKIP_BOOL = ("left_shift", "right_shift", "floordiv", "remainder", "pow")  # torch rejects these for bools


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_cpp_printer_writes_every_op(dtype):
    plan = KernelPlan([], sympy.Integer(1), sympy.Integer(1))
    printer = CppPrinter(plan, _buffers(), sympy.Symbol("r0"), {})
    a, b = Var("a", dtype), Var("b", dtype)
    for op in UNARY:
        assert getattr(printer, op)(a).name
    for op in BINARY:
        if not (dtype == torch.bool and op in SKIP_BOOL):
            assert getattr(printer, op)(a, b).name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_triton_printer_writes_every_op(dtype):
    plan = KernelPlan([], sympy.Integer(16), sympy.Integer(1))
    printer = TritonPrinter(plan, _buffers(), "x", {"x": None})
    a, b = TVar("a", dtype, True, X), TVar("b", dtype, True, X)
    for op in UNARY:
        assert getattr(printer, op)(a).name
    for op in BINARY:
        if not (dtype == torch.bool and op in SKIP_BOOL):
            assert getattr(printer, op)(a, b).name


@pytest.mark.parametrize("make", [
    lambda plan, buffers: CppPrinter(plan, buffers, sympy.Symbol("r0"), {}),
    lambda plan, buffers: TritonPrinter(plan, buffers, "x", {"x": None}),
    lambda plan, buffers: IRPrinter(buffers),
], ids=["cpp", "triton", "ir"])
def test_printers_write_the_structure_ops(make):
    plan = KernelPlan([], sympy.Integer(16), sympy.Integer(8))
    printer = make(plan, _buffers())
    printer.tag = LineTag("buf0")
    x = plan.x
    value = printer.load("buf0", (x,)) if isinstance(printer, IRPrinter) else Var("v", torch.float32) \
        if isinstance(printer, CppPrinter) else TVar("v", torch.float32, True, X)
    printer.store("buf0", (x,), value)
    row = printer.reduction(torch.float32, torch.float32, "sum", value)
    printer.store_reduction("buf0", (x,), row)
    assert row.name
    text = "\n".join(printer.lines + [line for line, _ in getattr(printer, "stores", [])])
    assert text.count("buf0") >= 2, text


def test_evaluator_runs_the_structure_ops():
    storages = {}
    evaluator = TorchEvaluator(storages, _buffers(), {}, [4], [3])
    value = torch.arange(12.0).view(4, 3)
    evaluator.store_reduction("buf0", (), evaluator.reduction(torch.float32, torch.float32, "sum", value))
    torch.testing.assert_close(storages["buf0"], value.sum(1))


def test_evaluator_computes_every_unary_op():
    evaluator = TorchEvaluator({}, {}, {})
    x = torch.rand(4) * 0.5 + 0.25
    for op in UNARY:
        value = x > 0.5 if op in ("logical_not",) else (x * 4).long() if op == "bitwise_not" else x
        assert isinstance(getattr(evaluator, op)(value), torch.Tensor)


def test_structure_ops_are_in_the_vocabulary():
    assert set(STRUCTURE) <= set(ALL_OPS)


@pytest.mark.parametrize("printer", [c_index, py_index, triton_index], ids=["c", "python", "triton"])
def test_index_printers_refuse_fractions(printer):
    x = sympy.Symbol("x0", integer=True, nonnegative=True)
    for expr in (x / 2, sympy.Rational(1, 3) * x + 1):
        with pytest.raises(ValueError, match="fraction"):
            printer(expr)
    assert printer(2 * x + 1).replace(" ", "") in ("2*x0+1",)
