"""fuse-epilogue: fold element-wise copy nests into the epilogue of the nest producing their input.

Runs after convert-nn-to-nest (graph-level fusion of the llvm pipeline). A copy nest whose operand
is the single-use result of another nest (mac/max/avg, or an element-wise copy such as a batch norm
before a ReLU), read with the identity map, becomes more epilogue steps of that producer; the
copy's other operands become epilogue inputs, their maps composed with the producer's out_map.
`add`/`mul` whose *second* operand is the producer (a residual add written `other + conv`) fuse
too, by commutativity, when they are the copy's first step.

    %c = nest.compute %x, %w {name = "conv", ..., epilogue = []}
    %r = nest.compute %c {name = "relu", combiner = "copy", epilogue = ["relu"]}
  ==>
    %r = nest.compute %x, %w {name = "conv", ..., epilogue = ["relu"]}
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from nasir.dialects import nest
from nasir.dialects.shapes import shape_of

COMMUTATIVE = ("add", "mul")


def _producer(copy: nest.ComputeOp, k: int) -> nest.ComputeOp | None:
    """The fusable producer of input k of `copy`: a single-use nest read as-is (a conv, gemm or
    pool, or an element-wise copy nest such as a batch norm that no conv absorbed: its ReLU joins
    it, one pass over the tensor instead of two)."""
    value = copy.inputs[k]
    prod = value.owner
    rank = len(shape_of(copy.result))
    if (not isinstance(prod, nest.ComputeOp) or not value.has_one_use()
            or shape_of(value) != shape_of(copy.result) or copy.access_maps[k] != AffineMap.identity(rank)):
        return None
    return prod


class FuseIntoProducer(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nest.ComputeOp, rewriter: PatternRewriter):
        rank = len(shape_of(op.result))
        if op.kind != "copy" or op.output_map != AffineMap.identity(rank):
            return
        steps = op.steps
        src = 0
        prod = _producer(op, 0)
        if prod is None and steps and steps[0][0] in COMMUTATIVE and steps[0][1]:
            src = steps[0][1][0]
            prod = _producer(op, src)
        if prod is None:
            return
        # The copy's operand `src` is the producer's value; every other operand becomes an
        # epilogue input of the producer (input 0 too when src != 0, for the swapped first step).
        others = [k for k in range(len(op.inputs)) if k != src]
        index = {k: len(prod.inputs) + i for i, k in enumerate(others)}
        new_steps = []
        for i, (kind, refs, params) in enumerate(steps):
            if i == 0 and src != 0:
                refs = [0]
            new_steps.append(nest.format_step(kind, [index[r] for r in refs], params))
        out_map = prod.output_map
        maps = prod.access_maps + [op.access_maps[k].compose(out_map) for k in others]
        fused = nest.ComputeOp.make(
            prod.layer_name, [*prod.inputs, *(op.inputs[k] for k in others)], prod.domain, maps, out_map,
            shape_of(op.result), prod.kind, [s.data for s in prod.epilogue.data] + new_steps,
            prod.get_schedule() if prod.schedule is not None else None)
        rewriter.replace(op, fused)
        rewriter.erase(prod)


class FuseEpiloguePass(ModulePass):
    """Fold relu/clip/.../residual-add copy nests into the producing conv/gemm/pool nest (or the
    element-wise nest before them: a batch norm no conv absorbed takes its ReLU)."""

    name = "fuse-epilogue"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseIntoProducer()).rewrite_module(op)
