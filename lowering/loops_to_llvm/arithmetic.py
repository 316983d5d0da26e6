"""convert-loops-to-llvm: arith and math, on scalars or lane by lane: llvm ops or intrinsic calls.

    %c = arith.constant 8 : index              ->  llvm.mlir.constant(8) : i64   (once per function, at the top)
    %s = arith.addf %a, %b : vector<16xf32>    ->  %s = llvm.fadd %a, %b : vector<16xf32>
    %m = arith.maxnumf %a, %b : vector<16xf32> ->  %m = llvm.call_intrinsic "llvm.maxnum.v16f32"(%a, %b)
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IndexType, IntegerAttr, VectorType, i1, i64
from xdsl.ir import Attribute, Operation

from nasir.dialects.llvm import FCmpOp, SelectOp
from nasir.lowering.loops_to_llvm.function import FuncLowering, Lowering, llvm_type, vector_suffix

FLOAT_BINARY = {arith.AddfOp: llvm.FAddOp, arith.SubfOp: llvm.FSubOp, arith.MulfOp: llvm.FMulOp,
                arith.DivfOp: llvm.FDivOp}
INT_BINARY = {arith.AddiOp: llvm.AddOp, arith.SubiOp: llvm.SubOp, arith.MuliOp: llvm.MulOp,
              arith.RemSIOp: llvm.SRemOp, arith.FloorDivSIOp: llvm.SDivOp, arith.AndIOp: llvm.AndOp,
              arith.OrIOp: llvm.OrOp}
"""floordiv/mod of nest index maps only ever see non-negative operands, where they equal sdiv/srem."""
INTRINSICS = {arith.MaxnumfOp: "llvm.maxnum", arith.MinnumfOp: "llvm.minnum", mathd.ExpOp: "llvm.exp",
              mathd.LogOp: "llvm.log", mathd.SqrtOp: "llvm.sqrt", mathd.AbsFOp: "llvm.fabs",
              mathd.PowFOp: "llvm.pow", mathd.FmaOp: "llvm.fma"}
"""Called with type-mangled names (`llvm.maxnum.v16f32`): xDSL's converter declares these
intrinsics unmangled, so two vector widths in one module would clash."""


def constant(f: FuncLowering, op: arith.ConstantOp) -> None:
    """Scalars are made once per function (`FuncLowering.const`); vector constants in place."""
    r = op.result
    value, ty = _const_value(op.value, r.type), llvm_type(r.type)
    scalar = isinstance(value, (IntegerAttr, FloatAttr))
    f.replace(op, f.const(value, ty) if scalar else f.add(llvm.ConstantOp(value, ty)))


def _const_value(value: Attribute, ty: Attribute) -> Attribute:
    if isinstance(value, IntegerAttr) and isinstance(ty, IndexType):
        return IntegerAttr(value.value.data, i64)
    if isinstance(value, IntegerAttr) and ty == i1:
        return IntegerAttr(value.value.data, i1)
    if isinstance(value, DenseIntOrFPElementsAttr) and isinstance(ty, VectorType) and ty.element_type == i1:
        return DenseIntOrFPElementsAttr.from_list(ty, [int(bool(x)) for x in value.get_values()])
    return value


def binary(f: FuncLowering, op: arith.FloatingPointLikeBinaryOperation | arith.SignlessIntegerBinaryOperation) -> None:
    """`arith.mulf %a, %b` -> `llvm.fmul %a, %b` (`FLOAT_BINARY`, `INT_BINARY`)."""
    f.replace(op, f.add(BINARY[type(op)](f.v(op.operands[0]), f.v(op.operands[1]))))


def intrinsic(f: FuncLowering,
              op: arith.MaxnumfOp | arith.MinnumfOp | mathd.ExpOp | mathd.LogOp | mathd.SqrtOp | mathd.AbsFOp
              | mathd.PowFOp | mathd.FmaOp) -> None:
    """`math.exp %x : f32` -> `llvm.call_intrinsic "llvm.exp.f32"(%x)` (`INTRINSICS`)."""
    ty = op.results[0].type
    name = f"{INTRINSICS[type(op)]}.{vector_suffix(ty) if isinstance(ty, VectorType) else 'f32'}"
    f.replace(op, f.add(llvm.CallIntrinsicOp(name, [f.v(o) for o in op.operands], [ty])))


def min_max_si(f: FuncLowering, op: arith.MinSIOp | arith.MaxSIOp) -> None:
    """`arith.minsi %a, %b` -> `select (icmp slt %a, %b), %a, %b` (maxsi: sgt)."""
    a, b = f.v(op.lhs), f.v(op.rhs)
    pred = 2 if isinstance(op, arith.MinSIOp) else 4  # slt / sgt
    f.replace(op, f.add(llvm.SelectOp(f.add(llvm.ICmpOp(a, b, IntegerAttr(pred, i64))), a, b)))


def cmpf(f: FuncLowering, op: arith.CmpfOp) -> None:
    """`arith.cmpf olt, %a, %b : vector<16xf32>` -> `llvm.fcmp "olt" %a, %b`: one i1 per lane
    (arith.cmpf of vectors states a scalar i1)."""
    f.replace(op, f.add(FCmpOp(f.v(op.lhs), f.v(op.rhs), op.predicate)))


def cmpi(f: FuncLowering, op: arith.CmpiOp) -> None:
    """`arith.cmpi slt, %a, %b` -> `llvm.icmp "slt" %a, %b`."""
    f.replace(op, f.add(llvm.ICmpOp(f.v(op.lhs), f.v(op.rhs), op.predicate)))


def index_cast(f: FuncLowering, op: arith.IndexCastOp) -> None:
    """Nothing between index and i64 (index is i64); `vector<16xi32>` lanes of masks are truncated."""
    ty = op.result.type
    narrow = ty not in (i64, IndexType())
    f.replace(op, f.add(llvm.TruncOp(f.v(op.input), ty)) if narrow else f.v(op.input))


def select(f: FuncLowering, op: arith.SelectOp) -> None:
    """`arith.select %c, %a, %b` -> `llvm.select %c, %a, %b` (of vectors, lane by lane)."""
    f.replace(op, f.add(SelectOp(f.v(op.cond), f.v(op.lhs), f.v(op.rhs))))


BINARY = FLOAT_BINARY | INT_BINARY

LOWERINGS: dict[type[Operation], Lowering] = {
    arith.ConstantOp: constant,
    **dict.fromkeys(BINARY, binary),
    **dict.fromkeys(INTRINSICS, intrinsic),
    arith.MinSIOp: min_max_si,
    arith.MaxSIOp: min_max_si,
    arith.CmpfOp: cmpf,
    arith.CmpiOp: cmpi,
    arith.IndexCastOp: index_cast,
    arith.SelectOp: select,
}
