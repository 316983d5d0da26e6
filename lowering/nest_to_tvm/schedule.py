"""A nest's `schedule` attribute as s_tir.Schedule primitives on its PrimFunc.

nasir's schedule transforms are TVM's primitives under other names, so the mapping is direct, on the
PrimFunc's combiner block (its loops are the domain's dims, in domain order):

    splits  [["co", 16]]          sch.split(co, [None, 16])        -> co.o, co.i
    fusions [["oh", "ow"]]        sch.fuse(oh, ow)                 -> oh*ow
    order   [n, co.o, oh, ...]    sch.reorder(n, co.o, oh, ...)
    unroll  {kw = 3}              sch.unroll(kw) (a factor below the extent: split, unroll the inner)
    vector  "co.i"                sch.vectorize(co.i)
    parallel "co.o"               CPU: sch.parallel(co.o)

Unscheduled contractions on a CPU get `default_cpu`: the output channels as vector lanes.

On a GPU ("cuda") the parallel dims run on the grid instead: the spatial loops outside the first
reduction loop are fused and split over blockIdx.x / threadIdx.x (`GPU`: threads per block and
registers per thread from the target); the PrimFunc's other blocks
(epilogue, layout, avg's count) are bound the same way. Unscheduled contractions on a GPU get
`default_gpu`: each thread accumulates a register tile of output channels x positions, the
epilogue applied as the tile is written (`staged.py` has the schedule that stages the reduction
through shared memory instead, a tuning candidate); other unscheduled nests are left to TVM's
default pipeline (dlight's default rules). Packed operand layouts (`pack`) are the llvm backend's and are
not mapped. `program` marks a scheduled PrimFunc `tirx.is_scheduled` and opaque,
so TVM neither reschedules it nor fuses it into a neighbour.

A primitive TVM refuses (a fusion of loops that are not adjacent, say) is a LoweringError naming
the nest and the primitive.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import tvm
from tvm import s_tir, tirx

from nasir.dialects import affine, nest
from nasir.dialects.schedule import Loop, Schedule
from nasir.errors import LoweringError
from nasir.lowering.nest_to_tvm import nest_ops
from nasir.lowering.nest_to_tvm.bounds import BlockLimits

OPAQUE = 8
"""Relax's op pattern kOpaque: FuseOps leaves the call alone."""


def _error(op: nest.ComputeOp, what: str, e: Exception) -> LoweringError:
    first = str(e).strip().splitlines()
    return LoweringError(f"tvm backend: nest '{op.layer_name}': TVM refuses the schedule's {what}"
                         f" ({first[-1] if first else type(e).__name__})")


def blocks(sch: s_tir.Schedule) -> list:
    """The blocks of the PrimFunc, in order (under its root block)."""
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def combiner_block(sch: s_tir.Schedule, op: nest.ComputeOp):
    """The block computing the combiner (TE stage `nest_ops.combiner_stage(op)`)."""
    name = nest_ops.combiner_stage(op).replace(".", "_")
    for block in blocks(sch):
        if sch.get(block).name_hint == name:
            return block
    raise LoweringError(f"tvm backend: nest '{op.layer_name}': its PrimFunc has no block '{name}'")


GPU_TILE = {"channels": 4, "threads": 256, "min_threads": 16384, "registers_per_channel": 32}
"""nasir's GPU schedules: the threads of a block (fewer where the target allows fewer), and
default_gpu's tile: the output channels a thread accumulates in registers (fewer where the nest
would otherwise have fewer than min_threads threads: batch 1's small layers need the parallelism
more than the reuse, or where a thread's share of the block's registers holds fewer than
registers_per_channel for each: the accumulator, its operands and addresses)."""

MAX_REGISTERS_PER_THREAD = 255
"""What ptxas gives a thread at most, on every architecture."""


@dataclass(frozen=True)
class GPU:
    """What nasir's GPU schedules take from the target (threads per block, the registers of a block)
    and default_gpu's tile: the output channels a thread would accumulate (`wanted_channels`)."""

    threads: int
    block_registers: int
    wanted_channels: int = GPU_TILE["channels"]

    @classmethod
    def of(cls, target: tvm.target.Target) -> GPU:
        """The limits of `target` (a cuda target: `bounds.BlockLimits`)."""
        limits = BlockLimits.of(target)
        return cls(min(GPU_TILE["threads"], limits.threads), limits.registers)

    @property
    def registers(self) -> int:
        """The registers a thread may hold: its share of the block's, at most what ptxas gives one."""
        return min(MAX_REGISTERS_PER_THREAD, self.block_registers // self.threads)

    @property
    def channels(self) -> int:
        """The most output channels a thread of default_gpu accumulates: those wanted, as many as
        its registers hold."""
        return max(1, min(self.wanted_channels, self.registers // GPU_TILE["registers_per_channel"]))

    def variants(self, max_threads: int) -> list[GPU]:
        """default_gpu's tiles worth timing on a GPU (tuning candidates): blocks of 64 to 512
        threads (at most `max_threads`) by register tiles of 1 to 8 channels."""
        return [replace(self, threads=t, wanted_channels=c) for t in (64, 128, 256, 512) if t <= max_threads
                for c in (1, 2, 4, 8)]


def _bind_gpu(sch: s_tir.Schedule, loops: list, threads: int) -> None:
    """Fuse `loops` (adjacent, outermost first) and spread them over blockIdx.x / threadIdx.x."""
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def _spatial_loops(sch: s_tir.Schedule, block) -> list:
    """The outer loops of a TE block bound to its spatial iter vars (TE puts them first)."""
    spatial = [iv for iv in sch.get(block).iter_vars if iv.iter_type == tirx.IterVar.DataPar]
    return list(sch.get_loops(block))[: len(spatial)]


@contextmanager
def _primitive(op: nest.ComputeOp, what: str) -> Iterator[None]:
    """Turn TVM's refusal of a primitive into a LoweringError naming the nest and `what`."""
    try:
        yield
    except LoweringError:
        raise
    except Exception as e:  # noqa: BLE001 - TVM raises its own error types
        raise _error(op, what, e) from None


def output_channels(op: nest.ComputeOp) -> list[int]:
    """The parallel dims the weight reads and the data does not (a conv's `co`, a gemm's `n`)."""
    data, weight = (affine.map_dims(m) for m in op.access_maps[:2])
    return [d for d in range(op.domain.num_parallel.data) if d in weight and d not in data]


def default_cpu(op: nest.ComputeOp, lanes: int) -> Schedule | None:
    """The CPU schedule of an unscheduled contraction: its output-channel dim (a parallel dim the
    weight reads and the data does not: a conv's `co`, a gemm's `n`) split by the target's `lanes`,
    the inner part innermost, after the reductions, and vectorized; None for other nests.

        n, co, oh, ow, ci, kh, kw  ->  n, co.o, oh, ow, ci, kh, kw, co.i (vector, 16 lanes)
    """
    if op.kind != "mac" or not op.domain.reduction:
        return None
    names = op.domain.dim_names
    channels = [d for d in output_channels(op) if op.domain.dims[d][1] % lanes == 0]
    if not channels:
        return None
    dim = names[channels[-1]]
    outer = [Loop.outer(n) if n == dim else n for n, _ in op.domain.parallel]
    return Schedule(splits=[(dim, lanes)], order=[*outer, *(n for n, _ in op.domain.reduction), Loop.inner(dim)],
                    vector=Loop.inner(dim))


def divisor(extent: int, wanted: int) -> int:
    """The largest divisor of `extent` that is at most `wanted`."""
    return max(d for d in range(1, min(extent, wanted) + 1) if extent % d == 0)


def default_gpu(func: tirx.PrimFunc, op: nest.ComputeOp, gpu: GPU, bind: bool = True) -> tirx.PrimFunc | None:
    """`func` scheduled by `gpu_schedule` (None where it does not apply)."""
    sch = gpu_schedule(func, op, gpu, bind)
    return None if sch is None else sch.mod["main"]


def accumulate_in_registers(sch: s_tir.Schedule, block, thread_loop, threads: int | None) -> None:
    """`block` (a reduction) accumulates in registers: its result is written back, each thread's
    part after `thread_loop`, through the PrimFunc's other blocks (the epilogue, inlined into the
    write-back; one TVM cannot inline bound on its own, `threads` a block, unless `threads` is None:
    loops left unbound)."""
    write_back = sch.cache_write(block, 0, "local")
    own = {sch.get(block).name_hint, sch.get(write_back).name_hint}
    for consumer in [b for b in blocks(sch) if sch.get(b).name_hint not in own]:
        try:
            sch.reverse_compute_inline(consumer)
        except Exception:  # noqa: BLE001 - a consumer TVM cannot inline is bound on its own
            if threads is not None:
                _bind_gpu(sch, _spatial_loops(sch, consumer), threads)
    sch.reverse_compute_at(write_back, thread_loop)


def gpu_schedule(func: tirx.PrimFunc, op: nest.ComputeOp, gpu: GPU, bind: bool = True) -> s_tir.Schedule | None:
    """The GPU schedule of an unscheduled contraction (None for other nests, or where TVM refuses
    a primitive: dlight's rules then schedule it). The parallel dims but the output channel are
    fused into one position loop p; the channel c is split into a register tile c.i, threads c.t
    and blocks c.o, p into threads p.t (innermost: a warp reads consecutive positions and one
    weight) and blocks p.o, every split exact; the reduction runs in the thread, the accumulators
    in registers, and the write-back applies the epilogue blocks:

        blockIdx.x: c.o * p.o   threadIdx.x: c.t * p.t   for ci, kh, kw: for c.i (unrolled): acc += x * w
        for c.i: y = epilogue(acc)

    `bind=False` leaves the loops unbound (the same arithmetic, runnable on a CPU: the tests check it).
    """
    if op.kind != "mac" or not op.domain.reduction:
        return None
    npar = op.domain.num_parallel.data
    channel = next(reversed(output_channels(op)), None)
    sch = s_tir.Schedule(func)
    try:
        block = combiner_block(sch, op)
        loops = list(sch.get_loops(block))
        extents = [e for _, e in op.domain.dims]
        others = [d for d in range(npar) if d != channel]
        positions = math.prod(extents[d] for d in others)
        channels = 1 if channel is None else extents[channel]
        c_i = divisor(channels, gpu.channels)
        while positions * channels // c_i < GPU_TILE["min_threads"] and c_i > 1:
            c_i = divisor(channels, c_i - 1)
        p_t = divisor(positions, gpu.threads)
        c_t = divisor(channels // c_i, gpu.threads // p_t)
        order = [loops[d] for d in others] + ([loops[channel]] if channel is not None else [])
        sch.reorder(*order, *loops[npar:])
        p = sch.fuse(*(loops[d] for d in others)) if len(others) > 1 else loops[others[0]]
        p_o, p_t_loop = sch.split(p, [None, p_t])
        if channel is not None:
            c_o, c_t_loop, c_i_loop = sch.split(loops[channel], [None, c_t, c_i])
            sch.reorder(c_o, p_o, c_t_loop, p_t_loop, *loops[npar:], c_i_loop)
            bx, tx = sch.fuse(c_o, p_o), sch.fuse(c_t_loop, p_t_loop)
        else:
            sch.reorder(p_o, p_t_loop, *loops[npar:])
            bx, tx = p_o, p_t_loop
        if bind:
            sch.bind(bx, "blockIdx.x")
            sch.bind(tx, "threadIdx.x")
        accumulate_in_registers(sch, block, tx, gpu.threads if bind else None)
        sch.decompose_reduction(block, loops[npar])
        if channel is not None:
            sch.unroll(sch.get_loops(block)[-1])
    except Exception:  # noqa: BLE001 - TVM's schedule errors: leave the nest to dlight
        return None
    return sch


def apply(func: tirx.PrimFunc, op: nest.ComputeOp, gpu: GPU | None, schedule: Schedule | None = None
          ) -> tirx.PrimFunc:
    """`func` (the PrimFunc of `op`) scheduled by `schedule` (default: `op`'s schedule attribute) for
    a CPU (`gpu` None) or a GPU."""
    schedule = schedule or op.get_schedule()
    sch = s_tir.Schedule(func)
    block = combiner_block(sch, op)
    loops = dict(zip(op.domain.dim_names, sch.get_loops(block)))
    extents = dict(schedule.loops(op.domain))
    order = list(extents)
    with _primitive(op, "split"):
        for name, factor in schedule.splits_of_fused(False):
            loops[Loop.outer(name)], loops[Loop.inner(name)] = sch.split(loops.pop(name), [None, factor])
    with _primitive(op, "fusion"):
        for outer, inner in schedule.fusions:
            loops[f"{outer}*{inner}"] = sch.fuse(loops.pop(outer), loops.pop(inner))
    with _primitive(op, "split"):
        for name, factor in schedule.splits_of_fused(True):
            loops[Loop.outer(name)], loops[Loop.inner(name)] = sch.split(loops.pop(name), [None, factor])
    with _primitive(op, "loop order"):
        sch.reorder(*[loops[name] for name in order])
    with _primitive(op, "unroll"):
        for name, factor in schedule.unroll.items():
            sch.unroll(loops[name] if factor >= extents[name] else sch.split(loops[name], [None, factor])[1])
    with _primitive(op, "vector loop"):
        if schedule.vector is not None and gpu is not None:
            sch.unroll(loops[schedule.vector])  # a thread's lanes: unrolled, not CUDA vector types
        elif schedule.vector is not None:
            sch.vectorize(loops[schedule.vector])
    with _primitive(op, "parallel loop"):
        if gpu is not None:
            prefix = [loops[name] for name in schedule.outer_loops(op.domain)]
            if not prefix:
                raise LoweringError(f"tvm backend: nest '{op.layer_name}': on a GPU a scheduled nest needs "
                                    f"a parallel loop outside its reductions (its order: {', '.join(order)})")
            _bind_gpu(sch, prefix, gpu.threads)
            for other in blocks(sch):
                if sch.get(other).name_hint != sch.get(block).name_hint:
                    _bind_gpu(sch, _spatial_loops(sch, other), gpu.threads)
        elif schedule.parallel is not None:
            sch.parallel(loops[schedule.parallel])
    return sch.mod["main"]
