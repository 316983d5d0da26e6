"""default-schedule: give every nest without a schedule a first sensible one for the CPU.

Runs on nest IR before pack-weights and nest-bufferize. The schedule is data (see `Schedule`)
that convert-nest-to-loops reads. Two families, chosen per nest by a small cost model of the
fraction of the FMA rate each keeps (`spatial_score` vs `channel_score`: useful lanes, loads per
FMA, masked edge vectors, epilogue of transposed tiles):

- channel (`channel_vector_schedule`, for convs/gemms whose weight has output channels first and a
  multiple of the vector width of them per group): lanes over output channels from weights packed
  `OIHW16o`, see its docstring. Small images, strided convs and stems take it; its channel blocks
  run inside the image rows when the input does not stay in L2;
- a max pool, a depthwise conv (with or without a channel multiplier) or a strided 1x1 conv's
  subsample whose input pack-activations can store NCHW16c (its writer runs lanes over channels,
  and so does every other reader): lanes over channels (`channel_pool_schedule`,
  `depthwise_channel_schedule`, `channel_subsample_schedule`), so that each tap reads 16 channels
  with one load (ResNet's and DenseNet's stem pools, MobileNetV2's depthwise convs after its
  channel-family 1x1 convs, every stage of ResNet after `depthwise`). The pass gives them these first and falls back, until no input is
  left NCHW, for those whose input `packed_tensors` does not block; a conv the cost model gave
  the spatial family that writes such an input takes its channel plan where that scores close
  (`channel_writer_schedule`: a stem before a depthwise conv; before a strided reader, scored
  storing its result blocked: MobileNetV2's expanding 1x1 conv), and keeps it where its result is
  then blocked. Such a max pool whose
  producer it alone reads, with outer loops over that producer's channel blocks and rows (a
  stem), tiles a block of channel vectors and is marked FUSE_ROWS: its kernel computes the
  producer's rows as it needs them (one level: a max pool after such a pool reads its result);
- an elementwise nest (a batch norm that follows a concat) whose result a 1x1 conv with lanes over
  its output channels reads, at AVX2: lanes along the row and a tile of 8 channels, which its store
  transposes into a channel-blocked result (`channel_transpose_schedule`), so that the conv
  broadcasts its input channels from whole lines; its spatial schedule where pack-activations
  would not block the result (another reader needs it NCHW);
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

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.attributes import FUSE_ROWS, SCRATCH_BYTES, WINOGRAD
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Schedule
from nasir.errors import PassError
from nasir.lowering.schedule.pack_activations import packed_tensors
from nasir.lowering.schedule.schedules import (
    BY_POINT_TILES,
    candidate_schedules,
    channel_pool_schedule,
    channel_subsample_schedule,
    channel_transpose_schedule,
    channel_writer_schedule,
    depthwise_channel_schedule,
    fused_row_blocks,
    schedule_for,
    winograd_rows,
    winograd_schedule,
    winograd_tiles,
)
from nasir.lowering.schedule.tuned import TuningDatabase, tuning_database
from nasir.lowering.schedule.winograd import WinogradPlan, winograd_plan
from nasir.lowering.target import CPUTarget, target_of
from nasir.transforms.schedule import operand_axes


ALL_PLANS = 64
"""More plans than a nest has (the spatial schedule and a few channel plans): `candidate_schedules`
with this limit gives them all, then the register tiles."""


def nest_shape(op: nest.ComputeOp) -> NestView:
    """`op` as the default schedule reads it: with the axis letters of its weight inputs."""
    weights = {k: operand_axes(op, k) for k, v in enumerate(op.inputs) if isinstance(v.owner, nn.WeightOp)}
    return NestView.of(op, {k: axes for k, axes in weights.items() if axes})


def transferred(tuned: TuningDatabase, target: CPUTarget, op: nest.ComputeOp, shape: NestView) -> Schedule | None:
    """Transfer-tuning: of `op`'s own candidate schedules (`candidate_schedules` with the register
    tiles), the first with the vector loop and the unrolls (the register tile) of a schedule tuning
    found faster on another shape of `op`'s class (`TuningDatabase.donors`, nearest first); None
    if no donor's tile is one of `op`'s candidates.

        donor: co = 256, oh = ow = 8   {vector = "co.i", unroll = {ow.i = 4, co.o.i = 2, kh = 3, kw = 3}, ...}
        op:    co = 512, oh = ow = 4   its candidate with that vector and unroll, its own splits and order
    """
    donors = tuned.donors(target.cpu, op)
    if not donors:
        return None
    candidates = candidate_schedules(shape, target, ALL_PLANS, tiles=True)
    for donor in donors:
        for candidate in candidates:
            if candidate.vector == donor.vector and candidate.unroll == donor.unroll:
                return candidate
    return None


WINOGRAD_MODES = ("auto", "always", "never")
"""default-schedule's `winograd` option (another is refused), see `winograd_for`."""


def winograd_for(shape: NestView, target: CPUTarget, mode: str = "auto", several: bool = True) -> WinogradPlan | None:
    """The Winograd plan a conv runs by (`winograd_plan`: a wide row window), None for a direct
    conv. `mode` "auto": only where it pays on `target` (`pays`); "always": wherever the plan
    exists; "never": no Winograd. `several`: whether a register tile may take several output rows
    (`winograd_rows`; not where a max pool may compute the conv's rows one at a time, FUSE_ROWS).

        7x7 stride-2 stem, 3 -> 64 channels    AVX-512: F(4, 4) + F(4, 3), 13 x 2 accumulators
                                               AVX2:    None (direct, lanes over co)
        3x3 stride-1 conv, 64 channels, 32 x 32 both: F(4, 3) one product at a time, 8 tiles
    """
    if mode == "never" or 1 not in shape.weight_layouts:
        return None
    plan = winograd_plan(shape, target.lanes)
    if plan is None or (mode == "auto" and not pays(plan, target, several)):
        return None
    return plan


BY_POINT_INPUTS = 64
"""Input channels that such a conv needs at least: with fewer, a product's pass over them is
short beside the transforms (3 -> 64 channels 1.7x the direct time with AVX2, 32 -> 32 at 32 x 32
1.24x with AVX-512)."""

BY_POINT_VECTORS = 4
"""Vectors of output channels that such a conv needs at least, which share each transformed input
row (128 -> 32 channels at 16 x 16, 2 AVX-512 vectors: 1.14x the direct time)."""


def pays(plan: WinogradPlan, target: CPUTarget, several: bool = True) -> bool:
    """Whether Winograd beats the direct conv on `target` (`winograd_for`'s "auto"). The stem's
    tile: where a register tile holds two Winograd tiles (`winograd_tiles`), each broadcast of the
    transformed input feeding two FMAs. With one (AVX2's 16 registers) a broadcast feeds one FMA,
    two loads an FMA: on Zen 3 ResNet-34 imagenet's stem with its max pool ran 8.4 ms so against
    3.35 ms direct, where on Zen 4 two tiles took it from 2.17 to 1.37 ms. A conv run one product
    at a time (a 3x3 stride-1 conv, `WinogradPlan.by_point`): where it reads its transformed
    weights U fast enough (`weights_read_fast`: in L2, or from L3 at 16 lanes on Zen 4, each
    block of rows reading all of them), its register tile holds `BY_POINT_TILES`
    Winograd tiles (of one row or more: `winograd_rows`), and it has `BY_POINT_INPUTS` input channels and
    `BY_POINT_VECTORS` vectors of output channels, a grouped conv's counted in a group (each
    group's tiles read its own slab of U; the stem's tile is kept for dense convs). Measured on
    Zen 4 (1 MiB L2), one conv with ReLU, time as Winograd over the direct conv's, 1 thread (U
    made at every call then, but for 16 x 16):

        channels, image     AVX2 (znver3)   AVX-512 (znver4)
        64, 56 x 56         0.75            0.62          runs as Winograd
        64, 32 x 32         0.73            0.93          runs as Winograd
        64, 16 x 16         0.73 (2 rows)   0.80 (2 rows) runs as Winograd (2 rows of 4 tiles: `winograd_rows`;
                                                          AVX-512: WRN-40-2's, in the network)
        128 -> 32, 32 x 32  0.79            0.90          AVX2 only (AVX-512: 2 vectors of co)
        128, 28 x 28        1.04            0.63          AVX-512 on Zen 4 only (U 1.2 MB: `weights_read_fast`)
        256, 14 x 14        1.96            1.09          direct
        128 in 2 groups, 32 x 32  0.78      0.92          runs as Winograd (ResNeXt-29's)
    """
    if not plan.by_point:
        return plan.groups == 1 and winograd_tiles(plan, target) >= 2
    e = plan.extents
    rows, tiles = winograd_rows(plan, target, several), winograd_tiles(plan, target)
    return (weights_read_fast(plan, target, tiles, rows) and e["ci"] >= BY_POINT_INPUTS
            and e["co"] >= BY_POINT_VECTORS * target.lanes and rows * tiles >= BY_POINT_TILES)


def weights_read_fast(plan: WinogradPlan, target: CPUTarget, tiles: int, rows: int) -> bool:
    """Whether a conv run one product at a time (`pays`) with register tiles of `rows` rows of
    `tiles` Winograd tiles reads its transformed weights U fast enough. Each block of rows reads
    all of a group's U, a vector per tile of the register tile beside their broadcasts. Where the
    core issues two vector FMAs a cycle (`fmas_per_cycle`: every AVX2 core, Intel's AVX-512 with
    two units) those loads keep the load ports busy and a vector of U from L3 stalls them: U
    stays in L2. Where it issues one (Zen 4's 16-lane FMAs, run as two halves), the part of U
    that L2 does not hold may come from L3 at up to `l3_bytes_per_fma` bytes an FMA, for register
    tiles of one row. ResNet-34's layers on Zen 4 (L2 1 MiB), Winograd over direct, 1 / 2 threads:

        layer (3x3, stride 1)   U        znver3 code   znver4 code
        128 channels, 28 x 28   1.2 MB   1.0           0.65 / 0.81   runs so at 16 lanes (1.0 bytes an FMA)
        128 channels, 16 x 16   1.2 MB                 0.75 / 1.0    direct: the network 0.93-0.97x the
                                                                     time at 1 thread, 1.01-1.11x at 2
        256 channels, 14 x 14   4.7 MB   1.27          0.90 / 1.28   direct (2 rows, or 6.2 bytes an FMA)
    """
    u = 4 * plan.weight_floats
    if target.fmas_per_cycle > 1 or rows > 1:
        return u <= target.l2_bytes
    return max(0, u - target.l2_bytes) / u * 4 * target.lanes / tiles <= target.l3_bytes_per_fma


def pooled(op: nest.ComputeOp) -> bool:
    """Whether a max pool alone reads `op`'s result (it may compute `op`'s rows: FUSE_ROWS)."""
    uses = list(op.result.uses)
    return len(uses) == 1 and isinstance(uses[0].operation, nest.ComputeOp) and uses[0].operation.kind == "max"


def tunable(op: nest.ComputeOp, target: CPUTarget) -> NestView | None:
    """`op`'s shape if default-schedule gives it the better of the spatial and channel families
    (`schedule_for`, or a tuned schedule), None if it runs as Winograd or with lanes over
    channels (a max pool, a depthwise conv) or already has a schedule."""
    if op.schedule is not None:
        return None
    shape = nest_shape(op)
    if winograd_for(shape, target) is not None:
        return None
    if channel_pool_schedule(shape, target) or depthwise_channel_schedule(shape, target):
        return None
    return shape


@dataclass(frozen=True)
class DefaultSchedulePass(ModulePass):
    """Set a vectorised, thread-parallel schedule on every nest.compute that has none, for the
    module's target CPU (`nasir.target`, else NASIR_CPU, else the host; `nasir-opt --cpu`): its
    vector lanes, registers and caches; a conv with a wide row window (a 7x7 stride-2 stem, a
    3x3 stride-1 conv), where Winograd pays on the target (`winograd_for`, `pays`), gets
    `winograd_schedule` and is marked to run as 1-D Winograd (`nasir.winograd`, with the
    `nasir.scratch_bytes` its kernel needs). A conv or gemm whose signature the tuning
    database holds for the target CPU (`nasir tune`) gets the schedule timed fastest there; one
    of a class the database holds other shapes of, their register tile (`transferred`).

    Options: `tuning`: the tuning database file ("" the user's, `default_tuning_db`; "none": the
    cost model alone), as in `default-schedule{tuning=none}`; `winograd`: "auto" (where it pays
    on the target, `winograd_for`), "always" or "never"."""

    name = "default-schedule"

    tuning: str = ""
    winograd: str = "auto"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.winograd not in WINOGRAD_MODES:
            raise PassError(f"default-schedule: winograd={self.winograd!r}; expected one of {', '.join(WINOGRAD_MODES)}")
        target = target_of(op)
        tuned = tuning_database(self.tuning)
        # nests that run lanes over channels only if their input is stored channel-blocked (a max
        # pool after a stem, a depthwise conv): their channel schedule, and the spatial one to fall
        # back to; and the nests the cost model alone scheduled
        blocked_input: dict[nest.ComputeOp, tuple[Schedule, Schedule]] = {}
        modelled: dict[nest.ComputeOp, NestView] = {}
        # elementwise nests that store their result channel-blocked if a reader wants it so (a
        # batch norm before a 1x1 conv): their spatial schedule, to fall back to where none does
        transposers: dict[nest.ComputeOp, Schedule] = {}
        for nest_op in op.walk():
            if isinstance(nest_op, nest.ComputeOp) and nest_op.schedule is None:
                shape = nest_shape(nest_op)
                several = not pooled(nest_op)
                winograd = winograd_for(shape, target, self.winograd, several)
                if winograd is not None:
                    nest_op.properties["schedule"] = winograd_schedule(shape, winograd, target, several).to_attr()
                    WINOGRAD.set(nest_op, winograd.m)
                    SCRATCH_BYTES.set(nest_op, winograd.scratch_bytes)
                    continue
                transposing = channel_transpose_schedule(shape, target)
                subsample = channel_subsample_schedule(shape, target)
                if transposing is not None:
                    nest_op.properties["schedule"] = transposing.to_attr()
                    transposers[nest_op] = schedule_for(shape, target)
                    if subsample is not None:
                        blocked_input[nest_op] = (subsample, transposing)
                    continue
                channel = (channel_pool_schedule(shape, target) or depthwise_channel_schedule(shape, target)
                           or subsample)
                timed = (channel is None and tuned is not None
                         and (tuned.lookup(target.cpu, nest_op) or transferred(tuned, target, nest_op, shape)))
                spatial = timed or schedule_for(shape, target)
                nest_op.properties["schedule"] = (channel or spatial).to_attr()
                if channel is not None:
                    blocked_input[nest_op] = (channel, spatial)
                elif not timed:
                    modelled[nest_op] = shape
        lanes_over_channels = _settle(op, blocked_input)
        # a conv writing the input of one that fell back (a stem before a depthwise conv) takes its
        # channel plan where the cost model scores that close to its spatial schedule
        # (CHANNEL_WRITER_TIE), and keeps it where its result is then stored channel-blocked
        writers = {}
        for reader in blocked_input.keys() - lanes_over_channels:
            writer = reader.inputs[0].owner
            if writer in modelled and writer not in writers:
                plan = channel_writer_schedule(modelled[writer], target, nest_shape(reader))
                if plan is not None:
                    writers[writer] = writer.get_schedule()
                    writer.properties["schedule"] = plan.to_attr()
        if writers:
            _settle(op, blocked_input)
            packed = packed_tensors(op)
            for writer, spatial in writers.items():
                if writer.result not in packed:
                    writer.properties["schedule"] = spatial.to_attr()
            lanes_over_channels = _settle(op, blocked_input)
        packed = packed_tensors(op)
        for writer, spatial in transposers.items():
            if writer.result not in packed and writer not in lanes_over_channels:
                writer.properties["schedule"] = spatial.to_attr()
        # a channel-lane max pool whose producer it alone reads computes that producer's rows in
        # its own kernel, block by block of the producer's channels, as it needs them; in program
        # order, so that of two pools in a row the first fuses and the second sees it has
        for pool in (p for p in blocked_input if p in lanes_over_channels):
            blocks = fused_row_blocks(pool) if pool.kind == "max" else 0
            fused = channel_pool_schedule(nest_shape(pool), target, blocks) if blocks > 1 else None
            if fused is not None:
                pool.properties["schedule"] = fused.to_attr()
                FUSE_ROWS.set(pool, True)


def _settle(module: ModuleOp, blocked_input: dict[nest.ComputeOp, tuple[Schedule, Schedule]]) -> set[nest.ComputeOp]:
    """Give each nest of `blocked_input` its channel schedule, then its spatial one to those whose
    input pack-activations would not store channel-blocked (some other nest reads or writes it
    across the channels), until every input left is: the nests left on lanes over channels."""
    for nest_op, (channel, _) in blocked_input.items():
        nest_op.properties["schedule"] = channel.to_attr()
    left = set(blocked_input)
    while left:
        packed = packed_tensors(module)
        unpacked = [n for n in left if n.inputs[0] not in packed]
        if not unpacked:
            break
        for nest_op in unpacked:
            nest_op.properties["schedule"] = blocked_input[nest_op][1].to_attr()
            left.discard(nest_op)
    return left
