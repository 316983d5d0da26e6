"""`print-capacity`: the capacity properties of @main (`nasir.transforms.analysis.properties`) as a
table on stderr; stdout carries the IR, unchanged.

    nasir-opt net.mlir -p convert-nn-to-nest,print-capacity
"""

from __future__ import annotations

import sys

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from nasir.transforms.analysis.properties import analyse


class PrintCapacityPass(ModulePass):
    """`print-capacity`: print the mixing and depth table of @main to stderr (stdout carries the
    IR); the IR is left unchanged."""

    name = "print-capacity"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        print(analyse(op), file=sys.stderr, flush=True)
