"""xDSL's llvm dialect, with `llvm.fcmp` and `llvm.select` on vectors as MLIR's has them.

convert-loops-to-llvm compares vectors lane by lane (a max pool's `x > acc ? x : acc`):

    %m = "llvm.fcmp"(%x, %acc) <{predicate = 2 : i64, ...}> : (vector<8xf32>, vector<8xf32>) -> vector<8xi1>

xDSL 0.74's `llvm.fcmp` takes scalar floats only, so IR holding such a comparison did not verify
(`nasir-opt -t llvm` on any model with a max pool). `FCmpOp` here takes floats or vectors of them and
gives i1 or a vector of i1 of the same lanes, and `SelectOp` takes such a vector as its condition;
they subclass xDSL's, so its llvmlite converter handles them as its own.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects import llvm
from xdsl.dialects.builtin import I64, AnyFloatConstr, IntegerAttr, VectorType, i1, i64
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    AnyOf,
    BaseAttr,
    EqAttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class FCmpOp(llvm.FCmpOp):
    """`llvm.fcmp` of two floats or two float vectors; the result has one i1 per lane."""

    T: ClassVar = VarConstraint("T", AnyOf([AnyFloatConstr, BaseAttr(VectorType)]))
    lhs = operand_def(T)
    rhs = operand_def(T)
    res = result_def(AnyOf([EqAttrConstraint(i1), BaseAttr(VectorType)]))
    predicate = prop_def(IntegerAttr[I64])
    fastmathFlags = prop_def(llvm.FastMathAttr, default_value=llvm.FastMathAttr(None))
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, lhs: Operation | SSAValue, rhs: Operation | SSAValue, predicate: str | IntegerAttr,
                 attributes: dict[str, Attribute] | None = None):
        if isinstance(predicate, str):
            predicate = IntegerAttr(llvm.FCmpPredicateFlag(predicate).to_int(), i64)
        operand = SSAValue.get(lhs).type
        result = VectorType(i1, operand.get_shape()) if isinstance(operand, VectorType) else i1
        IRDLOperation.__init__(self, operands=[lhs, rhs], result_types=[result], attributes=attributes or {},
                               properties={"predicate": predicate})

    def verify_(self) -> None:
        operand, result = self.lhs.type, self.res.type
        lanes = operand.get_shape() if isinstance(operand, VectorType) else None
        if (result.get_shape() if isinstance(result, VectorType) else None) != lanes:
            raise VerifyException(
                f"llvm.fcmp of {operand} gives one i1 per lane, not {result}")


@irdl_op_definition
class SelectOp(llvm.SelectOp):
    """`llvm.select` by an i1, or lane by lane by a vector of i1 as wide as its values."""

    T: ClassVar = VarConstraint("T", AnyAttr())
    cond = operand_def(AnyOf([EqAttrConstraint(i1), BaseAttr(VectorType)]))
    lhs = operand_def(T)
    rhs = operand_def(T)
    res = result_def(T)
    fastmathFlags = prop_def(llvm.FastMathAttr, default_value=llvm.FastMathAttr(None))
    traits = traits_def(Pure())
    assembly_format = "$cond `,` $lhs `,` $rhs attr-dict `:` type($cond) `,` type($res)"
    print = Operation.print  # made anew from the format: xDSL's read the condition as i1
    parse = Operation.__dict__["parse"]
    irdl_options = (ParsePropInAttrDict(),)

    def verify_(self) -> None:
        cond, value = self.cond.type, self.res.type
        if isinstance(cond, VectorType) and (not isinstance(value, VectorType) or cond.get_shape() != value.get_shape()):
            raise VerifyException(f"llvm.select by {cond} needs values of as many lanes, not {value}")


VECTOR_OPS = {llvm.FCmpOp: FCmpOp, llvm.SelectOp: SelectOp}

LLVM = Dialect("llvm", [VECTOR_OPS.get(op, op) for op in llvm.LLVM.operations], list(llvm.LLVM.attributes))
"""xDSL's llvm dialect with `FCmpOp` and `SelectOp` in place of its scalar-only ones."""
