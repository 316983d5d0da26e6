"""convert-nn-to-nest: turn the heavy and element-wise nn ops into `nest.compute` loop nests.

Sits between the graph passes on the nn dialect (fold-batch-norm, ...) and everything that works on
nests (architecture and schedule transforms, the backends). Ops that are not loop nests by nature
stay nn ops and are run by the backends directly: nn.batch_norm (kept distinct for training-mode
Fisher Potential; `lower-batch-norm` turns it into a nest when wanted), nn.concat, nn.reshape,
nn.softmax, nn.lrn, nn.weight, and nn.pad with a non-zero value.

Each op's domain and maps come from `nasir.dialects.nest_maps` (its docstring: the dim names
architecture transforms rely on).

A 3x3 conv, stride 2, pads [1, 1, 0, 0] with bias:

    %y = nest.compute %x, %w, %b {name = "conv1",
        domain = #nest.domain<[n = 1, co = 8, oh = 4, ow = 4], [ci = 3, kh = 3, kw = 3]>,
        maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, ((d2 * 2) + d5) + -1, ...)>, ...],
        out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>,
        combiner = "mac", epilogue = ["add 2"]} : (...) -> tensor<1x8x4x4xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineExpr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from nasir.dialects import nest, nn
from nasir.dialects.module import weights_of
from nasir.dialects.nest_maps import (
    Window,
    amap,
    broadcast_map,
    conv_nest,
    dims_of,
    elementwise_domain,
    identity,
    pool_nest,
)
from nasir.dialects.shapes import broadcast_shapes, shape_of

# --- patterns ----------------------------------------------------------------------------------

class LayerNames:
    """Hands out nest names: the nn op's layer name, or a fresh `<kind>_<k>` unique in the module."""

    def __init__(self, module: ModuleOp):
        self.taken = {op.layer_name for op in module.walk() if isinstance(op, (nn.NNOp, nest.ComputeOp))}
        self.counter = 0

    def __call__(self, op: nn.NNOp) -> str:
        if op.layer_name:
            return op.layer_name
        kind = op.name.split(".")[1]
        while f"{kind}_{self.counter}" in self.taken:
            self.counter += 1
        name = f"{kind}_{self.counter}"
        self.taken.add(name)
        return name


@dataclass(eq=False)
class NestPattern(RewritePattern):
    module: ModuleOp
    names: LayerNames


def _ints(attr) -> tuple[int, ...]:
    return tuple(attr.get_values())


class ConvToNest(NestPattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.Conv2DOp, rewriter: PatternRewriter):
        out = shape_of(op.result)
        pt, pl, _, _ = _ints(op.pads)
        geo = Window(_ints(op.strides), _ints(op.dilations), (pt, pl))
        domain, maps, out_map = conv_nest(shape_of(op.operands[0]), shape_of(op.operands[1]), out[2:],
                                          op.groups.value.data, geo)
        has_bias = len(op.operands) == 3
        rewriter.replace(op, nest.ComputeOp.make(
            self.names(op), list(op.operands), domain, maps[:len(op.operands)], out_map, out,
            "mac", ["add 2"] if has_bias else []))


class GemmToNest(NestPattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.GemmOp, rewriter: PatternRewriter):
        a, b = op.operands[0], op.operands[1]
        m, n = shape_of(op.result)
        k = shape_of(a)[0] if op.trans_a.value.data else shape_of(a)[1]
        domain = nest.DomainAttr.make([("m", m), ("n", n)], [("k", k)])
        d = dims_of(domain.dim_names)
        maps = [amap(3, [d["k"], d["m"]] if op.trans_a.value.data else [d["m"], d["k"]]),
                amap(3, [d["n"], d["k"]] if op.trans_b.value.data else [d["k"], d["n"]])]
        name = self.names(op)
        alpha, beta = op.alpha.value.data, op.beta.value.data
        steps = [] if alpha == 1.0 else [nest.format_step("scale", params=[alpha])]
        inputs, new_ops = [a, b], []
        if len(op.operands) == 3 and beta != 0.0:
            c = op.operands[2]
            if beta != 1.0:
                c, new_ops = self._scaled(c, beta, name)
            inputs.append(c)
            maps.append(broadcast_map(shape_of(c), [d["m"], d["n"]], (m, n), 3))
            steps.append("add 2")
        new_ops.append(nest.ComputeOp.make(name, inputs, domain, maps, amap(3, [d["m"], d["n"]]), (m, n),
                                           "mac", steps))
        rewriter.replace(op, new_ops)

    def _scaled(self, c: SSAValue, beta: float, name: str) -> tuple[SSAValue, list[Operation]]:
        """beta * C: a pre-scaled weight when C is one, else a copy nest with `scale beta`."""
        shape = shape_of(c)
        if isinstance(c.owner, nn.WeightOp):
            store = weights_of(self.module)
            key = store.add(f"{c.owner.key}.scaled", np.asarray(store[c.owner.key] * np.float32(beta), np.float32))
            w = nn.WeightOp.make(key, shape)
            return w.result, [w]
        domain = elementwise_domain(shape)
        copy = nest.ComputeOp.make(f"{name}.beta", [c], domain, [identity(len(shape))], identity(len(shape)),
                                   shape, "copy", [nest.format_step("scale", params=[beta])])
        return copy.result, [copy]


class MatMulToNest(NestPattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.MatMulOp, rewriter: PatternRewriter):
        a, b = (shape_of(v) for v in op.operands)
        out = shape_of(op.result)
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        batch = broadcast_shapes(a2[:-2], b2[:-2])
        par = [(f"b{i}", e) for i, e in enumerate(batch)]
        if len(a) > 1:
            par.append(("m", a2[-2]))
        if len(b) > 1:
            par.append(("n", b2[-1]))
        domain = nest.DomainAttr.make(par, [("k", a2[-1])])
        d = dims_of(domain.dim_names)
        nd = len(domain.dim_names)
        bdims = [d[f"b{i}"] for i in range(len(batch))]
        amap_ = broadcast_map(a2[:-2], bdims, batch, nd).results
        bmap_ = broadcast_map(b2[:-2], bdims, batch, nd).results
        maps = [amap(nd, [*amap_, d["m"], d["k"]] if len(a) > 1 else [d["k"]]),
                amap(nd, [*bmap_, d["k"], d["n"]] if len(b) > 1 else [d["k"]])]
        out_map = amap(nd, [d[name] for name, _ in par])
        rewriter.replace(op, nest.ComputeOp.make(self.names(op), list(op.operands), domain, maps, out_map,
                                                    out, "mac"))


class PoolToNest(NestPattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        if not isinstance(op, (nn.MaxPoolOp, nn.AvgPoolOp)):
            return
        x = op.operands[0]
        out = shape_of(op.result)
        pads = _ints(op.pads)
        dil = _ints(op.dilations) if isinstance(op, nn.MaxPoolOp) else (1, 1)
        name = self.names(op)
        new_ops: list[Operation] = []
        if isinstance(op, nn.AvgPoolOp) and op.count_include_pad.value.data and any(pads):
            # Padding counts in the divisor: make it real (zeros), then average without pads.
            n, c, h, w = shape_of(x)
            padded = (n, c, h + pads[0] + pads[2], w + pads[1] + pads[3])
            dom = elementwise_domain(padded)
            dd = dims_of(dom.dim_names)
            pad = nest.ComputeOp.make(f"{name}.pad", [x], dom, [amap(4, [dd["n"], dd["c"], dd["h"] - pads[0],
                                                                          dd["w"] - pads[1]])],
                                      identity(4), padded, "copy")
            new_ops.append(pad)
            x, pads = pad.result, (0, 0, 0, 0)
        geo = Window(_ints(op.strides), dil, (pads[0], pads[1]))
        domain, in_map, out_map = pool_nest(shape_of(x), out[2:], _ints(op.kernel), geo)
        kind = "max" if isinstance(op, nn.MaxPoolOp) else "avg"
        new_ops.append(nest.ComputeOp.make(name, [x], domain, [in_map], out_map, out, kind))
        rewriter.replace(op, new_ops)


class GlobalPoolToNest(NestPattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        if not isinstance(op, (nn.GlobalAvgPoolOp, nn.GlobalMaxPoolOp)):
            return
        n, c, h, w = shape_of(op.operands[0])
        domain = nest.DomainAttr.make([("n", n), ("c", c)], [("kh", h), ("kw", w)])
        d = dims_of(domain.dim_names)
        kind = "max" if isinstance(op, nn.GlobalMaxPoolOp) else "avg"
        rewriter.replace(op, nest.ComputeOp.make(
            self.names(op), [op.operands[0]], domain, [amap(4, [d["n"], d["c"], d["kh"], d["kw"]])],
            amap(4, [d["n"], d["c"], 0, 0]), shape_of(op.result), kind))


def elementwise_step(op: Operation) -> str | None:
    """The epilogue step of an element-wise nn op (`nn.UnaryOp.STEP` with its `PARAMS`, `BinaryOp.STEP`
    on input 1), "" for nn.expand (a plain broadcasting copy), None for any other op."""
    if isinstance(op, nn.UnaryOp) and op.STEP:
        return nest.format_step(op.STEP, params=[op.properties[p].value.data for p in op.PARAMS])
    if isinstance(op, nn.BinaryOp) and op.STEP:
        return nest.format_step(op.STEP, operands=[1])
    return "" if isinstance(op, nn.ExpandOp) else None


class ElementwiseToNest(NestPattern):
    """Element-wise nn ops and nn.expand: a copy nest of operand 0 (broadcast operands read size-1
    axes at index 0) plus the op's one epilogue step."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        step = elementwise_step(op)
        if step is None:
            return
        out = shape_of(op.result)
        domain = elementwise_domain(out)
        d = [AffineExpr.dimension(i) for i in range(len(out))]
        maps = [broadcast_map(shape_of(v), d, out, len(out)) for v in op.operands]
        rewriter.replace(op, nest.ComputeOp.make(self.names(op), list(op.operands), domain, maps,
                                                    identity(len(out)), out, "copy", [step] if step else []))


class SliceToNest(NestPattern):
    """A slice: a copy nest reading input index `start + step * i` (Split, runtime Slice, and the
    edges of reflect and edge padding come here)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.SliceOp, rewriter: PatternRewriter):
        out = shape_of(op.result)
        reads = [AffineExpr.dimension(i) * st + b for i, (b, st) in enumerate(zip(_ints(op.starts), _ints(op.steps)))]
        rewriter.replace(op, nest.ComputeOp.make(self.names(op), [op.operands[0]], elementwise_domain(out),
                                                    [amap(len(out), reads)], identity(len(out)), out, "copy"))


class ReduceToNest(NestPattern):
    """ReduceMean / ReduceSum: an `avg` nest whose reduction dims `r<axis>` walk the reduced axes
    (the output keeps them as size-1 parallel dims, as a global pool does); a sum is the mean
    times the count (`scale N`).

        nn.reduce_sum %x {axes = [1]} : 2x3x4 -> 2x1x4  ->
          domain [i0 = 2, i1 = 1, i2 = 4], [r1 = 3]; map (d0, d1, d2, d3) -> (d0, d3, d2); "avg", ["scale 3.0"]
    """

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter):
        if not isinstance(op, nn.ReduceOp):
            return
        src, out = shape_of(op.operands[0]), shape_of(op.result)
        axes = _ints(op.axes)
        par = elementwise_domain(out).parallel
        domain = nest.DomainAttr.make(par, [(f"r{a}", src[a]) for a in axes])
        nd = len(domain.dim_names)
        reduced = {a: AffineExpr.dimension(len(out) + k) for k, a in enumerate(axes)}
        read = amap(nd, [reduced.get(a, AffineExpr.dimension(a)) for a in range(len(src))])
        count = int(np.prod([src[a] for a in axes]))
        steps = [nest.format_step("scale", params=[count])] if isinstance(op, nn.ReduceSumOp) else []
        rewriter.replace(op, nest.ComputeOp.make(self.names(op), [op.operands[0]], domain, [read],
                                                    amap(nd, [AffineExpr.dimension(a) for a in range(len(out))]),
                                                    out, "avg", steps))


class TransposeToNest(NestPattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.TransposeOp, rewriter: PatternRewriter):
        perm = _ints(op.perm)
        out = shape_of(op.result)
        reads: list[AffineExpr | int] = [0] * len(perm)
        for i, p in enumerate(perm):
            reads[p] = AffineExpr.dimension(i)
        rewriter.replace(op, nest.ComputeOp.make(self.names(op), [op.operands[0]], elementwise_domain(out),
                                                    [amap(len(out), reads)], identity(len(out)), out, "copy"))


class PadToNest(NestPattern):
    """Zero padding: a copy nest reading at shifted indices (out-of-bounds reads are 0)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.PadOp, rewriter: PatternRewriter):
        if op.value.value.data != 0.0:
            return
        out = shape_of(op.result)
        pads = _ints(op.pads)
        reads = [AffineExpr.dimension(i) - pads[i] for i in range(len(out))]
        rewriter.replace(op, nest.ComputeOp.make(self.names(op), [op.operands[0]], elementwise_domain(out),
                                                    [amap(len(out), reads)], identity(len(out)), out, "copy"))


class ConvertNnToNestPass(ModulePass):
    """Lower conv/gemm/matmul/pools/reductions/element-wise/expand/transpose/pad/slice nn ops to nest.compute."""

    name = "convert-nn-to-nest"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        names = LayerNames(op)
        patterns = [cls(op, names) for cls in (ConvToNest, GemmToNest, MatMulToNest, PoolToNest,
                                               GlobalPoolToNest, ElementwiseToNest, TransposeToNest, PadToNest,
                                               SliceToNest, ReduceToNest)]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns), apply_recursively=False).rewrite_module(op)
