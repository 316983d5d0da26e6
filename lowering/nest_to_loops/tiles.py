"""The register tile: accumulators over the reduction loops, tap order, prefetch, stores and transposes.

A part of `NestEmitter` (`nasir.lowering.nest_to_loops.emitter`), which holds the spec, the
builder and the loops these methods read."""

from __future__ import annotations

import itertools
import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    VectorType,
    f32,
)
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind, AffineConstantExpr

from nasir.dialects import affine, nest
from nasir.dialects.affine import expr_range, interleaves, linear_coefficient, one_channel, stride_of
from nasir.dialects.schedule import Loop
from nasir.lowering.analysis.cost_model import row_window
from nasir.lowering.nest_to_loops.accesses import lane_stride
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.spec import IDENTITY, Spec
from nasir.lowering.target import CPUTarget

PREFETCH_DISTANCE = 4
"""Iterations of a tile's channel loop ahead of which it prefetches its input (see
`NestEmitter.prefetch_ahead`): 2 to 8 ran alike on ResNet's 1x1 and 3x3 convs, 16 slower."""
PREFETCH_MIN_STRIDE = 2048
"""Bytes a loop iteration must move its input by for the tile to prefetch it: shorter strides (a
window's rows, a 14x14 channel plane) the hardware's stride prefetcher follows, and prefetching
the 7x7 stem's rows (896 bytes apart) made it 1.36x slower."""

class Tiles:
    """The register tile: accumulators over the reduction loops, tap order, prefetch, stores and transposes."""

    spec: Spec
    b: LoopBuilder
    target: CPUTarget

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
            if "*" in loop:  # a fused loop (`oh*ow.i`) is no image row
                continue
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
        line = self.target.cache_line // 4
        dims = [d for d, _ in spec.dims]
        read = {dims[d] for d in affine.map_dims(spec.maps[0])}
        # points apart only along tile loops input 0 does not read (a conv's channel vectors) read alike
        points = sorted({tuple(v if self._origins(t) & read else 0 for t, v in zip(self.tile, p)) for p in points})
        # the points along a fused row (`oh*ow.i`) that input 0 holds as a plane read one run across
        # image rows: its first point, one a cache line on, and its last (each its own div and mod)
        for pos, row in enumerate(self.tile):
            fused = self.fusion_of(row)
            if fused is None or not self.holds_plane(fused, [(spec.maps[0], shape)]):
                continue
            inner_stride = abs(stride_of(spec.maps[0], shape, dims.index(self.fusion_parts[fused][1]))) or 1
            r = self.extent[row]
            ends = {*range(0, r, max(1, line // inner_stride)), r - 1}
            points = sorted({p[:pos] + (q,) + p[pos + 1:] for p in points for q in ends})
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
        for run in reads.values():
            last = None
            offsets = sorted(run)
            for flat in offsets:
                if last is None or flat - last >= line or flat == offsets[-1]:
                    b.prefetch(self.ins[0], [b.scalar(l) for l in run[flat]])
                    last = flat

    def next_block_prefetch(self) -> tuple[str, list[str], list[str], int, list[tuple[str, int]]] | None:
        """(block loop, row loops, step loops, packed blocks of weights an iteration of the block
        loop reads, group loops with the packed blocks a step of each moves) when a `mac` tile
        prefetches the weights of its next channel block into L2 while it runs the rows of this
        one (see `prefetch_next_block`): lanes over output channels from a packed weight (input 1)
        that does not fit in L1, an outer loop over channel blocks, and outer loops inside it that
        each stream the block's weights again (a 3x3 conv's image rows). A grouped conv's packed
        weight holds its groups' blocks one after another (`(g * 64 + co) floordiv 8`: a step of
        `g` moves 8 blocks), so the next block of a group's last one is the next group's first.
        None otherwise.

        Weights beyond L1 but in L2 gain too: in a network the other layers evict them (DenseNet-121
        cifar10's 1x1 and 3x3 convs, 32-512 KB each: the network 0.966-0.972x the time at AVX2 with
        these prefetches against 1.0 with those beyond L2 alone); smaller weights stay in L1."""
        spec = self.spec
        if spec.combiner != "mac" or self.vec is None or len(spec.maps) < 2 or len(spec.in_shapes[1]) < 2:
            return None
        weight = spec.in_shapes[1]
        if 4 * math.prod(weight) <= self.target.l1_bytes:
            return None
        names = [d for d, _ in spec.dims]
        origins = self._origins(self.vec)
        if len(origins) != 1:
            return None
        channel = next(iter(origins))
        groups = self._weight_groups(names.index(channel), weight[-1])
        if groups is None:
            return None
        block = next((l for l in self.outer if self._origins(l) == {channel} and self.extent[l] > 1), None)
        if block is None or any(self.outer.index(g) > self.outer.index(block) for g, _ in groups):
            return None
        rows = [l for l in self.outer[self.outer.index(block) + 1:] if self.extent[l] > 1]
        rolled = [n for n in self.red if spec.schedule.unroll.get(n, 1) < self.extent[n]]
        if not rows or not rolled:
            return None
        channels = math.prod(self.extent[l] for l in self.order if self._origins(l) == {channel}
                             and self.order.index(l) > self.order.index(block))
        steps = self.red[: self.red.index(rolled[-1]) + 1]
        return block, rows, steps, channels // weight[-1], groups

    def _weight_groups(self, channel: int, width: int) -> list[tuple[str, int]] | None:
        """The outer loops other than channel dim `channel` that the packed weight's first axis
        reads, each with the blocks a step of it moves: none for a conv (`co floordiv 8`), `g`
        and 8 for a grouped one's `(g * 64 + co) floordiv 8`; None for another form (a loop
        split or unrolled, a group not a whole number of blocks)."""
        spec = self.spec
        names = [d for d, _ in spec.dims]
        expr = spec.maps[1].results[0]
        used = affine.used_dims(expr)
        if used == {channel}:
            return []
        if channel not in used or not (isinstance(expr, AffineBinaryOpExpr) and expr.kind == AffineBinaryOpKind.FloorDiv
                                       and isinstance(expr.rhs, AffineConstantExpr) and expr.rhs.value == width):
            return None
        form = affine.linear_form(expr.lhs)
        if form is None or form[1] or form[0].get(channel) != 1:
            return None
        groups = []
        for d, coefficient in form[0].items():
            if d != channel:
                if coefficient % width or names[d] not in self.outer:
                    return None
                groups.append((names[d], coefficient // width))
        return groups

    def prefetch_next_block(self, plan: tuple[str, list[str], list[str], int, list[tuple[str, int]]]) -> None:
        """L2 prefetches (`level = 2`) at each step of the tile's reduction: of the next channel
        block's packed weights, the next cache lines at each step of the block's rows, so the
        block's lines arrive spread over the rows of this one; as many lines a step as the
        block's lines need (ResNet-34's layer4 on 7 x 7: a block of 147 KB, its 7 rows x 512
        channel steps prefetch one line each, 2304 of them and then the last again; on 4 x 4,
        4 rows x 512 steps of a 295 KB block prefetch three each). Without it the first row of
        each block waits for its weights from memory, where the layers between two calls
        evicted them (those convs ran at 81% of the 8-lane peak in the network, 93% with it; on
        4 x 4, one line a step left half the block to the first row: 75%, against 103% at three):

            for co.o: for oh: for ci: prefetch w[co.o + 1, min(oh * 512 + ci, 2303) * 16]; ...
            for g: for co.o: for oh: for ci: prefetch w[g * 4 + co.o + 1, ...]   (grouped, 4 blocks a group)
        """
        b = self.b
        block, rows, steps, blocks, groups = plan
        weight = self.spec.in_shapes[1]
        floats = blocks * math.prod(weight[1:])
        line = self.target.cache_line // 4
        per_step = -(-floats // (line * math.prod(self.extent[l] for l in rows + steps)))
        t = None
        for loop in rows + steps:
            v = b.scalar(self.value(loop))
            t = v if t is None else b.addi(b.muli(t, b.idx(self.extent[loop])), v)
        first = b.muli(t, b.idx(line * per_step))
        offsets = [b.add(arith.MinSIOp(first if k == 0 else b.addi(first, b.idx(k * line)),
                                       b.idx(max(floats - line, 0)))) for k in range(per_step)]
        at = b.addi(b.scalar(self.value(block)), b.idx(1))
        at = at if blocks == 1 else b.muli(at, b.idx(blocks))
        for group, moved in groups:
            at = b.addi(at, b.muli(b.scalar(self.value(group)), b.idx(moved)))
        for offset in offsets:
            b.prefetch(self.ins[1], [at] + [b.idx(0)] * (len(weight) - 2) + [offset], level=2)

    def emit_tile(self, guards: list[tuple[str, int]]) -> None:
        """The register tile at the loop values bound so far: one accumulator per tile point,
        carried through the reduction loops, then the epilogue and the stores (`_store_tile`).
        `guards`: the split loops whose tails this tile may run past. WinogradEmitter overrides it."""
        b, spec = self.b, self.spec
        ty = f32 if self.width is None else VectorType(f32, [self.width])
        points = list(itertools.product(*[range(self.extent[n]) for n in self.tile]))
        if self.vec:
            self.bind(self.vec, Lin(None, 0, 1))
        kind = spec.combiner
        counting = kind == "avg" and (self._may_read_outside()
                                      or any(self.is_red[self._first_loop(n)] for n, _ in guards))
        ones = b.lanes_buffer(self.width, b.const(1.0, ty)) if counting and self.width else None
        if kind == "copy":  # its tile (if any) transposes into a channel-blocked output: `transposed_row`
            values = []
            for p in points:
                self._set_point(p)
                values.append(self.read(0, self._dims(), self._conds(guards), spec.pad)[0])
            self._store_tile(points, values, guards)
            return
        zero = b.const(0.0, ty)
        init = [b.const(IDENTITY[kind], ty) for _ in points] + ([b.const(0.0, ty)] * len(points) if counting else [])
        accs = self._reduce(points, init, lambda carried: self._accumulate(
            points, list(carried), guards, ty, zero, ones if counting else False))
        values = accs[:len(points)]
        if kind == "avg":
            for t in range(len(points)):
                count = accs[len(points) + t] if counting else b.const(
                    float(math.prod(e for _, e in spec.dims[spec.npar:])), ty)
                values[t] = b.binary("div", values[t], count)
        self._store_tile(points, values, guards, transpose=kind in ("mac", "max"))

    def _may_read_outside(self) -> bool:
        """Whether a read of the combiner's inputs may fall outside them (padding)."""
        spec = self.spec
        extents = [e for _, e in spec.dims]
        return any(lo < 0 or hi >= spec.in_extents(k)[a]
                   for k in range(nest.COMBINERS[spec.combiner]) for a, ex in enumerate(spec.maps[k].results)
                   for lo, hi in [expr_range(ex, extents)])

    def _accumulate(self, points, accs: list[SSAValue], guards, ty, zero: SSAValue, ones) -> list[SSAValue]:
        """One step of the reduction: every tile point's accumulator takes its reads. `ones`: False
        where an average does not count its reads, else the lanes buffer of ones (None: no lanes)
        the count takes under a mask."""
        b, kind = self.b, self.spec.combiner
        for t, p in enumerate(points):
            self._set_point(p)
            dims = self._dims()
            conds = self._conds(guards)
            if kind == "mac":
                x, _ = self.read(0, dims, conds, 0.0)
                y, _ = self.read(1, dims, conds, 0.0)
                if zero not in (x, y):  # padding adds nothing
                    accs[t] = b.fma(x, y, accs[t])
                continue
            x, m = self.read(0, dims, conds, IDENTITY[kind])
            if x is b.const(IDENTITY[kind], ty):  # padding: neither a value nor a count
                continue
            accs[t] = b.maximum(x, accs[t]) if kind == "max" else b.binary("add", accs[t], x)
            if ones is not False:
                if m is None:
                    one = b.const(1.0, ty)
                elif ones is not None:
                    one = b.vload(ones, [b.idx(0)], self.width, m, 0.0)
                else:
                    one = b.select(m, b.const(1.0, ty), b.const(0.0, ty))
                accs[len(points) + t] = b.binary("add", accs[len(points) + t], one)
        return accs

    def _reduce(self, points, init: list[SSAValue], update) -> list[SSAValue]:
        """The reduction loops around `update` (values carried in, values out), outermost first,
        prefetching input 0 ahead in the loop `prefetch_loop` picks and the next channel block's
        weights in the innermost rolled one (`next_block_prefetch`)."""
        b, ahead, next_block = self.b, self.prefetch_loop(), self.next_block_prefetch()

        def red(i, carried):
            if i == len(self.red):
                return update(carried)
            name = self.red[i]

            def body(iv, c):
                self.bind(name, b.lin(iv))
                if name == ahead:
                    self.prefetch_ahead(name, points)
                if next_block is not None and name == next_block[2][-1]:
                    self.prefetch_next_block(next_block)
                return red(i + 1, c)

            return b.loop(self.extent[name], self.spec.schedule.unroll.get(name, 1), carried, body,
                          self.tap_order(name))

        return red(0, init)

    def _set_point(self, p: tuple[int, ...]) -> None:
        """Bind the register-tile loops to the tile point `p`."""
        for n, j in zip(self.tile, p):
            self.bind(n, Lin(None, j))

    def _conds(self, guards: list[tuple[str, int]]) -> list[tuple[Lin, int]]:
        """The split-tail guards `guards` as conditions `0 <= value < extent` at the current point."""
        return [(self.value(n), e) for n, e in guards]

    def _store_tile(self, points: list[tuple[int, ...]], values: list[SSAValue], guards: list[tuple[str, int]],
                    transpose: bool = True) -> None:
        """Epilogue and stores of a finished register tile, one value per point: transposed first
        when its lanes are strided in the output (`transposed_row`)."""
        multiplier = self.interleaved_loop() if transpose else None
        if multiplier is not None:
            return self._finish_interleaved(multiplier, points, values, guards)
        row = self.transposed_row() if transpose else None
        if row is not None:
            return self._finish_transposed(row, points, values, guards)
        for p, v in zip(points, values):
            self._set_point(p)
            self._finish(v, self._dims(), self._conds(guards))

    def transposed_row(self) -> str | None:
        """The register-tile loop to store along when the vector lanes are strided in the output
        (lanes over channels: a conv, gemm or max pool): a tile loop of 2..width points contiguous in
        the output (conv's ow, or a flat fusion's `oh*ow.i`: see `flat_fusion`)."""
        if self.vec is None:
            return None
        names = [n for n, _ in self.spec.dims]
        out_map, out_shape = self.spec.out_map, self.spec.out_shape
        strides = {n: stride_of(out_map, out_shape, names.index(n)) for n in names}
        if lane_stride(out_map, out_shape, names.index(self._vector_dim()), self.width) == 1:
            return None

        def contiguous(t: str) -> bool:
            fused = self.fusion_of(t)
            if fused:
                return self.flat_fusion(fused)
            dim = Loop(t).dim
            if t in (dim, Loop.inner(dim)):  # steps of one along `dim`, within a channel block too
                return lane_stride(out_map, out_shape, names.index(dim), self.extent[t]) == 1
            return [strides[d] for d in self._origins(t)] == [1]
        return next((t for t in self.tile if 1 < self.extent[t] <= self.width and contiguous(t)), None)

    def interleaved_loop(self) -> str | None:
        """The register-tile loop over a channel multiplier (`depthwise_multiplier`'s co, extent m)
        whose values of a point, interleaved lane by lane, are m vectors of consecutive values in
        the output (stored channel-blocked by pack-activations: `interleaved_block`): the output
        and every epilogue operand read the vector dim g and co only as `m * g + co`. None
        otherwise (an NCHW output: `transposed_row`)."""
        if self.vec is None or self.vec != Loop.inner(self._vector_dim()):
            return None
        spec, width = self.spec, self.width
        names = [n for n, _ in spec.dims]
        g = names.index(self._vector_dim())
        operands = {k for _, refs, _ in spec.steps for k in refs}
        accesses = [(spec.out_map, spec.out_shape)] + [(spec.maps[k], spec.in_shapes[k]) for k in sorted(operands)]
        for t in self.tile:
            m = self.extent[t]
            if t not in names or m < 2 or width % m:
                continue
            co = names.index(t)
            if all(one_channel(amap, g, co, m, width) for amap, _ in accesses) and interleaves(
                    spec.out_map, spec.out_shape, g, co, m, width):
                return t
        return None

    def _finish_interleaved(self, loop: str, points, accs, guards: list[tuple[str, int]]) -> None:
        """Epilogue and stores of a tile over a channel multiplier (`interleaved_loop`): the m
        accumulators of each point (lanes over g, one per co) interleaved into m vectors of
        channels `m * g + co` in a row, each bound as g at its first channel and co along the
        lanes, so that the epilogue reads its per-channel operands and the store writes whole
        vectors:

            acc[co = 0] : [c0 c2 .. c14], acc[co = 1] : [c1 c3 .. c15]  ->  [c0 .. c7] [c8 .. c15]
        """
        b, width = self.b, self.width
        pos, m = self.tile.index(loop), self.extent[loop]
        groups: dict[tuple, list] = {}
        for t, p in sorted(enumerate(points), key=lambda tp: tp[1][pos]):
            groups.setdefault(p[:pos] + p[pos + 1:], []).append(accs[t])
        with self._restoring([*self.tile, self.vec]):
            for p, values in groups.items():
                self._set_point(p[:pos] + (0,) + p[pos:])
                self.bind(loop, Lin(None, 0, 1))
                self.ranges[loop] = (0, width - 1)
                for j, v in enumerate(b.interleave(values, width)):
                    self.bind(self.vec, Lin(None, j * width // m))
                    self._finish(v, self._dims(), self._conds(guards))

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
        self.flat_lanes = self.fusion_of(row) is not None
        with self._restoring(self.tile):  # versions emitted next see the tile loops unbound
            for p, values in groups.items():
                rows = b.transpose(values, width)
                self._set_point(p[:pos] + (0,) + p[pos:])
                self.bind(row, Lin(None, 0, 1))
                self.ranges[row] = (0, width - 1)  # lanes past the tile read past it: keep their checks
                for lane, v in enumerate(rows):
                    self.bind(self.vec, Lin(None, lane))
                    self._finish(v, self._dims(), self._conds(guards) + [(self.ivs[row], r)], lead)
                self.bind(self.vec, Lin(None, 0, 1))
        self.flat_lanes = False

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
