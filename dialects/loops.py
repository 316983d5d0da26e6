"""The loops level: the op convert-nest-to-loops adds to xDSL's scf/arith/memref/vector.

    nasir.prefetch %ref[%i, %j] : memref<1x64x56x56xf32>

convert-loops-to-llvm turns it into `llvm.prefetch` of the element's address.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, i32
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, opt_prop_def, var_operand_def


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    """`nasir.prefetch %ref[%i, %j, ...]`: a hint to bring the cache line holding one element
    into L1 ahead of its loads (`llvm.prefetch`; it never faults, so the indices may run past
    the memref); with `{level = 2}` into L2 only (`llvm.prefetch` locality 2: `prefetcht1`)."""

    name = "nasir.prefetch"
    ref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    level = opt_prop_def(IntegerAttr)

    def __init__(self, ref: SSAValue, indices: Sequence[SSAValue], level: int = 1):
        super().__init__(operands=[ref, list(indices)],
                         properties={} if level == 1 else {"level": IntegerAttr(level, i32)})

    @property
    def locality(self) -> int:
        """`llvm.prefetch`'s locality: 3 into L1, 2 into L2."""
        return 4 - (self.level.value.data if self.level is not None else 1)


LOOPS = Dialect("nasir", [PrefetchOp])
"""The loop-level op convert-nest-to-loops adds to scf/arith/memref/vector."""
