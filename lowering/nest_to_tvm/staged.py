"""nasir's GPU schedule that stages a contraction's reduction through shared memory.

`schedule.gpu_schedule` gives each thread a register tile of output channels at one position and
reads both operands from global memory. `staged_schedule` tiles the output as a block's box instead
(output channels x rows x columns, each dim split apart, not fused) and runs the reduction in steps
of `chunk` input channels: at each step the block's threads copy together the input window and the
weights the box needs for those channels into shared memory, and every thread reads its operands
from there. A 3x3 conv, 56 px, 64 channels, tile 4 x 16 channels, 1 x 14 positions, chunk 8:

    blockIdx.x: n * co.o * oh.o * ow.o       threadIdx.x: co.t * oh.t * ow.t
    for ci.o in 0..8:
        x_shared[8, 3, 16]  = x[n, ci.o*8 : +8, oh - 1 : +3, ow.o*14 - 1 : +16]  (inside the image)
        w_shared[64, 8, 3, 3] = w[co.o*64 : +64, ci.o*8 : +8, :, :]
        for ci.i, kh, kw: for co.i (unrolled): acc[co.i] += x_shared[...] * w_shared[...]
    for co.i: y = epilogue(acc[co.i])

TVM's `cache_read` copies only the window's points inside the input (the padding stays the
combiner's guard), compacts each copy to the region a block reads and synchronises the block around
it. The tile is fitted to the nest (every split exact), and the shared memory of the compacted
copies (`bounds.shared_bytes`) to the target's limit (`max_shared_memory_per_block`): `chunk` halves
until they fit. Applies to a contraction with a
reduction dim both operands read, the one staged: a conv's `ci` (a grouped conv's within its
group), a gemm's `k`, a depthwise conv's `kh` (its window's rows: neighbouring positions share them).

Not the default (`program` takes `gpu_schedule`): which family is faster for which nest is for a GPU
to say; both are tuning candidates (`Staged.variants`, `nasir tune --target cuda --export`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir, tirx

from nasir.dialects import affine, nest
from nasir.lowering.nest_to_tvm.bounds import shared_bytes
from nasir.lowering.nest_to_tvm.schedule import (accumulate_in_registers, combiner_block, divisor,
                                                 output_channels)


@dataclass(frozen=True)
class Staged:
    """A tile of `staged_schedule`: the threads of a block, the output channels a thread accumulates
    (`channels`) and the threads across them (`channel_threads`), the positions a thread accumulates
    along a row (`width`), the input channels staged a step (`chunk`). Each is the most the nest
    gets: `divisor` fits it to the extent."""

    threads: int = 256
    channels: int = 4
    channel_threads: int = 16
    width: int = 1
    chunk: int = 8

    @staticmethod
    def variants(max_threads: int) -> list[Staged]:
        """The tiles worth timing on a GPU (tuning candidates): blocks of 128 to 256 threads, 2 to 8
        channels by 4 to 32 channel threads, rows of 1 or 2 positions a thread, chunks of 4 to 16."""
        tiles = [Staged(256, 4, 16, 1, 8), Staged(256, 4, 8, 2, 8), Staged(128, 4, 8, 1, 16),
                 Staged(256, 2, 16, 2, 8), Staged(256, 8, 8, 1, 8), Staged(128, 2, 16, 1, 8),
                 Staged(256, 4, 32, 1, 4), Staged(128, 8, 4, 2, 8)]
        return [t for t in tiles if t.threads <= max_threads]


@dataclass(frozen=True)
class _Dims:
    """The roles of a contraction's dims in the staged schedule (domain positions)."""

    channel: int
    staged: int  # the reduction dim both operands read
    row: int | None  # the innermost position dim (a conv's ow), then the one outside it (oh)
    column: int | None

    @classmethod
    def of(cls, op: nest.ComputeOp) -> _Dims | None:
        if op.kind != "mac" or not op.domain.reduction:
            return None
        npar = op.domain.num_parallel.data
        data, weight = (affine.map_dims(m) for m in op.access_maps[:2])
        channels = output_channels(op)
        shared = [d for d in range(npar, len(op.domain.dims)) if d in data and d in weight]
        if not channels or not shared:
            return None
        positions = [d for d in range(npar) if d != channels[-1] and op.domain.dims[d][1] > 1]
        return cls(channels[-1], shared[0], positions[-1] if positions else None,
                   positions[-2] if len(positions) > 1 else None)


def _fit(op: nest.ComputeOp, dims: _Dims, tile: Staged) -> dict[int, tuple[int, int]]:
    """Per parallel dim (threads, registers) of `tile` fitted to the extents; the staged dim's chunk
    as (chunk, 1)."""
    extents = [e for _, e in op.domain.dims]
    c_i = divisor(extents[dims.channel], tile.channels)
    c_t = divisor(extents[dims.channel] // c_i, tile.channel_threads)
    fitted = {dims.channel: (c_t, c_i), dims.staged: (divisor(extents[dims.staged], tile.chunk), 1)}
    rest = max(1, tile.threads // c_t)
    if dims.row is not None:
        w_i = divisor(extents[dims.row], tile.width)
        w_t = divisor(extents[dims.row] // w_i, rest)
        fitted[dims.row] = (w_t, w_i)
        rest = max(1, rest // w_t)
    if dims.column is not None:
        fitted[dims.column] = (divisor(extents[dims.column], rest), 1)
    return fitted


def staged_schedule(func: tirx.PrimFunc, op: nest.ComputeOp, tile: Staged, max_shared_bytes: int,
                    bind: bool = True) -> s_tir.Schedule | None:
    """`func` (the PrimFunc of `op`) scheduled with its reduction staged through shared memory at
    `tile` (the module's docstring); None where the nest has no reduction both operands read, where
    even a chunk of 1 needs more than `max_shared_bytes`, or where TVM refuses a primitive.
    `bind=False` leaves the loops unbound (the same arithmetic, runnable on a CPU)."""
    dims = _Dims.of(op)
    if dims is None:
        return None
    fitted = _fit(op, dims, tile)
    while (sch := _scheduled(func, op, dims, fitted, bind)) is not None:
        if shared_bytes(sch.mod["main"]) <= max_shared_bytes:
            return sch
        chunk = fitted[dims.staged][0]
        if chunk == 1:
            return None
        fitted[dims.staged] = (divisor(op.domain.dims[dims.staged][1], chunk // 2), 1)
    return None


def _scheduled(func: tirx.PrimFunc, op: nest.ComputeOp, dims: _Dims, fitted: dict[int, tuple[int, int]],
               bind: bool) -> s_tir.Schedule | None:
    """`staged_schedule` at the `fitted` tile; None where TVM refuses a primitive."""
    npar = op.domain.num_parallel.data
    threads = math.prod(fitted[d][0] for d in range(npar) if d in fitted)
    sch = s_tir.Schedule(func)
    try:
        block = combiner_block(sch, op)
        loops = list(sch.get_loops(block))
        outer, thread, inner = [], [], []
        for d in range(npar):
            t, r = fitted.get(d, (1, 1))
            parts = sch.split(loops[d], [None, t, r])
            outer.append(parts[0])
            thread.append(parts[1])
            inner.append(parts[2])
        step, staged = sch.split(loops[dims.staged], [None, fitted[dims.staged][0]])
        others = [loops[d] for d in range(npar, len(loops)) if d != dims.staged]
        sch.reorder(*outer, *thread, step, staged, *others, *inner)
        bx, tx = sch.fuse(*outer), sch.fuse(*thread)
        if bind:
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
        accumulate_in_registers(sch, block, tx, threads if bind else None)
        for operand in (0, 1):
            _stage(sch, block, operand, step, threads, bind)
        sch.decompose_reduction(block, step)
        for loop in inner:
            sch.unroll(loop)
    except Exception:  # noqa: BLE001 - TVM's schedule errors: the nest keeps its other schedules
        return None
    return sch


def _stage(sch: s_tir.Schedule, block, operand: int, step, threads: int, bind: bool) -> None:
    """Copy input `operand` of `block` into shared memory at each iteration of `step`, the block's
    `threads` sharing the copy (consecutive threads, consecutive elements)."""
    copy = sch.cache_read(block, operand, "shared")
    sch.compute_at(copy, step)
    loops = list(sch.get_loops(copy))
    at = next(k for k, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(step)))
    inside = loops[at + 1:]
    fused = sch.fuse(*inside) if len(inside) > 1 else inside[0]
    _, t = sch.split(fused, [None, threads])
    if bind:
        sch.bind(t, "threadIdx.x")
