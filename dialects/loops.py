"""The loops level: the op convert-nest-to-loops adds to xDSL's scf/arith/memref/vector.

    nasir.prefetch %ref[%i, %j] : memref<1x64x56x56xf32>

convert-loops-to-llvm turns it into `llvm.prefetch` of the element's address.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, MemRefType
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, var_operand_def


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    """`nasir.prefetch %ref[%i, %j, ...]`: a hint to bring the cache line holding one element
    into L1 ahead of its loads (`llvm.prefetch`; it never faults, so the indices may run past
    the memref)."""

    name = "nasir.prefetch"
    ref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)

    def __init__(self, ref: SSAValue, indices: Sequence[SSAValue]):
        super().__init__(operands=[ref, list(indices)])


LOOPS = Dialect("nasir", [PrefetchOp])
"""The loop-level op convert-nest-to-loops adds to scf/arith/memref/vector."""
