"""`NestEmitter`: one `Spec` as scf loops over memrefs, following its schedule.

See the package docstring (`nasir.lowering.nest_to_loops`) for the loop structure it builds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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

from nasir.dialects import nest
from nasir.dialects.nest import Loop, expr_bounds, expr_range, linear_coefficient, stride_of
from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.spec import IDENTITY, Shape, Spec
from nasir.lowering.schedule.default_schedule import row_window
from nasir.lowering.target import CPUTarget

PREFETCH_DISTANCE = 4
"""Iterations of a tile's channel loop ahead of which it prefetches its input (see
`NestEmitter.prefetch_ahead`): 2 to 8 ran alike on ResNet's 1x1 and 3x3 convs, 16 slower."""
PREFETCH_MIN_STRIDE = 2048
"""Bytes a loop iteration must move its input by for the tile to prefetch it: shorter strides (a
window's rows, a 14x14 channel plane) the hardware's stride prefetcher follows, and prefetching
the 7x7 stem's rows (896 bytes apart) made it 1.36x slower."""
EDGE_SHARE = 1 / 8
"""The share of an outer loop's iterations its edge runs must make to get tile versions of their
own (see `NestEmitter.interior`): the first and last of a row's 7 tiles do, the first and last of 56
rows do not."""


class NestEmitter:
    """Emits the loops of one Spec for `target` into a kernel whose arguments are `refs`."""

    def __init__(self, b: LoopBuilder, spec: Spec, refs: list[SSAValue], target: CPUTarget):
        self.b, self.spec, self.refs, self.target = b, spec, refs, target
        self.ins = [refs[a] for a in spec.args]
        self.out = refs[-1]
        sched = spec.schedule
        where = f"nest '{spec.name}'"
        try:
            self.loops = sched.loops(spec.domain)
        except Exception as e:
            raise LoweringError(f"{where}: bad schedule: {e}") from None
        self.extent = dict(self.loops)
        self.order = [n for n, _ in self.loops]
        self.split_extents, self.fused_into = self._derivation()
        red_dims = {n for n, _ in spec.dims[spec.npar:]}
        self.is_red = {n: bool(self._origins(n) & red_dims) for n in self.order}
        for n in self.order:
            if self.is_red[n] and self._origins(n) - red_dims:
                raise LoweringError(f"{where}: loop '{n}' fuses parallel and reduction dims")
        self.vec = sched.vector
        if self.vec is not None:
            if self.order[-1] != self.vec:
                raise LoweringError(f"{where}: vector loop '{self.vec}' must be the innermost loop")
            if "*" in self.vec or self.is_red[self.vec]:
                raise LoweringError(f"{where}: vector loop '{self.vec}' must be an unfused parallel loop")
        self.width = self.extent[self.vec] if self.vec else None
        first_red = next((i for i, n in enumerate(self.order) if self.is_red[n]), len(self.order))
        self.outer = [n for n in self.order[:first_red] if n != self.vec]
        self.red = [n for n in self.order if self.is_red[n]]
        self.tile = [n for n in self.order[first_red:] if not self.is_red[n] and n != self.vec]
        for n in self.tile:
            if sched.unroll.get(n, 1) < self.extent[n]:
                raise LoweringError(
                    f"{where}: parallel loop '{n}' sits inside reduction loops; it must be the vector loop or "
                    f"fully unrolled (unroll {n} = {self.extent[n]})")
        if sched.parallel is not None and sched.parallel not in self.outer:
            raise LoweringError(f"{where}: parallel loop '{sched.parallel}' must be outside the reduction loops")
        if sched.pack:
            layouts = ", ".join(f"input {k} as {v}" for k, v in sorted(sched.pack.items()))
            raise LoweringError(f"{where}: the llvm backend packs weights at compile time (pass pack-weights) "
                                f"and picks activation layouts itself (pass pack-activations); packed "
                                f"activations from a schedule are not implemented ({layouts}): remove the "
                                f"pack transform for them")
        self.ivs: dict[str, Lin] = {}
        self.ranges: dict[str, tuple[int, int]] = {}
        self.preset: dict[str, Lin] = {}
        self.threads = True

    # Loop structure ---------------------------------------------------------------------------
    def _derivation(self):
        """Extent of every split dim, and the fused loop each fused name went into."""
        loops = dict(self.spec.dims)
        split_extents = {}
        self.fusion_parts: dict[str, tuple[str, str]] = {}
        for name, factor in self.spec.schedule.splits:
            split_extents[name] = (loops[name], factor)
            e = loops.pop(name)
            loops[Loop.outer(name)], loops[Loop.inner(name)] = -(-e // factor), factor
        fused_into = {}
        for a, b_ in self.spec.schedule.fusions:
            fused = f"{a}*{b_}"
            fused_into[a] = fused_into[b_] = (fused, loops[b_], a)
            self.fusion_parts[fused] = (a, b_)
            loops[fused] = loops.pop(a) * loops.pop(b_)
        return split_extents, fused_into

    def _origins(self, loop: str) -> set[str]:
        """Domain dims a loop iterates over."""
        if loop in self.fusion_parts:
            a, b_ = self.fusion_parts[loop]
            return self._origins(a) | self._origins(b_)
        if loop in dict(self.spec.dims):
            return {loop}
        return self._origins(Loop(loop).parent)

    def _loops_of(self, name: str) -> set[str]:
        if name in self.extent:
            return {name}
        if name in self.fused_into:
            return self._loops_of(self.fused_into[name][0])
        return self._loops_of(Loop.outer(name)) | self._loops_of(Loop.inner(name))

    def value(self, name: str) -> Lin:
        """Value of a dim or intermediate loop name from the loop ivs bound so far."""
        if name in self.ivs:
            return self.ivs[name]
        b = self.b
        if name in self.fused_into:
            fused, inner_extent, outer = self.fused_into[name]
            f = self.value(fused)
            if f.c:
                raise LoweringError(f"nest '{self.spec.name}': fused loop '{fused}' cannot be vectorised")
            kind = arith.FloorDivSIOp if name == outer else arith.RemSIOp
            return Lin(b.add(kind(b.scalar(f), b.idx(inner_extent))))
        _, factor = self.split_extents[name]
        return b.lin_add(b.lin_scale(self.value(Loop.outer(name)), factor), self.value(Loop.inner(name)))

    def guards(self) -> list[tuple[str, int]]:
        return [(n, e) for n, (e, f) in self.split_extents.items() if e % f]

    # Expressions ------------------------------------------------------------------------------
    def eval(self, expr: AffineExpr, dims: list[Lin]) -> Lin:
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
        if split is not None:
            return split
        if lhs.c:
            raise LoweringError(f"nest '{self.spec.name}': '{expr}' of the vector loop is not supported")
        kind = {AffineBinaryOpKind.FloorDiv: arith.FloorDivSIOp, AffineBinaryOpKind.CeilDiv: arith.CeilDivSIOp,
                AffineBinaryOpKind.Mod: arith.RemSIOp}[expr.kind]
        return Lin(b.add(kind(b.scalar(lhs), b.idx(expr.rhs.value))))

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
            s = None if a.s is None else self.b.add(arith.FloorDivSIOp(a.s, self.b.idx(f)))
            return Lin(s, a.k // f, 0, a.align // f)
        return None

    def dim_range(self, name: str) -> tuple[int, int]:
        """Smallest and largest value of a dim or loop at the current point of emission: bound
        loops by the iterations they run (an unrolled one by its constant), others by their extent."""
        if name in self.ranges:
            return self.ranges[name]
        if name in self.extent:
            return 0, self.extent[name] - 1
        if name in self.fused_into:
            return 0, dict(self.spec.dims)[name] - 1
        _, factor = self.split_extents[name]
        (olo, ohi), (ilo, ihi) = self.dim_range(Loop.outer(name)), self.dim_range(Loop.inner(name))
        return olo * factor + ilo, ohi * factor + ihi

    def read_bounds(self, k: int) -> list[tuple[int, int, int]]:
        """Per axis of input `k`: the lowest and highest index read at the current point, and the
        axis's size."""
        ranges = [self.dim_range(n) for n, _ in self.spec.dims]
        return [(*expr_bounds(e, ranges), size) for e, size in zip(self.spec.maps[k].results, self.spec.in_shapes[k])]

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

    def _checks_everywhere(self) -> frozenset:
        """The (input, axis, side) of every read that may leave its input at the current point."""
        sides = set()
        for k in range(len(self.spec.maps)):
            for a, (lo, hi, size) in enumerate(self.read_bounds(k)):
                if lo < 0:
                    sides.add((k, a, "low"))
                if hi >= size:
                    sides.add((k, a, "high"))
        return frozenset(sides)

    def check_runs(self, name: str) -> list[tuple[int, int, frozenset]]:
        """Outer loop `name`'s iterations as runs [a, b) that need the same bounds checks."""
        runs: list[tuple[int, int, frozenset]] = []
        for v in range(self.extent[name]):
            self.ranges[name] = (v, v)
            need = self._checks_everywhere()
            if runs and runs[-1][2] == need:
                runs[-1] = (runs[-1][0], v + 1, need)
            else:
                runs.append((v, v + 1, need))
        del self.ranges[name]
        return runs

    def interior(self, name: str) -> tuple[tuple[int, int], list[tuple[int, int]]] | None:
        """[lo, hi]: the longest run of iterations of outer loop `name` needing the fewest bounds
        checks (a padded conv's interior rows / tiles), with the edge runs around it that get tile
        versions of their own, or None when every iteration needs the same checks. Edge runs get
        versions when they are at most one per side and at least EDGE_SHARE of the iterations (a
        padded conv's first and last tiles of a row: with the tile index a constant there, every
        read of the unrolled points is known to be inside or padding); otherwise [] leaves them to
        the guarded tile."""
        runs = self.check_runs(name)
        fewest = min(len(need) for _, _, need in runs)
        a, b, _ = max((r for r in runs if len(r[2]) == fewest), key=lambda r: r[1] - r[0])
        if (a, b) == (0, self.extent[name]):
            return None
        edges = [(lo, hi - 1) for lo, hi, _ in runs if (lo, hi) != (a, b)]
        share = sum(hi + 1 - lo for lo, hi in edges) / self.extent[name]
        return (a, b - 1), (edges if len(edges) <= 2 and share >= EDGE_SHARE else [])

    def mask(self, conds: list[tuple[Lin, int]]) -> SSAValue | None:
        return self.b.all_of([self.b.below(a, size, self.width) for a, size in conds])

    def read(self, k: int, dims: list[Lin], extra: list[tuple[Lin, int]], identity: float) -> tuple[SSAValue, SSAValue | None]:
        """Input k at the current point (lanes), and the in-bounds mask when reads may leave the input."""
        b, spec = self.b, self.spec
        shape = spec.in_shapes[k]
        idx = [self.eval(e, dims) for e in spec.maps[k].results]
        bounds = self.read_bounds(k)
        checks, outside = self.bounds_checks(bounds)
        conds, guard_outside = static_bounds(list(extra) + [(idx[a], shape[a]) for a in checks], self.width or 1)
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
        at = [b.scalar(l) for l in idx]
        if lane_stride == 1:
            return b.shared_vload(ref, at, w, m, identity), m
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

    def tap_order(self, name: str) -> list[int] | None:
        """The order in which to emit the iterations of reduction loop `name` when it is the
        window (`row_window`) along a strided row of the register tile (conv's kw in a stride-2
        conv), for `LoopBuilder.loop` to use when it unrolls the loop whole: grouped by the input
        phase they read, `tap * dilation mod stride`. The tile's points broadcast the inputs one
        phase shares, and those die before the next phase loads its own: ResNet's 7x7 stride-2
        stem emits kw = 0, 2, 4, 6, 1, 3, 5, so its 2 x 8 tile keeps 11 broadcasts live instead of
        21 and does not spill. None: in order."""
        names = [d for d, _ in self.spec.dims]
        if name not in names or not self.spec.maps:
            return None
        for loop in self.tile:
            window = row_window(self.spec, names.index(Loop(loop).dim))
            if window is not None and names[window.dim] == name and abs(window.stride) > 1:
                stride = abs(window.stride)
                return sorted(range(window.taps), key=lambda tap: ((tap * window.dilation) % stride, tap))
        return None

    def prefetch_loop(self) -> str | None:
        """The loop of a `mac` tile that prefetches (see `prefetch_ahead`): the innermost
        reduction loop left as a loop (a conv's input channels), when it runs more than
        PREFETCH_DISTANCE iterations and each moves input 0 by PREFETCH_MIN_STRIDE or more (a
        channel plane of 28x28 or more); None otherwise (a window's rows, 4 channels a group)."""
        spec = self.spec
        dims = [d for d, _ in spec.dims]
        name = next((n for n in reversed(self.red) if spec.schedule.unroll.get(n, 1) < self.extent[n]), None)
        if spec.combiner != "mac" or name not in dims or self.extent[name] <= PREFETCH_DISTANCE:
            return None
        shape = spec.in_shapes[0]
        step = 0
        for a, expr in enumerate(spec.maps[0].results):
            coefficient = linear_coefficient(expr, dims.index(name))
            if coefficient is None:
                return None
            step += coefficient * math.prod(shape[a + 1:])
        return name if 4 * abs(step) >= PREFETCH_MIN_STRIDE else None

    def prefetch_ahead(self, name: str, points: list[tuple[int, ...]]) -> None:
        """Prefetch the cache lines of input 0 that the tile will read PREFETCH_DISTANCE
        iterations of loop `name` ahead, over its points and the unrolled reduction loops inside
        `name`: one line address per cache line (16 floats) of each run of reads (a 3x3 conv's 14 points read
        3 rows of 16 columns: 3 to 6 prefetches per input channel). Each iteration reads a new
        channel plane, a stride the hardware prefetchers do not follow: without them ResNet's
        1x1 stride-2 convs ran 1.4x the time, 3x3 convs 1.06x."""
        b, spec = self.b, self.spec
        inner = self.red[self.red.index(name) + 1:]
        shape = spec.in_shapes[0]
        strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
        reads: dict[tuple, dict[int, list[Lin]]] = {}
        with self._restoring([name, *inner]):
            here = self.ivs[name]
            self.ivs[name] = Lin(here.s, here.k + PREFETCH_DISTANCE, here.c, here.align)
            for taps in itertools.product(*[range(self.extent[n]) for n in inner]):
                for n, v in zip(inner, taps):
                    self.ivs[n] = Lin(None, v)
                for p in points:
                    self._set_point(p)
                    idx = [self.eval(e, self._dims()) for e in spec.maps[0].results]
                    for lane in sorted({0, (self.width or 1) - 1} if any(l.c for l in idx) else {0}):
                        at = [Lin(l.s, l.k + l.c * lane) for l in idx]
                        flat = sum(l.k * st for l, st in zip(at, strides))
                        reads.setdefault(tuple(id(l.s) for l in at), {})[flat] = at
        line = self.target.cache_line // 4
        for run in reads.values():
            last = None
            offsets = sorted(run)
            for flat in offsets:
                if last is None or flat - last >= line or flat == offsets[-1]:
                    b.prefetch(self.ins[0], [b.scalar(l) for l in run[flat]])
                    last = flat

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

    def write(self, value: SSAValue, dims: list[Lin], conds: list[tuple[Lin, int]]) -> None:
        b, spec = self.b, self.spec
        shape = spec.out_shape
        idx = [self.eval(e, dims) for e in spec.out_map.results]
        strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
        lane_stride = sum(l.c * s for l, s in zip(idx, strides))
        if self.width is None:
            b.store(value, self.out, [b.scalar(l) for l in idx])
        elif lane_stride == 1:
            b.vstore(value, self.out, [b.scalar(l) for l in idx], self.mask(conds))
        else:
            buf = b.lanes_buffer(self.width)
            b.vstore(value, buf, [b.idx(0)], None)

            def lane(j):
                def put():
                    b.store(b.load(buf, [j]), self.out, [b.lane(l, j) for l in idx])
                lane_ok = b.all_of([b.add(arith.CmpiOp(b.lane(a, j), b.idx(size), "ult")) for a, size in conds])
                b.if_(lane_ok, put) if lane_ok is not None else put()

            b.for_lanes(self.width, lane)

    # The nest ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Work the kernel does once before the nest's loops (and before a fused kernel's): none
        here; a Winograd conv transforms its input and weights (`WinogradEmitter`)."""

    def emit(self, preset: dict[str, Lin] | None = None, threads: bool = True) -> None:
        """The nest's loops. `preset`: outer loops the caller binds instead (the loops a fused
        kernel shares, see `emit_row_fused`); `threads=False` runs every loop on the caller's
        thread."""
        self.preset, self.threads = preset or {}, threads
        self.box = self.interior_box()
        self._outer(0)

    def _bind(self, name: str, lin: Lin) -> None:
        self.ivs[name] = lin
        last = self.width - 1 if name == self.vec else self.extent[name] - 1
        self.ranges[name] = (lin.k, lin.k) if lin.constant else (0, last)

    @contextmanager
    def _restoring(self, names: list[str]) -> Iterator[None]:
        """Put back the values and ranges `names` are bound to (or unbind them) on leaving: a
        tile version or a look-ahead rebinds loops for the code it emits."""
        saved = {n: (self.ivs.get(n), self.ranges.get(n)) for n in names}
        try:
            yield
        finally:
            for n, (iv, bounds) in saved.items():
                for table, old in ((self.ivs, iv), (self.ranges, bounds)):
                    if old is None:
                        table.pop(n, None)
                    else:
                        table[n] = old

    def _outer(self, i: int) -> None:
        b, sched = self.b, self.spec.schedule
        if i == len(self.outer):
            return self._point_block()
        name = self.outer[i]
        extent = self.extent[name]
        if name in self.preset:
            self._bind(name, self.preset[name])
            return self._outer(i + 1)

        def body(iv, carried):
            self._bind(name, b.lin(iv))
            self._outer(i + 1)
            return carried

        if name == sched.parallel and extent > 1 and self.threads:
            b.parallel(extent, lambda iv: body(iv, []))
        else:
            b.loop(extent, sched.unroll.get(name, 1), [], body)

    def _point_block(self) -> None:
        """Inside the outer loops: the tile in nested versions, one per outer loop with an interior
        (a padded conv's inner rows, then inner tiles of a row), each checking only the reads that
        can still leave the input there; the loop whose interior is largest is tested first. Edge
        runs worth their own version (see `interior`) get one, with the loop a constant in it:

            if oh in rows 1..54:
              if ow.o in tiles 1..5: tile (no checks)
              else if ow.o == 0: tile (ow.o = 0: reads left of the row are padding, skipped)
              else: tile (ow.o = 6)
            else: tile (all checks)
        """
        self._versions(self.box)

    @contextmanager
    def _within(self, name: str, lo: int, hi: int) -> Iterator[None]:
        """Emit code for the iterations lo..hi of outer loop `name` (a constant when lo == hi)."""
        with self._restoring([name]):
            if lo == hi:
                self._bind(name, Lin(None, lo))
            else:
                self.ranges[name] = (lo, hi)
            yield

    def _versions(self, box: list[tuple[str, tuple[int, int], list[tuple[int, int]]]]) -> None:
        b = self.b
        if not box:
            return self._guarded_tile()
        (name, interior, edges), rest = box[0], box[1:]

        def version(lo: int, hi: int, inner: list) -> Callable[[], None]:
            def emit():
                with self._within(name, lo, hi):
                    self._versions(inner)
            return emit

        def test(lo: int, hi: int) -> SSAValue:
            return b.below(b.lin_add(self.ivs[name], Lin(None, -lo)), hi + 1 - lo, None)

        branches = [(interior, version(*interior, rest))] + [(e, version(*e, [])) for e in edges]
        orelse = branches.pop()[1] if edges else self._guarded_tile
        for (lo, hi), emit in reversed(branches):
            orelse = lambda lo=lo, hi=hi, emit=emit, orelse=orelse: b.if_(test(lo, hi), emit, orelse)
        orelse()

    def interior_box(self) -> list[tuple[str, tuple[int, int], list[tuple[int, int]]]]:
        """For each outer loop with an interior (see `interior`), its iterations there and its edge
        runs with versions of their own, the largest interior (as a fraction of its
        loop) first, when together they remove bounds checks; [] otherwise."""
        box = {}
        for name in self.outer:
            inner = self.interior(name) if self.extent[name] > 1 else None
            if inner is not None:
                box[name] = inner
        everywhere = self._checks_everywhere()
        self.ranges.update({name: interior for name, (interior, _) in box.items()})
        fewer = self._checks_everywhere() < everywhere
        self.ranges.clear()
        if not fewer:
            return []
        order = sorted(box.items(), key=lambda item: -(item[1][0][1] - item[1][0][0] + 1) / self.extent[item[0]])
        return [(name, interior, edges) for name, (interior, edges) in order]

    def _guarded_tile(self) -> None:
        """Guards of split tails that the iterations of this version can reach, then the tile
        (the inner tiles of a 56-wide row split by 16 need no lane mask, only the last does).
        A last tile whose vector holds at most half its lanes (`tail_width`) runs on vectors of
        that many lanes in a version of its own:

            if ow.o == 3: tile on vector<8xf32> (ow 48..55)  else: tile on vector<16xf32>
        """
        tail = self.tail_width()
        if tail is None:
            return self._guarded_tile_of_width()
        loop = Loop.outer(self._vector_dim())
        last, lo = self.extent[loop] - 1, self.dim_range(loop)[0]

        def version(first: int, final: int, width: int) -> Callable[[], None]:
            def emit():
                saved, self.width = self.width, width
                try:
                    with self._within(loop, first, final):
                        self._guarded_tile_of_width()
                finally:
                    self.width = saved
            return emit

        if lo == last:
            return version(last, last, tail)()
        b = self.b
        at_last = b.add(arith.CmpiOp(b.scalar(self.value(loop)), b.idx(last), "eq"))
        b.if_(at_last, version(last, last, tail), version(lo, last - 1, self.width))

    def _vector_dim(self) -> str:
        return Loop(self.vec).parent

    def tail_width(self) -> int | None:
        """Lanes of the vectors of the last tile of a vector loop split with a tail of at most half
        the width (the tail's next power of two, at least 4: 8 for a 56-wide row of 16 lanes),
        when the lanes are contiguous in the output (a spatial schedule); None otherwise. Such
        a tile's FMAs are half as wide; where the CPU splits 16-lane FMAs in two (Zen 4), it runs
        them twice as fast (ResNet-34 group16's 56-wide grouped convs: 0.88x the time)."""
        if self.vec is None or not Loop(self.vec).is_inner or self.transposed_row() is not None:
            return None
        dim = self._vector_dim()
        extent, factor = self.split_extents.get(dim, (0, 0))
        tail = extent % factor if factor == self.width else 0
        narrow = max(4, 1 << max(tail - 1, 0).bit_length())
        loop = Loop.outer(dim)
        if not tail or narrow > self.width // 2 or loop not in self.outer:
            return None
        return narrow if self.dim_range(loop)[1] == self.extent[loop] - 1 else None

    def _guarded_tile_of_width(self) -> None:
        b = self.b
        bound = set(self.outer)
        outer_guards, inner_guards = [], []
        for name, e in self.guards():
            if self.dim_range(name)[1] < e:
                continue
            (outer_guards if self._loops_of(name) <= bound else inner_guards).append((name, e))
        if outer_guards:
            cond = b.all_of([b.below(self.value(n), e, None) for n, e in outer_guards])
            b.if_(cond, lambda: self._tile(inner_guards))
        else:
            self._tile(inner_guards)

    def _dims(self) -> list[Lin]:
        return [self.value(n) for n, _ in self.spec.dims]

    def _tile(self, guards: list[tuple[str, int]]) -> None:
        b, spec = self.b, self.spec
        ty = f32 if self.width is None else VectorType(f32, [self.width])
        points = list(itertools.product(*[range(self.extent[n]) for n in self.tile]))
        if self.vec:
            self._bind(self.vec, Lin(None, 0, 1))
        kind = spec.combiner
        arity = nest.COMBINERS[kind]
        extents = [e for _, e in spec.dims]
        may_leave = any(lo < 0 or hi >= spec.in_shapes[k][a]
                        for k in range(arity) for a, ex in enumerate(spec.maps[k].results)
                        for lo, hi in [expr_range(ex, extents)])
        counting = kind == "avg" and (may_leave or any(self.is_red[self._first_loop(n)] for n, _ in guards))
        ones = b.lanes_buffer(self.width, b.const(1.0, ty)) if counting and self.width else None

        if kind == "copy":
            for p in points:
                self._set_point(p)
                dims = self._dims()
                v, _ = self.read(0, dims, self._conds(guards), spec.pad)
                self._finish(v, dims, self._conds(guards))
            return
        zero = b.const(0.0, ty)
        init = [b.const(IDENTITY[kind], ty) for _ in points] + ([b.const(0.0, ty)] * len(points) if counting else [])

        def update(carried):
            accs = list(carried)
            for t, p in enumerate(points):
                self._set_point(p)
                dims = self._dims()
                conds = self._conds(guards)
                if kind == "mac":
                    x, _ = self.read(0, dims, conds, 0.0)
                    y, _ = self.read(1, dims, conds, 0.0)
                    if zero not in (x, y):  # padding adds nothing
                        accs[t] = b.fma(x, y, accs[t])
                else:
                    x, m = self.read(0, dims, conds, IDENTITY[kind])
                    if x is b.const(IDENTITY[kind], ty):  # padding: neither a value nor a count
                        continue
                    accs[t] = b.running_max(accs[t], x) if kind == "max" else b.binary("add", accs[t], x)
                    if counting:
                        if m is None:
                            one = b.const(1.0, ty)
                        elif ones is not None:
                            one = b.vload(ones, [b.idx(0)], self.width, m, 0.0)
                        else:
                            one = b.select(m, b.const(1.0, ty), b.const(0.0, ty))
                        accs[len(points) + t] = b.binary("add", accs[len(points) + t], one)
            return accs

        ahead = self.prefetch_loop()

        def red(i, carried):
            if i == len(self.red):
                return update(carried)
            name = self.red[i]

            def body(iv, c):
                self._bind(name, b.lin(iv))
                if name == ahead:
                    self.prefetch_ahead(name, points)
                return red(i + 1, c)

            return b.loop(self.extent[name], spec.schedule.unroll.get(name, 1), carried, body,
                          self.tap_order(name))

        accs = red(0, init)
        values = accs[:len(points)]
        if kind == "avg":
            for t in range(len(points)):
                count = accs[len(points) + t] if counting else b.const(
                    float(math.prod(e for _, e in spec.dims[spec.npar:])), ty)
                values[t] = b.binary("div", values[t], count)
        self._store_tile(points, values, guards, transpose=kind in ("mac", "max"))

    def _set_point(self, p: tuple[int, ...]) -> None:
        """Bind the register-tile loops to the tile point `p`."""
        for n, j in zip(self.tile, p):
            self._bind(n, Lin(None, j))

    def _conds(self, guards: list[tuple[str, int]]) -> list[tuple[Lin, int]]:
        """The split-tail guards `guards` as conditions `0 <= value < extent` at the current point."""
        return [(self.value(n), e) for n, e in guards]

    def _store_tile(self, points: list[tuple[int, ...]], values: list[SSAValue], guards: list[tuple[str, int]],
                    transpose: bool = True) -> None:
        """Epilogue and stores of a finished register tile, one value per point: transposed first
        when its lanes are strided in the output (`transposed_row`)."""
        row = self.transposed_row() if transpose else None
        if row is not None:
            return self._finish_transposed(row, points, values, guards)
        for p, v in zip(points, values):
            self._set_point(p)
            self._finish(v, self._dims(), self._conds(guards))

    def transposed_row(self) -> str | None:
        """The register-tile loop to store along when the vector lanes are strided in the output
        (lanes over channels: a conv, gemm or max pool): a tile loop of 2..width points contiguous in
        the output (conv's ow)."""
        if self.vec is None:
            return None
        names = [n for n, _ in self.spec.dims]
        strides = {n: stride_of(self.spec.out_map, self.spec.out_shape, names.index(n)) for n in names}
        if strides[sorted(self._origins(self.vec))[0]] == 1:
            return None
        return next((t for t in self.tile if 1 < self.extent[t] <= self.width
                     and [strides[d] for d in self._origins(t)] == [1]), None)

    def _finish_transposed(self, row: str, points, accs, guards: list[tuple[str, int]]) -> None:
        """Epilogue and stores of a tile whose lanes are strided in the output: the accumulators
        of the `row` points are transposed in registers (log2 rounds of shuffles), so that each
        lane's values along `row` are one contiguous vector, and the epilogue runs on those, the
        lanes past the tile's r points masked off:

            acc[ow = p] : vector<16 x f32> over co   ->   out[co = l] : vector<16 x f32> over ow
        """
        b, width = self.b, self.width
        lead = self.lane_steps()
        for t, p in enumerate(points if lead else ()):
            self._set_point(p)
            accs[t] = self._steps(accs[t], self._dims(), self._conds(guards), self.spec.steps[:lead])
        pos = self.tile.index(row)
        groups: dict[tuple, list] = {}
        for t, p in enumerate(points):
            groups.setdefault(p[:pos] + p[pos + 1:], []).append(accs[t])
        r = self.extent[row]
        for p, values in groups.items():
            rows = b.transpose(values, width)
            self._set_point(p[:pos] + (0,) + p[pos:])
            self._bind(row, Lin(None, 0, 1))
            self.ranges[row] = (0, width - 1)  # lanes past the tile read past it: keep their checks
            for lane, v in enumerate(rows):
                self._bind(self.vec, Lin(None, lane))
                self._finish(v, self._dims(), self._conds(guards) + [(self.ivs[row], r)], lead)
            self._bind(self.vec, Lin(None, 0, 1))

    def lane_steps(self) -> int:
        """How many leading epilogue steps read every operand as one vector or one value per tile
        point (a bias or a folded batch norm indexed by the output channel, a residual operand
        that pack-activations stored channel-blocked; ReLU and clip read nothing): a transposed
        tile runs them on its accumulators, one vector op per point instead of one per row of the
        transpose. A residual add from an NCHW tensor reads across the lanes: it and the steps
        after it run on the rows."""
        (origin,) = self._origins(self.vec)
        lane = [n for n, _ in self.spec.dims].index(origin)
        for count, (_, refs, _) in enumerate(self.spec.steps):
            if any(lane_stride(self.spec.maps[k], self.spec.in_shapes[k], lane, self.width) not in (0, 1)
                   for k in refs):
                return count
        return len(self.spec.steps)

    def _first_loop(self, name: str) -> str:
        return sorted(self._loops_of(name))[0]

    def _steps(self, v: SSAValue, dims: list[Lin], conds: list[tuple[Lin, int]], steps) -> SSAValue:
        for kind, refs, params in steps:
            operands = [self.read(k, dims, conds, 0.0)[0] for k in refs]
            v = epilogue(self.b, kind, v, operands, params)
        return v

    def _finish(self, v: SSAValue, dims: list[Lin], conds: list[tuple[Lin, int]], done: int = 0) -> None:
        """The epilogue steps from `done` on, then the store."""
        self.write(self._steps(v, dims, conds, self.spec.steps[done:]), dims, conds)


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


def epilogue(b: LoopBuilder, kind: str, v: SSAValue, operands: list[SSAValue], params: list[float]) -> SSAValue:
    """One epilogue step on a finished value (see nest.EPILOGUE_STEPS; `lrn`, `batch_norm` internal)."""
    f = lambda x: b.f(x, v)  # noqa: E731
    if kind in ("add", "sub", "mul", "div"):
        return b.binary(kind, v, operands[0])
    if kind == "relu":
        return b.binary("max", v, f(0.0))
    if kind == "clip":
        return b.binary("min", b.binary("max", v, f(params[0])), f(params[1]))
    if kind == "scale":
        return b.binary("mul", v, f(params[0]))
    if kind == "leaky_relu":
        # max(x, 0) + alpha * min(x, 0): no vector select in xDSL's arith
        return b.fma(b.binary("min", v, f(0.0)), f(params[0]), b.binary("max", v, f(0.0)))
    if kind == "hard_sigmoid":
        lin = b.fma(v, f(params[0]), f(params[1]))
        return b.binary("min", b.binary("max", lin, f(0.0)), f(1.0))
    if kind == "hard_swish":
        gate = b.binary("min", b.binary("max", b.fma(v, f(1 / 6), f(0.5)), f(0.0)), f(1.0))
        return b.binary("mul", v, gate)
    if kind == "sigmoid":
        e = b.unary("exp", b.binary("sub", f(0.0), v))
        return b.binary("div", f(1.0), b.binary("add", f(1.0), e))
    if kind == "batch_norm":
        scale, shift, mean, var = operands
        inv = b.binary("div", scale, b.unary("sqrt", b.binary("add", var, f(params[0]))))
        return b.fma(b.binary("sub", v, mean), inv, shift)
    if kind == "lrn":
        alpha_n, beta, bias = params
        return b.binary("div", operands[0], b.pow(b.fma(v, f(alpha_n), f(bias)), f(beta)))
    raise LoweringError(f"epilogue step '{kind}' is not supported by the llvm backend")
