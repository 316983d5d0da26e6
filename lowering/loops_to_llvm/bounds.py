"""convert-loops-to-llvm{checked=true}: each load and store of a kernel behind a check of its indices.

Each index is checked against the memref's shape, each axis on its own (a vector's active lanes on
the last axis; across a last axis of 1, against the whole buffer). An access outside skips the
memory and records itself in the globals `BOUNDS_GLOBALS`; the module attribute `BOUNDS_CHECKS`
describes each access by its number, for the runtime to raise a `BoundsError` with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.dialects import llvm, memref, vector
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, DictionaryAttr, IntegerAttr, StringAttr, VectorType, i1, i64
from xdsl.ir import BlockArgument, Operation, SSAValue

from nasir.lowering.loops_to_llvm.function import PTR, FuncLowering, llvm_type

BOUNDS_GLOBALS = ("nasir_bounds_access", "nasir_bounds_axis", "nasir_bounds_index")
"""A checked build's record of the first access outside its memref seen: the access's number + 1
(0: none), the axis and the index (a vector's first lane's, on its last axis)."""
BOUNDS_CHECKS = "nasir.bounds_checks"


def access(f: FuncLowering, op: Operation, ref: SSAValue, indices: Sequence[SSAValue],
           emit: Callable[[], SSAValue | None], vector_type: VectorType | None = None,
           mask: SSAValue | None = None) -> SSAValue | None:
    """`emit()`: the load or store `op` of `ref[indices]` (a vector of `vector_type` along the
    last axis, under `mask`); in a checked build behind a check of each index against the
    memref's shape:

        ^check: %out = or (idx_a u>= size_a)...   cond_br %out, ^record, ^access
        ^record: store number + 1, axis, index to the globals; br ^next(undef)
        ^access: %v = <op>; br ^next(%v)
    """
    if not f.module.checked:
        return emit()
    out, axis, index = _outside(f, ref, indices, vector_type, mask)
    number = len(f.module.checks)
    f.module.checks.append(_describe(f.name, op, ref))
    result = op.results[0].type if op.results else None
    record, inside = f.new_block(), f.new_block()
    after = f.new_block([llvm_type(result)] if result is not None else [])
    f.add(llvm.CondBrOp(out, record, [], inside, []))
    f.block = record
    for name, value in zip(BOUNDS_GLOBALS, (f.i64c(number + 1), axis, index)):
        f.add(llvm.StoreOp(value, f.add(llvm.AddressOfOp(name, PTR)), alignment=8))
    f.add(llvm.BrOp(after, *([f.add(llvm.UndefOp(llvm_type(result)))] if result is not None else [])))
    f.block = inside
    value = emit()
    f.add(llvm.BrOp(after, *([value] if result is not None else [])))
    f.block = after
    return after.args[0] if result is not None else None


def _outside(f: FuncLowering, ref: SSAValue, indices: Sequence[SSAValue], vector_type: VectorType | None,
             mask: SSAValue | None) -> tuple[SSAValue, SSAValue, SSAValue]:
    """Whether `ref[indices]` is outside `ref` (i1), and the axis and index of the first axis outside."""
    shape = ref.type.get_shape()
    width = vector_type.get_shape()[0] if vector_type is not None else 1
    active = _any_lane(f, f.v(mask)) if mask is not None else None
    # a vector's lanes run along the last axis; across a last axis of 1 (lanes over the
    # channels of a 1x1 image) they run through memory: checked against the whole buffer
    flat = width > 1 and shape[-1] == 1
    out = axis = index = None
    for a in reversed(range(len(shape))):  # the first axis outside wins the record
        at, size = f.v(indices[a]), shape[a]
        if flat and a == len(shape) - 1:
            at, size, a = _flat_offset(f, ref, indices), math.prod(shape), -1
        if a in (-1, len(shape) - 1) and width > 1:
            lanes = f.add(llvm.AddOp(f.splat(at, width), _iota(f, width)))
            beyond = f.add(llvm.ICmpOp(lanes, f.splat(f.i64c(size), width), IntegerAttr(9, i64)))
            if mask is not None:
                beyond = f.add(llvm.AndOp(beyond, f.v(mask)))
            here = _any_lane(f, beyond)
        else:
            here = f.add(llvm.ICmpOp(at, f.i64c(size), IntegerAttr(9, i64)))  # uge
            if active is not None:
                here = f.add(llvm.AndOp(here, active))
        out = here if out is None else f.add(llvm.OrOp(out, here))
        axis = f.i64c(a) if axis is None else f.add(llvm.SelectOp(here, f.i64c(a), axis))
        index = at if index is None else f.add(llvm.SelectOp(here, at, index))
    return out, axis, index


def _describe(function: str, op: Operation, ref: SSAValue) -> DictionaryAttr:
    """The checked access of `ref` by `op` in `function` (a kernel or its outlined parallel body)."""
    if isinstance(ref.owner, memref.CollapseShapeOp):  # the same memory, its axes merged
        ref = ref.owner.src
    if isinstance(ref, BlockArgument):
        operand = f"argument {ref.index}"
    elif isinstance(ref.owner, memref.ViewOp) and isinstance(ref.owner.source, BlockArgument):
        operand = f"a view of argument {ref.owner.source.index}"
    else:
        operand = "a stack buffer"
    writes = isinstance(op, (memref.StoreOp, vector.StoreOp, vector.MaskedStoreOp))
    return DictionaryAttr({
        "kernel": StringAttr(function.split(".par")[0]), "access": StringAttr("write" if writes else "read"),
        "operand": StringAttr(operand), "type": StringAttr(str(ref.type))})


def _flat_offset(f: FuncLowering, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
    """The row-major element offset of `ref[indices]` (i64)."""
    shape = ref.type.get_shape()
    total = None
    for a, i in enumerate(indices):
        term = f.cse(llvm.MulOp, f.v(i), f.i64c(math.prod(shape[a + 1:])))
        total = term if total is None else f.cse(llvm.AddOp, total, term)
    return total


def _iota(f: FuncLowering, width: int) -> SSAValue:
    """`<0, 1, ..., width - 1>` (i64 lanes)."""
    ty = VectorType(i64, [width])
    return f.add(llvm.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, list(range(width))), ty))


def _any_lane(f: FuncLowering, mask: SSAValue) -> SSAValue:
    width = mask.type.get_shape()[0]
    return f.add(llvm.CallIntrinsicOp(f"llvm.vector.reduce.or.v{width}i1", [mask], [i1]))
