"""The schedule families default-schedule chooses from, built for a nest and a target.

- `spatial_vector_schedule`: lanes over the output-contiguous dim (conv's ow), a register tile of
  output channels x rows;
- `channel_vector_schedule` (planned by `channel_vector_plan`): lanes over output channels read from
  packed weights (`OIHW16o`), a register tile of row points x channel blocks;
- `winograd_schedule`, `channel_pool_schedule`, `depthwise_channel_schedule`,
  `channel_subsample_schedule`: a Winograd stem, a max pool, a depthwise conv and a strided 1x1
  conv's subsample with lanes over channels;
- `schedule_for`: the better of the spatial and channel families by the cost model;
  `candidate_schedules`: the few it ranks highest, and the spatial schedule's other register tiles
  (`spatial_tiles`), for tuning (`nasir.tuning.host`) to time.

    schedule_for(NestView.of(op), target)    # Schedule(splits=[("co", 16)], vector="co.i", ...)
"""

from __future__ import annotations

import dataclasses
import math

from xdsl.ir.affine import AffineDimExpr

from nasir.dialects import affine, nest
from nasir.dialects.affine import linear_coefficient, stride_of
from nasir.dialects.attributes import FUSE_ROWS
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Loop, Schedule
from nasir.lowering.analysis.cost_model import (
    MAX_UNROLLED_BODY,
    PLAN_TIE,
    ChannelPlan,
    balanced,
    channel_loads_per_fma,
    channel_score,
    channel_tile_rows,
    channel_tile_score,
    depthwise_points,
    epilogue_cost,
    flat_row,
    input_in_l2,
    input_stream_bound,
    max_accumulators,
    row_window,
    rows_hold_blocks,
    spatial_score,
    tile_input1_bytes,
    weight_block_fits,
)
from nasir.lowering.schedule.winograd import WinogradPlan
from nasir.lowering.target import CPUTarget


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
    return candidate_schedules(n, target, 1)[0]


def _lanes_along_output(n: NestView, target: CPUTarget) -> tuple[Schedule, list[str], tuple | None, int]:
    """The vector loop of a spatial schedule: the last parallel dim contiguous in the output (and
    affine in every input), split by the lanes (or its packing block) when longer. Returns the
    schedule so far, the parallel loops outside the vector loop, the dim (name, extent) and the
    lanes."""
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
    return sched, loops, vec, width


def spatial_vector_schedule(n: NestView, target: CPUTarget, tile: tuple[int | None, int | None] | None = None
                            ) -> Schedule:
    """Vector lanes over the output dim that is contiguous (conv's ow), register tile co x oh: the
    cost model's pick of the legal tiles (`spatial_tiles`), or `tile` (one of them: tuning's
    variants)."""
    sched, loops, vec, width = _lanes_along_output(n, target)
    options = _spatial_tile_options(n, target, sched, loops, vec, width)
    tile_loops = []
    if options is not None:
        col, row, cols, rows, pairs, window = options
        if tile is not None:
            c, r = tile
        elif pairs and window is not None and window.taps > 1:
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
            tile_loops += _tile_loop(sched, loops, row[0], row[1], r)
        if c is not None:
            tile_loops += _tile_loop(sched, loops, col[0], col[1], c)
    if n.dims[n.npar:] and sched.vector:
        _unroll_inner_reductions(sched, n)
    return _finish(sched, n, loops, tile_loops)


def _spatial_tile_options(n: NestView, target: CPUTarget, sched: Schedule, loops: list[str], vec, width: int):
    """What a spatial schedule's register tile may be: (col, row, cols, rows, pairs, window) with
    the dims (name, extent) tiled by output channels (`col`, read by the weight only) and by rows
    (`row`, read by the input only), their legal factors and the (col, row) factor pairs within
    `max_accumulators`; None where the nest has no tile (no reduction, no vector loop, no dim of
    output channels). The caller tiles the loops."""
    if not (n.combiner == "mac" and n.dims[n.npar:] and sched.vector and len(n.maps) >= 2):
        return None
    par = n.dims[: n.npar]
    read0, read1 = affine.map_dims(n.maps[0]), affine.map_dims(n.maps[1])
    col = next(((name, e) for pos, (name, e) in reversed(list(enumerate(par)))
                if name in loops and pos not in read0 and pos in read1), None)
    row = next(((name, e) for pos, (name, e) in enumerate(par)
                if name in loops and e > 1 and pos in read0 and pos not in read1), None)
    factors, vec_pos = (8, 4, 2), [name for name, _ in par].index(vec[0])
    if col is None and Loop.outer(vec[0]) in loops and vec_pos not in read0:
        # the vector loop's blocks (a classifier's 1000 classes in 125 vectors of 8): each
        # broadcast input feeds several independent accumulators instead of one FMA chain
        col, factors = (Loop.outer(vec[0]), -(-vec[1] // width)), range(8, 1, -1)
    if col is None:
        return None
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
    return col, row, cols, rows, pairs, window


TUNING_FACTORS = (8, 7, 6, 4, 3, 2)
"""Register tile factors tuning also times beyond the cost model's (3 and 6 make 12 of AVX2's 16
registers: on Zen 3, ResNeXt-29's 1x1 convs ran 4 x 3 spatial tiles in 0.64-0.72x the time of
4 x 2)."""


def tile_registers(target: CPUTarget) -> int:
    """Accumulators a register tile tuning times may hold: all vector registers but 4 (an input
    vector, a broadcast, a weight vector and an address): 12 of AVX2's 16, 28 of AVX-512's 32."""
    return target.registers - 4


def spatial_tiles(n: NestView, target: CPUTarget) -> list[tuple[int | None, int | None]]:
    """Every register tile (output channels, rows) a spatial schedule of `n` may take, for tuning
    to time: the factor pairs within the accumulator budget, channels alone, rows alone, then the
    pairs of `TUNING_FACTORS` beyond that budget up to `tile_registers`."""
    sched, loops, vec, width = _lanes_along_output(n, target)
    options = _spatial_tile_options(n, target, sched, loops, vec, width)
    if options is None:
        return []
    col, row, cols, rows, pairs, _ = options
    alone = [(c, None) for c in cols] + [(None, r) for r in rows if row is not None and row[1] % r == 0]
    wider = [(c, r) for c in TUNING_FACTORS for r in TUNING_FACTORS
             if col[1] % c == 0 and row is not None and row[1] % r == 0 and (rows or r == 1)
             and max_accumulators(target) < c * r <= tile_registers(target)]
    return pairs + alone + wider


def channel_tiles(plan: ChannelPlan, target: CPUTarget) -> list[ChannelPlan]:
    """`plan` (a nest's channel plan) with other register tiles, for tuning to time: for each block
    of r_col channel vectors, the most points that fit `tile_registers`, the most that divide the
    row, and half the registers' worth (the cost model's budget counts the broadcasts a window keeps
    live; LLVM may reload them instead: on Zen 3 a grouped 3x3 conv's 1 x 8 tile ran 0.61-0.93x the
    time of 2 x 4)."""
    tiles = []
    for r_col in (1, 2, 3, 4):
        if (plan.col_extent // target.lanes) % r_col:
            continue
        most = min(plan.row_extent, tile_registers(target) // r_col)
        dividing = next(r for r in range(most, 0, -1) if plan.row_extent % r == 0)
        for r_row in sorted({most, dividing, min(most, target.registers // 2 // r_col)}, reverse=True):
            tiles.append(dataclasses.replace(plan, r_col=r_col, r_row=r_row))
    return tiles


def lane_packs(n: NestView, pos: int, width: int) -> tuple[int | None, dict[int, str]]:
    """Weights whose output-channel axis the vector loop (dim `pos`) walks with a stride, as a
    gemm's [n, k] weight: packed with a block of lanes innermost so that each weight vector is one
    load, and the block (the largest power of two up to `width` dividing the axis, at least 4:
    8 for 1000 classes) for the vector loop to split by. (None, {}) when there is none:

        W[n, k] : 1000 x 512, lanes over n  ->  pack = {1 = "OI8o"}, vector loop n split by 8

    A block never straddles a group: a grouped conv's W[g * 2 + co, ...] (2 output channels a
    group, lanes over co) gets none."""
    for k, axes in n.weight_layouts.items():
        amap, shape = n.maps[k], n.in_shapes[k]
        coefs = [linear_coefficient(e, pos) for e in amap.results]
        if axes[0] != "O" or coefs[0] != 1 or any(coefs[1:]) or stride_of(amap, shape, pos) == 1:
            continue
        # a block must not straddle what the other dims add to the channel (a grouped conv's
        # g * Co/G): the vector loop's extent and every other dim's coefficient are multiples of it
        steps = [n.dims[pos][1]] + [linear_coefficient(amap.results[0], d) for d in range(len(n.dims)) if d != pos]
        block = next((b for b in (width, width // 2, width // 4)
                      if b >= 4 and shape[0] % b == 0 and all(s % b == 0 for s in steps)), None)
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


def channel_vector_plan(n: NestView, target: CPUTarget) -> ChannelPlan | None:
    """The channel-vector plan of a contraction whose input 1 is a weight with output channels on
    its first axis (conv, gemm), None when the nest has no such shape: the first of
    `channel_vector_plans`."""
    plans = channel_vector_plans(n, target)
    return plans[0] if plans else None


def channel_vector_plans(n: NestView, target: CPUTarget, blocked: bool = False) -> list[ChannelPlan]:
    """The channel-vector plans of a contraction whose input 1 is a weight with output channels on
    its first axis (conv, gemm), the cost model's choice first, the others by score; empty when
    the nest has no such shape. A channel block's packed weights stream from L2 row after row
    (`weight_block_fits`). `blocked`: scored as storing its result channel-blocked, each
    accumulator a whole vector of the result (`epilogue_cost`), not transposed into NCHW rows."""
    width = target.lanes
    if n.combiner != "mac" or len(n.maps) < 2 or not n.dims[n.npar:]:
        return []
    axes = n.weight_layouts.get(1)
    if axes is None or axes[0] != "O":
        return []
    par = n.dims[: n.npar]
    read0, w_map = affine.map_dims(n.maps[0]), n.maps[1]
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
        return []
    red = math.prod(e for _, e in n.dims[n.npar:])
    pos = [d for d, _ in par].index(row[0])
    window = row_window(n, pos)
    rows = [row]
    if (outer := flat_row(n, pos)) is not None:  # the image rows as one row (a 1x1 conv's 8 x 8 points)
        rows.append((f"{par[outer][0]}*{row[0]}", par[outer][1] * row[1]))
    plans = []
    in_l2 = input_in_l2(n, target)
    for r_col in (4, 3, 2, 1):
        if (col[1] // width) % r_col or not weight_block_fits(r_col, r_col * width * red * 4, target):
            continue
        streaming = input_stream_bound(n, col[1] // width, r_col, target)
        for name, extent in rows:
            for r_row in range(1, min(extent, channel_tile_rows(r_col, window, target, in_l2)) + 1):
                used = extent / (-(-extent // r_row) * r_row)
                score = channel_tile_score(r_col, r_row, used, red, target, window, blocked) * streaming
                plans.append((score, r_col, r_row, used, name, extent))
    best = max(plans, key=lambda plan: plan[0])
    # near-ties: see PLAN_TIE; of tiles alike, the one along an image row (its stores transpose)
    chosen = max((p for p in plans if p[0] >= best[0] * (1 - PLAN_TIE) and p[1] <= best[1]),
                 key=lambda plan: (plan[3] == 1, plan[1] * plan[2], plan[0], -plan[1], plan[4] == row[0]))
    ranked = [chosen] + sorted((p for p in plans if p is not chosen), key=lambda plan: -plan[0])
    # a lane-strided output: the tile is transposed in registers, then stored as rows of r_row lanes
    return [ChannelPlan(col[0], col[1], r_col, name, extent, r_row,
                        used * red / (red + epilogue_cost(r_row, width, blocked)), window)
            for _, r_col, r_row, used, name, extent in ranked]


def candidate_schedules(n: NestView, target: CPUTarget, limit: int, tiles: bool = False) -> list[Schedule]:
    """At most `limit` schedules of a nest, best first by the cost model (the first is
    `schedule_for`'s): the spatial schedule and the channel plans (`channel_vector_plans`). A nest
    with no channel plan has one; tuning times the others. With `tiles`, then the spatial schedule
    with each other register tile (`spatial_tiles`): a grouped conv with fewer channels a group
    than lanes has no channel plan, and its tile is what tuning can change; then the channel plan
    with its other register tiles (`channel_tiles`), then the channel plan with its channel blocks
    in the other loop order (outside the image rows or inside them)."""
    spatial = spatial_vector_schedule(n, target)
    channel = channel_vector_plans(n, target)
    plans: list = list(channel)
    if plans and channel_score(plans[0], target) > spatial_score(n, spatial, target) * (1 - channel_tie(plans[0], target)):
        plans.insert(1, spatial)
    else:
        plans.insert(0, spatial)
    ranked = [p if isinstance(p, Schedule) else channel_vector_schedule(n, p, target) for p in plans[:limit]]
    if tiles:
        seen = {str(s.to_attr()) for s in ranked}
        variants = [spatial_vector_schedule(n, target, tile) for tile in spatial_tiles(n, target)]
        if channel:
            variants += [channel_vector_schedule(n, tile, target) for tile in channel_tiles(channel[0], target)]
            # the cost model's plan with its channel blocks outside and inside the rows (its own order: seen)
            variants += [channel_vector_schedule(n, channel[0], target, blocks_in_rows=inside) for inside in (False, True)]
        for variant in variants:
            if (key := str(variant.to_attr())) not in seen:
                seen.add(key)
                ranked.append(variant)
    return ranked


SHORT_ROW_TIE = 0.1
"""How far below its spatial schedule's score a 1x1 conv's channel plan may score and still be
taken where the output rows are shorter than a cache line (8 x 8 images with AVX2's 8 lanes):
each step of its channel loop, the spatial tile loads its row vectors from another input plane,
part of a line each, where the channel plan's broadcasts walk the channels of a point, which
pack-activations stores channel-blocked (a line holds 16 of them). The cost model sees the same
loads per FMA in both, and the channel plan's epilogue. On Zen 3, ResNeXt-29's 512 -> 1024 and
1024 -> 512 1x1 convs on 8 x 8 ran 0.80x and 0.95x the time with their channel plans (2 x 4
tiles), the network 0.972x (interleaved per-layer profile, 7 rounds); DenseNet-121, MobileNetV2
and WRN-40-2 within +-1.3%. Those convs now run their tiles along the fused row of all 64 points
(`flat_row`: 2 x 6), which is no short row, and win on score alone; the tie is left for a plan
along an image row (a stride)."""


def channel_tie(plan: ChannelPlan, target: CPUTarget) -> float:
    """How far below the spatial schedule's score `plan` may score and still be the cost model's
    choice: SHORT_ROW_TIE for a plan without a window along its rows (a 1x1 conv) whose rows are
    shorter than a cache line, else 0."""
    return SHORT_ROW_TIE if plan.window is None and 4 * plan.row_extent < target.cache_line else 0.0


CHANNEL_WRITER_TIE = 0.1
"""How far below its spatial schedule's score a conv's channel plan may score and still be taken
where the conv writes the input of a nest that runs lanes over channels only on a channel-blocked
input (`channel_writer_schedule`)."""


def channel_writer_schedule(n: NestView, target: CPUTarget, reader: NestView) -> Schedule | None:
    """`n`'s channel plan as a schedule when the cost model scores it within `CHANNEL_WRITER_TIE`
    of the spatial schedule, else None: for a conv whose result `reader`, a depthwise conv or a
    max pool, would read 8 or 16 channels a load if it were stored channel-blocked, which only a
    writer with lanes over channels can do (default-schedule). On Zen 3, ResNet-34's stem (3 -> 64
    channels, 32 x 32; the plan scores 0.93 of the spatial schedule) ran 0.95x the time with its
    plan, and after `depthwise` the depthwise convs of its first stage 0.88x, the network 0.95x.

    Where the reader's window is strided (`window_stride`), the plan is scored as it runs then,
    its result stored channel-blocked (`channel_vector_plans`' `blocked`: no transposed epilogue):
    on NCHW such a reader gathers every other point of its input rows with shuffles, which at
    AVX2 spill. MobileNetV2's 16 -> 96 1x1 conv on 112 x 112 (16 input channels: the transposes
    halve its NCHW score) then takes its plan, at AVX2 0.45-0.52 -> 0.41-0.42 ms, its stride-2
    depthwise conv 0.35-0.61 -> 0.10-0.23 ms (Zen 4, znver3 code, 3 interleaved rounds; the
    network 6.38-6.97 -> 6.12-6.16 ms). A reader of stride 1 is left to the transposing score:
    at 16 lanes MobileNetV2's depthwise convs on 56 x 56 and 16 x 16 ran 1.3-1.4x the time with
    lanes over channels (their NCHW results transposed) as along the row."""
    plans = channel_vector_plans(n, target, blocked=window_stride(reader) > 1)
    if not plans:
        return None
    spatial = spatial_score(n, spatial_vector_schedule(n, target), target)
    if channel_score(plans[0], target) < spatial * (1 - CHANNEL_WRITER_TIE):
        return None
    return channel_vector_schedule(n, plans[0], target)


def window_stride(n: NestView) -> int:
    """The stride of the window along the output row of a nest of NCHW output (a conv's or pool's
    ow, `ow * 2 + kw - 1` -> 2), 1 where none slides along it."""
    row = n.out_map.results[-1]
    window = row_window(n, row.position) if isinstance(row, AffineDimExpr) and n.maps else None
    return window.stride if window is not None else 1


def channel_vector_schedule(n: NestView, plan: ChannelPlan, target: CPUTarget,
                            blocks_in_rows: bool | None = None, rows: int = 1) -> Schedule:
    """Lanes over output channels read from weights packed `OIHW16o` (one contiguous vector per
    weight element), each input element broadcast to `r_col` vectors of `r_row` tile points.
    Channel blocks come first unless the input does not stay in L2 and the weights re-read for
    every row move fewer bytes (cost_model's `rows_hold_blocks`): then they go inside the image rows
    (`oh`), each row's inputs re-read from L2 by every block (`blocks_in_rows`: the one or the
    other order, for tuning to time both). `rows`: the register tile takes that many image rows
    too (the loop outside the plan's row, split; a Winograd conv's, `winograd_rows`), each row's
    points `r_row`:

        domain = #nest.domain<[n = 1, co = 512, oh = 7, ow = 7], [ci = 512, kh = 3, kw = 3]>
        -> schedule = {splits = [["co", 16], ["co.o", 2]], vector = "co.i", pack = {"1" = "OIHW16o"},
                       order = ["n", "co.o.o", "oh", "ci", "kh", "kw", "ow", "co.o.i", "co.i"],
                       unroll = {ow = 7, co.o.i = 2, kw = 3, kh = 3}, parallel = "co.o.o"}
    """
    width = target.lanes
    sched = Schedule(splits=[(plan.col, width)], vector=Loop.inner(plan.col),
                     pack={1: n.weight_layouts[1] + f"{width}o"})
    loops = [Loop.outer(name) if name == plan.col else name for name, _ in n.dims[: n.npar]]
    if "*" in plan.row:  # a row of fused loops (see `flat_row`)
        outer, inner = plan.row.split("*")
        sched.fusions.append((outer, inner))
        loops[loops.index(outer)] = plan.row
        loops.remove(inner)
        blocks_in_rows = False  # inside the fused row, the blocks would re-read their weights each tile
    # tile points row-major over (row, col): each broadcast input feeds r_col FMAs in a row and dies
    tile = _tile_loop(sched, loops, plan.row, plan.row_extent, plan.r_row)
    tile += _tile_loop(sched, loops, Loop.outer(plan.col), plan.col_extent // width, plan.r_col)
    if rows > 1:
        names = [name for name, _ in n.dims]
        image_row = names[names.index(plan.row) - 1]
        tile = _tile_loop(sched, loops, image_row, dict(n.dims)[image_row], rows) + tile
    _unroll_inner_reductions(sched, n)
    blocks = next((l for l in loops if l.startswith(Loop.outer(plan.col))), None)
    if blocks_in_rows is None:
        blocks_in_rows = rows_hold_blocks(n, plan.col, plan.row, plan.col_extent // (width * plan.r_col), target)
    if blocks is not None and blocks_in_rows:
        # the input does not stay in L2: the channel blocks take turns on each row of the image,
        # whose inputs stay there (DenseNet-161 0.95x the time, ResNet-34 0.99x)
        loops.remove(blocks)
        at = next((i for i, l in enumerate(loops) if l in (plan.row, Loop.outer(plan.row))), len(loops))
        loops.insert(at, blocks)
    return _finish(sched, n, loops, tile)


def winograd_schedule(n: NestView, plan: WinogradPlan, target: CPUTarget, several: bool = True) -> Schedule:
    """A conv that runs as 1-D Winograd (`WINOGRAD`): lanes over output channels, a register
    tile of one channel vector by `winograd_tiles` Winograd tiles along ow (of `winograd_rows`
    output rows, `oh.i`, where `several` may be), so that the transformed weights of a channel
    block (the stem's 17.5 KiB) stay in L1 while the block runs along a row; the channel blocks go inside the
    rows when the input does not stay in L2 (the stem's), as other channel-vector schedules do,
    and always for a conv run one product at a time: its threads then take rows, each reading the
    transformed input rows it made (64 channels at 16 x 16, 2 threads: 0.78x the direct time,
    0.88x with the blocks outer).

        64 channels, 16 x 16, AVX2: order = ["n", "oh.o", "co.o", "ci", "kh", "kw", "oh.i", "ow", "co.i"],
                                   unroll = {ow = 16, oh.i = 2, ...}, parallel = "oh.o"   (2 rows of 4 tiles)
    """
    return channel_vector_schedule(n, ChannelPlan("co", plan.extents["co"], 1, "ow", plan.extents["ow"],
                                                  winograd_tiles(plan, target) * plan.m, 1.0), target,
                                   blocks_in_rows=True if plan.by_point else None,
                                   rows=winograd_rows(plan, target, several))


BY_POINT_TILES = 7
"""Winograd tiles (28 output points) a register tile of a conv run one product at a time needs at
least to beat the direct conv: with AVX2 a product's pass over the input channels then has 7
accumulators (64 channels at 16 x 16, 4 tiles: 1.19x the direct time); with AVX-512 such a conv
ran 0.90x at 1 thread, but WRN-40-2, whose 64-channel convs are 16 x 16, 1.12x at 2 threads
(0.97x at 1). Rows too short for them take more rows (`winograd_rows`)."""


def winograd_tiles(plan: WinogradPlan, target: CPUTarget) -> int:
    """Winograd tiles along ow in a register tile of one channel vector. A kernel that runs one
    product at a time (`WinogradPlan.by_point`): as many as fit the registers beside a weight
    vector, a broadcast and two more (with 14 of AVX2's 16 LLVM spilled accumulators in the loop:
    a 64-channel 56 x 56 conv 1.3x the time), the largest count whose tiles make whole rows (28 of
    56 points, not 48), else the most. Otherwise two where their E x 2 accumulators fit beside a
    weight vector and a broadcast (the stem's 26 of AVX-512's 32), so each broadcast of the
    transformed input feeds two FMAs; else one (AVX2's 16).

        3x3 stride 1, rows of 56:  AVX2 7 (28 points), AVX-512 14 (the row)
        7x7 stride 2 (the stem):   AVX2 1, AVX-512 2
    """
    if plan.by_point:
        most = min(plan.tiles, target.registers - 4)
        whole = [t for t in range(most, 0, -1) if t == plan.tiles or plan.extents["ow"] % (t * plan.m) == 0]
        return whole[0] if whole else most
    return 2 if 2 * plan.points + 2 <= target.registers else 1


ROWS_MIN_TILES = 4
"""Winograd tiles a row needs at least for a register tile of several rows: the transformed
input has a vector of tiles a row, so shorter rows transform mostly padding (128 -> 32 channels
at 8 x 8, 2 tiles a row, 4 rows: 1.55x the direct time with AVX2, 1.60x at 2 threads)."""

ROWS_MIN_OUTPUTS = 64
"""Output channels a conv needs at least for a register tile of several rows: each transformed
input row feeds a product per output channel, so with fewer the transforms weigh more beside
the contraction, whatever the width. AVX2: 128 -> 32 channels at 16 x 16 ran 0.84x the direct
time at 1 thread but 1.16x at 2; 64 channels 0.73x and 0.78x. AVX-512: WRN-40-2's 64-channel
16 x 16 convs (4 vectors), summed in the network's profile, 0.80x at 1 thread, about 0.9x at 2
(Zen 4, 4-5 rounds each), the network 0.95x at 1 thread."""


def winograd_rows(plan: WinogradPlan, target: CPUTarget, several: bool = True) -> int:
    """Output rows in the register tile of a conv run one product at a time: where it may take
    `several` (not where a max pool computes its rows one at a time, FUSE_ROWS), a whole row has
    fewer than `BY_POINT_TILES` tiles (but `ROWS_MIN_TILES`) and the conv `ROWS_MIN_OUTPUTS`
    output channels, the fewest rows (dividing oh) that have as many and fit the registers beside
    a weight vector, a broadcast and two more, so each weight vector still feeds as many FMAs;
    else one.

        3x3 stride 1, 64 channels, rows of 16 (4 tiles):  2 rows, 8 tiles (AVX2 and AVX-512)
        128 -> 32 channels; rows of 8 (2 tiles), of 32 (8 tiles), of 56:  1
    """
    tiles = winograd_tiles(plan, target)
    if (not several or not plan.by_point or tiles < plan.tiles or tiles >= BY_POINT_TILES
            or plan.tiles < ROWS_MIN_TILES or plan.extents["co"] < ROWS_MIN_OUTPUTS):
        return 1
    fit = (target.registers - 4) // tiles
    return next((r for r in range(2, fit + 1) if plan.extents["oh"] % r == 0 and r * tiles >= BY_POINT_TILES), 1)


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


def channel_subsample_schedule(n: NestView, target: CPUTarget) -> Schedule | None:
    """Lanes over channels for a copy of an image's points (a strided 1x1 conv's subsample,
    `subsample-strided-1x1`) whose input pack-activations stores channel-blocked (its writer and
    other readers run lanes over channels: ResNet's depthwise stages): each point one load of
    `width` channels, a register tile of the points along the output row (the largest divisor of
    the row up to `width`), so that the stage's tensors stay blocked across the downsample:

        domain = #nest.domain<[n = 1, c = 128, h = 8, w = 8]>
        -> schedule = {splits = [["c", 8]], vector = "c.i", order = ["n", "c.o", "h", "w", "c.i"],
                       unroll = {w = 8}, parallel = "c.o"}

    None unless the nest copies input 0 alone at a stride (`_copies_points`), NCHW to NCHW, with a
    multiple of `width` channels."""
    width = target.lanes
    names = [name for name, _ in n.dims]
    results = n.out_map.results
    if (n.combiner != "copy" or n.npar != len(n.dims) or len(n.maps) != 1 or len(results) != 4
            or not _copies_points(n) or [r.position if isinstance(r, AffineDimExpr) else None for r in results] != [0, 1, 2, 3]
            or n.dims[1][1] % width or all(linear_coefficient(e, a) == 1 for a, e in enumerate(n.maps[0].results))):
        return None
    channel, (row, extent) = names[1], n.dims[3]
    sched = Schedule(splits=[(channel, width)], vector=Loop.inner(channel))
    loops = [Loop.outer(name) if name == channel else name for name in names]
    points = next(p for p in range(min(width, extent), 0, -1) if extent % p == 0)
    tile = _tile_loop(sched, loops, row, extent, points)
    return _finish(sched, n, loops, tile)


def fused_row_blocks(pool: nest.ComputeOp) -> int:
    """The channel blocks of the producer whose rows `pool`'s kernel can compute (FUSE_ROWS), 0 if
    none: the producer is a nest that only `pool` reads, with lanes over its channels and outer
    loops over its output rows and over blocks of its channels (ResNet's stem: 2 blocks of 32), and
    not itself a pool computing its own producer's rows (max pool -> max pool after a stem: the
    first pool keeps the stem, the second computes its input whole)."""
    producer = pool.inputs[0].owner
    if (not isinstance(producer, nest.ComputeOp) or len(list(producer.result.uses)) != 1 or producer.schedule is None
            or FUSE_ROWS.on(producer)):  # one level: a pool whose own rows a later pool computes is not fused
        return 0
    sched = producer.get_schedule()
    names = [name for name, _ in producer.domain.dims]
    results = producer.output_map.results
    if len(results) != 4 or not isinstance(results[1], AffineDimExpr) or not isinstance(results[2], AffineDimExpr):
        return 0
    channel, row = names[results[1].position], names[results[2].position]
    outer = sched.outer_loops(producer.domain)
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
    forms = [affine.linear_form(m.results[1]) for m in (n.out_map, n.maps[0])]
    if any(f is None or f[1] != 0 for f in forms):
        return None
    dims = [{d for d, c in f[0].items() if c and extents[d] > 1} for f in forms]
    if len(dims[0]) != 1 or dims[0] != dims[1]:
        return None
    (d,) = dims[0]
    if forms[0][0][d] != 1 or forms[1][0][d] != 1 or d >= n.npar:
        return None
    return n.dims[d][0]


def depthwise_multiplier(n: NestView) -> tuple[str, str] | None:
    """The channel and multiplier dims of a depthwise conv with a channel multiplier (each input
    channel g feeds m output channels `m * g + co`, co < m: ResNet's stride-2 convs that double the
    channels after `depthwise`), None for any other nest: input 0's channel index is `g` alone,
    the output's and the weight's `m * g + co` with co of extent m > 1, both parallel dims, and no
    other index reads either."""
    if n.combiner != "mac" or len(n.maps) < 2 or len(n.out_map.results) != 4 or len(n.maps[0].results) != 4:
        return None
    extents = [e for _, e in n.dims]
    forms = [affine.linear_form(m.results[a]) for m, a in ((n.maps[0], 1), (n.out_map, 1), (n.maps[1], 0))]
    if any(f is None or f[1] != 0 for f in forms):
        return None
    reads, writes, weights = ({d: c for d, c in f[0].items() if c and extents[d] > 1} for f in forms)
    if len(reads) != 1 or len(writes) != 2 or writes != weights:
        return None
    ((g, one),) = reads.items()
    co = next((d for d in writes if d != g), None)
    if one != 1 or co is None or writes.get(g) != extents[co] or writes[co] != 1 or max(g, co) >= n.npar:
        return None
    if any(d in affine.used_dims(e) for m in (n.maps[0], n.out_map) for a, e in enumerate(m.results) if a != 1
           for d in (g, co)):
        return None
    return n.dims[g][0], n.dims[co][0]


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

    A conv with a channel multiplier m (`depthwise_multiplier`: `g = 64, co = 2`, output channel
    `2g + co`) has its m output channels of a lane in the tile too, each point's input vector
    feeding m accumulators, its weight packed as [G, m, KH, KW] (`multiplier_rows`: a block of
    `width` g of one co a vector); its tile stores the m accumulators of a point interleaved into
    m vectors of consecutive channels (`Tiles.interleaved_loop`):

        domain = #nest.domain<[n = 1, g = 64, co = 2, oh = 16, ow = 16], [kh = 3, kw = 3]>
        -> schedule = {splits = [["g", 8], ["ow", 4]], vector = "g.i", pack = {"1" = "OIHW8o"},
                       order = ["n", "g.o", "oh", "ow.o", "kh", "kw", "ow.i", "co", "g.i"],
                       unroll = {ow.i = 4, co = 2, kw = 3, kh = 3}, parallel = "g.o"}

    None unless the nest is a depthwise conv (`depthwise_channel`, `depthwise_multiplier`) over a
    multiple of `width` channels, NCHW, with a weight packable by output channel (and a
    multiplier dividing `width`)."""
    width = target.lanes
    channel = depthwise_channel(n)
    multiplier = depthwise_multiplier(n) if channel is None else None
    if multiplier is not None:
        channel = multiplier[0]
    m = dict(n.dims)[multiplier[1]] if multiplier else 1
    axes = n.weight_layouts.get(1)
    if channel is None or axes is None or axes[0] != "O" or dict(n.dims)[channel] % width or width % m:
        return None
    names = [name for name, _ in n.dims]
    row = n.out_map.results[3]
    if not isinstance(row, AffineDimExpr) or stride_of(n.out_map, n.out_shape, row.position) != 1:
        return None
    row_name, row_extent = n.dims[row.position]
    # a weight that is one value for every channel (presum's ones) is read as a broadcast, unpacked
    shared = linear_coefficient(n.maps[1].results[0], names.index(channel)) == 0
    sched = Schedule(splits=[(channel, width)], vector=Loop.inner(channel),
                     pack={} if shared else {1: f"{axes}{width}o"})
    loops = [Loop.outer(name) if name == channel else name for name in names[: n.npar]]
    taps = math.prod(e for _, e in n.dims[n.npar:])
    most = max(1, depthwise_points(taps, target) // m)
    points = next(p for p in range(min(most, row_extent), 0, -1) if row_extent % p == 0)
    tile = _tile_loop(sched, loops, row_name, row_extent, points)
    if multiplier:
        tile += _tile_loop(sched, loops, multiplier[1], m, m)
    _unroll_inner_reductions(sched, n)
    return _finish(sched, n, loops, tile)


TRANSPOSE_LANES = 8
"""The most lanes at which an elementwise nest transposes its tile into a channel-blocked output
for a 1x1 conv (`channel_transpose_schedule`)."""


def channel_transpose_schedule(n: NestView, target: CPUTarget) -> Schedule | None:
    """An elementwise nest (a batch norm's scale, shift and ReLU) that may write its result
    channel-blocked for a 1x1 conv reading it by broadcasts (pack-activations' `transposed_block`):
    lanes along the image row, read from the NCHW input one vector a channel, and a register tile
    of `width` channels, which its store transposes in registers into `width` points of one channel
    block each. The row is split by `width` even where it is shorter (7 points: one vector, the last
    lane masked), so that the tile is square:

        domain = #nest.domain<[n = 1, c = 992, h = 7, w = 7], []>
        -> schedule = {splits = [["w", 8], ["c", 8]], vector = "w.i",
                       order = ["n", "c.o", "h", "w.o", "c.i", "w.i"], unroll = {c.i = 8}, parallel = "c.o"}

    In NCHW its 1x1 conv reader broadcasts each input channel from another plane, a cache line a
    step from L2 for the 12 FMAs of an AVX2 tile: with znver3 code, DenseNet-121 imagenet's block-4
    1x1 convs (992 channels on 7 x 7) ran at 72-75% of the 8-lane FMA peak so, 86-89% from a
    channel-blocked input; the network 0.98x the time (its batch norms 1.2-1.6x theirs).

    None unless the nest copies an NCHW input at the output's points (or at a multiple of them on
    the image axes: a subsample, `subsample-strided-1x1`), with a multiple of `width`
    channels and rows of 2 points or more, on 8 lanes (`TRANSPOSE_LANES`) and planes of more than
    a cache line. At 16 lanes the readers' tiles (14 points x 2 channel vectors) ran 1.1-2.2x slower
    from the blocked input (Zen 4, 7 x 7 to 28 x 28): their unrolled channel block spilled its
    broadcasts. With that block a loop (`split_channel_loop`) 16 lanes gained nothing either:
    DenseNet-121 0.99x (cifar10) and 1.01x (imagenet) the time, Zen 4; on 4 x 4 planes
    (DenseNet-121 cifar10's block 4: one line a plane) the 1x1 convs ran alike and the batch norms
    2.7x the time."""
    width = target.lanes
    names = [name for name, _ in n.dims]
    results = n.out_map.results
    if (n.combiner != "copy" or n.npar != len(n.dims) or len(results) != 4 or not n.maps
            or not _copies_points(n) or tuple(n.in_shapes[0][:2]) != tuple(n.out_shape[:2])
            or [r.position if isinstance(r, AffineDimExpr) else None for r in results] != [0, 1, 2, 3]):
        return None
    channel, row = names[1], names[3]
    if (width > TRANSPOSE_LANES or n.dims[1][1] % width or n.dims[3][1] < 2
            or n.dims[2][1] * n.dims[3][1] * 4 <= target.cache_line):
        return None
    sched = Schedule(splits=[(row, width)], vector=Loop.inner(row))
    loops = [Loop.outer(row) if name == row else name for name in names]
    tile = _tile_loop(sched, loops, channel, n.dims[1][1], width)
    return _finish(sched, n, loops, tile)


def _copies_points(n: NestView) -> bool:
    """Whether input 0 is read at the output's point, or on the image axes at a multiple of it (a
    subsample, `subsample-strided-1x1`: `(n, c, h, w) -> (n, c, h * 2, w * 2)`)."""
    results = n.maps[0].results
    if len(results) != 4:
        return False
    for a, expr in enumerate(results):
        form = affine.linear_form(expr)
        if form is None or form[1] != 0 or set(form[0]) != {a} or form[0][a] < 1 or (a < 2 and form[0][a] != 1):
            return False
    return True
