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

Tensors are blocked together or not at all (`packed_tensors`, a fixed point): a nest whose
epilogue reads a tensor across its lanes (a residual add) needs that tensor blocked as well, then
reads one vector per point; a transposed tile (NCHW output) does the same in the epilogue steps
before its transpose. A tensor stays NCHW when the function returns it, when any nest reads it
otherwise (a conv by broadcasts over its input channels, a nest with lanes along rows), or when a
tensor it needs to be blocked with stays NCHW.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr, ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import affine, nest
from nasir.dialects.affine import stride_of, used_dims
from nasir.dialects.schedule import Loop
from nasir.dialects.shapes import shape_of
from nasir.lowering.schedule.pack_weights import layout_exprs


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
    conv's `g + co`, co = 1), and no other index uses it. None otherwise."""
    lanes = lane_dim(op)
    if lanes is None or len(shape) != 4 or len(amap.results) != 4:
        return None
    d, block = lanes
    form = affine.linear_form(amap.results[1])
    extents = [e for _, e in op.domain.dims]
    if form is None or shape[1] % block or form[1] != 0 or form[0].get(d) != 1:
        return None
    if any(c and extents[q] > 1 for q, c in form[0].items() if q != d):
        return None
    if any(d in used_dims(e) for a, e in enumerate(amap.results) if a != 1):
        return None
    return block


def _across_lanes(op: nest.ComputeOp, k: int) -> bool:
    """Whether `op` reads its input `k` with a stride across its lanes (not one vector, not one
    broadcast value): in NCHW, a residual operand of a nest with lanes over channels."""
    d, _ = lane_dim(op)
    return stride_of(op.access_maps[k], shape_of(op.inputs[k]), d) not in (0, 1)


def _requirements(value: SSAValue) -> tuple[int, set[SSAValue]] | None:
    """The channel block `value` could be stored in and the tensors that must then be stored
    channel-blocked with it, or None when it must stay NCHW. Its writer runs lanes over its
    channels; every use is a nest whose lanes walk the same channels in the same blocks, as its
    main input or as an epilogue operand; an epilogue that reads an operand across the lanes
    needs that operand blocked too (then it reads one vector per point: the writer's operands,
    and a reader's operands in the steps up to the one reading `value`)."""
    producer = value.owner
    if not isinstance(producer, nest.ComputeOp) or not value.uses:
        return None
    shape = shape_of(value)
    block = channel_lane_block(producer, producer.output_map, shape)
    if block is None:
        return None
    needs: set[SSAValue] = set()

    def operands_blocked(op: nest.ComputeOp, steps) -> bool:
        for _, refs, _ in steps:
            for k in refs:
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
        if channel_lane_block(reader, reader.access_maps[use.index], shape) != block:
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
    """Store NCHW16c the tensors whose producer and readers all run their lanes over channels."""

    name = "pack-activations"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for value, block in packed_tensors(op).items():
            producer = value.owner
            n, c, h, w = shape_of(value)
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
