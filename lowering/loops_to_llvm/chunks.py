"""convert-loops-to-llvm: which barriers of @main's team a kernel call may go without.

In @main's team each thread runs its chunk of a kernel's parallel loop (`parallel._chunk`: equal
contiguous chunks of [0, N), by thread number). A kernel whose one loop's iteration i touches
each buffer along one axis only at [s * i, s * (i + 1)), the axis s * N long (s = 1: the loop's
index itself; the indices read as `a * i + r` over the ranges of the loops inside, `_span`),
reads and writes, on each thread, only that thread's chunk of the axis (`chunk_accesses`). Two
such kernels in a row that take the same buffer along the same axis at the same scale need no
barrier between them: each thread reads what it wrote itself (the same chunks: the same N, the
same team), as OpenMP's `nowait` between two loops of the same static schedule. ResNet-34 after
`depthwise`: 32 of its 40 kernel calls are channel-block-local (the loop over blocks of 8
channels), so most of its barriers go.

    scf.parallel (%b) = (0) to (8) {                            @layer1.0_conv1(%x, %w, %y)
      %v = vector.load %x[0, %b, %h, %w0, 0] : memref<1x8x32x32x8xf32>
      vector.store %r, %y[0, %b, %h, %w0, 0] : memref<1x8x32x32x8xf32>
    }
        ->  {0: ChunkAccess(axis=1, write=False), 1: ChunkAccess(axis=None, write=False),
             2: ChunkAccess(axis=1, write=True)}

@main keeps the accesses since its last barrier (`Unsynced`) and waits at a barrier before a
call only when one of the call's accesses could meet another thread's (`Unsynced.conflicts`):
overlapping bytes of the same buffer, one of them a write, and not both chunks of one view along
one axis at one scale (a grouped conv's loop over groups of 4 channel blocks: iteration g at
blocks [4g, 4g + 4), the same chunks as another such loop's, not as a loop over single blocks).
Chunks of one view along one axis at two scales (MobileNetV2's expand 1x1 conv writing two
channel blocks an iteration, the depthwise conv after it reading one) are a `Rechunk`: the same
elements on each thread at T threads when the scales times their chunk sizes agree (scale 2
over 8 iterations and scale 1 over 16: blocks [8t, 8t + 8) at T = 2, not at T = 6), which only
the run knows; the call waits at a barrier only if they do not
(`FuncLowering.barrier_unless_same_chunks`).

    Unsynced([(y, ChunkAccess(1, True, scale=2))]).rechunks([(y, ChunkAccess(1, False))])
        ->  {Rechunk(length=16, scales=(1, 2))}      (y: memref<1x16x32x32x8xf32>)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import BlockArgument, Operation, SSAValue

from nasir.dialects.loops import PrefetchOp


@dataclass(frozen=True)
class ChunkAccess:
    """How a kernel's loop touches one of its memref arguments: along `axis`, iteration i only at
    [scale * i, scale * (i + 1)) (each thread its own chunk of that axis), or anywhere (`axis`
    None); `write` if it stores."""

    axis: int | None
    write: bool
    scale: int = 1


def chunk_accesses(fn: func.FuncOp) -> dict[int, ChunkAccess] | None:
    """Each memref argument's access (by argument number; arguments not touched are left out) of a
    kernel of @main's team (`parallel.team_safe`: its body runs parallel loops and ops without
    effects) whose body is one `scf.parallel` from 0 to a constant (step 1); None for any other
    kernel, or one whose loop touches memory otherwise than by loads and stores of its arguments
    (a vector along the chunked axis would cross chunks: not chunked)."""
    loops = [op for op in fn.body.block.ops if isinstance(op, scf.ParallelOp)]
    if len(loops) != 1:
        return None
    loop = loops[0]
    if len(loop.lowerBound) != 1 or _constant(loop.lowerBound[0]) != 0 or _constant(loop.step[0]) != 1:
        return None
    trips, index = _constant(loop.upperBound[0]), loop.body.block.args[0]
    if trips is None:  # convert-loops-to-llvm refuses it (`parallel._constant_bound`)
        return None
    args = {a: k for k, a in enumerate(fn.body.block.args)}
    axes: dict[int, set[tuple[int, int] | None]] = {}
    writes: set[int] = set()
    for op in loop.body.walk():
        touched = _touched(op)
        if touched is None:
            if not isinstance(op, PrefetchOp) and any(o in args for o in op.operands):
                return None  # a view of an argument, a call: not followed (a prefetch touches nothing)
            continue
        ref, indices, write, lanes = touched
        if ref not in args:
            if isinstance(ref, BlockArgument) or not isinstance(ref.owner, memref.AllocaOp):
                return None  # not an argument, not the thread's own scratch
            continue
        k = args[ref]
        shape = ref.type.get_shape()
        on = set()
        for d, i in enumerate(indices):
            span = _span(i, index)
            if span is None:
                continue
            a, lo, hi = span
            hi += lanes - 1 if d == len(shape) - 1 else 0  # a vector's lanes run along the last axis
            if a >= 1 and 0 <= lo and hi < a and shape[d] == a * trips:
                on.add((d, a))
        axes.setdefault(k, set()).add(next(iter(on)) if len(on) == 1 else None)
        if write:
            writes.add(k)
    accesses = {}
    for k, on in axes.items():
        axis, scale = on.pop() if len(on) == 1 and None not in on else (None, 1)
        accesses[k] = ChunkAccess(axis, k in writes, scale)
    return accesses


def _touched(op: Operation) -> tuple[SSAValue, list[SSAValue], bool, int] | None:
    """(memref, indices, whether it writes, lanes) of a load or store; None for other ops."""
    if isinstance(op, memref.LoadOp):
        return op.memref, list(op.indices), False, 1
    if isinstance(op, memref.StoreOp):
        return op.memref, list(op.indices), True, 1
    if isinstance(op, (vector.LoadOp, vector.MaskedLoadOp)):
        return op.base, list(op.indices), False, op.result.type.get_shape()[0]
    if isinstance(op, vector.StoreOp):
        return op.base, list(op.indices), True, op.vector.type.get_shape()[0]
    if isinstance(op, vector.MaskedStoreOp):
        return op.base, list(op.indices), True, op.value_to_store.type.get_shape()[0]
    return None


def _constant(v: SSAValue) -> int | None:
    return v.owner.value.value.data if isinstance(v.owner, arith.ConstantOp) else None


def _span(v: SSAValue, index: SSAValue) -> tuple[int, int, int] | None:
    """`(a, lo, hi)`: `v` is `a * index + r` with r in [lo, hi] for every value of the loops inside
    (`scf.for` of constant bounds), when it is computed from `index`, their indices and constants
    alone; else None.

        (%b * 8) floordiv 8  ->  (1, 0, 0)      (%g * 8 + %ci) floordiv 8, %ci in [0, 8)  ->  (1, 0, 0)
        %b * 4 + %co, %co in [0, 4)  ->  (4, 0, 3)      %b + 1  ->  (1, 1, 1)      %b * %h  ->  None
    """
    if v is index:
        return 1, 0, 0
    c = _constant(v)
    if c is not None:
        return 0, c, c
    if isinstance(v, BlockArgument):
        op = v.owner.parent_op()
        if isinstance(op, scf.ForOp) and v is op.body.block.args[0]:
            lb, ub, step = _constant(op.lb), _constant(op.ub), _constant(op.step)
            if lb is not None and ub is not None and step is not None and step > 0 and ub > lb:
                return 0, lb, ub - 1
        return None
    op = v.owner
    if isinstance(op, arith.IndexCastOp):
        return _span(op.input, index)
    if not isinstance(op, (arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.FloorDivSIOp, arith.DivSIOp)):
        return None
    lhs, rhs = _span(op.lhs, index), _span(op.rhs, index)
    if lhs is None or rhs is None:
        return None
    (a, lo, hi), (b, lo2, hi2) = lhs, rhs
    if isinstance(op, arith.AddiOp):
        return a + b, lo + lo2, hi + hi2
    if isinstance(op, arith.SubiOp):
        return a - b, lo - hi2, hi - lo2
    if isinstance(op, arith.MuliOp):
        if b == 0 and lo2 == hi2:
            k, (a, lo, hi) = lo2, lhs
        elif a == 0 and lo == hi:
            k, (a, lo, hi) = lo, rhs
        else:
            return None
        return (a * k, lo * k, hi * k) if k >= 0 else (a * k, hi * k, lo * k)
    # (a * i + r) / d with d dividing a: a / d * i + r / d (truncation: the dividend >= 0, as floor)
    if b != 0 or lo2 != hi2 or (d := lo2) <= 0 or a % d or (isinstance(op, arith.DivSIOp) and (a < 0 or lo < 0)):
        return None
    return a // d, lo // d, hi // d


@dataclass(frozen=True)
class Buffer:
    """The bytes an @main value names: `root` (an argument of @main, the workspace) from `start`
    to `end`, through the view `key` (root, start and type: the same key, the same elements);
    root None: not known (any bytes)."""

    root: SSAValue | None
    start: int
    end: int | None
    key: tuple
    shape: tuple[int, ...] = ()
    """The view's shape."""

    @staticmethod
    def of(v: SSAValue) -> Buffer:
        """An argument of @main, or `memref.view %arg[%c][]` of one at a constant byte offset (at
        another offset: all of its root; anything else: not known)."""
        shape = tuple(v.type.get_shape())
        if isinstance(v, BlockArgument):
            return Buffer(v, 0, _nbytes(v.type), (v, 0, v.type), shape)
        if isinstance(v.owner, memref.ViewOp) and isinstance(v.owner.source, BlockArgument):
            start = _constant(v.owner.byte_shift)
            if start is None:
                return Buffer(v.owner.source, 0, None, (v,), shape)
            return Buffer(v.owner.source, start, start + _nbytes(v.type), (v.owner.source, start, v.type), shape)
        return Buffer(None, 0, None, (v,), shape)

    def overlaps(self, other: Buffer) -> bool:
        if self.root is None or other.root is None:
            return True
        return self.root is other.root and (self.end is None or other.start < self.end) and (
            other.end is None or self.start < other.end)


def _nbytes(ty: MemRefType) -> int:
    return math.prod(ty.get_shape()) * ty.element_type.bitwidth // 8


@dataclass(frozen=True)
class Rechunk:
    """One axis `length` long, chunked by two loops of `scales` elements an iteration (length /
    scale iterations each): at T threads a thread's elements are the same in both when
    `scale * ceil(length / scale / T)` is the same for both scales (`parallel._chunk`)."""

    length: int
    scales: tuple[int, int]

    def same_at(self, threads: int) -> bool:
        """Whether each thread's elements are the same in both chunkings at `threads` threads."""
        a, b = (s * -(-(self.length // s) // threads) for s in self.scales)
        return a == b


@dataclass
class Unsynced:
    """What the kernels @main's team called since its last barrier touched: (buffer, access)."""

    touched: list[tuple[Buffer, ChunkAccess]] = field(default_factory=list)

    def conflicts(self, calls: list[tuple[Buffer, ChunkAccess]]) -> bool:
        """Whether a thread's accesses `calls` could meet another thread's since the barrier at any
        thread count (a `Rechunk` may not: see `rechunks`)."""
        return any(_meet(a, b) is True for a in calls for b in self.touched)

    def rechunks(self, calls: list[tuple[Buffer, ChunkAccess]]) -> set[Rechunk]:
        """The axes `calls` take in other chunks than a kernel since the barrier did (`conflicts`
        being False): they meet another thread's accesses unless each `Rechunk` is the same at
        the run's thread count."""
        return {m for a in calls for b in self.touched if isinstance(m := _meet(a, b), Rechunk)}

    def add(self, calls: list[tuple[Buffer, ChunkAccess]]) -> None:
        self.touched.extend(calls)

    def clear(self) -> None:
        self.touched.clear()

    def __bool__(self) -> bool:
        return bool(self.touched)


def _meet(a: tuple[Buffer, ChunkAccess], b: tuple[Buffer, ChunkAccess]) -> bool | Rechunk:
    """Whether two threads' accesses may meet: True, False, or when a `Rechunk` differs."""
    (x, p), (y, q) = a, b
    if not (p.write or q.write) or not x.overlaps(y):
        return False
    if x.key != y.key or p.axis is None or p.axis != q.axis:
        return True
    if p.scale == q.scale:
        return False
    return Rechunk(x.shape[p.axis], tuple(sorted((p.scale, q.scale))))


def call_accesses(call: func.CallOp, accesses: dict[int, ChunkAccess]) -> list[tuple[Buffer, ChunkAccess]]:
    """A chunked kernel's accesses (`chunk_accesses`) on the buffers @main passes it."""
    return [(Buffer.of(call.arguments[k]), a) for k, a in accesses.items()]
