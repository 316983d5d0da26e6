"""Static capacity properties (alphaNAS, Jin et al.): mixing and depth, read off the IR for free.

An analysis beside Fisher Potential (`nasir.fisher`): where Fisher needs data and a
backward pass, these properties need only the nest access maps, so they serve as a pre-filter
(`properties_at_least`) before the costlier check. They cannot see widths: a group or bottleneck
factor keeps the mixing of a conv, so quantitative changes still need Fisher Potential.

**Mixing** of an op is a matrix over (input axis, output axis) pairs with values
x (no dependence) < o (one-to-one) < m (many-to-one: a window) < a (all-to-one). For a nest it is
read from the maps: with S = dims of the input's index expression on axis i and T = dims of the
output's index on axis j,
- S and T share a dim: `o` if S lies inside T (plain, strided or shifted copies), else `m` (a
  reduction dim also moves the index: a spatial window, or the channels of one group);
- S is all reduction dims and the contraction is tied to axis j (a weight indexed by dims of both,
  or i == j as in a global pool): `a`;
- otherwise `x`.
So a 3x3 conv mixes channels `a` and space `m`, a grouped conv channels `m`, a depthwise conv
channels `o`. Along the graph the matrices compose as a product in the semiring
(max as +, and "x if either is x, else the larger" as times), starting from the identity
(`o` on the diagonal) at the graph input.

**Depth** is the longest alternation of linear ops (mac, avg, batch-norm, add) and non-linear ops
(activations, max pooling, products of activations) on any path: each change of kind counts one.

    nasir-opt net.mlir -p convert-nn-to-nest,print-capacity     # a table, IR unchanged
    ok, reason = properties_at_least(candidate, original)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from nasir.dialects import affine, nest, nn
from nasir.dialects.module import main_func
from nasir.dialects.shapes import shape_of
from nasir.errors import PassError

LEVELS = "xoma"
Matrix = list[list[str]]


def compose(a: str, b: str) -> str:
    """Mixing through two ops in sequence: x if either is x, else the stronger one."""
    return "x" if "x" in (a, b) else max(a, b, key=LEVELS.index)


def join(a: str, b: str) -> str:
    return max(a, b, key=LEVELS.index)


def product(first: Matrix, second: Matrix) -> Matrix:
    """Semiring matrix product: rows of `first` (its inputs) to columns of `second` (its outputs)."""
    cols = len(second[0]) if second else 0
    out = [["x"] * cols for _ in first]
    for i, row in enumerate(first):
        for k, level in enumerate(row):
            if level != "x":
                for j in range(cols):
                    out[i][j] = join(out[i][j], compose(level, second[k][j]))
    return out


def identity(rank: int) -> Matrix:
    return [["o" if i == j else "x" for j in range(rank)] for i in range(rank)]


def nest_mixing(op: nest.ComputeOp, k: int) -> Matrix:
    """Mixing from input `k` of a nest to its output (see the module docstring)."""
    dims = op.domain.dim_names
    red = {name for name, _ in op.domain.reduction}
    names = lambda expr: {dims[p] for p in affine.used_dims(expr)}  # noqa: E731
    ins = [names(e) for e in op.access_maps[k].results]
    outs = [names(e) for e in op.output_map.results]
    others = [set().union(*map(names, m.results)) for q, m in enumerate(op.access_maps) if q != k]
    matrix = [["x"] * len(outs) for _ in ins]
    for i, s in enumerate(ins):
        for j, t in enumerate(outs):
            if s & t:
                matrix[i][j] = "o" if s <= t else "m"
            elif s and s <= red and (i == j and len(ins) == len(outs) or any(s & o and t & o for o in others)):
                matrix[i][j] = "a"
    return matrix


def _reshape_mixing(src: tuple[int, ...], dst: tuple[int, ...]) -> Matrix:
    """A reshape moves each element once: `o` between axes whose strides ranges [stride, stride*size)
    overlap (a size-1 axis counts as [stride, stride + 1), so flattening N x C x 1 x 1 keeps H, W)."""
    def spans(shape):
        out, stride = [], 1
        for size in reversed(shape):
            out.append((stride, max(stride * size, stride + 1)))
            stride *= size
        return out[::-1]

    return [["o" if lo < hi2 and lo2 < hi else "x" for lo2, hi2 in spans(dst)] for lo, hi in spans(src)]


def op_mixing(op: Operation, operand: int) -> Matrix:
    """Mixing from operand `operand` of any op of @main to its result."""
    src, dst = shape_of(op.operands[operand]), shape_of(op.results[0])
    if isinstance(op, nest.ComputeOp):
        return nest_mixing(op, operand)
    if isinstance(op, nn.ReshapeOp):
        return _reshape_mixing(src, dst)
    if isinstance(op, (nn.BatchNormOp, nn.ConcatOp, nn.UnaryOp, nn.BinaryOp)) and len(src) == len(dst):
        matrix = identity(len(src))
        if isinstance(op, nn.SoftmaxBase):
            axis = op.properties["axis"].value.data % len(src) if "axis" in op.properties else len(src) - 1
            matrix[axis][axis] = "a"
        return matrix
    return [["a"] * len(dst) for _ in src]  # unknown structure: assume everything mixes


LINEAR_STEPS = {"add", "sub", "scale"}
KEPT_NN = (nn.BatchNormOp, nn.ReshapeOp, nn.ConcatOp, nn.SoftmaxBase, nn.LRNOp, nn.PadOp)
"""nn ops that stay nn ops after convert-nn-to-nest (analysed here directly)."""


def op_kinds(op: Operation) -> list[str]:
    """The linear ("L") / non-linear ("N") stages an op applies, in order; [] for pure data movement."""
    if isinstance(op, nest.ComputeOp):
        kinds = {"mac": ["L"], "avg": ["L"], "max": ["N"], "copy": []}[op.kind]
        for kind, refs, _ in op.steps:
            weight = bool(refs) and isinstance(op.inputs[refs[0]].owner, nn.WeightOp)
            kinds.append("L" if kind in LINEAR_STEPS or (kind in ("mul", "div") and weight) else "N")
        return kinds
    if isinstance(op, (nn.BatchNormOp, nn.AddOp, nn.SubOp, nn.ReduceOp)):
        return ["L"]
    if isinstance(op, (nn.ReshapeOp, nn.ConcatOp, nn.TransposeOp, nn.PadOp, nn.SliceOp, nn.ExpandOp)):
        return []
    return ["N"]


@dataclass
class Properties:
    """Mixing of the network (graph input axes x output axes), its depth, and per-op rows."""

    mixing: Matrix
    depth: int
    rows: list[tuple[str, str, Matrix, list[str]]]  # (layer, op name, mixing from input 0, kinds)

    def __str__(self) -> str:
        def fmt(m: Matrix) -> str:
            return "/".join("".join(row) for row in m)

        width = max([len(r[0]) for r in self.rows] + [5])
        lines = [f"{'layer':<{width}}  {'op':<16} {'mixing (in axis rows)':<24} kinds"]
        for layer, name, mixing, kinds in self.rows:
            lines.append(f"{layer:<{width}}  {name:<16} {fmt(mixing):<24} {''.join(kinds) or '-'}")
        lines.append(f"network mixing {fmt(self.mixing)}  depth {self.depth}")
        return "\n".join(lines)


def analyse(module: ModuleOp) -> Properties:
    """Mixing and depth of `@main` (first input to first output), read from its nests: nn ops other
    than those convert-nn-to-nest keeps must have been converted."""
    unconverted = next((op for op in module.walk() if isinstance(op, nn.NNOp) and not isinstance(op, KEPT_NN)), None)
    if unconverted is not None:
        raise PassError(f"print-capacity reads nests: run convert-nn-to-nest before it ('{unconverted.name}' is left)")
    fn = main_func(module)
    block = fn.body.block
    first = block.args[0]
    mixing: dict[SSAValue, Matrix] = {first: identity(len(shape_of(first)))}
    depth: dict[SSAValue, dict[str, int]] = {arg: {"": 0} for arg in block.args}
    rows = []
    for op in block.ops:
        if isinstance(op, (nn.WeightOp, func.ReturnOp)):
            continue
        acts = [k for k, v in enumerate(op.operands) if not isinstance(v.owner, nn.WeightOp)]
        result = op.results[0]
        reached = [k for k in acts if op.operands[k] in mixing]
        if reached:
            rank = len(shape_of(result))
            total = [["x"] * rank for _ in mixing[first]]
            for k in reached:
                step = product(mixing[op.operands[k]], op_mixing(op, k))
                total = [[join(a, b) for a, b in zip(r1, r2)] for r1, r2 in zip(total, step)]
            mixing[result] = total
        kinds = op_kinds(op)
        states: dict[str, int] = {}
        for k in acts:
            for last, count in depth.get(op.operands[k], {"": 0}).items():
                for kind in kinds:
                    if kind != last:
                        count, last = count + 1, kind
                states[last] = max(states.get(last, 0), count)
        depth[result] = states or {"": 0}
        rows.append((getattr(op, "layer_name", "") or op.name, op.name,
                     op_mixing(op, acts[0]) if acts else [], kinds))
    out = block.last_op.operands[0]
    if out not in mixing:
        raise PassError("print-capacity: the first output does not depend on the first input")
    return Properties(mixing[out], max(depth[out].values()), rows)


def properties_at_least(candidate: ModuleOp, original: ModuleOp | Properties) -> tuple[bool, str]:
    """Whether `candidate` mixes at least as much as `original` on every axis pair and is as deep
    (both at the nest level; `original` may be given analysed, as a search checks many candidates
    against it)."""
    cand = analyse(candidate)
    orig = original if isinstance(original, Properties) else analyse(original)
    for i, (rc, ro) in enumerate(zip(cand.mixing, orig.mixing)):
        for j, (c, o) in enumerate(zip(rc, ro)):
            if LEVELS.index(c) < LEVELS.index(o):
                return False, f"mixing from input axis {i} to output axis {j} drops from '{o}' to '{c}'"
    if cand.depth < orig.depth:
        return False, f"depth drops from {orig.depth} to {cand.depth}"
    return True, f"mixing and depth ({cand.depth}) at least the original's"

