"""Builder of loop-level IR (scf/arith/math/memref/vector) used by convert-nest-to-loops.

`LoopBuilder` appends ops to a current block and opens nested regions for loops and guards; values
are scalars (`index`, `f32`, `i1`) or vectors of `width` lanes. `Lin` is an index that is affine in
the lane number of the vector loop (`s + k + c * lane`), which is how access maps are evaluated
inside a vectorised loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import gcd

from xdsl.dialects import arith, llvm, math, memref, scf, vector
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    VectorType,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from nasir.dialects.loops import PrefetchOp

index = IndexType()


@dataclass(frozen=True)
class Lin:
    """An index `s + k + c * lane`: `s` a scalar SSA index (or None for 0), `k`, `c` constants.

    `align`: a known divisor of `s` (0 when `s` is None: 0 is a multiple of everything), so that
    `floordiv` / `mod` by a divisor of it can split off the lanes (packed layouts).
    """

    s: SSAValue | None = None
    k: int = 0
    c: int = 0
    align: int = 1

    def __post_init__(self):
        if self.s is None:
            object.__setattr__(self, "align", 0)

    @property
    def constant(self) -> bool:
        return self.s is None and self.c == 0


class LoopBuilder:
    """Appends ops to `block`; constants go to the top of `entry` (they dominate everything).
    `mask_registers`: the target's (`CPUTarget.mask_registers`); without them `vstore` writes a
    constant prefix of lanes as plain stores (`prefix_pieces`)."""

    def __init__(self, entry: Block, mask_registers: bool = True):
        self.entry = entry
        self.mask_registers = mask_registers
        self.block = entry
        self._consts: dict[tuple, SSAValue] = {}
        self._pure: dict[tuple, SSAValue] = {}

    # Plumbing ---------------------------------------------------------------------------------
    def add(self, op: Operation) -> SSAValue | None:
        self.block.add_op(op)
        return op.results[0] if op.results else None

    def const(self, value: float | int | tuple, ty: Attribute) -> SSAValue:
        """A constant at the top of the entry block; for a vector type, `value` for every lane or
        a tuple of one value per lane."""
        key = (value, ty)
        if key not in self._consts:
            if isinstance(ty, VectorType):
                lanes = ty.get_shape()[0]
                cast = float if ty.element_type == f32 else int
                values = value if isinstance(value, tuple) else (value,) * lanes
                op = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, [cast(v) for v in values]), ty)
            elif ty == f32:
                op = arith.ConstantOp(FloatAttr(float(value), f32))
            else:
                op = arith.ConstantOp(IntegerAttr(int(value), ty))
            first = self.entry.first_op
            self.entry.insert_op_before(op, first) if first is not None else self.entry.add_op(op)
            self._consts[key] = op.result
        return self._consts[key]

    def idx(self, n: int) -> SSAValue:
        return self.const(n, index)

    def lin(self, iv: SSAValue) -> Lin:
        """A loop value as a Lin: a constant one (an unrolled iteration) as `Lin(None, k)`."""
        owner = iv.owner
        if isinstance(owner, arith.ConstantOp) and iv.type == index and self._consts.get(
                (owner.value.value.data, index)) is iv:
            return Lin(None, owner.value.value.data)
        return Lin(iv)

    def iota(self, width: int, scale: int = 1) -> SSAValue:
        """The i32 vector `[0, scale, 2 * scale, ...]`: lane offsets of a vector index (masks
        compare i32 lanes, one register for 16 of them; a kernel's indices fit in 32 bits)."""
        return self.const(tuple(j * scale for j in range(width)), VectorType(i32, [width]))

    # Regions ----------------------------------------------------------------------------------
    def in_block(self, block: Block, body: Callable[[], object]):
        saved, self.block = self.block, block
        try:
            return body()
        finally:
            self.block = saved

    def for_(self, lb: int | SSAValue, ub: int | SSAValue, step: int, carried: Sequence[SSAValue],
             body: Callable[[SSAValue, list[SSAValue]], list[SSAValue]]) -> list[SSAValue]:
        block = Block(arg_types=[index, *[v.type for v in carried]])

        def inner():
            out = body(block.args[0], list(block.args[1:]))
            self.add(scf.YieldOp(*out))

        self.in_block(block, inner)
        lb = self.idx(lb) if isinstance(lb, int) else lb
        ub = self.idx(ub) if isinstance(ub, int) else ub
        op = scf.ForOp(lb, ub, self.idx(step), list(carried), block)
        self.add(op)
        return list(op.results)

    def loop(self, extent: int, unroll: int, carried: list[SSAValue],
             body: Callable[[SSAValue, list[SSAValue]], list[SSAValue]],
             order: Sequence[int] | None = None) -> list[SSAValue]:
        """`for i in range(extent)`, unrolled `unroll` times (fully when unroll >= extent, then its
        iterations in `order` if given: a permutation of range(extent))."""
        if extent == 1 or unroll >= extent:
            for j in order or range(extent):
                carried = body(self.idx(j), carried)
            return carried
        if unroll <= 1:
            return self.for_(0, extent, 1, carried, body)
        main = extent - extent % unroll

        def unrolled(iv, c):
            for j in range(unroll):
                c = body(self.addi(iv, self.idx(j)) if j else iv, c)
            return c

        carried = self.for_(0, main, unroll, carried, unrolled)
        if main < extent:
            carried = self.for_(main, extent, 1, carried, body)
        return carried

    def for_lanes(self, width: int, body: Callable[[SSAValue], None]) -> None:
        """`body(lane)` for each lane of a vector, as a loop (LLVM unrolls it; emitting it
        unrolled would multiply the IR of every register-tile point by the width)."""
        self.for_(0, width, 1, [], lambda iv, carried: (body(iv), carried)[1])

    def parallel(self, extent: int, body: Callable[[SSAValue], None]) -> None:
        """A loop whose iterations may run on different threads (`scf.parallel`)."""
        block = Block(arg_types=[index])

        def inner():
            body(block.args[0])
            self.add(scf.ReduceOp())

        self.in_block(block, inner)
        self.add(scf.ParallelOp([self.idx(0)], [self.idx(extent)], [self.idx(1)], Region(block)))

    def if_(self, cond: SSAValue, body: Callable[[], None], orelse: Callable[[], None] | None = None) -> None:
        regions = []
        for branch in (body, orelse) if orelse is not None else (body,):
            block = Block()
            self.in_block(block, lambda branch=branch: (branch(), self.add(scf.YieldOp())))
            regions.append(Region(block))
        self.add(scf.IfOp(cond, [], *regions))

    # Index arithmetic -------------------------------------------------------------------------
    def pure(self, key: tuple, make: Callable[[], SSAValue]) -> SSAValue:
        """`make()`'s value, reused for the same `key` within the current block (the unrolled
        points of a register tile compute the same indices and masks many times)."""
        key = (self.block, *key)
        if key not in self._pure:
            self._pure[key] = make()
        return self._pure[key]

    def addi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.pure(("addi", a, b), lambda: self.add(arith.AddiOp(a, b)))

    def muli(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.pure(("muli", a, b), lambda: self.add(arith.MuliOp(a, b)))

    def divide(self, a: Lin, f: int, mod: bool = False) -> Lin:
        """`a floordiv f` (`mod`: `a mod f`) of a scalar index, as `arith.floordivsi` / `arith.remsi`
        compute it once lowered (sdiv, srem: the same for the non-negative indices of nest maps),
        without an op where the quotient is known: a constant folded, `(x * 16 + 32) floordiv 16`
        read as `x + 2`; a repeat in the block reused (the unrolled points of a register tile).

            (%ci * 8) floordiv 8  ->  %ci           1020 floordiv 32  ->  31 (no op)
        """
        assert a.c == 0 and f > 0, "a scalar index over a positive divisor"
        if a.s is None:
            quotient = abs(a.k) // f * (1 if a.k >= 0 else -1)  # truncated, as sdiv
            return Lin(None, a.k - quotient * f if mod else quotient)
        if not mod and a.k % f == 0 and (scaled := self._scaled(a.s)) is not None and scaled[1] % f == 0:
            x, m = scaled
            return self.lin_add(self.lin_scale(Lin(x), m // f), Lin(None, a.k // f))
        kind = arith.RemSIOp if mod else arith.FloorDivSIOp
        scalar = self.scalar(a)
        return Lin(self.pure((kind, scalar, f), lambda: self.add(kind(scalar, self.idx(f)))))

    def _scaled(self, s: SSAValue) -> tuple[SSAValue, int] | None:
        """(x, m) when `s` is `x * m` for a constant m built by `lin_scale`."""
        op = s.owner
        if isinstance(op, arith.MuliOp) and isinstance(c := op.rhs.owner, arith.ConstantOp) \
                and self._consts.get((c.value.value.data, index)) is op.rhs:
            return op.lhs, c.value.value.data
        return None

    def lin_add(self, a: Lin, b: Lin) -> Lin:
        s = a.s if b.s is None else b.s if a.s is None else self.addi(a.s, b.s)
        return Lin(s, a.k + b.k, a.c + b.c, gcd(a.align, b.align))

    def lin_scale(self, a: Lin, m: int) -> Lin:
        s = None if a.s is None or m == 0 else a.s if m == 1 else self.muli(a.s, self.idx(m))
        return Lin(s, a.k * m, a.c * m, a.align * abs(m))

    def lane(self, a: Lin, lane: SSAValue) -> SSAValue:
        """The index of lane `lane` (an SSA index) as one SSA value."""
        scaled = lane if a.c == 1 else self.muli(lane, self.idx(a.c))
        return self.addi(self.scalar(a), scaled) if a.c else self.scalar(a)

    def scalar(self, a: Lin, lane: int = 0) -> SSAValue:
        """The index of lane `lane` as one SSA value."""
        k = a.k + a.c * lane
        if a.s is None:
            return self.idx(k)
        return a.s if k == 0 else self.addi(a.s, self.idx(k))

    # Conditions -------------------------------------------------------------------------------
    def below(self, a: Lin, size: int, width: int | None) -> SSAValue:
        """0 <= a < size, as i1 (scalar) or a lane mask (unsigned compare catches negatives)."""
        return self.pure(("below", a, size, width), lambda: self._below(a, size, width))

    def _below(self, a: Lin, size: int, width: int | None) -> SSAValue:
        if a.s is None and width is not None:  # a constant index: the mask is known
            return self.const(tuple(int(0 <= a.k + a.c * j < size) for j in range(width)), VectorType(i1, [width]))
        if a.c == 0 or width is None:
            cond = self.add(arith.CmpiOp(self.scalar(a), self.idx(size), "ult"))
            return cond if width is None else self.add(vector.BroadcastOp(cond, VectorType(i1, [width])))
        vty = VectorType(i32, [width])
        base = self.add(arith.IndexCastOp(self.scalar(a), i32))
        lanes = self.add(arith.AddiOp(self.add(vector.BroadcastOp(base, vty)), self.iota(width, a.c)))
        # arith.cmpi is scalar-only in xDSL: lane masks use llvm.icmp (6 = ult), passed through later.
        return self.add(llvm.ICmpOp(lanes, self.const(size, vty), IntegerAttr(6, i64)))

    def all_of(self, conds: list[SSAValue]) -> SSAValue | None:
        """The conjunction of i1 conditions or lane masks (None for none); two constant masks
        give a constant (a tail tile's row bound and its points' bound: a known prefix)."""
        out = None
        for c in conds:
            out = c if out is None else self.pure(("and", out, c), lambda: self._and(out, c))
        return out

    def _and(self, a: SSAValue, b: SSAValue) -> SSAValue:
        la, lb = constant_lanes(a), constant_lanes(b)
        if la is not None and lb is not None:
            return self.const(tuple(int(x and y) for x, y in zip(la, lb)), a.type)
        return self.add(arith.AndIOp(a, b))

    def clamp(self, a: SSAValue, size: int) -> SSAValue:
        return self.pure(("clamp", a, size), lambda: self.add(
            arith.MaxSIOp(self.idx(0), self.add(arith.MinSIOp(a, self.idx(size - 1))))))

    # Float arithmetic (scalars or vectors alike) ----------------------------------------------
    def f(self, value: float, like: SSAValue) -> SSAValue:
        return self.const(value, like.type)

    def binary(self, kind: str, a: SSAValue, b: SSAValue) -> SSAValue:
        ops = {"add": arith.AddfOp, "sub": arith.SubfOp, "mul": arith.MulfOp, "div": arith.DivfOp}
        return self.add(ops[kind](a, b))

    # max and min are NaN where an operand is (torch, ONNX Runtime), not maxnum/minnum, which drop NaN
    def maximum(self, x: SSAValue, acc: SSAValue) -> SSAValue:
        """`x > acc or x is NaN ? x : acc`: the larger, NaN where either is (a max reduction keeps a
        NaN it met). A vmaxps, a vcmpunordps and a blend."""
        keep = self.add(arith.OrIOp(self.add(arith.CmpfOp(x, acc, "ogt")), self.add(arith.CmpfOp(x, x, "uno"))))
        return self.select(keep, x, acc)

    def minimum(self, x: SSAValue, acc: SSAValue) -> SSAValue:
        """`x < acc or x is NaN ? x : acc`: the smaller, NaN where either is (as `maximum`)."""
        keep = self.add(arith.OrIOp(self.add(arith.CmpfOp(x, acc, "olt")), self.add(arith.CmpfOp(x, x, "uno"))))
        return self.select(keep, x, acc)

    def at_least(self, v: SSAValue, bound: float) -> SSAValue:
        """max(v, bound) for a bound that is a number: `v < bound ? bound : v` (NaN v stays), one vmaxps."""
        c = self.f(bound, v)
        return self.select(self.add(arith.CmpfOp(v, c, "olt")), c, v)

    def at_most(self, v: SSAValue, bound: float) -> SSAValue:
        """min(v, bound) for a bound that is a number: `v > bound ? bound : v` (NaN v stays), one vminps."""
        c = self.f(bound, v)
        return self.select(self.add(arith.CmpfOp(v, c, "ogt")), c, v)

    def fma(self, a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
        return self.add(math.FmaOp.create(operands=[a, b, c], result_types=[a.type]))

    def unary(self, kind: str, a: SSAValue) -> SSAValue:
        ops = {"exp": math.ExpOp, "log": math.LogOp, "sqrt": math.SqrtOp, "abs": math.AbsFOp}
        return self.add(ops[kind].create(operands=[a], result_types=[a.type]))

    def pow(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(math.PowFOp.create(operands=[a, b], result_types=[a.type]))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SelectOp(cond, a, b))

    # Memory -----------------------------------------------------------------------------------
    def load(self, ref: SSAValue, indices: list[SSAValue]) -> SSAValue:
        return self.add(memref.LoadOp.get(ref, indices))

    def prefetch(self, ref: SSAValue, indices: list[SSAValue], level: int = 1) -> None:
        self.add(PrefetchOp(ref, indices, level))

    def store(self, value: SSAValue, ref: SSAValue, indices: list[SSAValue]) -> None:
        self.add(memref.StoreOp.get(value, ref, indices))

    def vload(self, ref: SSAValue, indices: list[SSAValue], width: int, mask: SSAValue | None,
              passthru: float) -> SSAValue:
        vty = VectorType(f32, [width])
        if mask is None:
            return self.add(vector.LoadOp(ref, indices, vty))
        return self.add(vector.MaskedLoadOp(ref, indices, mask, self.const(passthru, vty), vty))

    def merged(self, ref: SSAValue, axis: int) -> SSAValue:
        """`ref` with axes `axis - 1` and `axis` as one, the same memory (a flat plane whose rows a
        vector runs across: see `NestEmitter.flat_fusion`):

            memref.collapse_shape %out [[0], [1], [2, 3]] : memref<1x64x8x8xf32> into memref<1x64x64xf32>
        """
        shape = ref.type.get_shape()
        groups = [[a] for a in range(axis - 1)] + [[axis - 1, axis]] + [[a] for a in range(axis + 1, len(shape))]
        merged = MemRefType(ref.type.element_type, [*shape[:axis - 1], shape[axis - 1] * shape[axis], *shape[axis + 1:]])
        reassociation = ArrayAttr([ArrayAttr([IntegerAttr(a, i64) for a in g]) for g in groups])
        return self.pure(("merged", ref, axis), lambda: self.add(memref.CollapseShapeOp(
            operands=[ref], result_types=[merged], properties={"reassociation": reassociation})))

    def shared_vload(self, ref: SSAValue, indices: list[SSAValue], width: int, mask: SSAValue | None,
                     passthru: float) -> SSAValue:
        """`vload` of a kernel input, which is read-only: the points and taps of a tile that read
        the same vector share one load."""
        return self.pure(("vload", ref, *indices, width, mask, passthru),
                         lambda: self.vload(ref, indices, width, mask, passthru))

    def vstore(self, value: SSAValue, ref: SSAValue, indices: list[SSAValue], mask: SSAValue | None,
               axis: int = -1) -> None:
        """Store `value` at `ref[indices]` (its lanes one element apart, along `axis`: the last, or
        one followed by axes of extent 1 only), the lanes of `mask` only.
        Without mask registers, a mask that is a constant prefix of k lanes (a transposed tile's
        rows of k < width points) stores k's power-of-two pieces (6 lanes: 4, then 2), each a
        plain store of a narrower vector:

            vector.maskedstore %out[%c, %r, %x0], %first6, %v : vector<8xf32>
            ->  vector.store %v4, %out[%c, %r, %x0] : vector<4xf32>     (%v4: lanes 0-3 of %v)
                vector.store %v2, %out[%c, %r, %x4] : vector<2xf32>     (%v2: lanes 4-5, %x4 = %x0 + 4)

        (a piece of one lane is stored as a float).

        A piece's offset goes to `axis`, so that each index stays within its axis (a checked build
        checks them one by one): lanes over the channels of [1, 195, 1, 1] move axis 1.
        """
        if mask is None:
            self.add(vector.StoreOp(value, ref, indices))
            return
        prefix = None if self.mask_registers else constant_prefix(mask)
        if prefix is None:
            self.add(vector.MaskedStoreOp(ref, indices, mask, value))
            return
        width = value.type.get_shape()[0]
        lanes = None
        for offset, size in prefix_pieces(prefix):
            at = list(indices)
            if offset:
                at[axis] = self.add(arith.AddiOp(indices[axis], self.idx(offset)))
            if size == 1:
                # one lane as a float: LLVM's O3 aborted on a store of a 1-lane vector shuffled out of
                # a 4-lane one (a cast to FixedVectorType; fuzzer seed 1795995369, a stride-2 max pool)
                lanes = lanes or self.lanes_buffer(width, value)
                self.store(self.load(lanes, [self.idx(offset)]), ref, at)
                continue
            part = value if size == width else self.shuffle(value, value, list(range(offset, offset + size)))
            self.add(vector.StoreOp(part, ref, at))

    def shuffle(self, a: SSAValue, b: SSAValue, lanes: list[int]) -> SSAValue:
        ty = VectorType(a.type.element_type, [len(lanes)])
        return self.add(vector.ShuffleOp(a, b, DenseArrayBase.from_list(i64, lanes), result_type=ty))

    def transpose(self, vectors: list[SSAValue], width: int) -> list[SSAValue]:
        """`rows[l][p] = vectors[p][l]` for p < len(vectors): `width` rows of `width` lanes from
        `width`-lane vectors; lanes from len(vectors) on hold other values (callers mask them).
        Vectors, padded to P (a power of two) by repeating the last, interleave their groups of
        values log2(P) times; each round's vectors, twice as long as the last round's, are kept
        as chunks of `width` lanes, so that every shuffle takes two `width`-lane vectors to one
        (one vpermt2ps: 64 for 16 x 16, where shuffles of the long vectors let LLVM emit about
        150 and as many register copies: a conv with 16 input channels per group ran 0.87x the
        time). A chunk then holds width/P rows; a row not at its start is shuffled there.

            round 1: [a0 a1 .. a15] [b0 b1 .. b15] -> [a0 b0 a1 b1 .. a7 b7] [a8 b8 .. a15 b15]
        """
        assert len(vectors) <= width, "transpose: more vectors than lanes (see transpose_chunks)"
        points = 1 << (len(vectors) - 1).bit_length()
        level = [[v] for v in vectors] + [[vectors[-1]]] * (points - len(vectors))
        half, group = width // 2, 1
        while len(level) > 1:
            pairs = zip(level[::2], level[1::2])
            level = [[self.shuffle(a[q // 2], c[q // 2], interleave_mask(width, group, q % 2 * half))
                      for q in range(2 * len(a))] for a, c in pairs]
            group *= 2
        rows = []
        for l in range(width):
            chunk, at = level[0][l * points // width], l * points % width
            rows.append(chunk if at == 0 else
                        self.shuffle(chunk, chunk, [at + j % points for j in range(width)]))
        return rows

    def interleave(self, vectors: list[SSAValue], width: int) -> list[SSAValue]:
        """The lanes of m `width`-lane vectors (m a power of two) taken in turn, as m vectors:
        `out[j][i] = vectors[(j * width + i) % m][(j * width + i) // m]`. Evens and odds are
        interleaved on their own, then lane by lane into each other (one shuffle an output vector
        a round):

            [a0 .. a7] [b0 .. b7] -> [a0 b0 a1 b1 a2 b2 a3 b3] [a4 b4 .. a7 b7]
        """
        if len(vectors) == 1:
            return list(vectors)
        assert len(vectors) & (len(vectors) - 1) == 0 and len(vectors) <= width, "interleave: m a power of two"
        evens, odds = self.interleave(vectors[::2], width), self.interleave(vectors[1::2], width)
        return [self.shuffle(e, o, interleave_mask(width, 1, offset)) for e, o in zip(evens, odds)
                for offset in (0, width // 2)]

    def transpose_chunks(self, vectors: list[SSAValue], width: int) -> list[list[SSAValue]]:
        """The transpose of any number of `width`-lane vectors: `rows[l][j]` holds values
        `j * width ..` of row l (`rows[l][j][i] = vectors[j * width + i][l]`), each block of `width`
        vectors transposed on its own (a Winograd tile's 13 points with 8 lanes: two chunks)."""
        blocks = [self.transpose(vectors[i: i + width], width) for i in range(0, len(vectors), width)]
        return [list(chunks) for chunks in zip(*blocks)]

    def splat(self, value: SSAValue, width: int) -> SSAValue:
        return self.add(vector.BroadcastOp(value, VectorType(value.type, [width])))

    def lanes_buffer(self, width: int, fill: SSAValue | None = None) -> SSAValue:
        """A stack buffer of `width` floats (optionally filled with a vector), to assemble or take
        apart a vector lane by lane, or to select lanes with a masked load (xDSL has no vector select)."""
        buf = self.add(memref.AllocaOp.get(f32, shape=[width]))
        if fill is not None:
            self.vstore(fill, buf, [self.idx(0)], None)
        return buf


def constant_lanes(mask: SSAValue) -> tuple[bool, ...] | None:
    """The lanes of a lane mask made by `LoopBuilder.const`, else None."""
    owner = mask.owner
    if not isinstance(owner, arith.ConstantOp) or not isinstance(owner.value, DenseIntOrFPElementsAttr):
        return None
    return tuple(bool(v) for v in owner.value.get_values())


def constant_prefix(mask: SSAValue) -> int | None:
    """k when `mask` is a constant whose first k lanes are set and the others not, else None."""
    lanes = constant_lanes(mask)
    if lanes is None:
        return None
    k = sum(lanes)
    return k if lanes == (True,) * k + (False,) * (len(lanes) - k) else None


def prefix_pieces(k: int) -> list[tuple[int, int]]:
    """(offset, size) of the power-of-two pieces of k lanes, largest first: 7 -> (0, 4), (4, 2), (6, 1)."""
    pieces, offset = [], 0
    for bit in reversed(range(k.bit_length())):
        if k >> bit & 1:
            pieces.append((offset, 1 << bit))
            offset += 1 << bit
    return pieces


def interleave_mask(width: int, group: int, offset: int) -> list[int]:
    """Shuffle lanes taking groups of `group` values alternately from lanes `offset`.. of the first
    and of the second `width`-lane vector: `width` lanes, half from each."""
    return [k for m in range(width // 2 // group)
            for k in (*range(offset + m * group, offset + (m + 1) * group),
                      *range(width + offset + m * group, width + offset + (m + 1) * group))]
