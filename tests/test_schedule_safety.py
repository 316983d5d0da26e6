"""Every schedule the default scheduler can pick stays in bounds and keeps the numbers (issue 5).

Odd sizes (7x7, 13x13, 1x1 images, channel counts the vector width does not divide, stride 2 on
odd inputs, tails of register tiles, rows whose last tile runs on narrower vectors, inputs too
big for L2 so that channel blocks run inside the image rows, the 3x1 and 1x3 windows `fold`
leaves) under both schedule families: lanes over the output width
(`spatial_vector_schedule`) and lanes over output channels from packed weights
(`channel_vector_schedule`, every register tile shape it can choose and the one it chose, tails
included, and a tile of WIDTH/2 + 1 points whose transpose pads rows to WIDTH lanes), at both
vector widths (`conftest.WIDTHS`: AVX2's 8 lanes and 16 registers, AVX-512's 16 and 32). The conv
carries a bias, a residual add and a ReLU in its epilogue; the oracle is PyTorch. The cost model's
choices measured on AVX-512 CPUs are checked on the AVX-512 target, whatever this machine is.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import WIDTH_CPUS, WIDTHS
from test_llvm_backend import build, rand, run

from nasir.dialects import nest, nn
from nasir.lowering.analysis.cost_model import ChannelPlan
from nasir.lowering.schedule.default_schedule import nest_shape
from nasir.lowering.schedule.schedules import (
    channel_vector_plan,
    channel_vector_schedule,
    schedule_for,
    spatial_vector_schedule,
    tile_registers,
)
from nasir.lowering.target import CPU_ENV, cpu_target

AVX512 = cpu_target(WIDTHS["avx512"][0])
"""The target the cost model's constants were measured on (Zen 4 and Zen 5)."""


def convs(width: int) -> list[tuple]:
    """The convs for vectors of `width` lanes."""
    return [  # (c, o, h, w, k, stride, pad, groups); k and pad: one size, or (along h, along w)
        (5, 2 * width, 7, 7, 3, 1, 1, 1),  # 7x7 image, odd ci
        (3, width, 13, 13, 3, 2, 1, 1),  # 13x13, stride 2 on an odd input
        (8, 3 * width, 1, 1, 1, 1, 0, 1),  # 1x1 image
        (7, 20, 13, 13, 3, 1, 1, 1),  # co not a multiple of the vector width: spatial only
        (2 * width, 2 * width, 15, 15, 3, 2, 1, 2),  # grouped, a vector of channels per group
        (12, 12, 13, 13, 3, 1, 1, 12),  # depthwise 13x13
        (width, 4 * width, 9, 11, 1, 2, 0, 1),  # 1x1 stride 2, odd and not square
        (3, width, 17, 17, 7, 2, 3, 1),  # a stem: 7x7 window, stride 2, pad 3
        # inputs over l2_input_bytes: channel blocks inside the rows, 1x1 tiles without a window
        (41, 2 * width, 57, 57, 3, 1, 1, 1),
        (150, 2 * width, 31, 31, 1, 1, 0, 1),
        # rows ending in at most half a vector: the last tile on narrower vectors (tail_width)
        (6, 8, 9, 3 * width // 2, 3, 1, 1, 2),
        (4, 6, 9, 2 * width + 5, 3, 2, 1, 2),  # stride 2: width + 3 outputs a row
        # fold{dim=kw} / fold{dim=kh}: a window along one axis only, padded along it
        (6, 2 * width, 13, 11, (3, 1), 1, (1, 0), 1),
        (2 * width, 2 * width, 9, 13, (1, 3), 2, (0, 1), 2),
    ]


CASES = [pytest.param(cpu, conv, id=f"{width}-" + "x".join(str(v).replace(", ", ".") for v in conv))
         for width, (cpu, lanes) in WIDTHS.items() for conv in convs(lanes)]


def conv_model(c, o, h, w, k, stride, pad, groups):
    """conv(+bias) + residual + relu as nasir IR (fused into one nest), inputs, PyTorch's answer."""
    (kh, kw), (ph, pw) = [v if isinstance(v, tuple) else (v, v) for v in (k, pad)]
    wt, b, x = rand(o, c // groups, kh, kw), rand(o), rand(1, c, h, w)
    oh, ow = (h + 2 * ph - kh) // stride + 1, (w + 2 * pw - kw) // stride + 1
    r = rand(1, o, oh, ow)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w", wt), W("b", b), (stride, stride), (ph, pw, ph, pw), (1, 1),
                               groups).named("conv")
        add = nn.AddOp.new(conv.result, a[1])
        return [conv, add, nn.ReluOp.new(add.result)]

    model = build([(1, c, h, w), (1, o, oh, ow)], body)
    ref = F.relu(F.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), stride, (ph, pw), 1, groups)
                 + torch.tensor(r))
    return model, (x, r), ref.numpy()


def candidate_schedules(shape, target):
    """The spatial schedule and every channel-vector register tile (r_col blocks x r_row points)."""
    width = target.lanes
    yield "spatial", spatial_vector_schedule(shape, target)
    plan = channel_vector_plan(shape, target)
    if plan is None:
        return
    blocks = plan.col_extent // width
    # row tiles: 1, odd, an image row (the whole row, or on a fused row `oh*ow` a tile that divides
    # it), width/2 + 1 points (a full transpose, with a tail) and the one the plan picked; none of
    # more points than a tile may hold accumulators (`tile_registers`: neither the cost model nor
    # tuning makes one; a 57-point row took 40 s to compile at AVX-512, a 961-point one minutes)
    image_row = dict(shape.dims)["ow"]
    most = min(plan.row_extent, max(tile_registers(target), plan.r_row))
    rows = sorted(r for r in {1, 3, 5, width // 2 + 1, image_row, plan.r_row} if r <= most)
    for r_col, r_row in itertools.product([r for r in (1, 2, 3, 4) if blocks % r == 0], rows):
        tile = ChannelPlan(plan.col, plan.col_extent, r_col, plan.row, plan.row_extent, r_row, plan.efficiency)
        yield f"channel {r_col}x{r_row}", channel_vector_schedule(shape, tile, target)


def with_schedule(model, schedule):
    """The model at the nest level with `schedule` on its conv nest (default-schedule keeps it)."""
    lowered = model.transform("convert-nn-to-nest,fuse-epilogue")
    [conv] = [op for op in lowered.module.walk() if isinstance(op, nest.ComputeOp) and op.kind == "mac"]
    conv.properties["schedule"] = schedule.to_attr()
    return lowered


def conv_shape(model):
    lowered = model.transform("convert-nn-to-nest,fuse-epilogue")
    return nest_shape(next(op for op in lowered.module.walk() if isinstance(op, nest.ComputeOp) and op.kind == "mac"))


@pytest.mark.parametrize("cpu,conv", CASES)
def test_every_candidate_schedule_keeps_the_numbers(cpu, conv, monkeypatch):
    monkeypatch.setenv(CPU_ENV, cpu)
    model, inputs, ref = conv_model(*conv)
    schedules = list(candidate_schedules(conv_shape(model), cpu_target(cpu)))
    assert schedules
    for name, schedule in schedules:
        got = run(with_schedule(model, schedule), *inputs)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=f"{conv}: {name} {schedule}")


@pytest.mark.parametrize("cpu", WIDTH_CPUS, ids=list(WIDTHS))
def test_channel_vector_schedule_is_chosen_where_spatial_lanes_idle(cpu):
    """7x7 images and stride 2 leave most lanes over ow idle: the scheduler vectorises channels there,
    and keeps lanes over ow for a wide stride-1 image whose 1x1 reduction is too short to pay for
    lane-by-lane stores."""
    target = cpu_target(cpu)

    def chosen(conv):
        return schedule_for(conv_shape(conv_model(*conv)[0]), target)

    small = chosen((64, 64, 7, 7, 3, 1, 1, 1))
    assert small.vector == "co.i" and small.pack == {1: f"OIHW{target.lanes}o"}
    strided = chosen((64, 128, 28, 28, 3, 2, 1, 1))
    assert strided.vector == "co.i"
    wide_1x1 = chosen((16, 64, 64, 64, 1, 1, 0, 1))
    assert wide_1x1.vector.startswith("ow") and not wide_1x1.pack


def test_cost_model_picks_what_measured_faster():
    """The scheduler's cost model on shapes whose winner was measured (interleaved A/B of two
    compiles each, issue 5): 16 output channels per group on 56-wide rows run faster in a
    1-vector channel tile than spatially (0.93x: the kw taps share its broadcasts), on 14-wide rows
    with channel vectors; a dense 3x3 conv on 14-wide rows in one 1 x 14 tile (0.89x the time of
    2 x 7: half the weight vectors per FMA from L2), on 28-wide rows too (4 x 4, as many
    accumulators, 1.10x); a 1x1 conv there (no window: a broadcast per FMA, dead after it, so 28
    accumulators fit) in 2 x 14 (0.80x the time of 2 x 7), ResNet's 1x1 stride-2 downsample from
    56x56 too (0.83x of 2 x 7, which ran 0.85x of 4 x 4: of its 800 KB input it reads the even
    rows, which stay in L2 while its channel blocks re-read them), DenseNet's 1x1 convs on 56x56
    as well (0.76-0.81x of 2 x 8) and its 192 -> 48 3x3 conv there in 1 x 14 (0.81x of 1 x 8: the
    most accumulators among near-equal plans); the stem gets 2 channel vectors x 8 points (4 x 4
    spends more on its transposed epilogue).
    Spatial tiles: 8 channels per group on 56-wide rows take 4 channels x 4 rows (0.92x
    the time of 8 x 2: rows share input rows, fewer loads per FMA), a wide 1x1 conv keeps 8 x 2
    (4 x 4 ran MobileNetV2 1.03x slower)."""
    def chosen(conv):
        return schedule_for(conv_shape(conv_model(*conv)[0]), AVX512)
    grouped = chosen((64, 64, 56, 56, 3, 1, 1, 4))
    assert grouped.vector == "co.i" and grouped.unroll["co.o"] == 1
    assert chosen((256, 256, 14, 14, 3, 1, 1, 16)).vector == "co.i"
    dense = chosen((256, 256, 14, 14, 3, 1, 1, 1))
    assert dense.vector == "co.i" and dense.unroll["ow"] == 14 and "co.o.i" not in dense.unroll
    dense_28 = chosen((128, 128, 28, 28, 3, 1, 1, 1))
    assert dense_28.unroll["ow.i"] == 14 and "co.o.i" not in dense_28.unroll
    pointwise = chosen((512, 128, 14, 14, 1, 1, 0, 1))
    assert pointwise.unroll["ow"] == 14 and pointwise.unroll["co.o.i"] == 2
    downsample = chosen((64, 128, 56, 56, 1, 2, 0, 1))
    assert downsample.unroll["ow.i"] == 14 and downsample.unroll["co.o.i"] == 2
    dense_block_1x1 = chosen((336, 192, 56, 56, 1, 1, 0, 1))
    assert dense_block_1x1.unroll["ow.i"] == 14 and dense_block_1x1.unroll["co.o.i"] == 2
    dense_block_3x3 = chosen((192, 48, 56, 56, 3, 1, 1, 1))
    assert dense_block_3x3.unroll["ow.i"] == 14 and "co.o.i" not in dense_block_3x3.unroll
    stem = chosen((3, 64, 224, 224, 7, 2, 3, 1))
    assert stem.vector == "co.i" and stem.unroll["ow.i"] == 8 and stem.unroll["co.o.i"] == 2
    grouped_8 = chosen((64, 64, 56, 56, 3, 1, 1, 8))
    assert grouped_8.vector == "ow.i" and grouped_8.unroll["oh.i"] == 4 and grouped_8.unroll["co.i"] == 4
    wide_1x1 = chosen((16, 96, 112, 112, 1, 1, 0, 1))
    assert wide_1x1.vector == "ow.i" and wide_1x1.unroll["oh.i"] == 2 and wide_1x1.unroll["co.i"] == 8


def test_cost_model_picks_what_measured_faster_on_avx2():
    """On Zen 3 (AVX2, 16 registers; each conv alone on padded planes, `experiments/data/
    tiles-znver3-*.json`), a 3x3 conv's channel tile is one channel vector x 8 points, not 2 x 4
    (ResNet-18's 256-channel convs on 8x8: 0.75-0.78x the time; ResNeXt-29's 2-group 64-channel
    conv on 32x32: 0.84x): without AVX-512's embedded broadcasts, a broadcast that feeds one FMA
    holds a register only while the window's taps reuse it, so 8 points fit beside it. A 1x1 conv
    (no window) keeps its 2 x 4 (ResNet-18's stride-2 downsample: 1 x 8 ran 1.10x the time)."""
    target = cpu_target("znver3")

    def tile(conv):
        sched = schedule_for(conv_shape(conv_model(*conv)[0]), target)
        assert sched.vector == "co.i"
        return sched.unroll.get("ow", sched.unroll.get("ow.i")), sched.unroll.get("co.o.i", 1)
    assert tile((256, 256, 8, 8, 3, 1, 1, 1)) == (8, 1)
    assert tile((128, 128, 32, 32, 3, 1, 1, 2)) == (8, 1)
    assert tile((128, 256, 16, 16, 1, 2, 0, 1)) == (4, 2)


def test_channel_blocks_take_turns_on_rows_whose_input_leaves_l2():
    """A conv whose input does not stay in L2 (DenseNet's 336 -> 192 1x1 conv on 56x56 reads
    4.2 MB) runs its channel blocks inside the image rows, so the blocks re-read a row's inputs
    from L2 instead of the whole input from L3 (0.92x the time; DenseNet-161 0.95x); a small input
    keeps the blocks outermost."""
    def order(conv):
        sched = schedule_for(conv_shape(conv_model(*conv)[0]), AVX512)
        return [name for name in sched.order if name in ("oh", "co.o", "co.o.o", "ow.o")]
    assert order((336, 192, 56, 56, 1, 1, 0, 1)) == ["oh", "co.o.o", "ow.o"]
    assert order((256, 256, 14, 14, 3, 1, 1, 1))[:2] == ["co.o", "oh"]


def test_parallel_loop_splits_evenly_over_threads():
    """Three blocks of output channels (48 = 3 x 16, DenseNet-161's 3x3 convs) would leave one of
    two threads idle a third of the time: the rows run on threads instead (2 threads: DenseNet-161
    0.90x the time); a power-of-two count of blocks keeps the channel loop."""
    def parallel(conv):
        n = conv_shape(conv_model(*conv)[0])
        sched = schedule_for(n, AVX512)
        extents = dict(sched.loops(nest.DomainAttr.make(n.dims[: n.npar], n.dims[n.npar:])))
        return sched.parallel, extents[sched.parallel]
    assert parallel((192, 48, 28, 28, 3, 1, 1, 1)) == ("oh", 28)
    name, extent = parallel((128, 64, 28, 28, 3, 1, 1, 1))
    assert name.startswith("co") and extent in (2, 4)


def test_parallel_loop_stays_on_five_or_more_channel_tiles():
    """MobileNetV2 cifar10's 1x1 projections: 160 channels on 4 x 4 points in 5 tiles of 2
    channel vectors (AVX-512), 96 on 8 x 8 in 6 tiles of 2 (AVX2). Run on threads, the points
    inside each tile made every thread read all the weights, one tile after another with a
    barrier between (1.4-1.8x the time at 2 threads): the tiles run on threads, unevenly."""
    def parallel(conv, target):
        n = conv_shape(conv_model(*conv)[0])
        sched = schedule_for(n, target)
        extents = dict(sched.loops(nest.DomainAttr.make(n.dims[: n.npar], n.dims[n.npar:])))
        return sched.parallel, extents[sched.parallel], sched.order.index(sched.parallel)
    assert parallel((576, 160, 4, 4, 1, 1, 0, 1), AVX512) == ("co.o.o", 5, 1)
    assert parallel((576, 96, 8, 8, 1, 1, 0, 1), cpu_target("znver3")) == ("co.o.o", 6, 1)
