"""subsample-strided-1x1: a strided conv whose window is one tap (ResNet's 1x1 stride-2 downsample)
onto short rows reads its input through a copy of the points it uses, then runs at stride 1.

    %y = nest.compute %x, %w, %b {name = "ds",
        domain = #nest.domain<[n = 1, co = 512, oh = 7, ow = 7], [ci = 256, kh = 1, kw = 1]>,
        maps = [(n, co, oh, ow, ci, kh, kw) -> (n, ci, oh * 2 + kh, ow * 2 + kw), ...], combiner = "mac"}
        : (tensor<1x256x14x14xf32>, ...) -> tensor<1x512x7x7xf32>
    ->
    %z = nest.compute %x {name = "ds.subsample", domain = #nest.domain<[n = 1, c = 256, h = 7, w = 7]>,
        maps = [(n, c, h, w) -> (n, c, h * 2, w * 2)], combiner = "copy"} : (...) -> tensor<1x256x7x7xf32>
    %y = nest.compute %z, %w, %b {name = "ds",
        maps = [(n, co, oh, ow, ci, kh, kw) -> (n, ci, oh + kh, ow + kw), ...], ...}

Both keep the layer's class (`nasir.layer_class = "conv 1x1 s2"`, `ComputeOp.layer_class`), so a
profile counts the copy and the conv as the strided 1x1 conv they compute.

The strided conv's input stays NCHW (the block's 3x3 conv reads it with a window too), so each
step of its channel loop broadcasts from another plane, a quarter of each line used, along image
rows too short for its register tile (7 points: a tile of 6 and a tail of 1). Subsampled, the
conv's rows fuse into one (`flat_row`: 49 points), and the copy stores `z` channel-blocked where
the conv broadcasts from it (`channel_transpose_schedule`, 8 lanes): each step reads 8 channels of
one point from a line.

Where: at 8 lanes (`TRANSPOSE_LANES`), output rows shorter than `SHORT_ROW`, an input that another
nest reads with a window (`read_by_a_window`; one read by 1x1 convs alone its writer may store
channel-blocked, which the strided conv reads directly). Each strided 1x1
conv of ResNet-34 compiled alone for znver3 on a Zen 3, its kernels' time with the copy over its
time strided (15 interleaved rounds): imagenet onto 28 x 28 1.06, onto 14 x 14 0.85, onto 7 x 7
0.80 (58% -> 77% of the FMA peak); cifar10 onto 16 x 16 0.99, 8 x 8 0.97, 4 x 4 0.87. At 16 lanes
the copy would store NCHW (the conv's 16-lane tiles spill an unrolled channel block), unmeasured:
left strided.

Runs in the llvm pipeline before default-schedule, on `mac` nests without a schedule whose input 0
is read on its two image axes as `stride * d + taps` with no offset (no padding), every tap dim of
extent 1, and a stride above 1 on one of them at least (`subsampled_axes`).
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import nest
from nasir.dialects.attributes import LAYER_CLASS
from nasir.dialects.nest_maps import amap, elementwise_domain, identity
from nasir.dialects.shapes import shape_of
from nasir.lowering.schedule.schedules import TRANSPOSE_LANES
from nasir.lowering.target import CPUTarget, target_of
from nasir.transforms.nest_spec import Form, NestSpec

IMAGE_AXES = (2, 3)
"""The axes of an NCHW input a conv's window slides along."""

SHORT_ROW = 16
"""Output rows of fewer points than this are subsampled (see the module docstring)."""


def subsampled_axes(spec: NestSpec) -> dict[int, tuple[str, int]] | None:
    """Per image axis of input 0, the parallel dim that reads it and its stride, when the nest
    reads that input only at `stride * d` plus taps of extent 1 and some stride is above 1; None
    otherwise.

        (n, ci, oh * 2 + kh, ow * 2 + kw), kh = kw = 1   ->  {2: ("oh", 2), 3: ("ow", 2)}
        (n, ci, oh * 2 + kh - 1, ow * 2 + kw - 1)         ->  None (padding)
    """
    if spec.combiner != "mac" or len(spec.forms[0]) != 4 or len(spec.inputs) < 2:
        return None
    extents = dict(spec.dims)
    axes = {}
    for a in IMAGE_AXES:
        f = spec.forms[0][a]
        if f.raw is not None or f.const:
            return None
        strided = [d for d in f.terms if spec.is_parallel(d)]
        taps = [d for d in f.terms if not spec.is_parallel(d)]
        if len(strided) != 1 or any(extents[d] != 1 or f.terms[d] != 1 for d in taps):
            return None
        axes[a] = (strided[0], f.terms[strided[0]])
    if all(stride == 1 for _, stride in axes.values()):
        return None
    used = {d for a in IMAGE_AXES for d in spec.forms[0][a].terms}
    if any(spec.forms[0][a].uses(d) for a in (0, 1) for d in used):
        return None
    return axes


def read_by_a_window(x: SSAValue, op: nest.ComputeOp) -> bool:
    """Whether a nest other than `op` reads `x` with a window of more than one tap on an image axis
    (a 3x3 conv): `x` then stays NCHW, which no writer can store channel-blocked for `op`."""
    for use in x.uses:
        other = use.operation
        if other is op or not isinstance(other, nest.ComputeOp):
            continue
        spec = NestSpec.of(other)
        extents = dict(spec.dims)
        if any(extents[d] > 1 for a in IMAGE_AXES if a < len(spec.forms[use.index])
               for d in spec.forms[use.index][a].terms if not spec.is_parallel(d)):
            return True
    return False


def subsample(op: nest.ComputeOp, target: CPUTarget) -> bool:
    """Read `op`'s strided input through a subsampling copy nest put before it, where
    `subsampled_axes` finds it strided, another nest reads that input with a window
    (`read_by_a_window`; else its writer may store it channel-blocked for `op`, read directly),
    and it pays on `target` (see the module docstring)."""
    if op.schedule is not None or target.lanes > TRANSPOSE_LANES:
        return False
    spec = NestSpec.of(op)
    axes = subsampled_axes(spec)
    extents = dict(spec.dims)
    if axes is None or extents[axes[IMAGE_AXES[-1]][0]] >= SHORT_ROW or not read_by_a_window(spec.inputs[0], op):
        return False
    layer_class = op.layer_class
    x = spec.inputs[0]
    shape = list(shape_of(x))
    for a, (dim, _) in axes.items():
        shape[a] = extents[dim]
    strides = [1, 1] + [axes[a][1] for a in IMAGE_AXES]
    points = [d * s if s > 1 else d for d, s in zip(identity(4).results, strides)]
    copy = nest.ComputeOp.make(f"{spec.name}.subsample", [x], elementwise_domain(tuple(shape)), [amap(4, points)],
                               identity(4), shape, "copy")
    op.parent_block().insert_ops_before([copy], op)
    spec.inputs[0] = copy.results[0]
    for a, (dim, _) in axes.items():
        spec.forms[0][a] = Form({**spec.forms[0][a].terms, dim: 1})
    conv = spec.build()
    conv.attributes.update(op.attributes)
    for part in (copy, conv):  # the layer's class, not a copy's and a conv's at stride 1
        LAYER_CLASS.set(part, layer_class)
    Rewriter.replace_op(op, conv)
    return True


class SubsampleStrided1x1Pass(ModulePass):
    """Give each strided conv of one tap onto short rows a subsampling copy of its input and stride
    1, at 8 lanes."""

    name = "subsample-strided-1x1"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = target_of(op)
        for compute in [o for o in op.walk() if isinstance(o, nest.ComputeOp)]:
            subsample(compute, target)
