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
average pool the same way. A tensor stays NCHW when the function returns it, when any nest reads
it otherwise (a conv by broadcasts over its input channels, a spatial nest, an epilogue operand:
a transposed tile reads those along its rows), or when the writer's epilogue reads another
tensor across the channels (a residual add: untransposed, its tile would read it lane by lane).
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr, ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import nest
from nasir.dialects.nest import used_dims
from nasir.dialects.nn import shape_of
from nasir.lowering.default_schedule import stride_of
from nasir.lowering.pack_weights import layout_exprs


def lane_dim(op: nest.ComputeOp) -> tuple[int, int] | None:
    """(domain index, lane count) of the dim that `op`'s vector loop splits (`d.i` of a split of
    `d` by the lane count), or None."""
    if op.schedule is None:
        return None
    sched = op.get_schedule()
    names = op.domain.dim_names
    return next(((names.index(dim), factor) for dim, factor in sched.splits
                 if sched.vector == f"{dim}.i" and dim in names), None)


def channel_lane_block(op: nest.ComputeOp, amap: AffineMap, shape) -> int | None:
    """The lane count of `op`'s vector loop when its lanes walk axis 1 (channels) of the NCHW
    tensor that `amap` indexes (`op`'s output or one of its inputs) in blocks dividing that axis:
    the map's channel index is exactly the split dim, and no other index uses it. None otherwise."""
    lanes = lane_dim(op)
    if lanes is None or len(shape) != 4:
        return None
    d, block = lanes
    channel = amap.results[1]
    if (isinstance(channel, AffineDimExpr) and channel.position == d and shape[1] % block == 0
            and not any(d in used_dims(e) for a, e in enumerate(amap.results) if a != 1)):
        return block
    return None


def packable_block(value: SSAValue) -> int | None:
    """The channel block to store `value` in, or None. The nest writing it has lanes over its
    channels and its epilogue reads nothing else across them with a stride (a residual add
    would read NCHW lane by lane once its tile is no longer transposed); every use is the main
    input (not an epilogue operand, which a transposed tile reads along its rows) of a nest
    whose lanes walk the same channels in the same blocks."""
    producer = value.owner
    if not isinstance(producer, nest.ComputeOp) or not value.uses:
        return None
    shape = shape_of(value)
    block = channel_lane_block(producer, producer.output_map, shape)
    if block is None:
        return None
    d, _ = lane_dim(producer)
    maps = producer.access_maps
    for _, refs, _ in producer.steps:
        if any(stride_of(maps[k], shape_of(producer.inputs[k]), d) not in (0, 1) for k in refs):
            return None
    for use in value.uses:
        reader = use.operation
        if not isinstance(reader, nest.ComputeOp) or use.index >= nest.COMBINERS[reader.kind]:
            return None
        if channel_lane_block(reader, reader.access_maps[use.index], shape) != block:
            return None
    return block


def blocked(amap: AffineMap, block: int) -> AffineMap:
    """`amap` (indexing NCHW) indexing the same element of NCHW<block>c."""
    return AffineMap(amap.num_dims, amap.num_symbols, tuple(layout_exprs("NCHW", f"NCHW{block}c", list(amap.results))))


class PackActivationsPass(ModulePass):
    """Store NCHW16c the tensors whose producer and readers all run their lanes over channels."""

    name = "pack-activations"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for producer in list(op.walk()):
            if not isinstance(producer, nest.ComputeOp):
                continue
            block = packable_block(producer.result)
            if block is None:
                continue
            n, c, h, w = shape_of(producer.result)
            for use in list(producer.result.uses):
                reader = use.operation
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
