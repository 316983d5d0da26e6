"""convert-loops-to-llvm: vector ops; loads and stores along a memref's last axis.

    %v = vector.load %m[%i, %c0] : memref<4x16xf32>, vector<16xf32>
        ->  %o = llvm.mul %i, 16   %a = llvm.getelementptr %m[%o] : f32   %v = llvm.load %a -> vector<16xf32>
    %v = vector.maskedload %m[%i], %mask, %pass : memref<20xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
        ->  %a = llvm.getelementptr %m[%i] : f32
            %v = llvm.call_intrinsic "llvm.masked.load.v16f32.p0"(%a, 4, %mask, %pass)
"""

from __future__ import annotations

from xdsl.dialects import llvm, vector
from xdsl.dialects.builtin import IntegerAttr, i32
from xdsl.ir import Operation

from nasir.lowering.loops_to_llvm.bounds import access
from nasir.lowering.loops_to_llvm.function import FuncLowering, Lowering, shuffle_mask, vector_suffix


def load(f: FuncLowering, op: vector.LoadOp) -> None:
    ty = op.result.type
    f.replace(op, access(f, op, op.base, op.indices, lambda: f.add(
        llvm.LoadOp(f.vector_address(op.base, op.indices), ty, alignment=4)), ty))


def store(f: FuncLowering, op: vector.StoreOp) -> None:
    access(f, op, op.base, op.indices, lambda: f.add(
        llvm.StoreOp(f.v(op.vector), f.vector_address(op.base, op.indices), alignment=4)), op.vector.type)


def masked_load(f: FuncLowering, op: vector.MaskedLoadOp) -> None:
    ty = op.result.type
    align = f.const(IntegerAttr(4, i32), i32)
    f.replace(op, access(f, op, op.base, op.indices, lambda: f.add(llvm.CallIntrinsicOp(
        f"llvm.masked.load.{vector_suffix(ty)}.p0",
        [f.address(op.base, op.indices), align, f.v(op.mask), f.v(op.pass_thru)], [ty])), ty, op.mask))


def masked_store(f: FuncLowering, op: vector.MaskedStoreOp) -> None:
    ty = op.value_to_store.type
    align = f.const(IntegerAttr(4, i32), i32)
    access(f, op, op.base, op.indices, lambda: f.add(llvm.CallIntrinsicOp(
        f"llvm.masked.store.{vector_suffix(ty)}.p0",
        [f.v(op.value_to_store), f.address(op.base, op.indices), align, f.v(op.mask)], [])), ty, op.mask)


def broadcast(f: FuncLowering, op: vector.BroadcastOp) -> None:
    """`vector.broadcast %x : f32 to vector<16xf32>` -> `FuncLowering.splat`."""
    f.replace(op, f.splat(f.v(op.source), op.vector.type.get_shape()[0]))


def shuffle(f: FuncLowering, op: vector.ShuffleOp) -> None:
    f.replace(op, f.add(llvm.ShuffleVectorOp(f.v(op.v1), f.v(op.v2), shuffle_mask(tuple(op.mask.get_values())),
                                             op.result.type)))


LOWERINGS: dict[type[Operation], Lowering] = {
    vector.LoadOp: load,
    vector.StoreOp: store,
    vector.MaskedLoadOp: masked_load,
    vector.MaskedStoreOp: masked_store,
    vector.BroadcastOp: broadcast,
    vector.ShuffleOp: shuffle,
}
