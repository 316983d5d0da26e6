"""Reads and writes of a nest's buffers: affine maps evaluated on lanes, masks, bounds.

A part of `NestEmitter` (`nasir.lowering.nest_to_loops.emitter`), which holds the spec, the
builder and the loops these methods read."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    VectorType,
    f32,
    i1,
)
from xdsl.ir import SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)

from nasir.dialects.affine import expr_bounds, linear_form
from nasir.dialects.schedule import Loop
from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.spec import Shape, Spec
from nasir.lowering.target import CPUTarget


class Accesses:
    """Reads and writes of a nest's buffers: affine maps evaluated on lanes, masks, bounds."""

    spec: Spec
    b: LoopBuilder
    target: CPUTarget
    flat_lanes: bool = False
    """Whether the lanes being read and written run along a flat fusion's row (`flat_fusion`),
    across the ends of image rows: set by a transposed store of such a row."""

    def eval(self, expr: AffineExpr, dims: Sequence[Lin]) -> Lin:
        b = self.b
        if isinstance(expr, AffineConstantExpr):
            return Lin(None, expr.value)
        if isinstance(expr, AffineDimExpr):
            return dims[expr.position]
        assert isinstance(expr, AffineBinaryOpExpr)
        if expr.kind == AffineBinaryOpKind.Add:
            return b.lin_add(self.eval(expr.lhs, dims), self.eval(expr.rhs, dims))
        if expr.kind == AffineBinaryOpKind.Mul:
            lhs, rhs = expr.lhs, expr.rhs
            if isinstance(lhs, AffineConstantExpr):
                lhs, rhs = rhs, lhs
            if not isinstance(rhs, AffineConstantExpr):
                raise LoweringError(f"nest '{self.spec.name}': non-affine product {expr}")
            return b.lin_scale(self.eval(lhs, dims), rhs.value)
        lhs = self.eval(expr.lhs, dims)
        if not isinstance(expr.rhs, AffineConstantExpr):
            raise LoweringError(f"nest '{self.spec.name}': non-affine '{expr}'")
        split = self.split_lanes(lhs, expr.rhs.value, expr.kind)
        if split is None:
            split = self.split_loop(expr.lhs, expr.rhs.value, expr.kind, dims)
        if split is not None:
            return split
        if lhs.c:
            raise LoweringError(f"nest '{self.spec.name}': '{expr}' of the vector loop is not supported")
        if expr.kind == AffineBinaryOpKind.CeilDiv:
            return Lin(b.add(arith.CeilDivSIOp(b.scalar(lhs), b.idx(expr.rhs.value))))
        return b.divide(lhs, expr.rhs.value, mod=expr.kind == AffineBinaryOpKind.Mod)

    def split_lanes(self, a: Lin, f: int, kind: AffineBinaryOpKind) -> Lin | None:
        """`a floordiv f` / `a mod f` without division ops when `f` divides `a.s` and the lanes
        `a.k + a.c * lane` stay in one block of `f` (a packed layout read by a vector loop that
        matches its block): (16 * s + k + lane) floordiv 16 = s + k // 16 for k % 16 + lane < 16."""
        lanes = a.c * ((self.width or 1) - 1)
        if f <= 0 or a.align % f or a.c < 0 or a.k % f + lanes >= f:
            return None
        if kind == AffineBinaryOpKind.Mod:
            return Lin(None, a.k % f, a.c)
        if kind == AffineBinaryOpKind.FloorDiv:
            s = None if a.s is None else self.b.divide(Lin(a.s), f).s
            return Lin(s, a.k // f, 0, a.align // f)
        return None

    def split_loop(self, expr: AffineExpr, f: int, kind: AffineBinaryOpKind, dims: Sequence[Lin]) -> Lin | None:
        """`expr floordiv f` / `expr mod f` without division ops when `expr` is a dim that the
        schedule splits by `f`, plus multiples of `f` (a grouped conv's `g * 64 + ci`): the split's
        outer loop plus the multiples over `f`, and its inner loop. A 1x1 conv reading a
        channel-blocked input whose block of channels, split off its channel loop, stays a loop
        (`split_channel_loop`): `ci mod 16` is `ci.i`, a loop of 16 where `split_lanes` needs a
        constant."""
        form = linear_form(expr)
        if form is None or form[1] % f or kind not in (AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.Mod):
            return None
        rest = [(d, c) for d, c in form[0].items() if c % f]
        if len(rest) != 1 or rest[0][1] != 1:
            return None
        d = rest[0][0]
        name = self.spec.dims[d][0]
        extent, factor = self.split_extents.get(name, (0, 0))
        if factor != f or extent % f or not self._loops_of(name) <= self.ivs.keys():
            return None
        b = self.b
        outer, inner = self.value(Loop.outer(name)), self.value(Loop.inner(name))
        if b.lin_add(b.lin_scale(outer, f), inner) != dims[d]:  # a caller's own value of the dim
            return None
        if kind == AffineBinaryOpKind.Mod:
            return inner
        quotient = b.lin_add(outer, Lin(None, form[1] // f))
        for q, c in form[0].items():
            if q != d:
                quotient = b.lin_add(quotient, b.lin_scale(dims[q], c // f))
        return quotient

    def read_bounds(self, k: int) -> list[tuple[int, int, int]]:
        """Per axis of input `k`: the lowest and highest index read at the current point, and the
        axis's size."""
        ranges = [self.dim_range(n) for n, _ in self.spec.dims]
        return [(*expr_bounds(e, ranges), size) for e, size in zip(self.spec.maps[k].results, self.spec.in_extents(k))]

    @staticmethod
    def bounds_checks(bounds: list[tuple[int, int, int]]) -> tuple[list[int], bool]:
        """Axes whose reads may leave the input, from its `read_bounds`, and whether every read
        does (then the read is padding everywhere)."""
        checks = []
        for a, (lo, hi, size) in enumerate(bounds):
            if hi < 0 or lo >= size:
                return [], True
            if lo < 0 or hi >= size:
                checks.append(a)
        return checks, False

    def mask(self, conds: list[tuple[Lin, int]]) -> SSAValue | None:
        return self.b.all_of([self.b.below(a, size, self.width) for a, size in conds])

    def read(self, k: int, dims: Sequence[Lin], extra: list[tuple[Lin, int]], identity: float) -> tuple[SSAValue, SSAValue | None]:
        """Input k at the current point (lanes), and the in-bounds mask when reads may leave the input."""
        b, spec = self.b, self.spec
        shape = spec.in_shapes[k]
        idx = [self.eval(e, dims) for e in spec.maps[k].results]
        bounds = self.read_bounds(k)
        checks, outside = self.bounds_checks(bounds)
        extents = spec.in_extents(k)
        conds, guard_outside = static_bounds(list(extra) + [(idx[a], extents[a]) for a in checks], self.width or 1)
        w = self.width
        if outside or guard_outside:
            return b.const(identity, f32 if w is None else VectorType(f32, [w])), None
        ref = self.ins[k]
        m = self.mask(conds)
        strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
        lane_stride = sum(l.c * s for l, s in zip(idx, strides))
        if w is None or lane_stride == 0:
            scalar_m = self.b.all_of([b.below(a, size, None) for a, size in conds])
            at = [b.scalar(l) for l in idx]
            if scalar_m is not None:
                at = [b.clamp(i, s) for i, s in zip(at, shape)]
            # inputs are read-only in a kernel: the tile's points share their loads
            v = b.pure(("load", ref, *at), lambda: b.load(ref, at))
            if scalar_m is not None:
                v = b.select(scalar_m, v, b.const(identity, f32))
            if w is not None:
                v = b.pure(("splat", v, w), lambda: b.splat(v, w))
            return v, m
        if lane_stride == 1:
            ref, at, _ = self.lanes_at(ref, idx, shape)
            return b.shared_vload(ref, at, w, m, identity), m
        at = [b.scalar(l) for l in idx]
        if 1 < lane_stride <= 4 and idx[-1].c == lane_stride:
            whole = self.whole_window_read(k, idx, bounds[-1]) if m is None else None
            if whole is not None:
                return whole, m
            narrow = m if m is not None else b.const(1, VectorType(i1, [w]))
            false = b.const(0, narrow.type)
            # a power-of-two count of lanes: in a 4-lane tile at stride 3, LLVM's AVX2 code for
            # the masked load of 12 lanes took lane 9 from memory with its mask off (it widens the
            # load to 16 lanes and blends halves of it), reading past the input row
            span = 1 << (w * lane_stride - 1).bit_length()
            wide_mask = b.shuffle(narrow, false, [j // lane_stride if j % lane_stride == 0 and j < w * lane_stride
                                                  else w for j in range(span)])
            wide = b.vload(ref, at, span, wide_mask, identity)
            return b.shuffle(wide, wide, [j * lane_stride for j in range(w)]), m
        buf = b.lanes_buffer(w)
        b.for_lanes(w, lambda j: b.store(b.load(ref, [b.clamp(b.lane(l, j), s) for l, s in zip(idx, shape)]),
                                         buf, [j]))
        return b.vload(buf, [b.idx(0)], w, m, identity), m

    def lanes_at(self, ref: SSAValue, idx: list[Lin], shape: Shape) -> tuple[SSAValue, list[SSAValue], int]:
        """The memref, indices and lane axis of a vector whose lanes run one element apart along
        the last axis they move (`idx`: per axis of `ref`, of `shape`): where they run across its
        rows (a flat fusion's row, `flat_lanes`), that axis and the one before as one
        (`LoopBuilder.merged`), so each index stays inside its axis."""
        b = self.b
        axis = max(a for a, l in enumerate(idx) if l.c)
        if not self.flat_lanes or axis == 0:
            return ref, [b.scalar(l) for l in idx], axis
        plane = b.lin_add(b.lin_scale(idx[axis - 1], shape[axis]), idx[axis])
        at = idx[:axis - 1] + [plane] + idx[axis + 1:]
        return b.merged(ref, axis), [b.scalar(l) for l in at], axis - 1

    def whole_window_read(self, k: int, idx: list[Lin], last_bounds: tuple[int, int, int]) -> SSAValue | None:
        """Lanes `stride` apart along the last axis of input `k` (a stride-2 pool or conv), read as
        one unmasked load of `stride * width` lanes and a shuffle, when every such window of the
        current point lies inside its row (`last_bounds`: that axis's `read_bounds`); else None (a
        masked load then reads the used lanes).
        The window starts at the used lanes' start rounded down to the stride, so the taps of a
        window along the row share loads: a 3x3 stride-2 pool's taps at columns 2x-1, 2x, 2x+1
        read two windows, [2x-2, 2x+30) and [2x, 2x+32) for 16 lanes, not three masked ones.
        """
        b, w, last = self.b, self.width, idx[-1]
        stride, phase = last.c, last.k % last.c
        lo, hi, size = last_bounds
        if lo - phase < 0 or hi + stride - 1 - phase >= size:
            return None
        ref = self.ins[k]
        at = [b.scalar(l) for l in idx[:-1]] + [b.scalar(Lin(last.s, last.k - phase, stride, last.align))]
        wide = b.shared_vload(ref, at, w * stride, None, 0.0)
        return b.pure(("lanes", wide, phase, stride), lambda: b.shuffle(wide, wide, [j * stride + phase for j in range(w)]))

    def write(self, value: SSAValue, dims: Sequence[Lin], conds: list[tuple[Lin, int]]) -> None:
        b, spec = self.b, self.spec
        shape = spec.out_shape
        idx = [self.eval(e, dims) for e in spec.out_map.results]
        strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
        lane_stride = sum(l.c * s for l, s in zip(idx, strides))
        if self.width is None:
            b.store(value, self.out, [b.scalar(l) for l in idx])
        elif lane_stride == 1:  # the lanes move the last axis with a lane coefficient, those after it have extent 1
            ref, at, axis = self.lanes_at(self.out, idx, shape)
            b.vstore(value, ref, at, self.mask(conds), axis)
        else:
            buf = b.lanes_buffer(self.width)
            b.vstore(value, buf, [b.idx(0)], None)

            def lane(j):
                def put():
                    b.store(b.load(buf, [j]), self.out, [b.lane(l, j) for l in idx])
                lane_ok = b.all_of([b.add(arith.CmpiOp(b.lane(a, j), b.idx(size), "ult")) for a, size in conds])
                b.if_(lane_ok, put) if lane_ok is not None else put()

            b.for_lanes(self.width, lane)


def lane_stride(amap: AffineMap, shape: Shape, lane: int, width: int) -> int | None:
    """Elements between the buffer positions that `amap` gives lanes 0..width-1 of dim `lane` (the
    others at 0), None when they are not evenly spaced: through floordiv/mod, a channel-blocked
    layout's block reads with stride 1."""
    def offset(j: int) -> int:
        point = [0] * amap.num_dims
        point[lane] = j
        return sum(i * math.prod(shape[a + 1:]) for a, i in enumerate(amap.eval(point, [])))

    base = offset(0)
    steps = {offset(j) - base - j * (offset(1) - base) for j in range(width)}
    return offset(1) - base if steps == {0} else None


def static_bounds(conds: list[tuple[Lin, int]], width: int) -> tuple[list[tuple[Lin, int]], bool]:
    """The conditions `0 <= a < size` that depend on loop values, and whether one of the others is
    false on every lane (the read is padding: a tile point on the border of a small image)."""
    kept, outside = [], False
    for a, size in conds:
        if a.s is None:
            lanes = [a.k + a.c * j for j in range(width)]
            if all(0 <= v < size for v in lanes):
                continue
            outside |= not any(0 <= v < size for v in lanes)
        kept.append((a, size))
    return kept, outside
