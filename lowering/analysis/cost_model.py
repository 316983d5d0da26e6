"""default-schedule's cost model: the fraction of the FMA rate a schedule keeps on the target.

Spatial schedules (lanes along the output row) are scored by useful lanes, loads per FMA and masked
edge vectors (`spatial_score`); channel schedules (lanes over output channels) by loads per FMA
beyond what runs beside the FMAs, weight vectors streamed from L2, inputs re-read from L3 and the
epilogue of transposed rows (`channel_tile_score`). Budgets (registers, L1, L2) come from the
target (`nasir.lowering.target.CPUTarget`).

    spatial_score(view, schedule, target)          # 0.0 .. 1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nasir.dialects import affine
from nasir.dialects.affine import linear_coefficient, stride_of
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Loop, Schedule
from nasir.lowering.target import CPUTarget


def tile_input1_bytes(target: CPUTarget) -> int:
    """Input-1 bytes (weights) the output channels of one spatial register tile may read (they stay
    in cache): three L1s (96 KiB on Zen 4)."""
    return 3 * target.l1_bytes


LATENCY_SLACK = 1.5
"""Independent accumulators a register tile needs per FMA in flight (the FMA latency times the
FMAs issued per cycle) to keep the FMA units busy beside its loads and loop overhead. Zen 3 (4 x 2
in flight, AVX2): 12-accumulator tiles ran 0.6-0.75x the time of 8-accumulator ones (ResNeXt-29's
1x1 convs: channel 2 x 6 against 2 x 4, spatial 4 x 3 against 4 x 2)."""


def accumulators_needed(target: CPUTarget) -> int:
    """Accumulators that hide the FMA latency (`LATENCY_SLACK`): 12 on Zen 3 and Zen 5, 6 on Zen 4
    (one 16-lane FMA a cycle)."""
    return math.ceil(LATENCY_SLACK * target.fma_latency * target.fmas_per_cycle)


def latency_bound(accumulators: int, target: CPUTarget) -> float:
    """Fraction of the FMA rate a register tile of `accumulators` independent chains keeps
    (`accumulators_needed`)."""
    return min(1.0, accumulators / accumulators_needed(target))


def max_accumulators(target: CPUTarget) -> int:
    """Vector accumulators of a spatial register tile: half the vector registers (16 of AVX-512's
    32), the rest for its input vectors, broadcasts and addresses."""
    return target.registers // 2


MAX_UNROLLED_BODY = 256
"""Combiner steps (FMAs) the fully unrolled inner reduction loops of a register tile may hold."""


def channel_score(plan: "ChannelPlan", target: CPUTarget) -> float:
    """Estimated fraction of the FMA rate a channel schedule keeps: its lanes and epilogue
    (`ChannelPlan.efficiency`) and its loads per FMA. (The L2 term of `channel_tile_score` only
    ranks the tiles of one nest.)"""
    return (plan.efficiency * load_bound(channel_loads_per_fma(plan.r_col, plan.r_row, plan.window), target)
            * latency_bound(plan.r_col * plan.r_row, target))


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
            lo, hi = affine.expr_range(expr, extents)
            left, right = left or lo < 0, right or hi >= n.in_shapes[0][axis]
    score *= 1 - EDGE_COST * min(left + right, vectors) / vectors
    rows, cols = spatial_tile(n, sched)
    return score * load_bound(1 / rows + 1 / cols, target) * latency_bound(rows * cols, target)


EDGE_COST = 0.4
"""Fraction of its speed a spatial vector loses to masks when it reads a padded edge or ends a
row in a tail (channel 1x14 tiles beat spatial 8x2 ones on 14- and 28-wide rows, lose on 56)."""


def load_bound(loads_per_fma: float, target: CPUTarget) -> float:
    """Fraction of the FMA rate a register tile with `loads_per_fma` keeps (see
    `CPUTarget.loads_per_fma`)."""
    return min(1.0, target.loads_per_fma / loads_per_fma)


def spatial_tile(n: NestView, sched: Schedule) -> tuple[int, int]:
    """(r, c): the rows (read by input 0) and output channels (read by the weight only) of a
    spatial register tile, its r x c accumulators; each input vector feeds c FMAs, each broadcast
    weight r, so it loads 1/r + 1/c per FMA."""
    read0 = {n.dims[pos][0] for pos in affine.map_dims(n.maps[0])} if n.maps else set()
    reductions = {name for name, _ in n.dims[n.npar:]}
    rows = cols = 1
    for loop, factor in sched.unroll.items():
        if loop not in reductions:
            if Loop(loop).dim in read0:
                rows *= factor
            else:
                cols *= factor
    return rows, cols


BALANCED_ITERATIONS = 5
"""Iterations of a thread-parallel loop that keep 2 threads within one iteration of 1/5 apart.
Fewer than that and not a power of two (3) leave the threads to a loop inside it; from 5 on, that
loop inside costs more than the imbalance: each of the outer loop's iterations runs on all the
threads in turn, each thread reading all of the iteration's weights, a barrier after each.
MobileNetV2 cifar10's 1x1 projections of 12 channel blocks (8 lanes, 2 blocks a tile: 6
iterations) and 10 (16 lanes: 5) ran 1.4-1.8x the time at 2 threads on their pixels (`nasir tune
--threads 2` on a Zen 4), the network 0.91x (8 lanes) and 0.95x the time on the blocks."""


def balanced(extent: int) -> bool:
    """Whether a loop of `extent` iterations splits evenly enough over threads to run on them: a
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


def flat_row(n: NestView, row: int) -> int | None:
    """The parallel dim before row dim `row` when the two make one row of points (a 1x1 conv's
    oh and ow: 8 x 8 points, a row of 64): input 0 and the output hold them as a plane, a step
    of the outer one moving as far as the whole row (`oh * W + ow`), and no window slides along
    either. A channel tile then runs along the fused row across image rows, where no tile of
    enough accumulators divides an image row (`channel_vector_plans`). None otherwise.

    The input's size does not matter: its channel blocks run outside the fused row, each reading
    the whole input, from L3 where it leaves L2, and still won at AVX2 against 2 x 6 tiles along
    image rows of 32 (the last tile of 2) or 14: znver3 code on Zen 4, ResNeXt-29's 1x1 convs on
    32 x 32 (input 0.5-1 MiB) 0.95-0.97x the time, DenseNet-121 imagenet's on 14 x 14 0.91-0.94x."""
    outer = row - 1
    if outer < 0 or n.dims[outer][1] == 1 or row_window(n, row) or row_window(n, outer):
        return None
    extent = n.dims[row][1]
    for amap, shape in ((n.maps[0], n.in_shapes[0]), (n.out_map, n.out_shape)):
        step = stride_of(amap, shape, row)
        if not step or stride_of(amap, shape, outer) != extent * step:
            return None
    return outer


@dataclass
class ChannelPlan:
    """A channel-vector schedule: lanes over `col` (conv's co, extent a multiple of the width),
    register tile of `r_col` vectors x `r_row` points of `row` (conv's ow, or a fusion of two
    loops `oh*ow`: see `flat_row`)."""

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


STRIDED_TAPS = 3
"""Most taps of a strided window whose channel tile may take as many points as a 1x1 conv's
(`channel_tile_rows`): a 3x3 conv's, not a 7x7 stem's."""


def channel_tile_rows(r_col: int, window: Window | None, target: CPUTarget, input_in_l2: bool = True) -> int:
    """Most points a channel tile of `r_col` weight vectors holds in `channel_tile_registers`: each
    point's accumulators, beside the weight vectors and the points' broadcast inputs. Without a
    window (1x1 conv) a broadcast feeds its r_col FMAs and dies. With one (conv's kw) LLVM keeps
    the broadcasts live: every point's where a broadcast feeds several weight vectors (3 x 7 on
    DenseNet's 48-channel 3x3 conv spills on AVX-512), and where it feeds one, a window's worth
    (`window.taps`) without AVX-512's embedded broadcasts (`CPUTarget.embedded_broadcast`, which
    fold it into the FMA): 1 x 8 to 1 x 10 tiles, 11 to 14 registers counted so, ran fastest on
    ResNet-18's, WRN-40-2's and ResNet-34's 3x3 convs on Zen 3 (counting a broadcast per point,
    at most 1 x 6 fitted). Where a broadcast feeds several weight vectors, LLVM still keeps only a
    window's worth live, and one more loading, beside the accumulators and weight vectors: 2 x 5 of
    a 3x3 conv (10 + 2 + 3 + 1 of AVX2's 16 registers; its inner loop: 90 FMAs, 20 weight loads,
    21 broadcasts, no spills), where counting a broadcast per point allows 2 x 4 (the larger count
    of the two is the bound; 2 x 6 spilled: 38-82 stack accesses per 108 FMAs). On ResNet-34
    imagenet's 3x3 convs 2 x 5 ran 0.93-0.96x the time of 1 x 8 and 2 x 4 on 56- and 28-wide rows,
    0.83-0.87x of 1 x 7 on the stride-2 conv on 14 (Zen 3 and Zen 4). A strided window (stride 2)
    may take as many points as a 1x1 conv where its input stays in L2 (`input_in_l2`): its neighbouring
    points share fewer inputs, so its tile loads more per FMA, and 2 x 6 (12 accumulators) ran
    0.96-0.98x the time of 2 x 4 and 0.88x of 2 x 5 though LLVM spills in it (31 stack accesses
    beside 57 loads per 108 FMAs), inside the network: the stride-2 3x3 convs onto 16 x 16 of
    ResNet-18 (256 KiB of input) and WRN-40-2 (128 KiB). Where the input comes from beyond L2, the
    spills' loads and stores cost more than the accumulators gain: 2 x 4 ran 0.87-0.88x the time of
    2 x 6 (2 x 5 0.95x) on ResNeXt-29's grouped one (1 MiB), 2 x 4 and 2 x 5 0.94-0.95x on ResNet-34
    imagenet's onto 28 x 28 (784 KiB); znver3 code on Zen 4, each network profiled in turn with the
    other tile. Not a wider window (`STRIDED_TAPS`): the 7x7 stem's 2 x 6 left LLVM no register to
    spare, and where the stem runs inside its max pool's kernel (`nasir.fuse_rows`) the JIT's code
    spilled an accumulator, carried through the stack at every tap: 2.2x the time of 2 x 4 in
    ResNet-34 and DenseNet-121 imagenet (2.4 -> 5.0 ms; standalone 0.98x)."""
    registers = channel_tile_registers(target) - r_col
    if window is None:
        return registers // r_col
    if target.embedded_broadcast:
        return registers // (r_col + 1)
    if r_col == 1:
        return registers - window.taps
    if window.stride > 1 and window.taps <= STRIDED_TAPS and input_in_l2:
        return registers // r_col
    return max(registers // (r_col + 1), (target.registers - r_col - window.taps - 1) // r_col)


PLAN_TIE = 0.01
"""Channel plans whose scores are within this fraction of the best count as equal; of those with
no more channel vectors than the best, one whose tiles divide the row wins (AVX2's 7 x 7 3x3
convs: the 2 x 4 tile, a tail of 3, ties with 1 x 7 by score and ran 1.03-1.06x its time on a
Zen 4), then the one with the most accumulators: more independent FMAs per reduction step hide
the loads that come from L2 (DenseNet's 1x1 convs with 96-336 input channels on 56x56: 2 x 14
ran 0.76-0.81x the time of 2 x 8; its 192 -> 48 3x3 conv on 56x56: 1 x 14 0.81x of 1 x 8). More
channel vectors did not: a 128-channel 3x3 conv on 28x28 ran 1.10x the time in 4 x 4 as in
1 x 14. Then the best score, then the fewest channel vectors (each weight vector serves more
points)."""


EPILOGUE_WEIGHT = 3.0
"""FMA slots one epilogue step per row of a transposed channel tile takes (bias or folded batch
norm, ReLU, residual add and the store of a row of r_row lanes)."""


def l2_input_bytes(target: CPUTarget) -> int:
    """Input bytes that stay in L2 while a conv's channel blocks re-read them: half of it (512 KiB
    of Zen 4's 1 MiB)."""
    return target.l2_bytes // 2


WEIGHT_REREAD_TIE = 2.0
"""How many times the bytes of re-reading the input for every channel block re-reading the weights
for every image row may move before the channel blocks go inside the rows (`rows_hold_blocks`):
DenseNet-161's 1x1 convs on 14 x 14 (weights 0.55-0.74 MiB, 1.1x the input's bytes) ran 0.93x
the time with the blocks inside the rows, its 1x1 convs on 7 x 7 (2.2x) and ResNeXt-29's grouped
3x3 conv on 16 x 16 (weights 0.56 MiB a group, 2.3x) 0.95x and 0.84x with the blocks outside."""


def rows_hold_blocks(n: NestView, col: str, row: str, blocks: int, target: CPUTarget) -> bool:
    """Whether a channel plan's blocks of output channels (`blocks` of them over `col`; lanes along
    `row`) go inside the image rows: when one group's input does not stay in L2 (`l2_input_bytes`),
    re-reading it for each block moves bytes from L3; with the blocks inside the rows each row's
    inputs stay in L2 and the group's weights are re-read for each row instead, from L2 when they
    fit there, else from L3 (then the order that moves fewer bytes, `WEIGHT_REREAD_TIE`):

        ResNet-34 imagenet, 64 -> 64 3x3 on 56 x 56: input 784 KiB, weights 144 KiB -> inside
        ResNet-34 imagenet, 128 -> 128 3x3 on 28 x 28: input 392 KiB, weights 576 KiB x 28 rows -> outside
        ResNeXt-29 grouped 3x3 on 32 x 32 (2 groups): 256 KiB of input a group -> outside
    """
    dims = dict(n.dims[: n.npar])
    groups = dims.get("g", 1)
    input_bytes = input_bytes_read(n) / groups
    if input_bytes <= l2_input_bytes(target):
        return False
    weight_bytes = 4 * math.prod(n.in_shapes[1]) / groups
    if weight_bytes <= target.l2_bytes:
        return True
    rows = math.prod(e for name, e in dims.items() if name not in (col, row, "g"))
    return weight_bytes * rows <= WEIGHT_REREAD_TIE * input_bytes * blocks


def input_stream_bound(n: NestView, col_vectors: int, r_col: int, target: CPUTarget) -> float:
    """Fraction of the FMA rate left by re-reading input 0 once per block of r_col channel vectors
    when the bytes it reads (`read_fraction`) do not stay in L2: a strided 1x1 conv does few FMAs
    per input byte. (ResNeXt-29's 256 -> 512 shortcut reads half of its 1 MiB input, the odd rows
    untouched: 2 x 8 tiles, 0.986x the model's time of 4 x 4.)"""
    if input_in_l2(n, target):
        return 1.0
    vector_fmas = math.prod(e for _, e in n.dims) / target.lanes
    return min(1.0, target.l3_bytes_per_fma * vector_fmas / (input_bytes_read(n) * col_vectors / r_col))


def weight_block_fits(r_col: int, block_bytes: int, target: CPUTarget) -> bool:
    """Whether a channel tile of `r_col` vectors may re-read its block of packed weights
    (`block_bytes`: r_col vectors of output channels x the reduction) from L2 for each image row.
    One vector: always. Two: when the block fits L2. More: when the block and the next, which
    `prefetch_next_block` brings into L2 meanwhile, fit together. Measured alone on a 2 MiB L2
    (Xeon, 16 lanes, 2 FMAs a cycle), 3x3 convs on 4 x 4, 4 vectors against 2 (blocks twice
    the size): 512 channels, blocks of 1.18 MB, 0.67 against 0.50 ms; 256 (590 KB) 0.138 against
    0.123; 128 (295 KB) 0.025 against 0.028. Zen 4's 1 MiB held 2 vectors' 590 KB blocks (ResNet-34
    cifar10's layer4 at 102% of the peak)."""
    if r_col == 1:
        return True
    return (block_bytes if r_col == 2 else 2 * block_bytes) <= target.l2_bytes


def input_in_l2(n: NestView, target: CPUTarget) -> bool:
    """Whether the bytes of input 0 a nest reads (`input_bytes_read`) stay in L2 (`l2_input_bytes`)."""
    return input_bytes_read(n) <= l2_input_bytes(target)


def input_bytes_read(n: NestView) -> float:
    """Bytes of input 0 a nest reads (see `read_fraction`)."""
    return 4 * math.prod(n.in_shapes[0]) * read_fraction(n)


def read_fraction(n: NestView) -> float:
    """Fraction of input 0's cache lines a nest reads: an axis before the contiguous one whose index
    is `s * p + r` reaches at most extent(p) * extent(r) of its positions (a 1x1 stride-2 conv reads
    every other row); the contiguous axis is read whole (a line holds many of its points)."""
    fraction = 1.0
    for expr, size in list(zip(n.maps[0].results, n.in_shapes[0]))[:-1]:
        form = affine.linear_form(expr)
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


def epilogue_cost(r_row: int, width: int, blocked: bool = False) -> float:
    """FMA slots per accumulator of a channel tile after its reduction: `width` rows of r_row points
    out of log2(r_row) rounds of shuffles (see `LoopBuilder.transpose`), then their epilogue; for
    a result stored channel-blocked (`blocked`), the epilogue of the accumulator itself, stored
    whole."""
    if blocked:
        return EPILOGUE_WEIGHT
    return EPILOGUE_WEIGHT * (width / r_row + (r_row - 1).bit_length() + 1)


L2_WEIGHT_VECTORS_PER_FMA = 0.25
"""Weight vectors per FMA that L2 feeds at full FMA rate: a tile of r_row points loads 1/r_row
(DenseNet's 48-channel 3x3 conv on 14x14: 3 x 2 tiles take 1.5x the time of 1 x 14)."""


def channel_tile_score(r_col: int, r_row: int, used: float, red: int, target: CPUTarget,
                       window: Window | None = None, blocked: bool = False) -> float:
    """Estimated fraction of the FMA rate a channel tile of r_col vectors x r_row points keeps:
    its loads per FMA beyond the target's `loads_per_fma` slow it, its epilogue adds
    `epilogue_cost` to `red` FMAs per accumulator, too few accumulators leave the FMA latency
    exposed (`latency_bound`; `blocked`: a result stored channel-blocked, no transpose), and a
    tail tile (its points need guards) is discounted by its used share cubed: 2 x 5 on 56-wide
    rows (a tail of 1, used 0.93) ran 0.96x the time of 1 x 8, on 28 (a tail of 3) 0.93-0.95x of
    2 x 4; on 16 (a tail of 1, used 0.8) 1.04x of 2 x 4. Its packed weights stream from L2 when
    they do not fit L1 beside its inputs."""
    width = target.lanes
    loads = load_bound(channel_loads_per_fma(r_col, r_row, window), target)
    score = used ** 3 * loads * latency_bound(r_col * r_row, target) * red / (red + epilogue_cost(r_row, width, blocked))
    if r_col * width * red * 4 > target.l1_bytes:  # weight vectors stream from L2
        score *= min(1.0, L2_WEIGHT_VECTORS_PER_FMA * r_row)
    return score


DEPTHWISE_POINTS = 14
"""Most points along the row a depthwise tile holds (each an accumulator beside its window's
weight vectors: 14 + 9 for 3x3 of AVX-512's 32 registers; see `depthwise_points`)."""


def depthwise_points(taps: int, target: CPUTarget) -> int:
    """Most accumulators of a depthwise tile beside the weight vectors of its window's `taps`, of
    which LLVM keeps at most half the registers live (it reloads the others, and the inputs, from
    L1): 14 on AVX-512, 8 for a 3x3 window with AVX2's 16 registers. At 8 lanes rows of 32, 16 and
    8 points then take tiles of 8, not 4 (the largest divisor of them up to 7, where a register was
    kept for the input): 8 FMA chains, Zen's FMA latency times its rate, where 4 left half the FMA
    slots idle. Measured with znver3 code on a Zen 4, in one process: ResNet-34 cifar10
    `depthwise`'s 3x3 convs took 0.80-0.89x the time (the network 0.92x), MobileNetV2 imagenet's
    stride-2 conv onto rows of 56 (8 points for 7) 0.53x, MobileNetV2 0.99x (both datasets)."""
    return max(1, min(DEPTHWISE_POINTS, target.registers - min(taps, target.registers // 2)))
