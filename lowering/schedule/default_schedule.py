"""default-schedule: give every nest without a schedule a first sensible one for the CPU.

Runs on nest IR before pack-weights and nest-bufferize. The schedule is data (see `nest.Schedule`)
that convert-nest-to-loops reads. Two families, chosen per nest by a small cost model of the
fraction of the FMA rate each keeps (`spatial_score` vs `channel_score`: useful lanes, loads per
FMA, masked edge vectors, epilogue of transposed tiles):

- channel (`channel_vector_schedule`, for convs/gemms whose weight has output channels first and a
  multiple of the vector width of them per group): lanes over output channels from weights packed
  `OIHW16o`, see its docstring. Small images, strided convs and stems take it; its channel blocks
  run inside the image rows when the input does not stay in L2;
- a max pool or a depthwise conv whose input pack-activations can store NCHW16c (its writer
  runs lanes over channels, and so does every other reader): lanes over channels
  (`channel_pool_schedule`, `depthwise_channel_schedule`), so that each tap reads 16 channels
  with one load (ResNet's and DenseNet's stem pools, MobileNetV2's depthwise convs after its
  channel-family 1x1 convs). The pass gives them these first and falls back, until no input is
  left NCHW, for those whose input `packed_tensors` does not block. Such a max pool whose
  producer it alone reads, with outer loops over that producer's channel blocks and rows (a
  stem), tiles a block of channel vectors and is marked FUSE_ROWS: its kernel computes the
  producer's rows as it needs them;
- spatial (`spatial_vector_schedule`), everything else:

- the vector loop is a parallel dim that is contiguous in the output (stride 1), split by the
  target's vector width (`CPUTarget.lanes`: 16 floats with AVX-512, 8 with AVX2) when longer, and
  placed innermost; a weight it reads with a stride (a classifier's [n, k]) is packed with a
  block of lanes innermost
  (`lane_packs`: 1000 classes -> `OI8o`, vectors of 8), and where no other dim makes a
  register tile, the vector loop's blocks do (125 blocks of 8 classes split by 5);
- the other parallel dims come first in domain order, then the reduction dims;
- for contractions (`mac`) a register tile, fully unrolled inside the reduction loops: a parallel
  dim that input 0 does not read (conv's `co`) split by 8, 4 or 2 (divisors whose input-1 rows fit
  `tile_input1_bytes`), times a parallel dim that input 1 does not read (conv's `oh`) split by 7, 4
  or 2 (not for strided 1x1 convs), at most `max_accumulators` vectors: each vector of input 0
  feeds several accumulators and each broadcast weight several rows. The most accumulators win;
  among those, where the rows share input rows (conv's kh) the fewest loads per FMA, else the
  widest channel block;
- the reduction loops inside the first one (conv's kh, kw) fully unrolled while the unrolled body
  stays within MAX_UNROLLED_BODY steps: the in-bounds masks and addresses of padded reads then do
  not change in the remaining reduction loop (ci) and LLVM hoists them out of it;
- the thread-parallel loop is the first outer loop whose iterations split evenly over 2, 4 or 8
  threads (a power of two, or at least 8: `balanced`), else the first with more than one.

    domain = #nest.domain<[n = 1, co = 16, oh = 32, ow = 32], [ci = 3, kh = 3, kw = 3]>
    -> schedule = {splits = [["ow", 16], ["oh", 4], ["co", 4]],
                   order = ["n", "co.o", "oh.o", "ow.o", "ci", "kh", "kw", "oh.i", "co.i", "ow.i"],
                   vector = "ow.i", unroll = {oh.i = 4, co.i = 4, kw = 3, kh = 3}, parallel = "co.o"}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import AffineDimExpr
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.attributes import FUSE_ROWS, SCRATCH_BYTES, WINOGRAD
from nasir.dialects.nest import Loop, NestView, Schedule, linear_coefficient, stride_of
from nasir.lowering.schedule.pack_activations import packed_tensors
from nasir.lowering.schedule.winograd import WinogradPlan, winograd_plan
from nasir.lowering.target import CPUTarget, target_of
from nasir.transforms.schedule import operand_axes


def tile_input1_bytes(target: CPUTarget) -> int:
    """Input-1 bytes (weights) the output channels of one spatial register tile may read (they stay
    in cache): three L1s (96 KiB on Zen 4)."""
    return 3 * target.l1_bytes


def max_accumulators(target: CPUTarget) -> int:
    """Vector accumulators of a spatial register tile: half the vector registers (16 of AVX-512's
    32), the rest for its input vectors, broadcasts and addresses."""
    return target.registers // 2


MAX_UNROLLED_BODY = 256
"""Combiner steps (FMAs) the fully unrolled inner reduction loops of a register tile may hold."""


def _tile_loop(sched: Schedule, loops: list[str], name: str, extent: int, factor: int) -> list[str]:
    """Split `name` by `factor` and return the inner loop, fully unrolled for the register tile
    (none for a factor of 1 that leaves a longer loop: it stays an outer loop)."""
    if factor == 1 < extent:
        return []
    if factor == extent:
        loops.remove(name)
        sched.unroll[name] = extent
        return [name]
    sched.splits.append((name, factor))
    loops[loops.index(name)] = Loop.outer(name)
    sched.unroll[Loop.inner(name)] = factor
    return [Loop.inner(name)]


def schedule_for(n: NestView, target: CPUTarget) -> Schedule:
    """The default schedule of a nest on `target`: vectorised over output channels with packed
    weights where `channel_score` estimates that to be faster than `spatial_score`, otherwise over
    the contiguous output dim (`spatial_vector_schedule`)."""
    spatial = spatial_vector_schedule(n, target)
    channel = channel_vector_plan(n, target)
    if channel is not None and channel_score(channel, target) > spatial_score(n, spatial, target):
        return channel_vector_schedule(n, channel, target)
    return spatial


def channel_score(plan: "ChannelPlan", target: CPUTarget) -> float:
    """Estimated fraction of the FMA rate a channel schedule keeps: its lanes and epilogue
    (`ChannelPlan.efficiency`) and its loads per FMA. (The L2 term of `channel_tile_score` only
    ranks the tiles of one nest.)"""
    return plan.efficiency * load_bound(channel_loads_per_fma(plan.r_col, plan.r_row, plan.window), target)


def spatial_score(n: NestView, sched: Schedule, target: CPUTarget) -> float:
    """Estimated fraction of the FMA rate a spatial schedule keeps: its useful lanes, its loads per
    FMA, and the vectors of a row that read padding or end in a tail (they need masks, computed
    per tile: EDGE_COST each)."""
    width = target.lanes
    score = spatial_efficiency(n, sched, width)
    if sched.vector is None or n.combiner != "mac" or len(n.maps) < 2:
        return score
    pos = [name for name, _ in n.dims].index(Loop(sched.vector).dim)
    extent = n.dims[pos][1]
    vectors = -(-extent // width)
    extents = [e for _, e in n.dims]
    left, right = False, extent % width != 0
    for axis, expr in enumerate(n.maps[0].results):
        if linear_coefficient(expr, pos) != 0:
            lo, hi = nest.expr_range(expr, extents)
            left, right = left or lo < 0, right or hi >= n.in_shapes[0][axis]
    score *= 1 - EDGE_COST * min(left + right, vectors) / vectors
    return score * load_bound(spatial_loads_per_fma(n, sched), target)


EDGE_COST = 0.4
"""Fraction of its speed a spatial vector loses to masks when it reads a padded edge or ends a
row in a tail (channel 1x14 tiles beat spatial 8x2 ones on 14- and 28-wide rows, lose on 56)."""


def load_bound(loads_per_fma: float, target: CPUTarget) -> float:
    """Fraction of the FMA rate a register tile with `loads_per_fma` keeps (see
    `CPUTarget.loads_per_fma`)."""
    return min(1.0, target.loads_per_fma / loads_per_fma)


def spatial_loads_per_fma(n: NestView, sched: Schedule) -> float:
    """Loads per FMA of a spatial register tile of c output channels x r rows: each input vector
    feeds c FMAs, each broadcast weight r."""
    read0 = {n.dims[pos][0] for pos in nest.map_dims(n.maps[0])} if n.maps else set()
    reductions = {name for name, _ in n.dims[n.npar:]}
    rows = cols = 1
    for loop, factor in sched.unroll.items():
        if loop not in reductions:
            if Loop(loop).dim in read0:
                rows *= factor
            else:
                cols *= factor
    return 1 / rows + 1 / cols


def spatial_vector_schedule(n: NestView, target: CPUTarget) -> Schedule:
    """Vector lanes over the output dim that is contiguous (conv's ow), register tile co x oh."""
    width = target.lanes
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
        block, sched.pack = lane_packs(n, [d for d, _ in par].index(name), width)
        width = block or width
        if extent > width:
            sched.splits = [(name, width)]
            loops[loops.index(name)] = Loop.outer(name)
            sched.vector = Loop.inner(name)
        else:
            loops.remove(name)
            sched.vector = name
    tile = []
    if n.combiner == "mac" and n.dims[n.npar:] and sched.vector and len(n.maps) >= 2:
        read0, read1 = nest.map_dims(n.maps[0]), nest.map_dims(n.maps[1])
        col = next(((name, e) for pos, (name, e) in reversed(list(enumerate(par)))
                    if name in loops and pos not in read0 and pos in read1), None)
        row = next(((name, e) for pos, (name, e) in enumerate(par)
                    if name in loops and e > 1 and pos in read0 and pos not in read1), None)
        factors, vec_pos = (8, 4, 2), [name for name, _ in par].index(vec[0])
        if col is None and Loop.outer(vec[0]) in loops and vec_pos not in read0:
            # the vector loop's blocks (a classifier's 1000 classes in 125 vectors of 8): each
            # broadcast input feeds several independent accumulators instead of one FMA chain
            col, factors = (Loop.outer(vec[0]), -(-vec[1] // width)), range(8, 1, -1)
        if col is not None:
            # bytes of input 1 one output channel reads (conv: ci * kh * kw floats)
            row_bytes = 4 * math.prod(e for _, e in n.dims[n.npar:])
            cols = [f for f in factors if col[1] % f == 0 and f * row_bytes <= tile_input1_bytes(target)] or \
                [f for f in (2,) if col[1] % f == 0]
            # a strided vector read (stride-2 conv) costs a shuffle per row: without a window (1x1
            # conv) the rows share no input, so no row tile
            strided = stride_of(n.maps[0], n.in_shapes[0], vec_pos) != 1
            rows = (7, 4, 2) if not strided or len(n.dims) - n.npar > 1 else ()
            pairs = [(c, r) for c in cols for r in rows
                     if row is not None and row[1] % r == 0 and c * r <= max_accumulators(target)]
            window = None if row is None else row_window(n, [name for name, _ in par].index(row[0]))
            if pairs and window is not None and window.taps > 1:
                # rows that share input rows (conv's kh): the most accumulators, then the fewest
                # loads per FMA (8 channels per group at 56: 4 x 4 ran 0.92x the time of 8 x 2);
                # 1x1 convs keep the widest channel block (4 x 4 ran MobileNetV2 1.03x slower)
                c, r = min(pairs, key=lambda p: (-p[0] * p[1], channel_loads_per_fma(p[0], p[1], window)))
            elif pairs:
                c, r = pairs[0]
            elif cols:
                c, r = cols[0], None
            else:  # one output channel per group (depthwise): rows alone share the input rows
                c, r = None, next((r for r in rows if row is not None and row[1] % r == 0), None)
            if r is not None:
                tile += _tile_loop(sched, loops, row[0], row[1], r)
            if c is not None:
                tile += _tile_loop(sched, loops, col[0], col[1], c)
    if n.dims[n.npar:] and sched.vector:
        _unroll_inner_reductions(sched, n)
    return _finish(sched, n, loops, tile)


def lane_packs(n: NestView, pos: int, width: int) -> tuple[int | None, dict[int, str]]:
    """Weights whose output-channel axis the vector loop (dim `pos`) walks with a stride, as a
    gemm's [n, k] weight: packed with a block of lanes innermost so that each weight vector is one
    load, and the block (the largest power of two up to `width` dividing the axis, at least 4:
    8 for 1000 classes) for the vector loop to split by. (None, {}) when there is none:

        W[n, k] : 1000 x 512, lanes over n  ->  pack = {1 = "OI8o"}, vector loop n split by 8
    """
    for k, axes in n.weight_layouts.items():
        amap, shape = n.maps[k], n.in_shapes[k]
        coefs = [linear_coefficient(e, pos) for e in amap.results]
        if axes[0] != "O" or coefs[0] != 1 or any(coefs[1:]) or stride_of(amap, shape, pos) == 1:
            continue
        block = next((b for b in (width, width // 2, width // 4) if b >= 4 and shape[0] % b == 0), None)
        if block is not None:
            return block, {k: f"{axes}{block}o"}
    return None, {}


def _unroll_inner_reductions(sched: Schedule, n) -> None:
    """Unroll the inner reduction loops (conv's kw, kh) around the register tile: the in-bounds
    masks and addresses of padded reads then do not change in the remaining reduction loop. A
    reduction that fits whole (a depthwise conv's or a pool's window) is unrolled whole: a tile's
    rows then share their input rows across kh too (depthwise 3x3 on 56x56, 7 rows: 0.88x)."""
    body = math.prod(sched.unroll.values())
    reductions = n.dims[n.npar:]
    if body * math.prod(e for _, e in reductions) > MAX_UNROLLED_BODY:
        reductions = reductions[1:]
    for name, extent in reversed(reductions):
        if body * extent > MAX_UNROLLED_BODY:
            break
        sched.unroll[name] = extent
        body *= extent


def _finish(sched: Schedule, n, loops: list[str], tile: list[str]) -> Schedule:
    """Order: outer parallel loops, reductions, register tile, vector; the first outer loop that
    splits evenly over threads (`balanced`) runs on them, else the first with more than one
    iteration."""
    sched.order = loops + [name for name, _ in n.dims[n.npar:]] + tile + ([sched.vector] if sched.vector else [])
    extents = dict(sched.loops(nest.DomainAttr.make(n.dims[: n.npar], n.dims[n.npar:])))
    sched.parallel = next((l for l in loops if balanced(extents[l])),
                          next((l for l in loops if extents[l] > 1), None))
    return sched


BALANCED_ITERATIONS = 8
"""Iterations of a thread-parallel loop that keep its threads within one iteration of 1/8 apart."""


def balanced(extent: int) -> bool:
    """Whether a loop of `extent` iterations splits evenly enough over 2, 4 or 8 threads: a
    power of two, or at least BALANCED_ITERATIONS. (DenseNet-161's 48 channels in three blocks
    of 16 left one of two threads idle a third of the time: its rows run on threads instead.)"""
    return extent > 1 and (extent & (extent - 1) == 0 or extent >= BALANCED_ITERATIONS)


def spatial_efficiency(n: NestView, sched: Schedule, width: int) -> float:
    """Estimated fraction of vector lanes doing useful work under a spatial schedule: the vector
    loop's tail lanes are wasted and a strided input row costs a shuffle per read."""
    if sched.vector is None:
        return 1 / width
    pos = [name for name, _ in n.dims].index(Loop(sched.vector).dim)
    extent = n.dims[pos][1]
    used = extent / (-(-extent // width) * width)
    return used * (0.5 if n.maps and stride_of(n.maps[0], n.in_shapes[0], pos) not in (0, 1) else 1.0)


@dataclass
class Window:
    """The unrolled reduction dim that slides along a tile's row in input 0 (conv's kw): its
    `taps`, the row's `stride` and the taps' `dilation` in the input axis they share, and its
    position `dim` in the domain."""

    taps: int
    stride: int
    dilation: int
    dim: int


def row_window(n: NestView, row: int) -> Window | None:
    """The window along parallel dim `row` in input 0: the innermost reduction dim read in the
    same input axis (conv's ow and kw: `ow * 2 + kw - 3` -> stride 2, 7 taps); None if none."""
    for expr in n.maps[0].results:
        stride = linear_coefficient(expr, row)
        if not stride:
            continue
        for pos in range(len(n.dims) - 1, n.npar - 1, -1):
            dilation = linear_coefficient(expr, pos)
            if dilation and n.dims[pos][1] > 1:
                return Window(n.dims[pos][1], stride, dilation, pos)
    return None


@dataclass
class ChannelPlan:
    """A channel-vector schedule: lanes over `col` (conv's co, extent a multiple of the width),
    register tile of `r_col` vectors x `r_row` points of `row` (conv's ow)."""

    col: str
    col_extent: int
    r_col: int
    row: str
    row_extent: int
    r_row: int
    efficiency: float
    window: Window | None = None


def channel_tile_registers(target: CPUTarget) -> int:
    """Vector registers a channel-vector register tile may hold, all but two (30 of AVX-512's 32):
    its accumulators, its weight vectors and, where its points share a window (conv's kw), their
    broadcast inputs, which LLVM keeps live across the weight vectors. A tile of 31 spills (3 x 7
    on DenseNet's 48-channel 3x3 conv: 1.8x the time of 3 x 4)."""
    return target.registers - 2


PLAN_TIE = 0.01
"""Channel plans whose scores are within this fraction of the best count as equal; of those with
no more channel vectors than the best, the one with the most accumulators wins: more independent
FMAs per reduction step hide the loads that come from L2 (DenseNet's 1x1 convs with 96-336 input
channels on 56x56: 2 x 14 ran 0.76-0.81x the time of 2 x 8; its 192 -> 48 3x3 conv on 56x56:
1 x 14 0.81x of 1 x 8). More channel vectors did not: a 128-channel 3x3 conv on 28x28 ran 1.10x
the time in 4 x 4 as in 1 x 14."""
EPILOGUE_WEIGHT = 3.0
"""FMA slots one epilogue step per row of a transposed channel tile takes (bias or folded batch
norm, ReLU, residual add and the store of a row of r_row lanes)."""


L2_WEIGHT_VECTORS_PER_FMA = 0.25
"""Weight vectors per FMA that L2 feeds at full FMA rate: a tile of r_row points loads 1/r_row
(DenseNet's 48-channel 3x3 conv on 14x14: 3 x 2 tiles take 1.5x the time of 1 x 14)."""


def l2_input_bytes(target: CPUTarget) -> int:
    """Input bytes that stay in L2 while a conv's channel blocks re-read them: half of it (512 KiB
    of Zen 4's 1 MiB)."""
    return target.l2_bytes // 2


def input_stream_bound(n: NestView, col_vectors: int, r_col: int, target: CPUTarget) -> float:
    """Fraction of the FMA rate left by re-reading input 0 once per block of r_col channel vectors
    when the bytes it reads (`read_fraction`) do not stay in L2: a strided 1x1 conv does few FMAs
    per input byte. (ResNeXt-29's 256 -> 512 shortcut reads half of its 1 MiB input, the odd rows
    untouched: 2 x 8 tiles, 0.986x the model's time of 4 x 4.)"""
    in_bytes = input_bytes_read(n)
    if in_bytes <= l2_input_bytes(target):
        return 1.0
    vector_fmas = math.prod(e for _, e in n.dims) / target.lanes
    return min(1.0, target.l3_bytes_per_fma * vector_fmas / (in_bytes * col_vectors / r_col))


def input_bytes_read(n: NestView) -> float:
    """Bytes of input 0 a nest reads (see `read_fraction`)."""
    return 4 * math.prod(n.in_shapes[0]) * read_fraction(n)


def read_fraction(n: NestView) -> float:
    """Fraction of input 0's cache lines a nest reads: an axis before the contiguous one whose index
    is `s * p + r` reaches at most extent(p) * extent(r) of its positions (a 1x1 stride-2 conv reads
    every other row); the contiguous axis is read whole (a line holds many of its points)."""
    fraction = 1.0
    for expr, size in list(zip(n.maps[0].results, n.in_shapes[0]))[:-1]:
        form = nest.linear_form(expr)
        if form is not None and form[0]:
            fraction *= min(1.0, math.prod(n.dims[d][1] for d in form[0]) / size)
    return fraction


def channel_loads_per_fma(r_col: int, r_row: int, window: Window | None = None) -> float:
    """Loads per FMA of a channel tile: a weight vector per r_row FMAs and a broadcast per input
    point it reads (of a spatial tile of r_col channels x r_row rows likewise: a broadcast weight
    per r_row FMAs, an input vector per row it reads). The unrolled taps of a window along the
    row (conv's kw) read overlapping points, which LLVM broadcasts once for all of them: a 1 x 14
    tile of a 3x3 conv broadcasts 16 points for 42 FMAs (without a window, a broadcast per r_col
    FMAs):

        points = min(r_row * taps, (r_row - 1) * stride + (taps - 1) * dilation + 1)
        loads = points / (taps * r_row * r_col) + 1 / r_row
    """
    taps, stride, dilation = (window.taps, window.stride, window.dilation) if window else (1, 1, 1)
    points = min(r_row * taps, (r_row - 1) * stride + (taps - 1) * dilation + 1)
    return points / (taps * r_row * r_col) + 1 / r_row


def epilogue_cost(r_row: int, width: int) -> float:
    """FMA slots per accumulator of a channel tile after its reduction: `width` rows of r_row points
    out of log2(r_row) rounds of shuffles (see `LoopBuilder.transpose`), then their epilogue."""
    return EPILOGUE_WEIGHT * (width / r_row + (r_row - 1).bit_length() + 1)


def channel_tile_score(r_col: int, r_row: int, used: float, red: int, target: CPUTarget,
                       window: Window | None = None) -> float:
    """Estimated fraction of the FMA rate a channel tile of r_col vectors x r_row points keeps:
    its loads per FMA beyond the target's `loads_per_fma` slow it, its epilogue adds
    `epilogue_cost` to `red` FMAs per accumulator, and a tail tile (its points need guards) is
    discounted steeply. Its packed weights stream from L2 when they do not fit L1 beside its inputs."""
    width = target.lanes
    loads = load_bound(channel_loads_per_fma(r_col, r_row, window), target)
    score = used ** 8 * loads * red / (red + epilogue_cost(r_row, width))
    if r_col * width * red * 4 > target.l1_bytes:  # weight vectors stream from L2
        score *= min(1.0, L2_WEIGHT_VECTORS_PER_FMA * r_row)
    return score


def channel_vector_plan(n: NestView, target: CPUTarget) -> ChannelPlan | None:
    """The channel-vector plan of a contraction whose input 1 is a weight with output channels on
    its first axis (conv, gemm), None when the nest has no such shape. Its channel block's packed
    weights stream from L2 (at most its size of them)."""
    width = target.lanes
    if n.combiner != "mac" or len(n.maps) < 2 or not n.dims[n.npar:]:
        return None
    axes = n.weight_layouts.get(1)
    if axes is None or axes[0] != "O":
        return None
    par = n.dims[: n.npar]
    read0, w_map = nest.map_dims(n.maps[0]), n.maps[1]
    col = None
    for pos, (name, extent) in enumerate(par):
        coefs = [linear_coefficient(e, pos) for e in w_map.results]
        if pos not in read0 and coefs[0] == 1 and not any(coefs[1:]) and extent % width == 0:
            others = [linear_coefficient(w_map.results[0], q) for q in range(len(n.dims)) if q != pos]
            if all(c is not None and c % width == 0 for c in others):
                col = (name, extent)
    row = next(((name, e) for pos, (name, e) in reversed(list(enumerate(par)))
                if e > 1 and stride_of(n.out_map, n.out_shape, pos) == 1 and pos in read0), None)
    if col is None or row is None or stride_of(n.out_map, n.out_shape, [d for d, _ in par].index(col[0])) == 1:
        return None
    red = math.prod(e for _, e in n.dims[n.npar:])
    window = row_window(n, [d for d, _ in par].index(row[0]))
    plans = []
    for r_col in (4, 3, 2, 1):
        if (col[1] // width) % r_col or (r_col > 1 and r_col * width * red * 4 > target.l2_bytes):
            continue
        streaming = input_stream_bound(n, col[1] // width, r_col, target)
        # each point's broadcast stays live beside the weight vectors where the points share a
        # window (conv's kw); without one (1x1 conv) it feeds r_col FMAs and dies
        live_per_point = r_col + 1 if window is not None else r_col
        for r_row in range(1, min(row[1], (channel_tile_registers(target) - r_col) // live_per_point) + 1):
            used = row[1] / (-(-row[1] // r_row) * r_row)
            score = channel_tile_score(r_col, r_row, used, red, target, window) * streaming
            plans.append((score, r_col, r_row, used))
    best = max(plans, key=lambda plan: plan[0])
    best = max((p for p in plans if p[0] >= best[0] * (1 - PLAN_TIE) and p[1] <= best[1]),
               key=lambda plan: (plan[1] * plan[2], plan[0]))
    _, r_col, r_row, used = best
    # a lane-strided output: the tile is transposed in registers, then stored as rows of r_row lanes
    efficiency = used * red / (red + epilogue_cost(r_row, width))
    return ChannelPlan(col[0], col[1], r_col, row[0], row[1], r_row, efficiency, window)


def channel_vector_schedule(n: NestView, plan: ChannelPlan, target: CPUTarget) -> Schedule:
    """Lanes over output channels read from weights packed `OIHW16o` (one contiguous vector per
    weight element), each input element broadcast to `r_col` vectors of `r_row` tile points.
    Channel blocks come first unless the input does not stay in L2 (`l2_input_bytes`): then they
    go inside the image rows (`oh`), each row's inputs re-read from L2 by every block:

        domain = #nest.domain<[n = 1, co = 512, oh = 7, ow = 7], [ci = 512, kh = 3, kw = 3]>
        -> schedule = {splits = [["co", 16], ["co.o", 2]], vector = "co.i", pack = {"1" = "OIHW16o"},
                       order = ["n", "co.o.o", "oh", "ci", "kh", "kw", "ow", "co.o.i", "co.i"],
                       unroll = {ow = 7, co.o.i = 2, kw = 3, kh = 3}, parallel = "co.o.o"}
    """
    width = target.lanes
    sched = Schedule(splits=[(plan.col, width)], vector=Loop.inner(plan.col),
                     pack={1: n.weight_layouts[1] + f"{width}o"})
    loops = [Loop.outer(name) if name == plan.col else name for name, _ in n.dims[: n.npar]]
    # tile points row-major over (row, col): each broadcast input feeds r_col FMAs in a row and dies
    tile = _tile_loop(sched, loops, plan.row, plan.row_extent, plan.r_row)
    tile += _tile_loop(sched, loops, Loop.outer(plan.col), plan.col_extent // width, plan.r_col)
    _unroll_inner_reductions(sched, n)
    blocks = next((l for l in loops if l.startswith(Loop.outer(plan.col))), None)
    if blocks is not None and input_bytes_read(n) > l2_input_bytes(target):
        # the input does not stay in L2: the channel blocks take turns on each row of the image,
        # whose inputs stay there (DenseNet-161 0.95x the time, ResNet-34 0.99x)
        loops.remove(blocks)
        rows = next((i for i, l in enumerate(loops) if l in (plan.row, Loop.outer(plan.row))), len(loops))
        loops.insert(rows, blocks)
    return _finish(sched, n, loops, tile)


def winograd_schedule(n: NestView, plan: WinogradPlan, target: CPUTarget) -> Schedule:
    """A conv that runs as 1-D Winograd (`WINOGRAD`): lanes over output channels, a register
    tile of one channel vector by two Winograd tiles along ow where their E x 2 accumulators fit
    the registers beside a weight vector and a broadcast (the stem's 26 of AVX-512's 32), else one
    (AVX2's 16), so that the transformed weights of a channel block (the stem's 17.5 KiB) stay in
    L1 while the block runs along a row; the channel blocks go inside the rows when the input does
    not stay in L2 (the stem's), as other channel-vector schedules do."""
    tiles = 2 if 2 * plan.points + 2 <= target.registers else 1
    return channel_vector_schedule(n, ChannelPlan("co", plan.extents["co"], 1, "ow", plan.extents["ow"],
                                                  tiles * plan.m, 1.0), target)


def nest_shape(op: nest.ComputeOp) -> NestView:
    """`op` as the default schedule reads it: with the axis letters of its weight inputs."""
    weights = {k: operand_axes(op, k) for k, v in enumerate(op.inputs) if isinstance(v.owner, nn.WeightOp)}
    return NestView.of(op, {k: axes for k, axes in weights.items() if axes})


def channel_pool_schedule(n: NestView, target: CPUTarget, blocks: int = 0) -> Schedule | None:
    """Lanes over channels for a max pool whose input pack-activations stores channel-blocked (its
    producer has lanes over the same channels): a register tile of points along the output row
    (the largest divisor of the row up to `width`), each a vector of `width` channels read with
    one load a tap, transposed in registers for the NCHW stores:

        domain = #nest.domain<[n = 1, c = 64, oh = 56, ow = 56], [kh = 3, kw = 3]>
        -> schedule = {splits = [["c", 16], ["ow", 14]], vector = "c.i",
                       order = ["n", "c.o", "oh", "ow.o", "kh", "kw", "ow.i", "c.i"],
                       unroll = {ow.i = 14, kw = 3, kh = 3}, parallel = "c.o"}

    With `blocks`, the channels come in that many blocks as the outer loop `c.o.o` (those of the
    producer whose rows a fused kernel computes, see FUSE_ROWS), the tile taking the vectors of a
    block times fewer points (`width` accumulators in all).

    None unless the pool writes NCHW with a multiple of `width` channels (and of `blocks` vectors)."""
    width = target.lanes
    names = [name for name, _ in n.dims]
    results = n.out_map.results
    if n.combiner != "max" or len(results) != 4 or not all(isinstance(e, AffineDimExpr) for e in results[1:]):
        return None
    channel, row = names[results[1].position], names[results[3].position]
    extents = dict(n.dims)
    vectors = extents[channel] // width
    if extents[channel] % width or (blocks and vectors % blocks):
        return None
    per_block = vectors // blocks if blocks else 1
    sched = Schedule(splits=[(channel, width)], vector=Loop.inner(channel))
    loops = [Loop.outer(name) if name == channel else name for name in names[: n.npar]]
    most = width // per_block
    points = next((p for p in range(most, 1, -1) if extents[row] % p == 0), most)
    tile = _tile_loop(sched, loops, row, extents[row], points)
    if blocks:
        tile += _tile_loop(sched, loops, Loop.outer(channel), vectors, per_block)
    _unroll_inner_reductions(sched, n)
    return _finish(sched, n, loops, tile)


def fused_row_blocks(pool: nest.ComputeOp) -> int:
    """The channel blocks of the producer whose rows `pool`'s kernel can compute (FUSE_ROWS), 0 if
    none: the producer is a nest that only `pool` reads, with lanes over its channels and outer
    loops over its output rows and over blocks of its channels (ResNet's stem: 2 blocks of 32)."""
    producer = pool.inputs[0].owner
    if not isinstance(producer, nest.ComputeOp) or len(list(producer.result.uses)) != 1 or producer.schedule is None:
        return 0
    sched = producer.get_schedule()
    names = [name for name, _ in producer.domain.dims]
    results = producer.output_map.results
    if len(results) != 4 or not isinstance(results[1], AffineDimExpr) or not isinstance(results[2], AffineDimExpr):
        return 0
    channel, row = names[results[1].position], names[results[2].position]
    reductions = names[producer.domain.num_parallel.data:]
    outer = sched.order[: next((i for i, l in enumerate(sched.order) if l in reductions), len(sched.order))]
    block = next((l for l in outer if Loop(l).dim == channel), None)
    if row not in outer or block is None or sched.vector != Loop.inner(channel):
        return 0
    return dict(sched.loops(producer.domain))[block]


def depthwise_channel(n: NestView) -> str | None:
    """The channel dim of a depthwise conv (each output channel reads only the same input channel,
    the reduction is the window alone), None for any other nest: the dim with extent > 1 that is
    the channel index of both input 0 and the output (`g`, beside `co = 1`)."""
    if n.combiner != "mac" or len(n.maps) < 2 or len(n.out_map.results) != 4 or len(n.maps[0].results) != 4:
        return None
    extents = [e for _, e in n.dims]
    forms = [nest.linear_form(m.results[1]) for m in (n.out_map, n.maps[0])]
    if any(f is None or f[1] != 0 for f in forms):
        return None
    dims = [{d for d, c in f[0].items() if c and extents[d] > 1} for f in forms]
    if len(dims[0]) != 1 or dims[0] != dims[1]:
        return None
    (d,) = dims[0]
    if forms[0][0][d] != 1 or forms[1][0][d] != 1 or d >= n.npar:
        return None
    return n.dims[d][0]


DEPTHWISE_POINTS = 14
"""Most points along the row a depthwise tile holds (each an accumulator beside its window's
weight vectors: 14 + 9 for 3x3 of AVX-512's 32 registers; see `depthwise_points`)."""


def depthwise_points(taps: int, target: CPUTarget) -> int:
    """Most accumulators of a depthwise tile beside the weight vectors of its window's `taps`, of
    which LLVM keeps at most half the registers live (it reloads the others from L1): 14 on
    AVX-512, 7 for a 3x3 window with AVX2's 16 registers."""
    return max(1, min(DEPTHWISE_POINTS, target.registers - 1 - min(taps, target.registers // 2)))


def depthwise_channel_schedule(n: NestView, target: CPUTarget) -> Schedule | None:
    """Lanes over channels for a depthwise conv whose input pack-activations stores channel-blocked
    (NCHW16c): each tap of a point is one aligned input load and one FMA with a weight vector
    packed `OIHW16o`, a register tile of points along the output row (the largest divisor of the
    row up to DEPTHWISE_POINTS), the window unrolled (3x3 on 56x56 rows of 64 channels, in L2:
    2.3x the FMA rate of lanes along the row, which read 9 unaligned vectors per 16 points):

        domain = #nest.domain<[n = 1, g = 64, co = 1, oh = 56, ow = 56], [kh = 3, kw = 3]>
        -> schedule = {splits = [["g", 16], ["ow", 14]], vector = "g.i", pack = {"1" = "OIHW16o"},
                       order = ["n", "g.o", "co", "oh", "ow.o", "kh", "kw", "ow.i", "g.i"],
                       unroll = {ow.i = 14, kw = 3, kh = 3}, parallel = "g.o"}

    None unless the nest is a depthwise conv (`depthwise_channel`) over a multiple of `width`
    channels, NCHW, with a weight packable by output channel."""
    width = target.lanes
    channel = depthwise_channel(n)
    axes = n.weight_layouts.get(1)
    if channel is None or axes is None or axes[0] != "O" or dict(n.dims)[channel] % width:
        return None
    names = [name for name, _ in n.dims]
    row = n.out_map.results[3]
    if not isinstance(row, AffineDimExpr) or stride_of(n.out_map, n.out_shape, row.position) != 1:
        return None
    row_name, row_extent = n.dims[row.position]
    sched = Schedule(splits=[(channel, width)], vector=Loop.inner(channel), pack={1: f"{axes}{width}o"})
    loops = [Loop.outer(name) if name == channel else name for name in names[: n.npar]]
    taps = math.prod(e for _, e in n.dims[n.npar:])
    points = next(p for p in range(min(depthwise_points(taps, target), row_extent), 0, -1) if row_extent % p == 0)
    tile = _tile_loop(sched, loops, row_name, row_extent, points)
    _unroll_inner_reductions(sched, n)
    return _finish(sched, n, loops, tile)


class DefaultSchedulePass(ModulePass):
    """Set a vectorised, thread-parallel schedule on every nest.compute that has none, for the
    module's target CPU (`nasir.target`, else NASIR_CPU, else the host; `nasir-opt --cpu`): its
    vector lanes, registers and caches; a conv with a wide strided row window (a 7x7 stride-2
    stem) gets `winograd_schedule` and is marked to run as 1-D Winograd (`nasir.winograd`, with
    the `nasir.scratch_bytes` its kernel needs)."""

    name = "default-schedule"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = target_of(op)
        # nests that run lanes over channels only if their input is stored channel-blocked (a max
        # pool after a stem, a depthwise conv): their channel schedule, and the spatial one to fall
        # back to
        blocked_input: dict[nest.ComputeOp, Schedule] = {}
        for nest_op in op.walk():
            if isinstance(nest_op, nest.ComputeOp) and nest_op.schedule is None:
                shape = nest_shape(nest_op)
                winograd = winograd_plan(shape, target.lanes) if 1 in shape.weight_layouts else None
                if winograd is not None:
                    nest_op.properties["schedule"] = winograd_schedule(shape, winograd, target).to_attr()
                    WINOGRAD.set(nest_op, winograd.m)
                    SCRATCH_BYTES.set(nest_op, winograd.scratch_bytes)
                    continue
                spatial = schedule_for(shape, target)
                channel = channel_pool_schedule(shape, target) or depthwise_channel_schedule(shape, target)
                nest_op.properties["schedule"] = (channel or spatial).to_attr()
                if channel is not None:
                    blocked_input[nest_op] = spatial
        # pack-activations then stores their inputs NCHW16c, unless some other nest reads or writes
        # those across the channels: such nests fall back until every input is blocked
        while blocked_input:
            packed = packed_tensors(op)
            unpacked = [n for n in blocked_input if n.inputs[0] not in packed]
            if not unpacked:
                break
            for nest_op in unpacked:
                nest_op.properties["schedule"] = blocked_input.pop(nest_op).to_attr()
        # a channel-lane max pool whose producer it alone reads computes that producer's rows in
        # its own kernel, block by block of the producer's channels, as it needs them
        for pool in blocked_input:
            blocks = fused_row_blocks(pool) if pool.kind == "max" else 0
            fused = channel_pool_schedule(nest_shape(pool), target, blocks) if blocks > 1 else None
            if fused is not None:
                pool.properties["schedule"] = fused.to_attr()
                FUSE_ROWS.set(pool, True)
