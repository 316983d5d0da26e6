"""pad-planes: store an NCHW activation with a padding row below each channel plane when its planes
would otherwise sit a multiple of `ALIASING_BYTES` apart.

A conv reads one point of each input channel per step of its channel loop. In NCHW those points are
a plane apart, and a plane of 32 x 32 floats is 4 KiB: every one of them falls in the same set of a
32 KiB 8-way L1 (and in 32 of L2's sets), so a 1x1 conv over 256 channels misses on nearly every
load. On a Zen 3, ResNeXt-29's 1x1 convs on 32 x 32 images ran at 21% of the FMA peak, the same convs
on 31 x 31 at 53%. One row more per plane (33 x 32 floats, 4224 bytes) spreads the planes over the
sets; the rows stay whole vectors apart.

    %y = nest.compute %x, %w {name = "conv1", ..., out_map = (n, co, oh, ow, ci) -> (n, co, oh, ow)}
         : (...) -> tensor<1x128x32x32xf32>
    %z = nest.compute %y, %w2 {name = "conv2", maps = [(n, co, oh, ow, ci) -> (n, ci, oh, ow), ...]}
    ->
    %y = nest.compute %x, %w {name = "conv1", ..., nasir.pad_rows = 1 : i64} : (...) -> tensor<1x128x33x32xf32>
    %z = nest.compute %y, %w2 {name = "conv2", maps = [(n, co, oh, ow, ci) -> (n, ci, oh, ow), ...]}

Only the result type changes: the writer's and the readers' maps index the same rows, and every
stride the lowering computes follows the stored shape, every bound its elements' rows
(`NestView.in_extents`): a 3x3 conv with padding reads row H of a padded plane as padding, as it
reads row -1. A tensor is padded when a nest writes it and every use is a nest, and the function
does not return it. Every tensor of a ResNet stage is then padded alike, so a block's residual add
still writes in place over the block's input (padding only the tensors that no 3x3 conv reads cost
ResNet-34 that reuse, 1.02-1.035x the time). The nest verifier holds writers to their rows
(`PAD_ROWS`, `nest.pad_rows`).

Runs on nest IR after default-schedule and pack-activations (whose blocked tensors are 5-D and
read a channel block a load: never aliased), before nest-bufferize.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import nest
from nasir.dialects.attributes import FUSE_ROWS, PAD_ROWS

ALIASING_BYTES = 1024
"""Planes whose size is a multiple of this many bytes get a padding row: 16 x 16 floats (1 KiB)
put 256 channels in 4 of L1's 64 sets (a 1x1 conv 256 -> 128 on a Zen 3: 16 x 16 ran at 46 GFLOP/s,
17 x 17 at 75)."""


def aliased(t: Attribute) -> bool:
    """Whether `t` is an NCHW f32 tensor type of more than one channel whose planes sit a multiple of
    `ALIASING_BYTES` apart."""
    if not isinstance(t, TensorType) or t.element_type.bitwidth != 32:
        return False
    shape = t.get_shape()
    return len(shape) == 4 and shape[1] > 1 and shape[2] * shape[3] * 4 % ALIASING_BYTES == 0


def padded(t: TensorType) -> TensorType:
    """NCHW type `t` with a padding row below each plane."""
    n, c, h, w = t.get_shape()
    return TensorType(t.element_type, [n, c, h + 1, w])


def paddable(value: SSAValue) -> bool:
    """Whether `value` may take padding rows: an aliased NCHW f32 result of a nest whose every use is
    a nest that computes its rows itself (not a max pool that computes its producer's rows as it
    needs them, `FUSE_ROWS`)."""
    if not isinstance(value.owner, nest.ComputeOp) or not value.uses or PAD_ROWS.on(value.owner):
        return False
    if not aliased(value.type):
        return False
    return all(isinstance(use.operation, nest.ComputeOp) and not FUSE_ROWS.on(use.operation) for use in value.uses)


class PadPlanesPass(ModulePass):
    """Give a padding row to each NCHW activation whose channel planes alias in the caches."""

    name = "pad-planes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        values = [o.result for o in op.walk() if isinstance(o, nest.ComputeOp) and paddable(o.result)]
        for value in values:
            producer = value.owner
            writer = nest.ComputeOp.create(operands=list(producer.operands), properties=dict(producer.properties),
                                           attributes=dict(producer.attributes), result_types=[padded(value.type)])
            PAD_ROWS.set(writer, 1)
            Rewriter.replace_op(producer, writer)
