"""fold-batch-norm: batch-norm folded into the conv producing its input, for inference.

A graph pass of the llvm pipeline, on the nn dialect before convert-nn-to-nest; the batch-norms it
cannot fold are left to `lower-batch-norm` (`nasir.lowering.nn_to_nest.batch_norm`). Both
precompute scale = gamma / sqrt(var + eps) and shift = beta - mean * scale (`scale_shift`) into new
weight-store entries (the old arrays are never changed).

    %w = nn.weight {name = "c.w"} ...          %w2 = nn.weight {name = "c.w.bn"} ...
    %y = nn.conv2d %x, %w ...          ==>      %b2 = nn.weight {name = "c.w.bn_bias"} ...
    %z = nn.batch_norm %y, %g, %b, %m, %v       %z  = nn.conv2d %x, %w2, %b2 ...
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from nasir.dialects import nn
from nasir.dialects.module import WeightStore, weights_of
from nasir.dialects.shapes import shape_of


def weight_array(store: WeightStore, value: SSAValue) -> np.ndarray | None:
    """The store's array of `value` when an nn.weight makes it, else None."""
    owner = value.owner
    return store.get(owner.key) if isinstance(owner, nn.WeightOp) else None


def scale_shift(store: WeightStore, bn: nn.BatchNormOp) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (scale, shift) with bn(x) = x * scale + shift, or None if a parameter is no weight."""
    params = [weight_array(store, v) for v in bn.operands[1:]]
    if any(p is None for p in params):
        return None
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
    scale = gamma / np.sqrt(var + bn.epsilon.value.data)
    return scale, beta - mean * scale


def drop_if_unused(rewriter: PatternRewriter, values) -> None:
    for v in values:
        if isinstance(v.owner, nn.WeightOp) and not v.uses:
            rewriter.erase(v.owner)


@dataclass(eq=False)
class FoldIntoConv(RewritePattern):
    module: ModuleOp

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.BatchNormOp, rewriter: PatternRewriter):
        conv = op.operands[0].owner
        if not isinstance(conv, nn.Conv2DOp) or not op.operands[0].has_one_use():
            return
        store = weights_of(self.module)
        w = weight_array(store, conv.operands[1])
        bias = weight_array(store, conv.operands[2]) if len(conv.operands) == 3 else np.zeros(shape_of(conv.result)[1])
        folded = scale_shift(store, op)
        if w is None or bias is None or folded is None:
            return
        scale, shift = folded
        key = conv.operands[1].owner.key
        new_w = nn.WeightOp.make(store.add(f"{key}.bn", (w * scale[:, None, None, None]).astype(np.float32)), w.shape)
        new_b = nn.WeightOp.make(store.add(f"{key}.bn_bias", (bias * scale + shift).astype(np.float32)),
                                 (w.shape[0],))
        new_conv = nn.Conv2DOp.make([conv.operands[0], new_w.result, new_b.result], **conv.props_dict())
        if conv.layer_name:
            new_conv.named(conv.layer_name)
        old = [*conv.operands[1:], *op.operands[1:]]
        rewriter.replace(op, [new_w, new_b, new_conv])
        rewriter.erase(conv)
        drop_if_unused(rewriter, old)


class FoldBatchNormPass(ModulePass):
    """Fold nn.batch_norm into the single-use nn.conv2d feeding it (weights and bias from the store)."""

    name = "fold-batch-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldIntoConv(op), apply_recursively=False).rewrite_module(op)
