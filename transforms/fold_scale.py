"""fold-scale: a contraction's first epilogue `mul` by a per-output-channel weight folded into its
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

A conv's bias before it (`["add 2", "mul 3", ...]`) is scaled too: `(acc + b) * s = acc * s + b * s`.

Runs on nests after fuse-epilogue: a `mac` nest whose first epilogue step other than an `add` of
weights is a `mul` by a weight, read at an index of the conv weight's and of each of those adds'
(each axis it reads read as one of theirs). Without weights (an IR file printed without them) it
leaves the nest as it is. Meaning is kept up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, weights_of
from nasir.dialects.shapes import shape_of
from nasir.transforms.fold_batch_norm import drop_if_unused, weight_array


def _spread(s: np.ndarray, s_reads, reads, shape: tuple[int, ...]) -> np.ndarray | None:
    """`s`, read at `s_reads`, shaped to multiply an array of `shape` read at `reads`; None unless
    each of its axes is read as one of that array's (of the same extent)."""
    axes = [next((a for a, e in enumerate(reads) if e == f), None) for f in s_reads]
    if None in axes or len(set(axes)) != len(axes) or any(s.shape[i] != shape[a] for i, a in enumerate(axes)):
        return None
    order = sorted(range(len(axes)), key=axes.__getitem__)  # s's axes in the order of the array's
    return np.transpose(s, order).reshape([shape[a] if a in axes else 1 for a in range(len(shape))])


def scaled_inputs(op: nest.ComputeOp, store: WeightStore) -> tuple[dict[int, np.ndarray], int] | None:
    """The inputs the first `mul` of `op`'s epilogue scales, by index, each array times the `mul`'s
    (input 1, the weight, and the `add`s before the `mul`: `(acc + b) * s = acc * s + b * s`), and
    the `mul`'s step; None where a step before it is no `add` of a weight, the `mul`'s weight is not
    read at an index of each of theirs, or a step after it reads one of them."""
    steps = op.steps
    first = next((j for j, (kind, _, _) in enumerate(steps) if kind != "add"), None)
    if op.kind != "mac" or first is None or steps[first][0] != "mul":
        return None
    k = steps[first][1][0]
    s, maps = weight_array(store, op.inputs[k]), op.access_maps
    scaled: dict[int, np.ndarray] = {}
    for i in [1] + [steps[j][1][0] for j in range(first)]:
        a = weight_array(store, op.inputs[i])
        spread = None if a is None or s is None or i in (0, k) else _spread(s, maps[k].results, maps[i].results, a.shape)
        if spread is None or any(i in refs for _, refs, _ in steps[first + 1:]):
            return None
        scaled[i] = a * spread
    return scaled, first


@dataclass(eq=False)
class FoldIntoWeights(RewritePattern):
    """A nest with its first `mul` folded into the inputs it scales (`scaled_inputs`); the walker
    visits the result again, so a second such `mul` folds too."""

    module: ModuleOp

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nest.ComputeOp, rewriter: PatternRewriter):
        store = weights_of(self.module)
        found = scaled_inputs(op, store)
        if found is None:
            return
        scaled, first = found
        weights = {i: nn.WeightOp.make(store.add(f"{op.inputs[i].owner.key}.scaled", a.astype(np.float32)), a.shape)
                   for i, a in scaled.items()}
        k = op.steps[first][1][0]
        steps = op.steps[:first] + op.steps[first + 1:]
        keep = [i for i in range(len(op.inputs)) if i != k or any(k in refs for _, refs, _ in steps)]
        index = {i: j for j, i in enumerate(keep)}
        inputs = [weights[i].result if i in weights else op.inputs[i] for i in keep]
        folded = nest.ComputeOp.make(
            op.layer_name, inputs, op.domain, [op.access_maps[i] for i in keep], op.output_map, shape_of(op.result),
            op.kind, [nest.format_step(kind, [index[r] for r in refs], params) for kind, refs, params in steps],
            op.get_schedule() if op.schedule is not None else None)
        folded.attributes.update(op.attributes)
        old = [op.inputs[i] for i in (*weights, k)]
        rewriter.replace(op, [*weights.values(), folded])
        drop_if_unused(rewriter, old)


class FoldScalePass(ModulePass):
    """Fold a contraction's first epilogue `mul` by a weight read per output channel into its
    weight and the bias added before it (an unfolded batch norm's scale)."""

    name = "fold-scale"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldIntoWeights(op)).rewrite_module(op)
