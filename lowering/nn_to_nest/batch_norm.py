"""lower-batch-norm: each nn.batch_norm that fold-batch-norm left becomes a scale/shift copy nest.

Runs after convert-nn-to-nest in the llvm pipeline (the torch backend keeps nn.batch_norm, whose
training mode Fisher Potential needs). Scale and shift are new weight-store entries
(`fold_batch_norm.scale_shift`):

    %z = nn.batch_norm %y, %g, %b, %m, %v {name = "bn"}
    ==>
    %s = nn.weight {name = "bn.scale"} : tensor<64xf32>
    %t = nn.weight {name = "bn.shift"} : tensor<64xf32>
    %z = nest.compute %y, %s, %t {name = "bn", combiner = "copy", epilogue = ["mul 1", "add 2"], ...}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from nasir.dialects import nest, nn
from nasir.dialects.module import weights_of
from nasir.dialects.nest_maps import amap, elementwise_domain, identity
from nasir.dialects.shapes import shape_of
from nasir.lowering.nn_to_nest.convert import LayerNames
from nasir.transforms.fold_batch_norm import drop_if_unused, scale_shift


@dataclass(eq=False)
class BatchNormToNest(RewritePattern):
    module: ModuleOp
    names: LayerNames

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.BatchNormOp, rewriter: PatternRewriter):
        store = weights_of(self.module)
        folded = scale_shift(store, op)
        if folded is None:
            return
        name = self.names(op)
        shape = shape_of(op.result)
        scale, shift = (nn.WeightOp.make(store.add(f"{name}.{part}", v.astype(np.float32)), v.shape)
                        for part, v in zip(("scale", "shift"), folded))
        rank = len(shape)
        channel = amap(rank, [identity(rank).results[1]])
        y = nest.ComputeOp.make(name, [op.operands[0], scale.result, shift.result], elementwise_domain(shape),
                                [identity(rank), channel, channel], identity(rank), shape, "copy",
                                ["mul 1", "add 2"])
        old = list(op.operands[1:])
        rewriter.replace(op, [scale, shift, y])
        drop_if_unused(rewriter, old)


class LowerBatchNormPass(ModulePass):
    """Turn each remaining nn.batch_norm (parameters from the store) into a `mul`/`add` copy nest."""

    name = "lower-batch-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(BatchNormToNest(op, LayerNames(op)), apply_recursively=False).rewrite_module(op)
