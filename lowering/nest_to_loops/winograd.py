"""The kernel of a conv marked `nasir.winograd` (see schedule/winograd.py): NestEmitter's loops and
epilogue around a 1-D Winograd register tile.

It reads the transformed weights pack-weights made once (`WinogradPlan.weights`),

    U[ci][kh][e][co] = sum_kw G[e, kw] * w[co, ci, kh, kw]

shared by its threads as read-only data (made at every call, half of U came from the other
core's cache: a 64-channel 16 x 16 conv ran 0.10-0.18 ms at 2 threads, 0.073 with U made once),
and first fills its scratch (a slice of the workspace arena that nest-bufferize reserves) with the
transformed input, in a parallel loop over rows and input channels (`each_row`):

    V[ci][row][t][e] = sum_i BT_p[e, i] * x[ci, row - pad, s*m*t + off_p(i)]   (lanes over tiles t)

The input is read a row at a time as `s * m` residue classes of its columns (`residues`: three
rounds of even/odd shuffles for 8 classes, one `vpermt2ps` each), kept in a small stack buffer so
that each of a phase's points is one unaligned load of a vector of tiles (16 with AVX-512); the E
products of a vector of tiles are transposed (in blocks of as many products as lanes) before their
stores, so that a tile's E values are adjacent (its broadcasts read one
or two cache lines, not E: the stem's contraction ran 1.5x the time with V[ci][row][e][t]). Then
the nest's own outer loops (rows, channel blocks, tiles of the row; a fused max pool's) run this
tile per vector of output channels, E x (points / m) accumulators (ResNet's stem: 13 x 2):

    for ci: for kh (unrolled): for e: u = U[ci][kh][e][co:co+16]
                                     for t: acc[e][t] += u * V[ci][sh*oh + kh][t0 + t][e]
    y[m*t + j] = sum_e AT[j, e] * acc[e][t]      (constants: zeros skipped, ones added)

A conv of stride 1 (one phase: a 3x3 conv's E = 6) runs its products one at a time
(`WinogradPlan.by_point`), each in a loop over ci of its own with a row of up to 12 (AVX2) or 28
tiles, each weight vector feeding that many FMAs; V and U are stored so that the loop reads
both in order, and no transpose is needed:

    V[row][e][ci][t]   U[e][kh][ci][co]
    for e: for ci: for kh (unrolled): u = U[e][kh][ci][co:co+8]
                                      for t: acc[e][t] += u * V[sh*oh + kh][e][ci][t0 + t]

(with the stem's tile a 64-channel 56 x 56 conv ran 1.3x the direct conv's time at 8 lanes, each
weight vector feeding 2 FMAs; so 0.75x). The kernel then hands the outputs to the epilogue and
stores of NestEmitter (bias, ReLU, channel-blocked or transposed NCHW stores).

A grouped conv (`g` groups of ci -> co channels) keeps these layouts over all its channels: V's
ci runs over the g * ci input channels, U's co over the g * co output channels (its ci over a
group's), and the tile of group g reads V from channel g * ci and U from channel g * co on.
"""

from __future__ import annotations

import itertools

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import MemRefType, VectorType, f32, i1
from xdsl.ir import SSAValue

from nasir.dialects.schedule import Loop
from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.emitter import NestEmitter
from nasir.lowering.nest_to_loops.spec import Spec
from nasir.lowering.schedule.winograd import WinogradPlan, row_tile_loop, winograd_plan
from nasir.lowering.target import CPUTarget


def residues(b: LoopBuilder, vectors: list[SSAValue], classes: int, width: int) -> list[SSAValue]:
    """`classes` vectors from consecutive values split in `width`-lane vectors (classes of them):
    vector q holds values q, q + classes, q + 2 * classes, ... Each round takes even and odd
    values of pairs of vectors, so `classes` (a power of two) costs log2(classes) shuffles a vector."""
    if classes == 1:
        return vectors
    pairs = list(zip(vectors[::2], vectors[1::2]))
    even = [b.shuffle(a, c, [2 * j for j in range(width)]) for a, c in pairs]
    odd = [b.shuffle(a, c, [2 * j + 1 for j in range(width)]) for a, c in pairs]
    low, high = residues(b, even, classes // 2, width), residues(b, odd, classes // 2, width)
    return [v for pair in zip(low, high) for v in pair]


def linear_sum(b: LoopBuilder, coefficients, values: list[SSAValue]) -> SSAValue:
    """sum_k c_k * v_k for constant c_k: zero terms dropped, +-1 as adds and subtracts."""
    total = None
    for c, v in zip(coefficients, values):
        c = float(c)
        if c == 0.0:
            continue
        if total is None:
            total = v if c == 1.0 else b.binary("mul", v, b.f(c, v))
        elif c in (1.0, -1.0):
            total = b.binary("add" if c == 1.0 else "sub", total, v)
        else:
            total = b.fma(v, b.f(c, v), total)
    return total if total is not None else b.f(0.0, values[0])


def each_row(b: LoopBuilder, channels: int, rows: int, body, rows_outer: bool) -> None:
    """`body(ci, row)` for every input channel and row, as one parallel loop over both: the
    kernel's threads share the transforms' rows as they share the contraction's (in serial loops
    the first thread ran the whole kernel alone: `parallel.team_safe`). Rows outer where the
    contraction's threads take rows, channels outer where they take channels (a grouped conv's
    groups), so each thread transforms most of the input it then reads (ResNeXt-29 at 2 threads
    ran 1.02x the time with its groups' channels transformed rows outer):

        channels outer: scf.parallel (%k) = (0) to (3 * 229) { %ci = %k floordiv 229   %r = %k mod 229   body }
    """
    fastest = channels if rows_outer else rows

    def point(k: SSAValue) -> None:
        fast, slow = b.scalar(b.divide(Lin(k), fastest, mod=True)), b.scalar(b.divide(Lin(k), fastest))
        body(*((fast, slow) if rows_outer else (slow, fast)))

    b.parallel(channels * rows, point)


class WinogradEmitter(NestEmitter):
    """A conv nest's kernel with a 1-D Winograd tile; `scratch` is its workspace slice (i8)."""

    def __init__(self, b: LoopBuilder, spec: Spec, refs: list[SSAValue], scratch: SSAValue, target: CPUTarget):
        super().__init__(b, spec, refs, target)
        where = f"nest '{spec.name}'"
        plan = winograd_plan(spec, self.width or 0)
        if plan is None:
            raise LoweringError(f"{where}: nasir.winograd on a nest that is not a batch-1 conv with a wide "
                                f"strided row window over an NCHW input")
        along = row_tile_loop(plan, spec.schedule, spec.domain)
        if along is None:
            raise LoweringError(f"{where}: nasir.winograd needs lanes over output channels and a register tile "
                                f"of whole Winograd tiles along ow (a multiple of {plan.m} points)")
        self.plan: WinogradPlan = plan
        self.row_tile = along
        self.scratch = scratch
        self.V = self.U = None

    def _view(self, offset_floats: int, shape: list[int]) -> SSAValue:
        b = self.b
        return b.add(memref.ViewOp(self.scratch, b.idx(4 * offset_floats), [], MemRefType(f32, shape)))

    def prepare(self) -> None:
        plan = self.plan
        e = plan.extents
        channels = plan.groups * e["ci"]
        if plan.by_point:
            self.V = self._view(0, [plan.rows, plan.points, channels, plan.tile_lanes])
        else:
            self.V = self._view(0, [channels, plan.rows, plan.tile_lanes, plan.points])
        self.U = self.ins[1]
        if tuple(self.U.type.get_shape()) != plan.weight_shape:
            raise LoweringError(f"nest '{self.spec.name}': nasir.winograd reads its weights transformed, "
                                f"{list(plan.weight_shape)}, not {list(self.U.type.get_shape())}: run pack-weights first")
        self.at, _, bts = plan.matrices()
        self._transform_input(bts)

    def _at_v(self, ci: SSAValue, row: SSAValue, tile: SSAValue, point: int) -> list[SSAValue]:
        """Indices of V's value of product `point` of `tile` (see `WinogradPlan.by_point`)."""
        b = self.b
        if self.plan.by_point:
            return [row, b.idx(point), ci, tile]
        return [ci, row, tile, b.idx(point)]

    def _at_u(self, ci: SSAValue, kh: SSAValue, point: int, co: SSAValue) -> list[SSAValue]:
        """Indices of U's vector of output channels from `co`, for product `point`."""
        b = self.b
        if self.plan.by_point:
            return [b.idx(point), kh, ci, co]
        return [ci, kh, b.idx(point), co]

    def _transform_input(self, bts) -> None:
        """V[ci][r][t][e] for every input channel ci (of all groups) and row r the output rows
        reach (padding rows are zeros; stored V[r][e][ci][t] where the kernel runs by point)."""
        b, plan, w = self.b, self.plan, self.width
        e = plan.extents
        classes = plan.classes
        places = {(ph, i): divmod(off, classes) for ph in plan.phases for i, off in enumerate(plan.offsets(ph))}
        lowest = min(d for d, _ in places.values())
        span = plan.tile_lanes + max(d for d, _ in places.values()) - lowest
        chunks = -(-span // w)
        x = self.ins[0]

        def row(ci: SSAValue, r: SSAValue) -> None:
            held = b.add(memref.AllocaOp.get(f32, shape=[classes, chunks * w]))  # each thread's own
            at = b.addi(r, b.idx(-plan.row_pad)) if plan.row_pad else r
            inside = b.below(Lin(at), plan.in_rows, None)
            clamped = b.clamp(at, plan.in_rows)
            for chunk in range(chunks):
                first = classes * (chunk * w + lowest)
                columns = []
                for k in range(classes):
                    start = first + k * w
                    mask = b.all_of([b.below(Lin(None, start, 1), plan.in_cols, w),
                                     b.splat(inside, w)])
                    columns.append(b.vload(x, [b.idx(0), ci, clamped, b.idx(start)], w, mask, 0.0))
                for q, v in enumerate(residues(b, columns, classes, w)):
                    b.vstore(v, held, [b.idx(q), b.idx(chunk * w)], None)
            products = [b.const(tuple(int(c + j < plan.points) for j in range(w)), VectorType(i1, [w]))
                        for c in range(0, plan.points, w)]
            for lanes in range(plan.tile_lanes // w):
                points = []
                for ph, bt in zip(plan.phases, bts):
                    inputs = []
                    for i in range(ph.points):
                        d, q = places[(ph, i)]
                        inputs.append(b.vload(held, [b.idx(q), b.idx(lanes * w + d - lowest)], w, None, 0.0))
                    points += [linear_sum(b, bt[p], inputs) for p in range(ph.points)]
                if plan.by_point:  # a vector of tiles of each product as it is
                    for p, v in enumerate(points):
                        b.vstore(v, self.V, self._at_v(ci, r, b.idx(lanes * w), p), None)
                    continue
                for t, tile in enumerate(b.transpose_chunks(points, w)):
                    for c, v in enumerate(tile):
                        b.vstore(v, self.V, self._at_v(ci, r, b.idx(lanes * w + t), c * w), products[c])

        parallel = self.spec.schedule.parallel
        each_row(b, plan.groups * e["ci"], plan.rows, row, parallel is not None and Loop(parallel).dim == "oh")

    # The tile -----------------------------------------------------------------------------------
    def interior_box(self):
        """No tile versions: the transformed input is padded, so the tile reads no bounds."""
        return []

    def emit_tile(self, guards: list[tuple[str, int]]) -> None:
        b, plan, w = self.b, self.plan, self.width
        e = plan.extents
        pos = plan.dims
        ty = VectorType(f32, [w])
        self.bind(self.vec, Lin(None, 0, 1))
        for name, _ in self.spec.dims[self.spec.npar:]:  # the tile runs its own reduction
            self.bind(name, Lin(None, 0))
        at_row = self.tile.index(self.row_tile)
        at_oh = next((i for i, n in enumerate(self.tile) if Loop(n).dim == "oh"), None)
        tiles = self.extent[self.row_tile] // plan.m
        rows = self.extent[self.tile[at_oh]] if at_oh is not None else 1
        along = {at_row, at_oh}
        points = list(itertools.product(*[range(self.extent[n]) for n in self.tile]))
        vectors: dict[tuple, list[tuple[int, ...]]] = {}
        for p in points:
            vectors.setdefault(tuple(i for a, i in enumerate(p) if a not in along), []).append(p)
        for group in vectors.values():
            self._set_point(group[0])
            dims = self._dims()
            co, ow, oh = dims[pos["co"]], dims[pos["ow"]], dims[pos["oh"]]
            conv_group = dims[pos["g"]] if "g" in pos else Lin(None, 0)
            channels = b.scalar(b.lin_add(b.lin_scale(conv_group, e["co"]), Lin(co.s, co.k, 0, co.align)))
            inputs = b.lin_scale(conv_group, e["ci"])  # the group's first input channel
            first = b.add(arith.FloorDivSIOp(b.scalar(ow), b.idx(plan.m)))
            zero = b.const(0.0, ty)
            per_point = rows * tiles  # accumulators of a product: [row][tile]

            def step(points, oh=oh, channels=channels, inputs=inputs, first=first):
                def body(ci, accs):
                    accs = list(accs)
                    channel = b.scalar(b.lin_add(inputs, Lin(ci)))
                    for kh in range(e["kh"]):
                        for k, point in enumerate(points):
                            u = b.vload(self.U, self._at_u(ci, b.idx(kh), point, channels), w, None, 0.0)
                            for row in range(rows):
                                r = b.scalar(b.lin_add(b.lin_scale(oh, plan.row_stride),
                                                       Lin(None, plan.row_stride * row + plan.row_dilation * kh)))
                                for t in range(tiles):
                                    v = b.load(self.V, self._at_v(channel, r, b.addi(first, b.idx(t)), point))
                                    at = k * per_point + row * tiles + t
                                    accs[at] = b.fma(u, b.splat(v, w), accs[at])
                    return accs
                return body

            # all products in one loop over ci (E x tiles accumulators), or one loop a product
            passes = [[p] for p in range(plan.points)] if plan.by_point else [list(range(plan.points))]
            accs = [acc for points in passes for acc in b.loop(e["ci"], 1, [zero] * (len(points) * per_point), step(points))]
            outputs = {}
            for p in group:
                t, j = divmod(p[at_row], plan.m)
                row = p[at_oh] if at_oh is not None else 0
                outputs[p] = linear_sum(b, self.at[j], [accs[point * per_point + row * tiles + t] for point in range(plan.points)])
            self._store_tile(group, [outputs[p] for p in group], guards)
