"""default-schedule: give every nest without a schedule a first sensible one for the CPU.

Runs on nest IR before nest-bufferize. The schedule is data (see `nest.Schedule`) that
convert-nest-to-loops reads; the performance work replaces this pass, not the lowering:

- the vector loop is a parallel dim that is contiguous in the output (stride 1), split by the
  target's vector width (16 floats with AVX-512) when longer, and placed innermost;
- the other parallel dims come first in domain order, then the reduction dims;
- for contractions (`mac`) a register tile: a parallel dim that input 0 does not read (conv's
  `co`) is split by 8, 4 or 2 (a divisor) and its inner loop fully unrolled inside the reduction
  loops, so each vector of input 0 feeds several accumulators;
- the first outer loop with more than one iteration is the thread-parallel loop.

    domain = #nest.domain<[n = 1, co = 16, oh = 32, ow = 32], [ci = 3, kh = 3, kw = 3]>
    -> schedule = {splits = [["ow", 16]], order = ["n", "co", "oh", "ow.o", "ci", "kh", "kw", "ow.i"],
                   vector = "ow.i", parallel = "co"}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind, AffineConstantExpr, AffineDimExpr, AffineExpr
from xdsl.passes import ModulePass

from nasir.dialects import nest
from nasir.dialects.nest import Schedule
from nasir.dialects.nn import shape_of


def linear_coefficient(expr: AffineExpr, dim: int) -> int | None:
    """Coefficient of d`dim` in an affine expression, None if it appears under floordiv/mod."""
    if isinstance(expr, AffineDimExpr):
        return int(expr.position == dim)
    if isinstance(expr, AffineConstantExpr):
        return 0
    assert isinstance(expr, AffineBinaryOpExpr)
    lhs, rhs = linear_coefficient(expr.lhs, dim), linear_coefficient(expr.rhs, dim)
    if lhs is None or rhs is None:
        return None
    if expr.kind == AffineBinaryOpKind.Add:
        return lhs + rhs
    if expr.kind == AffineBinaryOpKind.Mul:
        const = expr.rhs if isinstance(expr.rhs, AffineConstantExpr) else expr.lhs
        coef = lhs if isinstance(expr.rhs, AffineConstantExpr) else rhs
        return coef * const.value if isinstance(const, AffineConstantExpr) else None
    return None if lhs or rhs else 0


def stride_of(amap, shape, dim: int) -> int | None:
    """Elements moved in a row-major buffer of `shape` per step of d`dim` through `amap`."""
    total = 0
    for a, e in enumerate(amap.results):
        c = linear_coefficient(e, dim)
        if c is None:
            return None
        total += c * math.prod(shape[a + 1:])
    return total


@dataclass
class NestShape:
    """What the default schedule looks at: a nest's domain, maps and buffer shapes."""

    dims: list[tuple[str, int]]
    npar: int
    maps: list
    out_map: object
    in_shapes: list[tuple[int, ...]]
    out_shape: tuple[int, ...]
    combiner: str


def schedule_for(n, width: int | None = None) -> Schedule:
    """The default schedule of a nest (anything with NestShape's fields)."""
    if width is None:
        from nasir.lowering.llvm_target import host_target

        width = host_target().vector_width
    par = n.dims[: n.npar]
    vec = None
    for pos, (name, extent) in enumerate(par):
        if extent > 1 and stride_of(n.out_map, n.out_shape, pos) == 1 and all(
                stride_of(m, s, pos) is not None for m, s in zip(n.maps, n.in_shapes)):
            vec = (name, extent)
    sched = Schedule()
    loops = [name for name, _ in par]
    if vec is not None:
        name, extent = vec
        if extent > width:
            sched.splits = [(name, width)]
            loops[loops.index(name)] = f"{name}.o"
            sched.vector = f"{name}.i"
        else:
            loops.remove(name)
            sched.vector = name
    tile = []
    if getattr(n, "combiner", "mac") == "mac" and n.dims[n.npar:] and sched.vector and len(n.maps) >= 2:
        read0 = nest.map_dims(n.maps[0])
        for pos, (name, extent) in reversed(list(enumerate(par))):
            if name in loops and pos not in read0 and pos in nest.map_dims(n.maps[1]):
                factor = next((f for f in (8, 4, 2) if extent % f == 0), None)
                if factor is not None and extent > factor:
                    sched.splits.append((name, factor))
                    loops[loops.index(name)] = f"{name}.o"
                    tile, sched.unroll = [f"{name}.i"], {f"{name}.i": factor}
                elif factor is not None:
                    loops.remove(name)
                    tile, sched.unroll = [name], {name: extent}
                break
    sched.order = loops + [name for name, _ in n.dims[n.npar:]] + tile + ([sched.vector] if sched.vector else [])
    extents = dict(sched.loops(nest.DomainAttr.make(par, n.dims[n.npar:])))
    sched.parallel = next((l for l in loops if extents[l] > 1), None)
    return sched


def nest_shape(op: nest.ComputeOp) -> NestShape:
    dom = op.domain
    return NestShape(dom.dims, dom.num_parallel.data, op.access_maps, op.output_map,
                     [shape_of(v) for v in op.inputs], shape_of(op.result), op.kind)


class DefaultSchedulePass(ModulePass):
    """Set a vectorised, thread-parallel schedule on every nest.compute that has none."""

    name = "default-schedule"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for nest_op in op.walk():
            if isinstance(nest_op, nest.ComputeOp) and nest_op.schedule is None:
                nest_op.properties["schedule"] = schedule_for(nest_shape(nest_op)).to_attr()
