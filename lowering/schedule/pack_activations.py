"""pack-activations: store a tensor channel-blocked (NCHW16c) where the nest writing it and every
nest reading it run their vector lanes over its channels.

Runs on nest IR after default-schedule and before nest-bufferize. A nest with lanes over output
channels (default-schedule's channel family: a conv's `co.i`) stores NCHW by transposing each
register tile in registers first; a nest reading with lanes over the same channels (a max pool that
default-schedule gives channel lanes when its input comes from such a nest) would gather them lane
by lane. Stored with a block of `width` channels innermost, both are whole-vector moves:

    %s = nest.compute %x, %w, %b {out_map = (n, co, oh, ow, ci, kh, kw) -> (n, co, oh, ow),
                                  schedule = {splits = [["co", 16], ...], vector = "co.i", ...}}
         : (...) -> tensor<1x64x112x112xf32>
    %p = nest.compute %s {maps = [(n, c, oh, ow, kh, kw) -> (n, c, oh * 2 + kh - 1, ow * 2 + kw - 1)],
                          combiner = "max", schedule = {splits = [["c", 16], ...], vector = "c.i", ...}}
    ->
    %s = nest.compute %x, %w, %b {out_map = (...) -> (n, co floordiv 16, oh, ow, co mod 16), ...}
         : (...) -> tensor<1x4x112x112x16xf32>
    %p = nest.compute %s {maps = [(...) -> (n, c floordiv 16, oh * 2 + kh - 1, ow * 2 + kw - 1, c mod 16)], ...}

convert-nest-to-loops resolves the floordiv/mod against the vector loop without division (as for
packed weights). ResNet-34's stem then stores its tiles without transposes (1.87 -> 1.63 ms at
224x224) and its max pool reads 16 channels a load; MobileNetV2's last 1x1 conv feeds its global
average pool the same way, and depthwise convs that default-schedule gives channel lanes read
16 channels a load (MobileNetV2 0.97x the time; ResNet-34 after `depthwise` 0.97x, its first
stage blocked from the stem to the last depthwise conv).

A 1x1 conv with lanes over its output channels reads its input by broadcasts, one input channel a
step; it may read a blocked input too (`broadcast_channel`): its channel loop is then split by
the block (`split_channel_loop`), the inner part unrolled, so each step broadcasts from the block's
contiguous channels of one point, and the floordiv/mod resolve to the outer loop and a constant. In
NCHW those steps each read another plane (ResNeXt-29's 1x1 convs ran at 55-60% of the FMA peak on
Zen 3); blocked, its 1x1 convs between grouped 3x3 convs ran 0.8-0.9x the time, the network 0.95x,
MobileNetV2 0.975x:

    %b = nest.compute %a, %w2 {maps = [(n, co, oh, ow, ci, kh, kw) -> (n, ci, oh, ow), ...],
                               schedule = {splits = [["co", 8], ["ow", 6], ["co.o", 2]],
                                           order = [..., "ow.o", "ci", "kh", "kw", "ow.i", "co.o.i", "co.i"], ...}}
    ->
    %b = nest.compute %a, %w2 {maps = [(...) -> (n, ci floordiv 8, oh, ow, ci mod 8), ...],
                               schedule = {splits = [["co", 8], ["ow", 6], ["co.o", 2], ["ci", 8]],
                                           order = [..., "ow.o", "ci.o", "kh", "kw", "ci.i", "ow.i", ...],
                                           unroll = {ci.i = 8, ...}, ...}}

Where its register tile times the block would pass MAX_UNROLLED_BODY FMAs (AVX-512's 14 x 2 tiles
on 14 x 14: 448), the block's loop stays a loop (`split_channel_loop`), and `ci mod 16` is its value
(`Accesses.split_loop`).

A reader with a window (3x3) keeps its input NCHW: split so, its unrolled window and channels ran
ResNeXt-29's grouped 3x3 convs 2.3x slower.

An elementwise writer with lanes along the row may store blocked too, where its schedule tiles
`width` channels that its store transposes in registers (`transposed_block`, scheduled by
`channel_transpose_schedule`): DenseNet's batch norm before its 1x1 conv at AVX2:

    %y = nest.compute %cat, %scale, %shift {out_map = (n, c, h, w) -> (n, c, h, w), combiner = "copy",
                                            schedule = {splits = [["w", 8], ["c", 8]], vector = "w.i",
                                                        order = ["n", "c.o", "h", "w.o", "c.i", "w.i"], ...}}
    ->
    %y = nest.compute ... {out_map = (n, c, h, w) -> (n, c floordiv 8, h, w, c mod 8), ...}
         : (...) -> tensor<1x124x7x7x8xf32>

Tensors are blocked together or not at all (`packed_tensors`, a fixed point): a nest whose
epilogue reads a tensor across its lanes (a residual add) needs that tensor blocked as well, then
reads one vector per point; a transposed tile (NCHW output) does the same in the epilogue steps
before its transpose. A tensor stays NCHW when the function returns it, when any nest reads it
otherwise (a conv with a window by broadcasts over its input channels, a nest with lanes along rows),
or when a tensor it needs to be blocked with stays NCHW.
"""

from __future__ import annotations

import math

from xdsl.context import Context
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr, ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import affine, nest
from nasir.dialects.affine import one_channel, stride_of, used_dims
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Loop
from nasir.dialects.shapes import shape_of
from nasir.lowering.analysis.cost_model import MAX_UNROLLED_BODY
from nasir.lowering.schedule.pack_weights import layout_exprs
from nasir.lowering.schedule.schedules import depthwise_multiplier


def lane_dim(op: nest.ComputeOp) -> tuple[int, int] | None:
    """(domain index, lane count) of the dim that `op`'s vector loop splits (`d.i` of a split of
    `d` by the lane count), or None."""
    if op.schedule is None:
        return None
    sched = op.get_schedule()
    names = op.domain.dim_names
    return next(((names.index(dim), factor) for dim, factor in sched.splits
                 if sched.vector == Loop.inner(dim) and dim in names), None)


def channel_lane_block(op: nest.ComputeOp, amap: AffineMap, shape) -> int | None:
    """The lane count of `op`'s vector loop when its lanes walk axis 1 (channels) of the NCHW
    tensor that `amap` indexes (`op`'s output or one of its inputs) in blocks dividing that axis:
    the map's channel index is the split dim plus dims that only take the value 0 (a depthwise
    conv's `g + co`, co = 1) or step by multiples of the lanes (a grouped conv's `g * 64 + co`),
    and no other index uses it. None otherwise."""
    lanes = lane_dim(op)
    if lanes is None or len(shape) != 4 or len(amap.results) != 4:
        return None
    d, block = lanes
    form = affine.linear_form(amap.results[1])
    extents = [e for _, e in op.domain.dims]
    if form is None or shape[1] % block or form[1] != 0 or form[0].get(d) != 1:
        return None
    if any(c % block and extents[q] > 1 for q, c in form[0].items() if q != d):
        return None
    if any(d in used_dims(e) for a, e in enumerate(amap.results) if a != 1):
        return None
    return block


def transposed_block(op: nest.ComputeOp) -> int | None:
    """The channel block an elementwise nest's register tile stores its NCHW output in once
    transposed (`channel_transpose_schedule`): its channel dim split by the lanes, the inner part
    unrolled whole just outside a vector loop that splits the image row by as many lanes. None
    otherwise."""
    if op.schedule is None or op.kind != "copy" or op.domain.num_parallel.data != len(op.domain.dims):
        return None
    sched = op.get_schedule()
    results = op.output_map.results
    names = op.domain.dim_names
    if len(results) != 4:
        return None
    forms = [affine.linear_form(results[a]) for a in (1, 3)]
    if any(f is None or f[1] != 0 or len(f[0]) != 1 or list(f[0].values()) != [1] for f in forms):
        return None
    channel, row = (names[next(iter(f[0]))] for f in forms)
    factors = dict(sched.splits)
    block = factors.get(row)
    if (block is None or sched.vector != Loop.inner(row) or sched.order[-2:] != [Loop.inner(channel), sched.vector]
            or factors.get(channel) != block or sched.unroll.get(Loop.inner(channel)) != block):
        return None
    return block


def interleaved_block(op: nest.ComputeOp) -> int | None:
    """The channel block a depthwise conv with a channel multiplier m stores in (output channel
    `m * g + co`, `depthwise_multiplier`): its lanes over g, split by the lane count that m
    divides, and co unrolled whole in its register tile, whose m accumulators of a point
    convert-nest-to-loops interleaves into m vectors of consecutive channels
    (`Tiles.interleaved_loop`). None otherwise."""
    lanes = lane_dim(op)
    dims = depthwise_multiplier(NestView.of(op))
    names = op.domain.dim_names
    if lanes is None or dims is None or names[lanes[0]] != dims[0]:
        return None
    d, block = lanes
    co = names.index(dims[1])
    m = op.domain.dims[co][1]
    sched = op.get_schedule()
    if block % m or dims[1] not in sched.tile_loops(op.domain) or sched.unroll.get(dims[1]) != m:
        return None
    operands = {k for _, refs, _ in op.steps for k in refs}
    if not all(one_channel(op.access_maps[k], d, co, m, block) for k in operands):
        return None
    return block


def broadcast_channel(op: nest.ComputeOp, k: int, shape) -> tuple[int, int] | None:
    """(domain index of the input-channel dim, lane count) of `op` when it is a 1x1 conv with lanes
    over its output channels that reads its NCHW input `k` (its main input, 0) by broadcasts over a
    reduction dim of input channels whose extent the lanes divide: the map's channel index is that
    dim plus multiples of the lanes (a grouped conv's `g * 64 + ci`), no other index uses it, the
    other reduction dims have extent 1 and the schedule has not split that dim. None otherwise
    (`op` then needs the input NCHW)."""
    lanes = lane_dim(op)
    amap = op.access_maps[k]
    if lanes is None or k != 0 or len(shape) != 4 or len(amap.results) != 4:
        return None
    d, block = lanes
    form = affine.linear_form(amap.results[1])
    npar = op.domain.num_parallel.data
    extents = [e for _, e in op.domain.dims]
    if stride_of(amap, shape, d) != 0 or form is None or form[1] % block or shape[1] % block:
        return None
    channel = next((q for q, c in form[0].items() if q >= npar and c == 1 and extents[q] % block == 0), None)
    if channel is None or any(e > 1 for q, e in enumerate(extents[npar:], npar) if q != channel):
        return None
    if op.domain.dim_names[channel] not in op.get_schedule().order:  # already split (a tuned schedule)
        return None
    if any(c % block for q, c in form[0].items() if q != channel):
        return None
    if any(channel in used_dims(e) for a, e in enumerate(amap.results) if a != 1):
        return None
    return channel, block


def tile_points(op: nest.ComputeOp) -> int:
    """The points of `op`'s register tile: its parallel loops unrolled inside the reduction loops."""
    sched = op.get_schedule()
    return math.prod(sched.unroll.get(loop, 1) for loop in sched.tile_loops(op.domain))


def split_channel_loop(op: nest.ComputeOp, channel: int, block: int) -> None:
    """Split `op`'s input-channel loop (domain dim `channel`; a 1x1 conv reading a blocked input by
    broadcasts, `broadcast_channel`) by the block, the inner part after the other reduction loops:
    its `c floordiv block` is then the outer loop and `c mod block` the inner one. The inner part
    is unrolled where the register tile times the block stays within MAX_UNROLLED_BODY FMAs, and
    left a loop otherwise: AVX-512's 14 x 2 tiles on 14 x 14 times 16 channels, 448 FMAs in one
    body, had LLVM load every broadcast first and spill them (MobileNetV2 imagenet's 1x1 convs on
    14 x 14 ran at 46-53% of the 16-lane peak so); unrolled in runs of 4 or 8 channels they still
    took 1.6-2.2x the time of the loop, which runs as fast as reading NCHW (Zen 4). A channel loop
    already unrolled whole is left as it is.

        order = [..., "ow.o", "ci", "kh", "kw", "ow.i", "co.o.i", "co.i"], unroll = {ow.i = 6, co.o.i = 2}
        -> splits += [["ci", 8]], order = [..., "ow.o", "ci.o", "kh", "kw", "ci.i", "ow.i", ...], unroll = {ci.i = 8, ...}
    """
    names = op.domain.dim_names
    name, sched = names[channel], op.get_schedule()
    if name in sched.unroll:
        return
    order = list(sched.order)
    at = order.index(name)
    order[at] = Loop.outer(name)
    last = max([at] + [order.index(r) for r in names[op.domain.num_parallel.data:] if r in order])
    order.insert(last + 1, Loop.inner(name))
    sched.splits.append((name, block))
    sched.order = order
    if tile_points(op) * block <= MAX_UNROLLED_BODY:
        sched.unroll[Loop.inner(name)] = block
    sched.verify(op.domain)
    op.properties["schedule"] = sched.to_attr()


def _across_lanes(op: nest.ComputeOp, k: int) -> bool:
    """Whether `op` reads its input `k` with a stride across its lanes (not one vector, not one
    broadcast value): in NCHW, a residual operand of a nest with lanes over channels."""
    d, _ = lane_dim(op)
    return stride_of(op.access_maps[k], shape_of(op.inputs[k]), d) not in (0, 1)


def _requirements(value: SSAValue) -> tuple[int, set[SSAValue]] | None:
    """The channel block `value` could be stored in and the tensors that must then be stored
    channel-blocked with it, or None when it must stay NCHW. Its writer runs lanes over its
    channels or transposes its register tile into channel blocks (`transposed_block`); every use
    is a nest whose lanes walk the same channels in the same blocks, as its main input or as an
    epilogue operand, or a 1x1 conv reading it by broadcasts in blocks of its own lanes
    (`broadcast_channel`); an epilogue that reads an operand across the lanes needs that operand
    blocked too (then it reads one vector per point: the writer's operands, and a reader's
    operands in the steps up to the one reading `value`)."""
    producer = value.owner
    if not isinstance(producer, nest.ComputeOp) or not value.uses:
        return None
    shape = shape_of(value)
    interleaved = interleaved_block(producer)
    block = channel_lane_block(producer, producer.output_map, shape) or transposed_block(producer) or interleaved
    if block is None:
        return None
    needs: set[SSAValue] = set()

    def operands_blocked(op: nest.ComputeOp, steps) -> bool:
        for _, refs, _ in steps:
            for k in refs:
                if op is producer and interleaved and len(shape_of(op.inputs[k])) == 1:
                    continue  # a per-channel operand, read after the interleave one vector a point
                if not _across_lanes(op, k):
                    continue
                if channel_lane_block(op, op.access_maps[k], shape_of(op.inputs[k])) != block:
                    return False
                needs.add(op.inputs[k])
        return True

    if not operands_blocked(producer, producer.steps):
        return None
    for use in value.uses:
        reader = use.operation
        if not isinstance(reader, nest.ComputeOp):
            return None
        broadcast = broadcast_channel(reader, use.index, shape)
        if block not in (channel_lane_block(reader, reader.access_maps[use.index], shape), broadcast and broadcast[1]):
            return None
        if use.index >= nest.COMBINERS[reader.kind]:
            steps = reader.steps
            last = next(i for i, (_, refs, _) in enumerate(steps) if use.index in refs)
            if not operands_blocked(reader, steps[: last + 1]):
                return None
    return block, needs


def packed_tensors(module: ModuleOp) -> dict[SSAValue, int]:
    """The nest results to store channel-blocked, with their block: those whose `_requirements`
    hold, less, until none is left, any whose required partners do not (a residual chain is
    blocked whole or not at all)."""
    candidates: dict[SSAValue, tuple[int, set[SSAValue]]] = {}
    for op in module.walk():
        if isinstance(op, nest.ComputeOp):
            found = _requirements(op.result)
            if found is not None:
                candidates[op.result] = found
    changed = True
    while changed:
        changed = False
        for value, (_, needs) in list(candidates.items()):
            if any(other not in candidates for other in needs):
                del candidates[value]
                changed = True
    return {value: block for value, (block, _) in candidates.items()}


def blocked(amap: AffineMap, block: int) -> AffineMap:
    """`amap` (indexing NCHW) indexing the same element of NCHW<block>c."""
    return AffineMap(amap.num_dims, amap.num_symbols, tuple(layout_exprs("NCHW", f"NCHW{block}c", list(amap.results))))


class PackActivationsPass(ModulePass):
    """Store NCHW16c the tensors whose producer runs its lanes over channels (or transposes its
    tile of channels into blocks: a batch norm before a 1x1 conv at AVX2) and whose readers do too
    or are 1x1 convs reading them by broadcasts."""

    name = "pack-activations"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for value, block in packed_tensors(op).items():
            producer = value.owner
            n, c, h, w = shape_of(value)
            for use in list(producer.result.uses):
                reader = use.operation
                if channel_lane_block(reader, reader.access_maps[use.index], (n, c, h, w)) is None:
                    split_channel_loop(reader, *broadcast_channel(reader, use.index, (n, c, h, w)))
                maps = reader.access_maps
                maps[use.index] = blocked(maps[use.index], block)
                reader.properties["maps"] = ArrayAttr([AffineMapAttr(m) for m in maps])
            properties = dict(producer.properties)
            properties["out_map"] = AffineMapAttr(blocked(producer.output_map, block))
            packed = nest.ComputeOp.create(operands=list(producer.operands), properties=properties,
                                           attributes=dict(producer.attributes),
                                           result_types=[TensorType(producer.result.type.element_type,
                                                                    [n, c // block, h, w, block])])
            Rewriter.replace_op(producer, packed)
