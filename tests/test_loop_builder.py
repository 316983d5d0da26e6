"""`LoopBuilder.divide`: the index divisions convert-nest-to-loops emits, checked against Python's
integer division through xDSL's interpreter (`arith.floordivsi` / `arith.remsi` as xDSL defines them),
and the divisions it must not emit at all."""

import pytest
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter
from xdsl.interpreters.arith import ArithFunctions
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Block, Region

from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder, index

# (scale of x, constant, divisor, mod): the index `x * scale + constant` divided by `divisor`
CASES = [(8, 0, 8, False), (16, 32, 16, False), (32, 16, 16, False), (6, 3, 4, False),
         (1, 5, 7, False), (3, 0, 3, True), (16, 4, 16, True), (1, 0, 6, True), (24, 0, 8, False)]
QUOTIENT_KNOWN = {(8, 0, 8), (16, 32, 16), (32, 16, 16), (24, 0, 8)}


def built(cases):
    """A function of one index `x` returning every case's division, and the ops it holds."""
    block = Block(arg_types=[index])
    b = LoopBuilder(block)
    x = block.args[0]
    results = []
    for scale, constant, divisor, mod in cases:
        a = b.lin_add(b.lin_scale(Lin(x), scale), Lin(None, constant))
        results.append(b.scalar(b.divide(a, divisor, mod=mod)))
    b.add(func.ReturnOp(*results))
    f = func.FuncOp("f", ((index,), tuple(index for _ in cases)), Region(block))
    return ModuleOp([f]), list(block.ops)


def run(module, x):
    interpreter = Interpreter(module)
    interpreter.register_implementations(ArithFunctions())
    interpreter.register_implementations(FuncFunctions())
    return list(interpreter.call_op("f", (x,)))


@pytest.mark.parametrize("x", [0, 1, 5, 17, 63, 1000])
def test_divide_matches_integer_division(x):
    module, _ = built(CASES)
    want = [(x * s + k) % f if mod else (x * s + k) // f for s, k, f, mod in CASES]
    assert run(module, x) == want


@pytest.mark.parametrize("case", sorted(QUOTIENT_KNOWN))
def test_known_quotient_has_no_division(case):
    """`(x * 16 + 32) floordiv 16` is `x + 2`: no floordivsi (sdiv once lowered) in the IR."""
    _, ops = built([(*case, False)])
    assert not any(isinstance(op, (arith.FloorDivSIOp, arith.RemSIOp)) for op in ops)


def test_constants_fold_and_repeats_are_reused():
    block = Block(arg_types=[index])
    b = LoopBuilder(block)
    assert b.divide(Lin(None, 1020), 32) == Lin(None, 31)
    assert b.divide(Lin(None, 1020), 32, mod=True) == Lin(None, 28)
    x = Lin(block.args[0], 3)
    first, again = b.divide(x, 7), b.divide(x, 7)
    assert first.s is again.s
    assert sum(isinstance(op, arith.FloorDivSIOp) for op in block.ops) == 1
