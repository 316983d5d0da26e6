"""fold-scale: a contraction's leading epilogue `mul` by a per-output-channel weight folded into its
weight, for inference.

A batch norm that reaches the nest level unfolded (a model converted to nests before
fold-batch-norm, as every architecture transform's pipeline does) becomes, after fuse-epilogue, a
`mul k` and an `add` in the conv's epilogue: one multiply per output point, beside the few
multiply-adds of a depthwise conv. By distributivity `(sum of x * w) * s = sum of x * (w * s)` when
`s` is read at an index of `w`'s own (`s[co]` beside `w[co, ...]`), so the multiply moves into a
new weight-store entry `w * s` (the old arrays are never changed):

    %w = nn.weight {name = "c.w"} : tensor<64x1x3x3xf32>
    %s = nn.weight {name = "bn.scale"} : tensor<64xf32>
    %y = nest.compute %x, %w, %s, %t {name = "c", domain = #nest.domain<[n = 1, g = 64, co = 1, oh = 32, ow = 32], [kh = 3, kw = 3]>,
        maps = [..., (n, g, co, oh, ow, kh, kw) -> (g + co, 0, kh, kw), (...) -> (g + co), (...) -> (g + co)],
        combiner = "mac", epilogue = ["mul 2", "add 3", "relu"]}
  ==>
    %w2 = nn.weight {name = "c.w.scaled"} : tensor<64x1x3x3xf32>
    %y = nest.compute %x, %w2, %t {name = "c", ..., maps = [..., (...) -> (g + co, 0, kh, kw), (...) -> (g + co)],
        combiner = "mac", epilogue = ["add 2", "relu"]}

Runs on nests after fuse-epilogue: a `mac` nest whose input 1 and the `mul`'s input are weights of
the store, each axis the `mul` reads indexed as one of input 1's axes. Without weights (an IR file
printed without them) it leaves the nest as it is. Meaning is kept up to float rounding.
"""

from __future__ import annotations

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, weights_of
from nasir.dialects.shapes import shape_of


def _array(store: WeightStore, value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return store.get(owner.key) if isinstance(owner, nn.WeightOp) else None


def scaled_weight(op: nest.ComputeOp, store: WeightStore) -> tuple[np.ndarray, int] | None:
    """Input 1's array times the leading `mul`'s, and that `mul`'s input; None when the nest has no
    such step, or the step's weight is not read at an index of input 1's."""
    steps = op.steps
    if op.kind != "mac" or len(op.inputs) < 3 or not steps or steps[0][0] != "mul":
        return None
    k = steps[0][1][0]
    w, s = _array(store, op.inputs[1]), _array(store, op.inputs[k])
    if k < 2 or w is None or s is None:
        return None
    w_axes, s_axes = op.access_maps[1].results, op.access_maps[k].results
    axes = [next((a for a, e in enumerate(w_axes) if e == f), None) for f in s_axes]
    if None in axes or len(set(axes)) != len(axes) or any(s.shape[i] != w.shape[a] for i, a in enumerate(axes)):
        return None
    order = sorted(range(len(axes)), key=axes.__getitem__)  # s's axes in the order of w's
    shape = [1] * w.ndim
    for a in axes:
        shape[a] = w.shape[a]
    return np.transpose(s, order).reshape(shape) * w, k


def fold(op: nest.ComputeOp, store: WeightStore) -> nest.ComputeOp | None:
    """`op` with its leading `mul` folded into its weight (`scaled_weight`), in its place; None
    where it has none to fold."""
    found = scaled_weight(op, store)
    if found is None:
        return None
    scaled, k = found
    weight = nn.WeightOp.make(store.add(f"{op.inputs[1].owner.key}.scaled", scaled.astype(np.float32)), scaled.shape)
    steps = op.steps[1:]
    keep = [i for i in range(len(op.inputs)) if i != k or any(k in refs for _, refs, _ in steps)]
    index = {i: j for j, i in enumerate(keep)}
    inputs = [weight.result if i == 1 else op.inputs[i] for i in keep]
    folded = nest.ComputeOp.make(
        op.layer_name, inputs, op.domain, [op.access_maps[i] for i in keep], op.output_map, shape_of(op.result),
        op.kind, [nest.format_step(kind, [index[r] for r in refs], params) for kind, refs, params in steps],
        op.get_schedule() if op.schedule is not None else None)
    folded.attributes.update(op.attributes)
    op.parent_block().insert_op_before(weight, op)
    old = op.inputs[1], op.inputs[k]
    Rewriter.replace_op(op, folded)
    for value in old:
        if isinstance(value.owner, nn.WeightOp) and not value.uses:
            Rewriter.erase_op(value.owner)
    return folded


class FoldScalePass(ModulePass):
    """Fold a contraction's leading epilogue `mul` by a weight read per output channel into its
    weight (an unfolded batch norm's scale)."""

    name = "fold-scale"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        store = weights_of(op)
        for compute in [o for o in op.walk() if isinstance(o, nest.ComputeOp)]:
            while compute is not None:  # a second leading `mul` folds too
                compute = fold(compute, store)
