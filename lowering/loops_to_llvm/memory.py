"""convert-loops-to-llvm: memref and nasir.prefetch, on bare pointers (static identity layouts).

    %v = memref.load %m[%i, %j] : memref<4x8xf32>
        ->  %o = llvm.mul %i, 8   %p = llvm.add %o, %j   %a = llvm.getelementptr %m[%p] : f32
            %v = llvm.load %a -> f32
    %w = memref.view %ws[%off][] : memref<1024xi8> to memref<4x8xf32>
        ->  %w = llvm.getelementptr %ws[%off] : i8   (a byte offset)
    %c = memref.collapse_shape %m [[0, 1]] : memref<8x8xf32> into memref<64xf32>  ->  %m
"""

from __future__ import annotations

import math

from xdsl.dialects import llvm, memref
from xdsl.dialects.builtin import IntegerAttr, f32, i1, i8, i64
from xdsl.ir import Operation

from nasir.dialects.loops import PrefetchOp
from nasir.lowering.loops_to_llvm.bounds import access
from nasir.lowering.loops_to_llvm.chunks import Buffer, ChunkAccess
from nasir.lowering.loops_to_llvm.function import FuncLowering, Lowering


def load(f: FuncLowering, op: memref.LoadOp) -> None:
    f.replace(op, access(f, op, op.memref, op.indices, lambda: f.add(
        llvm.LoadOp(f.address(op.memref, op.indices), f32, alignment=4))))


def store(f: FuncLowering, op: memref.StoreOp) -> None:
    access(f, op, op.memref, op.indices, lambda: f.add(
        llvm.StoreOp(f.v(op.value), f.address(op.memref, op.indices), alignment=4)))


def prefetch(f: FuncLowering, op: PrefetchOp) -> None:
    """`llvm.prefetch` for a read into the data cache, locality 3 (L1) or 2 (L2, `level = 2`)."""
    f.add(llvm.CallIntrinsicOp("llvm.prefetch.p0", [f.address(op.ref, op.indices), f.i32c(0),
                                                    f.i32c(op.locality), f.i32c(1)], []))


def view(f: FuncLowering, op: memref.ViewOp) -> None:
    f.replace(op, f.add(llvm.GEPOp(f.v(op.source), [llvm.GEP_USE_SSA_VAL], i8, ssa_indices=[f.v(op.byte_shift)])))


def collapse_shape(f: FuncLowering, op: memref.CollapseShapeOp) -> None:
    """`memref.collapse_shape %m [[0], [1, 2]] : memref<4x8x8xf32> into memref<4x64xf32>` -> `%m`
    (a row-major buffer's merged axes index the same elements)."""
    f.replace(op, f.v(op.src))


def alloca(f: FuncLowering, op: memref.AllocaOp) -> None:
    """`memref.alloca() : memref<4x8xf32>` -> `llvm.alloca 32 x f32 {alignment = 64}`, hoisted to
    the entry block."""
    n = math.prod(op.memref.type.get_shape())
    size = llvm.ConstantOp(IntegerAttr(n, i64), i64)
    new = llvm.AllocaOp(size, f32, alignment=64)
    f.hoist(size, new)
    f.replace(op, new.results[0])


def copy(f: FuncLowering, op: memref.CopyOp) -> None:
    """`memref.copy %a, %b : memref<8xf32>` -> `llvm.memcpy(%b, %a, 32 bytes)`. In @main (a
    concat's copies), by the first thread of its team alone: were each thread to copy, one late
    to its copy could read a buffer that a kernel after it, run by a thread ahead, has reused.
    It waits at a barrier first if the others may still be at the bytes it touches (`FuncLowering.unsynced`)."""
    nbytes = 4 * math.prod(op.source.type.get_shape())

    def emit() -> None:
        f.add(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64", [f.v(op.destination), f.v(op.source), f.i64c(nbytes),
                                                            f.const(IntegerAttr(0, i1), i1)], []))

    if f.name == "main":
        accesses = [(Buffer.of(op.source), ChunkAccess(None, False)), (Buffer.of(op.destination), ChunkAccess(None, True))]
        if f.unsynced.conflicts(accesses):
            f.barrier()
        f.on_first_thread(emit)
        f.unsynced.add(accesses)
    else:
        emit()


LOWERINGS: dict[type[Operation], Lowering] = {
    memref.LoadOp: load,
    memref.StoreOp: store,
    PrefetchOp: prefetch,
    memref.ViewOp: view,
    memref.CollapseShapeOp: collapse_shape,
    memref.AllocaOp: alloca,
    memref.CopyOp: copy,
}
