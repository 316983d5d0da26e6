"""llvm backend: per-op numerics against PyTorch/numpy oracles, threads, bad inputs, save/load, IR."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region

from nasir.dialects import nest, nn, schedule
from nasir.dialects.module import WeightStore
from nasir.dialects.shapes import tensor
from nasir.errors import RuntimeInputError
from nasir.lowering.analysis.cost_model import MAX_UNROLLED_BODY
from nasir.lowering.passes import gc_paused
from nasir.lowering.schedule.pack_activations import tile_points
from nasir.model import Model
from nasir.runtime.llvm_executable import compile_llvm

RNG = np.random.default_rng(0)
pytestmark = pytest.mark.usefixtures("cpu")  # every test at both vector widths (conftest.py)


def build(input_shapes, body, weights=None):
    """A Model whose @main applies `body(args, weight) -> [ops]` (the last op's result is returned)."""
    block = Block(arg_types=[tensor(s) for s in input_shapes])
    store = WeightStore()
    ops = []

    def weight(name, array):
        store[name] = np.asarray(array, np.float32)
        op = nn.WeightOp.make(name, array.shape)
        ops.append(op)
        return op.result

    made = body(list(block.args), weight)
    ops += made
    ops.append(func.ReturnOp(made[-1].results[0]))
    block.add_ops(ops)
    fn = func.FuncOp("main", (list(block.arg_types), [made[-1].results[0].type]), Region(block))
    return Model(ModuleOp([fn]), store)


def run(model, *xs, threads=1):
    exe = compile_llvm(model.module, threads=threads)
    return exe(*xs)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def lanes() -> int:
    """The vector width the test compiles for (conftest's `cpu` fixture)."""
    from nasir.lowering.target import resolve_target

    return resolve_target(None).lanes


CONVS = [  # (c, o, h, w, k, stride, pad, dilation, groups)
    (3, 16, 8, 8, 3, 1, 1, 1, 1),
    (5, 20, 13, 13, 13, 1, 6, 1, 1),
    (3, 8, 15, 17, 7, 2, 3, 1, 1),
    (6, 12, 9, 9, 3, 1, 2, 2, 3),
    (18, 18, 11, 11, 3, 2, 1, 1, 18),
    (7, 33, 6, 5, 1, 1, 0, 1, 1),
    (4, 4, 9, 9, 3, 2, 0, 1, 1),
    (5, 8, 7, 7, 3, 1, 1, 1, 1),  # register tile of 7 rows x 2 channels, kh and kw unrolled
    (4, 16, 12, 20, 3, 1, 1, 1, 1),  # 2 rows x 8 channels, ow = 20 leaves a masked vector tail
    # strided windows along a channel-lane tile, their taps emitted by input phase
    (3, 32, 23, 29, 7, 2, 3, 1, 1),  # a stem: kw = 0, 2, 4, 6, then 1, 3, 5
    (4, 16, 16, 19, 5, 3, 2, 1, 1),  # three phases: kw = 0, 3, then 1, 4, then 2
    (4, 16, 17, 17, 3, 2, 2, 2, 1),  # dilation 2 at stride 2: one phase, in order
    # stride 3, dilated, padded: 12-point rows whose last tile runs on 4 lanes, each read of
    # 3 x 4 columns under a mask (its last point's kw = 1 reads column 32 of 31: padding)
    (6, 10, 12, 31, 2, 3, 3, 2, 1),
]


@pytest.mark.parametrize("c,o,h,w,k,stride,pad,dil,groups", CONVS)
def test_conv(c, o, h, w, k, stride, pad, dil, groups):
    wt, b, x = rand(o, c // groups, k, k), rand(o), rand(1, c, h, w)
    model = build([(1, c, h, w)], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), W("b", b), (stride, stride),
                                                               (pad,) * 4, (dil, dil), groups).named("conv")])
    ref = F.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), stride, pad, dil, groups).numpy()
    np.testing.assert_allclose(run(model, x), ref, rtol=1e-4, atol=1e-4)


def test_gemm_with_bias_and_transpose():
    a, bm, c = rand(3, 37), rand(21, 37), rand(21)
    model = build([(3, 37)], lambda a_, W: [nn.GemmOp.new(a_[0], W("b", bm), W("c", c), trans_b=True)])
    np.testing.assert_allclose(run(model, a), a @ bm.T + c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,outputs", [(1, 1000), (1, 40), (2, 20), (1, 10)])
def test_gemm_weight_read_across_lanes_is_packed(rows, outputs):
    """A classifier's [outputs, k] weight read with lanes over its outputs is packed so that each
    weight vector is one load (1000 classes: blocks of 8 lanes; 10 have no block of 4 or more and
    stay unpacked); the numbers are numpy's."""
    from nasir.lowering.pipeline import LLVM

    a, w, c = rand(rows, 64), rand(outputs, 64), rand(outputs)
    model = build([(rows, 64)], lambda a_, W: [nn.GemmOp.new(a_[0], W("w", w), W("c", c), trans_b=True).named("fc")])
    scheduled = model.transform(str(LLVM.before("pack-weights")))
    [fc] = [op for op in scheduled.module.walk() if isinstance(op, nest.ComputeOp)]
    width = lanes()
    block = next((b for b in (width, width // 2, width // 4) if b >= 4 and outputs % b == 0), None)
    sched = fc.get_schedule()
    assert sched.pack == ({1: f"OI{block}o"} if block else {})
    if block and outputs > block:
        # the blocks of lanes are a register tile: independent accumulators, not one FMA chain
        blocks, outer = outputs // block, sched.vector.replace(".i", ".o")
        tile = max(f for f in range(2, 9) if blocks % f == 0)
        assert sched.unroll.get(f"{outer}.i", sched.unroll.get(outer)) == tile
    np.testing.assert_allclose(run(model, a), a @ w.T + c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,ceil", [("max", False), ("max", True), ("avg", False), ("avg", True)])
def test_pools(kind, ceil):
    x = rand(1, 5, 10, 11)
    if kind == "max":
        model = build([x.shape], lambda a, W: [nn.MaxPoolOp.new(a[0], (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=ceil)])
        ref = F.max_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=ceil)
    else:
        model = build([x.shape], lambda a, W: [nn.AvgPoolOp.new(a[0], (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=ceil)])
        ref = F.avg_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=ceil, count_include_pad=False)
    np.testing.assert_allclose(run(model, x), ref.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width,kernel,stride", [(64, 3, 2), (65, 3, 2), (70, 3, 2), (97, 3, 2), (112, 3, 2),
                                                  (100, 3, 3), (80, 2, 2)])
def test_max_pool_on_rows_wider_than_a_vector(width, kernel, stride):
    """Rows of several vectors: the inner tiles read whole windows of `stride` x 16 columns
    unmasked, the first and last tiles (padding, the row's tail) masked; widths put the last full
    window at the end of the row (64), one past it (65) and the tail in it (70, 97)."""
    x = rand(1, 3, 9, width)
    pads = (kernel // 2,) * 4
    model = build([x.shape], lambda a, W: [nn.MaxPoolOp.new(a[0], (kernel, kernel), (stride, stride), pads)])
    ref = F.max_pool2d(torch.tensor(x), kernel, stride, kernel // 2)
    np.testing.assert_array_equal(run(model, x), ref.numpy())


def test_max_pool_keeps_nan_reads_in_every_tile_version():
    """A window that reads a NaN has max NaN (torch's rule, issue 30; maxnum's would skip it), the
    same in the unmasked inner tiles as in the masked edge tiles; the oracle is numpy's max
    (NaN-propagating) over the padded windows."""
    x = rand(1, 2, 12, 70)
    x[0, :, 3, ::7] = np.nan  # at most one NaN per 3x3 window
    model = build([x.shape], lambda a, W: [nn.MaxPoolOp.new(a[0], (3, 3), (2, 2), (1, 1, 1, 1))])
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    ref = np.max(windows.reshape(*windows.shape[:4], 9), axis=-1)
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    np.testing.assert_array_equal(run(model, x), ref)


def test_global_pool_and_broadcasting_elementwise():
    x, s = rand(1, 19, 5, 6), rand(19, 1, 1)

    def body(a, W):
        g = nn.GlobalAvgPoolOp.new(a[0])
        m = nn.MulOp.new(a[0], g.result)
        add = nn.AddOp.new(m.result, W("s", s))
        return [g, m, add, nn.HardSwishOp.new(add.result)]

    t = torch.tensor(x)
    ref = F.hardswish(t * t.mean((2, 3), keepdim=True) + torch.tensor(s)).numpy()
    np.testing.assert_allclose(run(build([x.shape], body), x), ref, rtol=1e-4, atol=1e-4)


def test_concat_softmax_lrn_reshape():
    x, y = rand(1, 3, 4, 5), rand(1, 2, 4, 5)

    def body(a, W):
        cat = nn.ConcatOp.new([a[0], a[1]], 1)
        lrn = nn.LRNOp.create(operands=[cat.result], result_types=[cat.result.type],
                              properties={"size": nn.IntegerAttr(3, nn.i64), "alpha": nn.FloatAttr(1e-2, nn.f32),
                                          "beta": nn.FloatAttr(0.75, nn.f32), "bias": nn.FloatAttr(1.0, nn.f32)})
        flat = nn.ReshapeOp.new(lrn.result, (1, 100))
        sm = nn.SoftmaxOp.create(operands=[flat.result], result_types=[flat.result.type],
                                 properties={"axis": nn.IntegerAttr(1, nn.i64)})
        return [cat, lrn, flat, sm]

    t = torch.cat([torch.tensor(x), torch.tensor(y)], 1)
    ref = torch.softmax(F.local_response_norm(t, 3, 1e-2, 0.75, 1.0).reshape(1, 100), 1).numpy()
    np.testing.assert_allclose(run(build([x.shape, y.shape], body), x, y), ref, rtol=1e-4, atol=1e-5)


def test_identical_layers_share_a_kernel():
    x, w1, w2, b = rand(1, 6, 9, 9), rand(6, 6, 3, 3), rand(6, 6, 3, 3), rand(6)

    def body(a, W):
        c1 = nn.Conv2DOp.new(a[0], W("w1", w1), W("b1", b), pads=(1,) * 4).named("c1")
        c2 = nn.Conv2DOp.new(c1.result, W("w2", w2), W("b2", -b), pads=(1,) * 4).named("c2")
        return [c1, c2]

    model = build([x.shape], body)
    lowered = model.transform("convert-nn-to-nest,default-schedule,nest-bufferize,convert-nest-to-loops")
    assert [f.sym_name.data for f in lowered.module.ops if isinstance(f, func.FuncOp)] == ["main", "c1"]
    t = F.conv2d(torch.tensor(x), torch.tensor(w1), torch.tensor(b), padding=1)
    ref = F.conv2d(t, torch.tensor(w2), torch.tensor(-b), padding=1).numpy()
    np.testing.assert_allclose(run(model, x), ref, rtol=1e-4, atol=1e-4)


def residual_model(residual_is_the_conv_input: bool):
    """a = relu(conv0(x)); out = relu(conv2(h) + a) with h = relu(conv1(a)) (or h = a); then conv3."""
    ws = [rand(6, 6, 3, 3) * 0.3 for _ in range(4)]

    def body(a, W):
        c0 = nn.Conv2DOp.new(a[0], W("w0", ws[0]), None, pads=(1,) * 4).named("c0")
        r0 = nn.ReluOp.new(c0.result).named("r0")
        ops, h = [c0, r0], r0.result
        if not residual_is_the_conv_input:
            c1 = nn.Conv2DOp.new(h, W("w1", ws[1]), None, pads=(1,) * 4).named("c1")
            r1 = nn.ReluOp.new(c1.result).named("r1")
            ops, h = ops + [c1, r1], r1.result
        c2 = nn.Conv2DOp.new(h, W("w2", ws[2]), None, pads=(1,) * 4).named("c2")
        add = nn.AddOp.new(c2.result, r0.result).named("add")
        r2 = nn.ReluOp.new(add.result).named("r2")
        c3 = nn.Conv2DOp.new(r2.result, W("w3", ws[3]), None, pads=(1,) * 4).named("c3")
        return ops + [c2, add, r2, c3]

    def reference(x):
        conv = lambda t, w: F.conv2d(t, torch.tensor(w), padding=1)  # noqa: E731
        a = F.relu(conv(torch.tensor(x), ws[0]))
        h = a if residual_is_the_conv_input else F.relu(conv(a, ws[1]))
        return conv(F.relu(conv(h, ws[2]) + a), ws[3]).numpy()

    return build([(1, 6, 9, 9)], body), reference


BUFFERIZED = "convert-nn-to-nest,fuse-epilogue,default-schedule,nest-bufferize"


@pytest.mark.parametrize("threads", [1, 2])
def test_residual_add_writes_over_its_dying_operand(threads):
    model, reference = residual_model(residual_is_the_conv_input=False)
    x = rand(1, 6, 9, 9)
    np.testing.assert_allclose(run(model, x, threads=threads), reference(x), rtol=1e-4, atol=1e-4)
    ops = list(model.transform(BUFFERIZED).func.body.block.ops)
    c2 = next(o for o in ops if isinstance(o, nest.ComputeOp) and o.layer_name == "c2")
    assert c2.attributes["nasir.in_place"].value.data == 2  # inputs: h, w2, a (the residual)
    residual = c2.operands[2].owner.operands[0].owner  # to_tensor <- memref.view
    dest = next(o for o in ops if getattr(o, "source", None) is c2.results[0]).dest.owner
    assert residual.byte_shift.owner.value == dest.byte_shift.owner.value  # the same bytes
    lowered = model.transform(BUFFERIZED + ",convert-nest-to-loops")
    kernel = next(f for f in lowered.module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == "c2")
    assert ["llvm.noalias" in a.data for a in kernel.arg_attrs.data] == [True, True, False, False]


def test_residual_that_the_conv_also_reads_is_not_overwritten():
    model, reference = residual_model(residual_is_the_conv_input=True)
    x = rand(1, 6, 9, 9)
    np.testing.assert_allclose(run(model, x), reference(x), rtol=1e-4, atol=1e-4)
    ops = model.transform(BUFFERIZED).func.body.block.ops
    assert not any("nasir.in_place" in o.attributes for o in ops if isinstance(o, nest.ComputeOp))


@pytest.mark.parametrize("axis", [1, 2, 3])
def test_concat_copies_and_kernels(axis):
    """Channel concats into the arena are memcpys, others kernels; both feed a following op."""
    xs = [rand(1, 3, 4, 5), rand(1, 2, 4, 5), rand(1, 3, 4, 5)]
    xs = [np.moveaxis(v, 1, axis).copy() for v in xs]

    def body(a, W):
        cat = nn.ConcatOp.new(a, axis)
        return [cat, nn.ReluOp.new(cat.result)]

    ref = np.maximum(np.concatenate(xs, axis), 0)
    np.testing.assert_allclose(run(build([v.shape for v in xs], body), *xs), ref, rtol=1e-4, atol=1e-4)


def _dense_block(hw: int, channels: int = 16, growth: int = 8, layers: int = 3):
    """A DenseNet block on an hw x hw image: layer k convolves (3x3, ReLU) the concat of the block's
    input and the layers before it; the block returns ReLU of the concat of all. Its Model and a
    torch reference."""
    x = rand(1, channels, hw, hw)
    ws = [rand(growth, channels + k * growth, 3, 3) * 0.2 for k in range(layers)]

    def body(a, W):
        ops = [nn.ReluOp.new(a[0])]
        feats = [ops[-1].result]
        for k, w in enumerate(ws):
            if len(feats) > 1:
                ops.append(nn.ConcatOp.new(feats, 1))
            ops.append(nn.Conv2DOp.new(ops[-1].result, W(f"w{k}", w), pads=(1,) * 4))
            ops.append(nn.ReluOp.new(ops[-1].result))
            feats.append(ops[-1].result)
        ops.append(nn.ConcatOp.new(feats, 1))
        return ops + [nn.SigmoidOp.new(ops[-1].result)]

    def reference(x):
        feats = [torch.relu(torch.tensor(x))]
        for w in ws:
            feats.append(torch.relu(F.conv2d(torch.cat(feats, 1), torch.tensor(w), padding=1)))
        return torch.sigmoid(torch.cat(feats, 1)).numpy()

    return build([x.shape], body), x, reference


@pytest.mark.parametrize("h,w,threads,also_3x3", [(7, 7, 1, False), (7, 7, 2, True), (14, 20, 2, False),
                                                   (5, 11, 1, False)])
def test_a_batch_norm_before_a_1x1_conv_transposes_its_tile_into_channel_blocks(h, w, threads, also_3x3):
    """DenseNet's bottleneck: concat -> batch norm -> ReLU -> 1x1 conv -> ReLU -> 3x3 conv. At AVX2
    the batch norm (not folded: it follows a concat) runs lanes along the row and a tile of 8
    channels, whose store transposes it into a channel-blocked result the 1x1 conv broadcasts
    from (`channel_transpose_schedule`; rows of 7, 20 = 8 + 8 + 4 and 11 points, their last
    vector masked); where a 3x3 conv reads the batch norm's result too, and at AVX-512, it stays
    NCHW. All match torch (float64), at 1 and 2 threads."""
    from nasir.lowering.pipeline import LLVM

    a, b = rand(1, 48, h, w), rand(1, 16, h, w)
    scale, shift, mean = rand(64), rand(64), rand(64)
    var = np.abs(rand(64)) + 0.5
    w1, w3, wx = rand(32, 64, 1, 1) * 0.2, rand(8, 32, 3, 3) * 0.2, rand(8, 64, 3, 3) * 0.2

    def body(args, W):
        cat = nn.ConcatOp.new(args, 1)
        bn = nn.BatchNormOp.new(cat.result, W("s", scale), W("h", shift), W("m", mean), W("v", var))
        relu = nn.ReluOp.new(bn.result)
        c1 = nn.Conv2DOp.new(relu.result, W("w1", w1))
        r1 = nn.ReluOp.new(c1.result)
        c3 = nn.Conv2DOp.new(r1.result, W("w3", w3), pads=(1,) * 4)
        ops = [cat, bn, relu, c1, r1, c3]
        if also_3x3:
            cx = nn.Conv2DOp.new(relu.result, W("wx", wx), pads=(1,) * 4)
            ops += [cx, nn.AddOp.new(c3.result, cx.result)]
        return ops

    model = build([a.shape, b.shape], body)
    scheduled = str(model.transform(str(LLVM.until("pad-planes"))).module)
    assert (f"tensor<1x8x{h}x{w}x8xf32>" in scheduled) == (lanes() == 8 and not also_3x3)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    y = torch.relu((torch.cat([t(a), t(b)], 1) - t(mean)[:, None, None]) / torch.sqrt(t(var) + 1e-5)[:, None, None]
                   * t(scale)[:, None, None] + t(shift)[:, None, None])
    expected = F.conv2d(torch.relu(F.conv2d(y, t(w1))), t(w3), padding=1)
    if also_3x3:
        expected = expected + F.conv2d(y, t(wx), padding=1)
    np.testing.assert_allclose(run(model, a, b, threads=threads), expected.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw", [8, 5])
def test_a_dense_block_computes_its_layers_where_its_concats_hold_them(hw):
    """nest-bufferize puts each input of a channel concat in the concat's bytes: on 8 x 8 (blocks
    of 64-byte multiples) every concat of the block is a view of one buffer of all its channels,
    which is the whole arena, and nothing is copied; on 5 x 5 the inputs whose blocks start off a
    64-byte boundary are copied. Both match torch, at 1 and 2 threads."""
    from nasir.lowering.pipeline import LLVM

    model, x, reference = _dense_block(hw)
    lowered = model.transform(str(LLVM.before("convert-loops-to-llvm")))
    copies = str(lowered.module).count("memref.copy")
    if hw == 8:
        assert copies == 0
        assert lowered.module.attributes["nasir.workspace_bytes"].value.data == (16 + 3 * 8) * hw * hw * 4
    else:
        assert 0 < copies < 2 + 3 + 4  # of the concats' 9 inputs, some in place
    expected = reference(x)
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run(model, x, threads=2), expected, rtol=1e-4, atol=1e-4)


def test_a_value_two_concats_hold_at_different_offsets_sits_in_one():
    """cat(a, b) and cat(b, a): a and b can each sit in only one of them; the other copies them."""
    x = rand(1, 16, 8, 8)

    def body(a, W):
        r, s = nn.ReluOp.new(a[0]), nn.SigmoidOp.new(a[0])
        ab, ba = nn.ConcatOp.new([r.result, s.result], 1), nn.ConcatOp.new([s.result, r.result], 1)
        return [r, s, ab, ba, nn.SubOp.new(ab.result, ba.result)]

    t = torch.tensor(x)
    ref = (torch.cat([torch.relu(t), torch.sigmoid(t)], 1) - torch.cat([torch.sigmoid(t), torch.relu(t)], 1)).numpy()
    np.testing.assert_allclose(run(build([x.shape], body), x), ref, rtol=1e-4, atol=1e-4)


def test_reshape_is_a_view_and_memory_is_reused():
    from nasir.lowering.pipeline import LLVM

    def body(a, W):
        ops = [nn.ReluOp.new(a[0])]
        for _ in range(4):
            ops.append(nn.ReluOp.new(ops[-1].result))
        ops.append(nn.ReshapeOp.new(ops[-1].result, (1, 4096)))
        ops.append(nn.SigmoidOp.new(ops[-1].result))
        return ops

    model = build([(1, 16, 16, 16)], body)
    # without fuse-epilogue (which would make the relus one nest): five 16 KiB intermediates live
    # one or two at a time, two slots suffice (17 KiB each: pad-planes gives the 16 x 16 planes the
    # relus read a padding row)
    lowered = model.transform(str(LLVM.before("convert-nest-to-loops").without("fuse-epilogue")))
    assert lowered.module.attributes["nasir.workspace_bytes"].value.data == 2 * 16 * 17 * 16 * 4
    assert "nn.reshape" not in str(lowered.module)
    x = rand(1, 16, 16, 16)
    ref = torch.sigmoid(torch.relu(torch.tensor(x)).reshape(1, 4096)).numpy()
    np.testing.assert_allclose(run(model, x), ref, rtol=1e-4, atol=1e-5)


def test_threads_give_identical_results():
    wt, x = rand(24, 8, 3, 3), rand(1, 8, 12, 12)
    model = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1, 1, 1, 1))])
    exe = compile_llvm(model.module, threads=1)
    one = exe(x)
    exe.threads = 2
    np.testing.assert_array_equal(exe(torch.tensor(x)), one)


@pytest.mark.parametrize("threads", [2, 3])
def test_main_runs_in_one_team_of_threads(threads):
    """With more than one thread @main runs in one team: each thread runs its chunk of every
    kernel's loop and waits at a barrier, and a kernel without a parallel loop (the classifier's
    gemm) is run by the first thread alone. Convs with a residual added in place, a global pool
    and the gemm match torch at 2 and 3 threads (3: chunks of unequal length), call after call."""
    from nasir.lowering.loops_to_llvm.parallel import team_safe
    from nasir.lowering.pipeline import LLVM

    w0, w1, wf, bf = rand(16, 8, 3, 3) * 0.3, rand(16, 16, 3, 3) * 0.3, rand(10, 16), rand(10)

    def body(a, W):
        c0 = nn.Conv2DOp.new(a[0], W("w0", w0), None, pads=(1,) * 4)
        r0 = nn.ReluOp.new(c0.result)
        c1 = nn.Conv2DOp.new(r0.result, W("w1", w1), None, pads=(1,) * 4)
        add = nn.AddOp.new(c1.result, r0.result)
        pool = nn.GlobalAvgPoolOp.new(add.result)
        flat = nn.ReshapeOp.new(pool.result, (1, 16))
        return [c0, r0, c1, add, pool, flat, nn.GemmOp.new(flat.result, W("fc", wf), W("fcb", bf), trans_b=True)]

    model = build([(1, 8, 12, 12)], body)
    kernels = [f for f in model.transform(str(LLVM.before("convert-loops-to-llvm"))).module.ops
               if isinstance(f, func.FuncOp) and f.sym_name.data != "main"]
    assert {team_safe(f) for f in kernels} == {True, False}  # both kinds are called
    x = rand(1, 8, 12, 12)
    r0 = F.relu(F.conv2d(torch.tensor(x), torch.tensor(w0), padding=1))
    pooled = (F.conv2d(r0, torch.tensor(w1), padding=1) + r0).mean((2, 3))
    want = (pooled @ torch.tensor(wf).T + torch.tensor(bf)).numpy()
    exe = compile_llvm(model.module, threads=threads)
    for _ in range(20):
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [2, 3])
def test_a_concat_copied_in_the_team_is_copied_before_its_buffers_are_reused(threads, tmp_path):
    """A reflect pad of a one-channel image concatenates the input (copied in @main) with its
    reflected rows, and the next kernel reuses the buffer of a row the copies read. Copied by every
    thread, a thread woken late for the call (calls 10 ms apart: the team's other threads sleep
    between them) read it overwritten: onnx's test_operator_pad at 2 threads, 19 calls of 20. The
    first thread copies alone, the team waiting for it before the next kernel. Against torch."""
    import time

    from onnx import helper
    from onnx_graphs import Initializers, save_graph

    from nasir.frontend.onnx_import import import_onnx

    shape, out, inits = (1, 1, 4, 6), (1, 1, 4 + 1 + 2, 6 + 2 + 3), Initializers()
    pads = inits.const("pads", np.array([0, 0, 1, 2, 0, 0, 2, 3], np.int64))
    save_graph(tmp_path / "pad.onnx", "pad", [helper.make_node("Pad", ["x", pads], ["y"], mode="reflect")], inits,
               shape, out)
    exe = compile_llvm(import_onnx(tmp_path / "pad.onnx").module, threads=threads)
    x = rand(*shape)
    want = F.pad(torch.tensor(x), (2, 3, 1, 2), mode="reflect").numpy()
    for _ in range(20):
        time.sleep(0.01)
        np.testing.assert_array_equal(exe(x), want)


def test_compiling_pauses_the_garbage_collector_and_turns_it_back_on():
    collections = []

    def record(phase, info):
        collections.append(phase)

    wt, x = rand(24, 8, 3, 3), rand(1, 8, 12, 12)
    model = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1, 1, 1, 1))])
    gc.callbacks.append(record)
    try:
        gc.set_threshold(1)  # would collect on almost every allocation
        compile_llvm(model.module)
    finally:
        gc.set_threshold(*THRESHOLDS)
        gc.callbacks.remove(record)
    # unpaused, this compile collects ~20,000 times; the few left are the call's own allocations
    assert collections.count("start") < 20 and gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()  # the inner block left it off
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


THRESHOLDS = gc.get_threshold()


def test_bad_inputs_are_rejected_before_native_code():
    model = build([(1, 2, 3, 3)], lambda a, W: [nn.ReluOp.new(a[0])])
    exe = compile_llvm(model.module)
    with pytest.raises(RuntimeInputError, match="shape"):
        exe(np.zeros((1, 2, 3), np.float32))
    with pytest.raises(RuntimeInputError, match="dtype"):
        exe(np.zeros((1, 2, 3, 3), bool))
    with pytest.raises(RuntimeInputError, match="input"):
        exe()
    x = np.asfortranarray(rand(1, 2, 3, 3)).astype(np.float64)
    np.testing.assert_allclose(exe(x), np.maximum(x, 0), rtol=1e-6)


def test_save_load_round_trip(tmp_path):
    import nasir.runtime

    wt, x = rand(4, 3, 3, 3), rand(1, 3, 7, 7)
    model = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1, 1, 1, 1))])
    exe = compile_llvm(model.module)
    exe.save(tmp_path / "conv")
    loaded = nasir.runtime.load(tmp_path / "conv", threads=2)
    np.testing.assert_allclose(loaded(x), exe(x), rtol=0, atol=0)


@pytest.mark.parametrize("c,groups,h,w,k,pad", [(8, 2, 9, 56, 3, 1), (8, 2, 5, 24, 3, 1), (4, 1, 6, 19, 3, 1),
                                                 (8, 2, 7, 25, 3, 1), (8, 8, 4, 20, 1, 0), (6, 3, 3, 40, 5, 2)])
def test_last_tile_of_a_row_runs_on_narrower_vectors(c, groups, h, w, k, pad):
    """A spatial conv whose rows end in a tail of at most half a vector (56 = 3 x 16 + 8, 24,
    19 = 16 + 3, 40 = 2 x 16 + 8 with a 5x5 window) computes its last tile on vectors of the tail's
    next power of two (8, 4) lanes; 25 = 16 + 9 keeps 16. Padded or not (the 1x1 conv's last tile
    has no version of its own), against torch."""
    from nasir.lowering.loops_to_llvm.llvm_ir import to_llvm_ir
    from nasir.lowering.pipeline import LLVM

    wt, x = rand(c, c // groups, k, k), rand(1, c, h, w)
    model = build([x.shape], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", wt), pads=(pad,) * 4, groups=groups).named("conv")])
    width = lanes()
    assert scheduled_nests(model)["conv"].get_schedule().vector == "ow.i"
    tail = w % width
    narrow = max(4, 1 << (tail - 1).bit_length()) if tail else width
    text = to_llvm_ir(model.transform(str(LLVM)).module)
    # the FMAs' widths (without mask registers a row's last lanes are also stored in smaller pieces)
    narrower = {lanes for lanes in (2, 4, 8) if lanes < width and f'"llvm.fma.v{lanes}f32"' in text}
    assert narrower == ({narrow} if narrow <= width // 2 else set())
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding=pad, groups=groups)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [48, 38, 34])
def test_average_pool_counts_the_lanes_of_a_narrower_last_tile(width):
    """A padded average pool (count_include_pad=False) whose output rows end in a tail of 8, 3 or 1
    points, the last tile on narrower vectors: its in-bounds counts are those lanes'."""
    x = rand(1, 3, 7, width)
    model = build([x.shape], lambda a, W: [nn.AvgPoolOp.new(a[0], (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=True)])
    ref = F.avg_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(run(model, x), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_llvm_ir_of_a_conv_has_vector_types():
    from nasir.lowering.loops_to_llvm.llvm_ir import optimize, to_llvm_ir
    from nasir.lowering.pipeline import LLVM
    from nasir.lowering.target import resolve_target

    wt = rand(32, 16, 3, 3)
    model = build([(1, 16, 20, 20)], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1, 1, 1, 1))])
    text = to_llvm_ir(model.transform(str(LLVM)).module)
    width = resolve_target(None).lanes
    assert f"<{width} x float>" in text
    assert "noalias" in text
    assert f"<{width} x float>" in str(optimize(text, resolve_target(None)))


def test_unsupported_schedule_names_the_nest():
    from nasir.dialects import nest
    from nasir.errors import LoweringError

    wt = rand(4, 3, 3, 3)
    model = build([(1, 3, 6, 6)], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt)).named("conv1")])
    lowered = model.transform("convert-nn-to-nest")
    op = next(o for o in lowered.module.walk() if isinstance(o, nest.ComputeOp))
    # a big parallel loop (oh) inside the reduction loops: neither vectorised nor unrolled
    op.properties["schedule"] = schedule.Schedule(order=["n", "co", "ci", "oh", "kh", "kw", "ow"]).to_attr()
    with pytest.raises(LoweringError, match="conv1.*'oh'"):
        compile_llvm(lowered.module)


@pytest.mark.parametrize("layout", ["OIHW8o", "OIHW4i8o", "HWIO"])
def test_packed_weights_are_packed_at_compile_time(layout):
    """A schedule that packs a weight reads it in that layout (pack-weights), same numbers as torch."""
    wt, x = rand(16, 8, 3, 3), rand(1, 8, 9, 9)
    model = build([(1, 8, 9, 9)], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1,) * 4).named("conv")])
    packed = model.transform(f'convert-nn-to-nest,pack{{operand=1 layout="{layout}"}}')
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding=1).numpy()
    np.testing.assert_allclose(run(packed, x), want, rtol=1e-4, atol=1e-4)


def test_packed_activations_are_refused_not_ignored():
    """A packed layout the lowering cannot produce must be an error naming the layer, never ignored."""
    from nasir.errors import LoweringError

    wt, x = rand(8, 8, 3, 3), rand(1, 8, 8, 8)
    model = build([(1, 8, 8, 8)], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1,) * 4).named("conv")])
    packed = model.transform('convert-nn-to-nest,pack{operand=0 layout="NCHW8c"}')
    with pytest.raises(LoweringError, match="nest 'conv'.*packed activations"):
        compile_llvm(packed.module)


def test_pack_made_stale_by_an_architecture_transform_is_an_error():
    """`pack` then `depthwise` leaves a 4i block on a weight with one input channel: the compile
    names the nest and the block instead of failing inside numpy (found by the property test)."""
    from nasir.errors import LoweringError

    wt = rand(8, 8, 3, 3)
    model = build([(1, 8, 8, 8)], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1,) * 4).named("conv")])
    stale = model.transform('convert-nn-to-nest,pack{operand=1 layout=OIHW4i4o},depthwise')
    with pytest.raises(LoweringError, match="nest 'conv'.*block 4i"):
        compile_llvm(stale.module)


STEM_POOLS = [  # (c, o, h, k, stride, pad, pool k, pool stride, pool pad, ceil_mode)
    (3, 32, 29, 7, 2, 3, 3, 2, 1, False),  # ResNet's stem and max pool on an odd image: 15 -> 8
    (3, 48, 20, 3, 1, 1, 2, 2, 0, False),  # three channel blocks, 2x2 pool
    (4, 16, 17, 3, 2, 1, 3, 2, 0, True),  # one block, ceil mode: 9 -> 4
    (5, 16, 17, 3, 1, 1, 3, 1, 1, False),  # a 17-point row: 16-point tiles and a 1-point tail
]


def scheduled_nests(model) -> dict[str, nest.ComputeOp]:
    """The nests of `model` by layer after the llvm pipeline's nest passes up to pack-activations."""
    from nasir.lowering.pipeline import LLVM

    scheduled = model.transform(str(LLVM.before("pack-weights")))
    return {op.layer_name: op for op in scheduled.module.walk() if isinstance(op, nest.ComputeOp)}


def with_winograd(model, mode: str = "always"):
    """`model` scheduled by default-schedule{winograd=mode}; "always": its convs with a wide strided
    row window run as Winograd at either width (by default only where a register tile holds two
    Winograd tiles: AVX-512's, see `winograd_for`), so the kernel runs on every machine."""
    from nasir.lowering.pipeline import LLVM

    return model.transform(str(LLVM.until("default-schedule").with_options("default-schedule", winograd=mode)))


def stem_and_pool(c, o, h, k, stride, pad, pk, ps, pp, ceil, threads=1):
    """nasir's and torch's conv -> ReLU -> max pool, and the nests' result types and lanes after
    default-schedule and pack-activations."""
    wt, bias, x = rand(o, c, k, k), rand(o), rand(1, c, h, h)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w", wt), W("b", bias), strides=(stride,) * 2, pads=(pad,) * 4).named("conv")
        relu = nn.ReluOp.new(conv.results[0]).named("relu")
        return [conv, relu, nn.MaxPoolOp.new(relu.results[0], (pk, pk), strides=(ps, ps), pads=(pp,) * 4,
                                             ceil_mode=ceil).named("pool")]

    model = build([(1, c, h, h)], body)
    nests = {name: (list(op.result.type.get_shape()), op.get_schedule().vector)
             for name, op in scheduled_nests(model).items()}
    y = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(bias), stride, pad).relu()
    want = F.max_pool2d(y, pk, ps, pp, ceil_mode=ceil).numpy()
    return run(model, x, threads=threads), want, nests


@pytest.mark.parametrize("case", STEM_POOLS)
def test_conv_into_max_pool_stores_channel_blocks(case):
    """A conv with lanes over output channels feeding only a max pool stores NCHW16c
    (pack-activations) and the pool reads it with lanes over channels; same numbers as torch."""
    got, want, nests = stem_and_pool(*case)
    c, o, *_ = case
    conv_shape, conv_lanes = nests["conv"]
    assert conv_lanes == "co.i" and conv_shape[1:2] + conv_shape[4:] == [o // lanes(), lanes()], nests
    assert nests["pool"][1] == "c.i" and len(nests["pool"][0]) == 4, nests
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_channel_blocked_pool_on_two_threads():
    got, want, _ = stem_and_pool(*STEM_POOLS[0], threads=2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


ROW_FUSED_POOLS = [  # as STEM_POOLS, with channel blocks for the fused kernel's threads to take
    (3, 128, 23, 7, 2, 3, 3, 2, 1, False),  # a 7x7 stride-2 stem (8 blocks of 16): 12 -> 6
    (5, 64, 17, 3, 1, 1, 3, 1, 1, False),  # 2 blocks of 32, 17-point rows (a tail), stride-1 pool
    (4, 64, 17, 3, 2, 1, 3, 2, 0, True),  # ceil mode: the last window reaches past the rows
    (3, 96, 25, 5, 2, 2, 2, 2, 0, False),  # 6 blocks, 2x2 pool
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ROW_FUSED_POOLS)
def test_max_pool_kernel_computes_its_producers_rows(case, threads):
    """A max pool that alone reads a conv with outer loops over channel blocks and rows runs in
    one kernel with it (FUSE_ROWS): threads take channel blocks, the conv's rows are computed
    as the pool's rows need them; @main makes one call. torch's numbers."""
    from nasir.dialects.attributes import FUSE_ROWS, LAYER
    from nasir.lowering.pipeline import LLVM

    got, want, _ = stem_and_pool(*case, threads=threads)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    c, o, h, k, stride, pad, pk, ps, pp, ceil = case
    model = build([(1, c, h, h)], lambda a, W: [
        conv := nn.Conv2DOp.new(a[0], W("w", rand(o, c, k, k)), strides=(stride,) * 2, pads=(pad,) * 4).named("conv"),
        nn.MaxPoolOp.new(conv.results[0], (pk, pk), strides=(ps, ps), pads=(pp,) * 4, ceil_mode=ceil).named("pool")])
    assert FUSE_ROWS.on(scheduled_nests(model)["pool"])
    lowered = model.transform(str(LLVM.before("convert-loops-to-llvm")))
    calls = [op for op in lowered.module.walk() if isinstance(op, func.CallOp)]
    assert [LAYER.get(call) for call in calls] == ["conv+pool"]


WINOGRAD_CONVS = [  # (c, o, h, w, k, stride, pad, row dilation, groups): convs that run as 1-D Winograd
    (3, 64, 224, 224, 7, 2, 3, 1, 1),  # ResNet's stem: F(4, 4) and F(4, 3), 13 products for 28
    (3, 32, 29, 31, 7, 2, 3, 1, 1),  # odd image: 15 x 16 outputs, stored NCHW (transposed tiles)
    (4, 16, 13, 13, 7, 2, 3, 1, 1),  # 7 outputs a row: the second Winograd tile runs past it
    (3, 48, 20, 21, 8, 2, 3, 1, 1),  # an even window: two phases of 4 taps, F(4, 4) twice
    (5, 16, 17, 18, 4, 1, 2, 1, 1),  # stride 1: one phase, F(4, 4), run one product at a time
    (64, 64, 32, 32, 3, 1, 1, 1, 1),  # ResNet's 3x3 convs: F(4, 3), 6 products for 12, a row of 8 tiles
    (8, 16, 30, 50, 3, 1, 1, 1, 1),  # 13 tiles a row: with AVX2 no count up to 12 makes whole rows
    (16, 32, 14, 14, 3, 1, 1, 1, 1),  # 14 outputs a row: its last tile runs past it
    (8, 16, 12, 9, 3, 1, 1, 2, 1),  # a 3x3 window with dilated rows, 9 outputs a row
    (3, 16, 19, 19, 7, 2, 3, 2, 1),  # dilated rows (kh), the row window itself undilated
    (128, 128, 32, 32, 3, 1, 1, 1, 2),  # ResNeXt-29's first grouped convs: 2 groups of 64 channels
    (32, 64, 16, 20, 3, 1, 1, 1, 4),  # 4 groups of 8 -> 16 channels (AVX-512: a vector a group)
    (6, 32, 29, 31, 7, 2, 3, 1, 2),  # a grouped stem: two phases, each group's 16 channels
    (128, 128, 12, 16, 3, 1, 1, 1, 1),  # rows of 4 tiles: a register tile of 2 rows (`winograd_rows`)
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c,o,h,w,k,stride,pad,dil,groups", WINOGRAD_CONVS)
def test_winograd_conv(c, o, h, w, k, stride, pad, dil, groups, threads):
    """Convs with a wide strided row window take the Winograd kernel (`nasir.winograd`) and give
    torch's numbers, bias and ReLU included. Its transforms run in parallel loops, so that each
    thread of @main's team runs the kernel (`team_safe`), not the first alone. Weights are scaled
    by 1/sqrt(fan-in), as the fuzzer's and trained convs' are: with N(0, 1) weights a 64-channel
    3x3 conv's outputs have a deviation of 24, and Winograd's rounding (the transforms' sums, about
    1e-4 of that) exceeds atol 1e-4 at outputs near zero."""
    from nasir.dialects.attributes import WINOGRAD
    from nasir.lowering.loops_to_llvm.parallel import team_safe
    from nasir.lowering.pipeline import LLVM

    wt, b, x = rand(o, c // groups, k, k) / (c // groups * k * k) ** 0.5, rand(o), rand(1, c, h, w)
    pads = (dil * (k // 2), pad, dil * (k // 2), pad)
    model = with_winograd(build([(1, c, h, w)], lambda a, W: [
        conv := nn.Conv2DOp.new(a[0], W("w", wt), W("b", b), (stride, stride), pads, (dil, 1), groups).named("conv"),
        nn.ReluOp.new(conv.results[0]).named("relu")]))
    assert WINOGRAD.on(scheduled_nests(model)["conv"])
    loops = model.transform(str(LLVM.after("default-schedule").before("convert-loops-to-llvm"))).module
    kernels = [f for f in loops.ops if isinstance(f, func.FuncOp) and f.sym_name.data != "main"]
    assert len(kernels) == 1 and team_safe(kernels[0])
    want = F.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), stride, (pads[0], pad), (dil, 1), groups).relu()
    np.testing.assert_allclose(run(model, x, threads=threads), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,stride,groups,batch", [(3, 2, 1, 1), (5, 2, 1, 1), (7, 2, 6, 1), (7, 2, 1, 2)])
def test_winograd_is_kept_for_wide_strided_windows(k, stride, groups, batch):
    """A 3x3 stride-2 conv (9 products for 12), a 5x5 stride-2 one (11 for 20), a depthwise stem
    (no reduction over input channels) and a batch of 2 run direct, even where Winograd is asked
    for wherever it applies."""
    from nasir.dialects.attributes import WINOGRAD

    model = build([(batch, 6, 32, 32)], lambda a, W: [nn.Conv2DOp.new(
        a[0], W("w", rand(48, 6 // groups, k, k)), strides=(stride,) * 2, pads=(k // 2,) * 4, groups=groups).named("conv")])
    assert not WINOGRAD.on(scheduled_nests(with_winograd(model))["conv"])


@pytest.mark.parametrize("mode", ["auto", "always", "never"])
def test_winograd_runs_where_a_broadcast_feeds_two_tiles(mode):
    """ResNet's stem (7x7 stride 2, 3 -> 64 channels) by default runs as Winograd only where a
    register tile holds two Winograd tiles (13 x 2 accumulators: AVX-512's 32 registers), not with
    AVX2's 16, where each broadcast would feed one FMA; `winograd` "always" and "never" override.
    Either way torch's numbers."""
    from nasir.dialects.attributes import WINOGRAD

    wt, x = rand(64, 3, 7, 7), rand(1, 3, 40, 40)
    scheduled = with_winograd(build([(1, 3, 40, 40)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", wt), strides=(2, 2), pads=(3,) * 4).named("stem")]), mode)
    want = {"auto": lanes() == 16, "always": True, "never": False}[mode]
    assert WINOGRAD.on(scheduled_nests(scheduled)["stem"]) == want
    np.testing.assert_allclose(run(scheduled, x), F.conv2d(torch.tensor(x), torch.tensor(wt), None, 2, 3).numpy(),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,o,h,groups", [(64, 64, 32, 1), (64, 64, 16, 1), (64, 64, 8, 1), (64, 64, 7, 1),
                                          (32, 32, 32, 1), (128, 128, 28, 1), (128, 128, 16, 1), (256, 256, 14, 1),
                                          (128, 32, 32, 1), (128, 128, 32, 2), (128, 128, 32, 4)])
def test_a_3x3_conv_runs_as_winograd_where_it_pays(c, o, h, groups):
    """By default a 3x3 stride-1 conv runs as Winograd, one product at a time, where its
    transformed weights U (c x o x 3 x 6 floats) fit the target's L2 or, where it issues one vector
    FMA a cycle (Zen 4's 16-lane ones) and a register tile is one row, L3 feeds what of U L2 does
    not hold (a vector of U for each Winograd tile of a register tile) at `l3_bytes_per_fma` (128
    channels at 28 x 28: 1.0 bytes an FMA; 256 at 14 x 14, 2 rows: L2 only), it has 64 input channels and
    4 vectors of output channels (DenseNet's 128 -> 32 with AVX2 only), and a register tile holds
    7 Winograd tiles beside 4 more registers: rows of at least 28 points, or, for rows of at least
    4 tiles and 64 output channels, as many rows as make 7 tiles and divide the image (64
    channels at 16 x 16: 2 rows of 4 tiles; not at 8 x 8); a grouped conv counts
    the channels of a group (ResNeXt-29's 2 groups of 64, not 4 groups of 32). Either way torch's
    numbers (weights scaled by 1/sqrt(fan-in), see `test_winograd_conv`)."""
    from nasir.dialects.attributes import WINOGRAD
    from nasir.lowering.target import resolve_target

    ci, co = c // groups, o // groups
    wt, x = rand(o, ci, 3, 3) / (9 * ci) ** 0.5, rand(1, c, h, h)
    model = build([(1, c, h, h)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", wt), pads=(1,) * 4, groups=groups).named("conv")])
    scheduled = with_winograd(model, "auto")
    target = resolve_target(None)
    tiles, registers = -(-h // 4), 32 if lanes() == 16 else 16
    several = [r for r in range(2, h + 1) if h % r == 0 and 7 <= r * tiles <= registers - 4]
    rows = tiles >= 7 or (tiles >= 4 and co >= 64 and bool(several))
    u = 4 * ci * co * 3 * 6
    fast = (u <= target.l2_bytes if target.fmas_per_cycle > 1 or tiles < 7
            else (u - target.l2_bytes) / u * 4 * lanes() / tiles <= target.l3_bytes_per_fma)
    want = ci >= 64 and co >= 4 * lanes() and fast and rows
    assert WINOGRAD.on(scheduled_nests(scheduled)["conv"]) == want
    np.testing.assert_allclose(run(scheduled, x), F.conv2d(torch.tensor(x), torch.tensor(wt), None, 1, 1, 1, groups).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_winograd_option_names_its_modes():
    """A mode default-schedule does not know is refused by name."""
    from nasir.errors import PassError

    model = build([(1, 3, 16, 16)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", rand(16, 3, 7, 7)), strides=(2, 2), pads=(3,) * 4).named("stem")])
    with pytest.raises(PassError, match="winograd='sometimes'; expected one of auto, always, never"):
        with_winograd(model, "sometimes")


def test_winograd_scratch_outlives_the_fused_pool():
    """The stem's scratch lives until its max pool, whose kernel computes the stem's rows: a conv
    placed between them in @main (whose result the pool's output is added to) keeps its bytes."""
    from nasir.dialects.attributes import FUSE_ROWS, WINOGRAD

    ws, wd, x = rand(32, 3, 7, 7), rand(32, 3, 1, 1), rand(1, 3, 64, 64)

    def body(a, W):
        stem = nn.Conv2DOp.new(a[0], W("ws", ws), strides=(2, 2), pads=(3,) * 4).named("stem")
        side = nn.Conv2DOp.new(a[0], W("wd", wd), strides=(4, 4)).named("side")
        pool = nn.MaxPoolOp.new(stem.results[0], (3, 3), strides=(2, 2), pads=(1,) * 4).named("pool")
        return [stem, side, pool, nn.AddOp.new(pool.results[0], side.results[0]).named("add")]

    model = with_winograd(build([(1, 3, 64, 64)], body))
    nests = scheduled_nests(model)
    assert WINOGRAD.on(nests["stem"]) and FUSE_ROWS.on(nests["pool"])
    xt = torch.tensor(x)
    want = F.max_pool2d(F.conv2d(xt, torch.tensor(ws), None, 2, 3), 3, 2, 1) + F.conv2d(xt, torch.tensor(wd), None, 4)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


def test_tensor_with_a_broadcast_reader_stays_nchw():
    """A conv output that a second conv also reads (by broadcasts over its input channels) is
    not packed, and the max pool beside it keeps lanes along its rows."""
    # weights scaled by 1/sqrt(fan-in): outputs of order 1, where float32 sums in any order agree
    # within the tolerance (unscaled, an output of -0.17 summed from terms near 200 did not)
    w1, w2, x = rand(32, 3, 7, 7) / 147 ** 0.5, rand(32, 32, 3, 3) / 288 ** 0.5, rand(1, 3, 29, 29)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w1", w1), strides=(2, 2), pads=(3,) * 4).named("conv")
        pool = nn.MaxPoolOp.new(conv.results[0], (3, 3), strides=(2, 2), pads=(1,) * 4).named("pool")
        conv2 = nn.Conv2DOp.new(conv.results[0], W("w2", w2), strides=(2, 2), pads=(1,) * 4).named("conv2")
        return [conv, pool, conv2, nn.AddOp.new(pool.results[0], conv2.results[0]).named("add")]

    model = build([(1, 3, 29, 29)], body)
    nests = scheduled_nests(model)
    conv, pool = nests["conv"], nests["pool"]
    assert list(conv.result.type.get_shape()) == [1, 32, 15, 15]
    assert pool.get_schedule().vector.startswith("ow")
    y = F.conv2d(torch.from_numpy(x), torch.from_numpy(w1), stride=2, padding=3)
    want = F.max_pool2d(y, 3, 2, 1) + F.conv2d(y, torch.from_numpy(w2), stride=2, padding=1)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("residual", [False, True])
def test_conv_into_global_pool_packs_unless_its_epilogue_reads_nchw(residual):
    """A 7x7 conv (lanes over channels) read only by a global average pool is stored NCHW16c;
    with a residual add in its epilogue it stays NCHW (untransposed, its tile would read the
    NCHW residual lane by lane). Both against torch."""
    wt, bias, x = rand(32, 32, 3, 3), rand(32), rand(1, 32, 7, 7)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w", wt), W("b", bias), pads=(1,) * 4).named("conv")
        ops = [conv]
        if residual:
            ops.append(nn.AddOp.new(conv.results[0], a[0]).named("add"))
        ops.append(nn.ReluOp.new(ops[-1].results[0]).named("relu"))
        return ops + [nn.GlobalAvgPoolOp.new(ops[-1].results[0]).named("gap")]

    model = build([(1, 32, 7, 7)], body)
    conv = scheduled_nests(model)["conv"]
    assert list(conv.result.type.get_shape()) == ([1, 32, 7, 7] if residual else [1, 32 // lanes(), 7, 7, lanes()])
    y = F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(bias), padding=1)
    y = (y + torch.from_numpy(x) if residual else y).relu()
    np.testing.assert_allclose(run(model, x), y.mean((2, 3), keepdim=True).numpy(), rtol=1e-4, atol=1e-4)


def test_fused_rows_need_a_producing_nest():
    """`nasir.fuse_rows` on a max pool of the function's input (set by hand: default-schedule sets
    it only where a nest writes the input for the pool alone) is refused with a LoweringError."""

    from nasir.dialects.attributes import FUSE_ROWS
    from nasir.errors import LoweringError
    from nasir.lowering.passes import run_pipeline

    model = build([(1, 16, 9, 9)], lambda a, W: [nn.MaxPoolOp.new(a[0], (3, 3), strides=(2, 2)).named("pool")])
    run_pipeline(model.module, "convert-nn-to-nest,default-schedule")
    [pool] = [op for op in model.module.walk() if isinstance(op, nest.ComputeOp)]
    FUSE_ROWS.set(pool, True)
    with pytest.raises(LoweringError, match="pool.*needs its input written by a nest"):
        run_pipeline(model.module, "nest-bufferize,convert-nest-to-loops")


DEPTHWISE_CHAINS = [  # (channels, image, depthwise stride, depthwise kernel)
    (32, 29, 1, 3),  # stem 15 -> pool 8: 8-point rows, two channel blocks
    (48, 23, 1, 3),  # three blocks, 6-point rows (tiles of 6)
    (16, 27, 2, 3),  # a stride-2 depthwise conv: 7 -> 4, one block
    (32, 41, 1, 5),  # a 5x5 window on 11-point rows (tiles of 11)
]


def depthwise_chain(c, h, stride, k, threads=1):
    """stem conv -> ReLU -> max pool -> depthwise conv -> ReLU -> depthwise conv + pool output ->
    ReLU -> dense 3x3 conv, nasir's and torch's results and the scheduled nests (a ResNet stage
    after `depthwise`; the residual add only when the shapes allow it)."""
    # weights scaled by 1/sqrt(fan-in): values stay near 1 through the five layers
    w0, b0, x = rand(c, 3, 7, 7) / 12, rand(c), rand(1, 3, h, h)
    wa, ba, wb, bb = rand(c, 1, k, k) / k, rand(c), rand(c, 1, k, k) / k, rand(c)
    wd = rand(8, c, 3, 3) / (3 * c ** 0.5)
    residual = stride == 1

    def body(a, W):
        stem = nn.Conv2DOp.new(a[0], W("w0", w0), W("b0", b0), strides=(2, 2), pads=(3,) * 4).named("stem")
        relu0 = nn.ReluOp.new(stem.results[0])
        pool = nn.MaxPoolOp.new(relu0.results[0], (3, 3), strides=(2, 2), pads=(1,) * 4).named("pool")
        dwa = nn.Conv2DOp.new(pool.results[0], W("wa", wa), W("ba", ba), strides=(stride,) * 2,
                              pads=(k // 2,) * 4, groups=c).named("dwa")
        relua = nn.ReluOp.new(dwa.results[0])
        dwb = nn.Conv2DOp.new(relua.results[0], W("wb", wb), W("bb", bb), pads=(k // 2,) * 4, groups=c).named("dwb")
        ops = [stem, relu0, pool, dwa, relua, dwb]
        if residual:
            ops.append(nn.AddOp.new(dwb.results[0], pool.results[0]))
        ops.append(nn.ReluOp.new(ops[-1].results[0]))
        return ops + [nn.Conv2DOp.new(ops[-1].results[0], W("wd", wd), pads=(1,) * 4).named("dense")]

    model = build([(1, 3, h, h)], body)
    t = {name: torch.from_numpy(v) for name, v in dict(w0=w0, b0=b0, x=x, wa=wa, ba=ba, wb=wb, bb=bb, wd=wd).items()}
    y = F.max_pool2d(F.conv2d(t["x"], t["w0"], t["b0"], 2, 3).relu(), 3, 2, 1)
    z = F.conv2d(F.conv2d(y, t["wa"], t["ba"], stride, k // 2, groups=c).relu(), t["wb"], t["bb"], 1, k // 2, groups=c)
    want = F.conv2d((z + y if residual else z).relu(), t["wd"], padding=1).numpy()
    return run(model, x, threads=threads), want, scheduled_nests(model)


@pytest.mark.parametrize("case", DEPTHWISE_CHAINS)
def test_depthwise_convs_run_on_channel_blocks(case):
    """Depthwise convs whose input pack-activations stores NCHW16c run lanes over channels: the
    pool's output and the first depthwise conv's are channel-blocked, the second conv writes NCHW
    for the dense conv that reads it along its rows (a transposed tile) and adds the blocked pool
    output before transposing. Odd images, 1-3 channel blocks, stride 2, a 5x5 window; torch's
    numbers."""
    got, want, nests = depthwise_chain(*case)
    c, *_ = case
    shapes = {name: list(op.result.type.get_shape()) for name, op in nests.items()}
    for name in ("pool", "dwa"):
        assert shapes[name][1:2] + shapes[name][4:] == [c // lanes(), lanes()], shapes
    assert len(shapes["dwb"]) == 4, shapes
    assert nests["dwa"].get_schedule().vector == nests["dwb"].get_schedule().vector == "g.i"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_depthwise_chain_on_two_threads():
    got, want, _ = depthwise_chain(*DEPTHWISE_CHAINS[0], threads=2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


DOWNSAMPLE_STAGES = [  # (channels, channel multiplier, image)
    (16, 2, 29),  # stem 15 -> pool 8 -> 4 x 4: two channel blocks after the multiplier
    (32, 2, 45),  # pool 12 -> 6 x 6: rows of 6 (tiles of 3 or 2 points)
    (16, 4, 29),  # four output channels an input channel
    (8, 3, 29),  # a multiplier that divides no vector width: lanes along the rows
]


def downsample_stage(c, m, h, threads=1):
    """stem conv -> ReLU -> max pool -> a stride-2 depthwise conv with a channel multiplier (c -> m c
    channels) -> ReLU -> depthwise conv + a strided 1x1 conv of the pool's output -> ReLU -> dense
    3x3 conv: the first block of a ResNet stage after `depthwise`. nasir's and torch's results and
    the scheduled nests."""
    w0, b0, x = rand(c, 3, 7, 7) / 12, rand(c), rand(1, 3, h, h)
    wa, ba, wb, bb = rand(m * c, 1, 3, 3) / 3, rand(m * c), rand(m * c, 1, 3, 3) / 3, rand(m * c)
    ws, wd = rand(m * c, c, 1, 1) / c ** 0.5, rand(8, m * c, 3, 3) / (3 * (m * c) ** 0.5)

    def body(a, W):
        stem = nn.Conv2DOp.new(a[0], W("w0", w0), W("b0", b0), strides=(2, 2), pads=(3,) * 4).named("stem")
        relu0 = nn.ReluOp.new(stem.results[0])
        pool = nn.MaxPoolOp.new(relu0.results[0], (3, 3), strides=(2, 2), pads=(1,) * 4).named("pool")
        dwa = nn.Conv2DOp.new(pool.results[0], W("wa", wa), W("ba", ba), strides=(2, 2), pads=(1,) * 4,
                              groups=c).named("dwa")
        relua = nn.ReluOp.new(dwa.results[0])
        dwb = nn.Conv2DOp.new(relua.results[0], W("wb", wb), W("bb", bb), pads=(1,) * 4, groups=m * c).named("dwb")
        short = nn.Conv2DOp.new(pool.results[0], W("ws", ws), strides=(2, 2)).named("short")
        add = nn.AddOp.new(dwb.results[0], short.results[0])
        relu = nn.ReluOp.new(add.results[0])
        dense = nn.Conv2DOp.new(relu.results[0], W("wd", wd), pads=(1,) * 4).named("dense")
        return [stem, relu0, pool, dwa, relua, dwb, short, add, relu, dense]

    model = build([(1, 3, h, h)], body)
    t = {name: torch.from_numpy(v) for name, v in dict(w0=w0, b0=b0, x=x, wa=wa, ba=ba, wb=wb, bb=bb, ws=ws,
                                                        wd=wd).items()}
    y = F.max_pool2d(F.conv2d(t["x"], t["w0"], t["b0"], 2, 3).relu(), 3, 2, 1)
    z = F.conv2d(F.conv2d(y, t["wa"], t["ba"], 2, 1, groups=c).relu(), t["wb"], t["bb"], 1, 1, groups=m * c)
    want = F.conv2d((z + F.conv2d(y, t["ws"], stride=2)).relu(), t["wd"], padding=1).numpy()
    return run(model, x, threads=threads), want, scheduled_nests(model)


@pytest.mark.parametrize("case", DOWNSAMPLE_STAGES)
def test_a_channel_multiplier_keeps_the_stage_on_channel_blocks(case):
    """A stride-2 depthwise conv with a channel multiplier m (each input channel g feeds output
    channels m g .. m g + m - 1) runs lanes over g with its m output channels in the register tile,
    and stores channel-blocked: each point's m accumulators interleaved into m vectors of
    consecutive channels. The strided 1x1 conv's subsample runs lanes over channels too, so the
    pool's output, the multiplier's, the subsample's and the shortcut's are all stored
    channel-blocked and the depthwise conv after them keeps its lanes over channels. At 16 lanes
    the strided conv is not subsampled (`TRANSPOSE_LANES`) and the layouts are the cost model's.
    A multiplier that divides no vector width (3) runs lanes along rows. torch's numbers."""
    from nasir.lowering.schedule.schedules import TRANSPOSE_LANES

    got, want, nests = downsample_stage(*case)
    c, m, _ = case
    shapes = {name: list(op.result.type.get_shape()) for name, op in nests.items()}
    if lanes() % m:
        assert nests["dwa"].get_schedule().vector == "ow"
    elif lanes() == TRANSPOSE_LANES:
        for name in ("pool", "dwa", "short.subsample", "short"):
            assert shapes[name][4:] == [lanes()], shapes
        assert [nests[n].get_schedule().vector for n in ("dwa", "short.subsample", "dwb")] == ["g.i", "c.i", "g.i"]
        assert nests["dwa"].get_schedule().unroll["co"] == m
    else:
        assert "short.subsample" not in nests
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_channel_multiplier_on_two_threads():
    got, want, _ = downsample_stage(*DOWNSAMPLE_STAGES[0], threads=2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_stem_before_depthwise_convs_writes_channel_blocks():
    """ResNet-34's first stage after `depthwise` (cifar10): the stem (3 -> 64, 3x3, 32 x 32), which
    the cost model alone gives lanes along its rows, takes its channel plan so that its result is
    stored channel-blocked, and the depthwise convs of the block read it 8 or 16 channels a load;
    the block's residual add reads it blocked too. torch's numbers."""
    w0, b0, x = rand(64, 3, 3, 3) / 5, rand(64), rand(1, 3, 32, 32)
    wa, wb, wd = rand(64, 1, 3, 3) / 3, rand(64, 1, 3, 3) / 3, rand(8, 64, 3, 3) / 24

    def body(a, W):
        stem = nn.Conv2DOp.new(a[0], W("w0", w0), W("b0", b0), pads=(1,) * 4).named("stem")
        relu0 = nn.ReluOp.new(stem.results[0])
        dwa = nn.Conv2DOp.new(relu0.results[0], W("wa", wa), pads=(1,) * 4, groups=64).named("dwa")
        relua = nn.ReluOp.new(dwa.results[0])
        dwb = nn.Conv2DOp.new(relua.results[0], W("wb", wb), pads=(1,) * 4, groups=64).named("dwb")
        add = nn.AddOp.new(dwb.results[0], relu0.results[0])
        relub = nn.ReluOp.new(add.results[0])
        return [stem, relu0, dwa, relua, dwb, add, relub,
                nn.Conv2DOp.new(relub.results[0], W("wd", wd), pads=(1,) * 4).named("dense")]

    model = build([(1, 3, 32, 32)], body)
    nests = scheduled_nests(model)
    assert [nests[n].get_schedule().vector for n in ("stem", "dwa", "dwb")] == ["co.i", "g.i", "g.i"]
    assert len(nests["stem"].result.type.get_shape()) == 5 and len(nests["dwb"].result.type.get_shape()) == 4
    t = {name: torch.from_numpy(v) for name, v in dict(w0=w0, b0=b0, x=x, wa=wa, wb=wb, wd=wd).items()}
    y = F.conv2d(t["x"], t["w0"], t["b0"], padding=1).relu()
    z = F.conv2d(F.conv2d(y, t["wa"], padding=1, groups=64).relu(), t["wb"], padding=1, groups=64)
    want = F.conv2d((z + y).relu(), t["wd"], padding=1).numpy()
    np.testing.assert_allclose(run(model, x), want, rtol=1e-4, atol=1e-4)


def test_a_1x1_conv_before_a_strided_depthwise_conv_writes_channel_blocks():
    """MobileNetV2's second block (imagenet: 16 -> 96 on 112 x 112; here 56 x 56): the expanding 1x1
    conv, whose channel plan scores below its spatial schedule while its 16-channel reduction is
    charged the transposes of an NCHW result, is scored storing its result channel-blocked, as it
    would for its stride-2 depthwise reader: it takes the plan, and the depthwise conv reads 8 or
    16 channels a load instead of gathering every other point of its rows. torch's numbers."""
    w0, wd, wp, x = rand(96, 16, 1, 1) / 4, rand(96, 1, 3, 3) / 3, rand(24, 96, 1, 1) / 10, rand(1, 16, 56, 56)

    def body(a, W):
        expand = nn.Conv2DOp.new(a[0], W("w0", w0)).named("expand")
        relu0 = nn.ReluOp.new(expand.results[0])
        dw = nn.Conv2DOp.new(relu0.results[0], W("wd", wd), strides=(2, 2), pads=(1,) * 4, groups=96).named("dw")
        relu1 = nn.ReluOp.new(dw.results[0])
        return [expand, relu0, dw, relu1, nn.Conv2DOp.new(relu1.results[0], W("wp", wp)).named("project")]

    model = build([(1, 16, 56, 56)], body)
    nests = scheduled_nests(model)
    assert [nests[n].get_schedule().vector for n in ("expand", "dw")] == ["co.i", "g.i"]
    assert nests["expand"].result.type.get_shape() == (1, 96 // lanes(), 56, 56, lanes())
    t = {name: torch.from_numpy(v) for name, v in dict(w0=w0, wd=wd, wp=wp, x=x).items()}
    y = F.conv2d(F.conv2d(t["x"], t["w0"]).relu(), t["wd"], stride=2, padding=1, groups=96).relu()
    np.testing.assert_allclose(run(model, x), F.conv2d(y, t["wp"]).numpy(), rtol=1e-4, atol=1e-4)


def test_a_strided_1x1_conv_reads_a_subsampled_copy_of_its_input():
    """ResNet-34 imagenet's last downsample (here 64 -> 128 from 14 x 14 onto 7 x 7): a 3x3 conv
    writes t, which the block's 3x3 stride-2 conv and the 1x1 stride-2 downsample both read, their
    sum is the block's. At 8 lanes the downsample reads a copy of the points it uses, stored in
    channel blocks for its broadcasts, and runs at stride 1; at 16 it stays strided. torch's
    numbers."""
    w0, w3, wd, bd, x = rand(64, 64, 3, 3) / 24, rand(128, 64, 3, 3) / 24, rand(128, 64, 1, 1) / 8, rand(128), \
        rand(1, 64, 14, 14)

    def body(a, W):
        c0 = nn.Conv2DOp.new(a[0], W("w0", w0), pads=(1,) * 4).named("c0")
        relu = nn.ReluOp.new(c0.results[0])
        c3 = nn.Conv2DOp.new(relu.results[0], W("w3", w3), strides=(2, 2), pads=(1,) * 4).named("c3")
        ds = nn.Conv2DOp.new(relu.results[0], W("wd", wd), W("bd", bd), strides=(2, 2)).named("ds")
        return [c0, relu, c3, ds, nn.AddOp.new(c3.results[0], ds.results[0])]

    model = build([(1, 64, 14, 14)], body)
    nests = scheduled_nests(model)
    ds = nests["ds"]
    if lanes() == 8:
        copy = nests["ds.subsample"]
        assert copy.kind == "copy" and ds.inputs[0] == copy.result
        assert [str(e) for e in ds.access_maps[0].results[2:4]] == ["(d2 + d5)", "(d3 + d6)"]
        assert copy.result.type.get_shape() == (1, 8, 7, 7, 8)
    else:
        assert "ds.subsample" not in nests and "(d2 * 2)" in str(ds.access_maps[0].results[2])
    t = {name: torch.from_numpy(v) for name, v in dict(w0=w0, w3=w3, wd=wd, bd=bd, x=x).items()}
    y = F.conv2d(t["x"], t["w0"], padding=1).relu()
    want = F.conv2d(y, t["w3"], stride=2, padding=1) + F.conv2d(y, t["wd"], t["bd"], stride=2)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


def test_depthwise_conv_on_an_nchw_input_keeps_lanes_along_rows():
    """The function's input is NCHW: a depthwise conv reading it falls back to lanes along the
    output row (over channels it would gather), and so does its consumer, whose input its
    spatial writer cannot block."""
    wa, wb, x = rand(32, 1, 3, 3), rand(32, 1, 3, 3), rand(1, 32, 9, 9)

    def body(a, W):
        dwa = nn.Conv2DOp.new(a[0], W("wa", wa), pads=(1,) * 4, groups=32).named("dwa")
        return [dwa, nn.Conv2DOp.new(dwa.results[0], W("wb", wb), pads=(1,) * 4, groups=32).named("dwb")]

    model = build([(1, 32, 9, 9)], body)
    nests = scheduled_nests(model)
    assert [nests[n].get_schedule().vector.split(".")[0] for n in ("dwa", "dwb")] == ["ow", "ow"]
    want = F.conv2d(F.conv2d(torch.from_numpy(x), torch.from_numpy(wa), padding=1, groups=32),
                    torch.from_numpy(wb), padding=1, groups=32)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


def test_lane_stride_through_channel_blocks():
    """Buffer elements between consecutive lanes of dim 1 (channels) of a [1, 32, 5, 7] tensor:
    NCHW 35, NCHW16c 1 (its block), a per-channel bias 1, a value that does not vary 0."""
    from xdsl.ir.affine import AffineMap

    from nasir.lowering.nest_to_loops.accesses import lane_stride
    from nasir.lowering.schedule.pack_activations import blocked

    nchw = AffineMap.from_callable(lambda n, c, h, w: (n, c, h, w))
    assert lane_stride(nchw, (1, 32, 5, 7), 1, 16) == 35
    assert lane_stride(blocked(nchw, 16), (1, 2, 5, 7, 16), 1, 16) == 1
    assert lane_stride(AffineMap.from_callable(lambda n, c, h, w: (c,)), (32,), 1, 16) == 1
    assert lane_stride(AffineMap.from_callable(lambda n, c, h, w: (h,)), (5,), 1, 16) == 0


@pytest.mark.parametrize("c,o", [(256, 512), (512, 256)])
def test_1x1_conv_on_rows_shorter_than_a_line_takes_lanes_over_channels(c, o):
    """ResNeXt's 1x1 convs on 8 x 8 images: rows of 8 floats, half a cache line. At either width
    the cost model gives them lanes over output channels (`SHORT_ROW_TIE`: with AVX2's 8 lanes the
    spatial schedule scores a little higher, by the channel plan's epilogue), broadcasting from
    their input stored channel-blocked; torch's numbers."""
    h = 8
    w3, b3 = rand(c, c, 3, 3) / (9 * c) ** 0.5, rand(c)
    w1, b1 = rand(o, c, 1, 1) / c ** 0.5, rand(o)
    x = rand(1, c, h, h)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w3", w3), W("b3", b3), pads=(1,) * 4).named("conv3")
        relu = nn.ReluOp.new(conv.results[0]).named("relu")
        return [conv, relu, nn.Conv2DOp.new(relu.results[0], W("w1", w1), W("b1", b1)).named("conv1")]

    model = build([(1, c, h, h)], body)
    reader = scheduled_nests(model)["conv1"].get_schedule()
    assert reader.vector == "co.i" and ("ci", lanes()) in reader.splits, reader
    y = F.conv2d(torch.tensor(x), torch.tensor(w3), torch.tensor(b3), padding=1).relu()
    want = F.conv2d(y, torch.tensor(w1), torch.tensor(b1))
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,o,h,stride,avx2_tile", [
    (64, 64, 56, 1, (2, 5)),  # ResNet-34 imagenet layer1: 0.96x the time of 1 x 8
    (128, 128, 28, 1, (2, 5)),  # layer2: 0.93-0.95x of 2 x 4
    (128, 256, 28, 2, (2, 5)),  # layer3.0.conv1 (14 x 14 out, a stride-2 window): 0.83x of 1 x 7
    (512, 512, 7, 1, (1, 7)),  # layer4: 2 x 5 1.2-1.7x, 2 x 4 (a tail of 3) 1.06x
    (256, 512, 14, 2, (1, 7)),  # layer4.0.conv1: 2 x 4 ties with 1 x 7 by score (PLAN_TIE), ran 1.03x
    (128, 128, 16, 1, (1, 8)),  # ResNet-34 cifar10 layer2: 2 x 5 (a tail of 1) 1.04-1.05x
    (64, 128, 32, 2, (2, 6)),  # ResNet-18 cifar10 layer2.0.conv1 (16 x 16 out, a stride-2 window): 0.96x of 2 x 4
])
def test_avx2_3x3_conv_tiles_hold_a_window_of_broadcasts_not_one_a_point(c, o, h, stride, avx2_tile):
    """A 3x3 conv's channel tile at AVX2's 16 registers: 2 x 5 where it divides the row with a
    short tail (LLVM keeps a window's worth of broadcasts live, not one a point:
    `channel_tile_rows`), the tile that divides the row where 2 x 5's tail is a third of it or its
    score ties (`PLAN_TIE`), 2 x 6 on a strided window along a row of 16 whose 256 KiB of input
    stays in L2 (half of 512 KiB or more), where its spills cost less than the accumulators it
    gains; times measured on Zen 3 and Zen 4. Torch's numbers. (Winograd off: the direct tile,
    which a stride-1 conv runs where Winograd does not pay, `pays`.)"""
    w, b, x = rand(o, c, 3, 3) / (9 * c) ** 0.5, rand(o), rand(1, c, h, h)
    model = with_winograd(build([(1, c, h, h)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", w), W("b", b), strides=(stride, stride), pads=(1,) * 4).named("conv")]), "never")
    reader = scheduled_nests(model)["conv"].get_schedule()
    if lanes() == 8:
        assert (reader.unroll.get("co.o.i", 1), reader.unroll.get("ow.i", reader.unroll.get("ow"))) == avx2_tile, reader
    want = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=stride, padding=1)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,o,h,groups,l2_kib,tile", [
    (64, 128, 32, 1, 512, (2, 6)),  # ResNet-18 cifar10 layer2.0.conv1: 256 KiB of input, in half of L2
    (256, 256, 32, 2, 512, (2, 4)),  # ResNeXt-29's grouped layer2.0.conv2: 1 MiB (2 x 4 0.87x of 2 x 6)
    (64, 128, 56, 1, 512, (2, 5)),  # ResNet-34 imagenet layer2.0.conv1: 784 KiB (0.94x of 2 x 6)
    (64, 128, 56, 1, 2048, (2, 6)),  # the same with 2 MiB of L2 (Sapphire Rapids): it stays there
])
def test_avx2_strided_3x3_conv_takes_twelve_accumulators_only_while_its_input_stays_in_l2(c, o, h, groups, l2_kib,
                                                                                         tile):
    """A stride-2 3x3 conv at AVX2's 16 registers takes a 2 x 6 tile, whose spills cost less than
    the accumulators gain, only where its input stays in L2 (`l2_input_bytes`: half of it); with
    its input coming from further out, the tile a window's worth of broadcasts leaves room for
    (`channel_tile_rows`): 2 x 4 or 2 x 5. Independent of this machine: a named AVX2 CPU with the
    L2 size given."""
    from nasir.lowering.target import cpu_target, set_target

    model = build([(1, c, h, h)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", rand(o, c // groups, 3, 3)), strides=(2, 2), pads=(1,) * 4,
                        groups=groups).named("conv")])
    level = model.transform("convert-nn-to-nest")
    set_target(level.module, cpu_target("x86-64-v3").with_overrides(l2_bytes=l2_kib * 1024))
    [conv] = [op for op in level.transform("default-schedule").module.walk() if isinstance(op, nest.ComputeOp)]
    sched = conv.get_schedule()
    assert sched.vector == "co.i" and (sched.unroll.get("co.o.i", 1), sched.unroll.get("ow.i")) == tile, sched


def hottest_loop(asm: str) -> list[str]:
    """The innermost loop (one block that branches back to itself) with the most FMAs in `asm`."""
    lines, loops, start = asm.splitlines(), [], {}
    for i, line in enumerate(lines):
        if line.startswith(".LBB"):
            start[line.rstrip(":")] = i
        elif line.strip().startswith("j") and line.split()[-1] in start:
            body = lines[start[line.split()[-1]]: i + 1]
            if not any(x.startswith(".LBB") for x in body[1:]):
                loops.append(body)
    return max(loops, key=lambda body: sum("vfmadd" in x for x in body))


def test_stem_inside_its_max_pool_keeps_its_accumulators_in_registers():
    """ResNet's 7x7 stride-2 stem (3 -> 64) computed inside its max pool's kernel, in the JIT's
    code (what nasir runs): its hottest FMA loop stores no vector to the stack. At AVX2 with 2 x 6
    tiles (f679c98) LLVM spilled an accumulator there and stored it at every tap, a store-forwarding
    chain: 2.2x the time of 2 x 4 in ResNet-34 imagenet (`cost_model.STRIDED_TAPS`); AVX-512 runs
    the stem as Winograd."""
    from nasir.lowering.loops_to_llvm.llvm_ir import optimize, to_llvm_ir
    from nasir.lowering.target import resolve_target
    from nasir.runtime.llvm_executable import lower_to_llvm_dialect

    model = build([(1, 3, 64, 64)], lambda a, W: [
        conv := nn.Conv2DOp.new(a[0], W("w", rand(64, 3, 7, 7)), W("b", rand(64)), strides=(2, 2),
                                pads=(3,) * 4).named("stem"),
        relu := nn.ReluOp.new(conv.results[0]).named("relu"),
        nn.MaxPoolOp.new(relu.results[0], (3, 3), strides=(2, 2), pads=(1,) * 4).named("pool")])
    target = resolve_target(None)
    ir = to_llvm_ir(lower_to_llvm_dialect(model.module, cpu=target, tuning="none"))
    loop = hottest_loop(target.target_machine(jit=True).emit_assembly(optimize(ir, target)))
    assert sum("vfmadd" in line for line in loop) >= 8
    spills = [line.strip() for line in loop if "mm" in line and line.rstrip().endswith("(%rsp)")]
    assert not spills, spills


@pytest.mark.parametrize("c,o,h,groups,inside", [
    (64, 64, 112, 1, True),  # input 3.1 MiB, weights 144 KiB: they stay in L2 while each row is read once
    (512, 512, 32, 2, False),  # 1 MiB of input a group, 2.25 MiB of weights a group for each of 32 rows
])
def test_channel_blocks_go_inside_the_rows_when_re_reading_the_weights_moves_fewer_bytes(c, o, h, groups, inside):
    """A 3x3 conv whose input does not stay in L2 takes its channel blocks inside the image rows
    (each row's inputs stay in L2, the weights re-read for each row) unless the weights do not stay
    in L2 either and re-reading them for every row moves more bytes than re-reading the input for
    every block (`rows_hold_blocks`). The sizes hold for any L2 of 256 KiB to 2 MiB."""
    def body(a, W):
        return [nn.Conv2DOp.new(a[0], W("w", rand(o, c // groups, 3, 3)), pads=(1,) * 4, groups=groups).named("conv")]

    sched = scheduled_nests(build([(1, c, h, h)], body))["conv"].get_schedule()
    blocks = next(loop for loop in sched.order if loop.startswith("co.o"))
    assert sched.vector == "co.i" and (sched.order.index(blocks) > sched.order.index("oh")) == inside, sched


@pytest.mark.parametrize("channels,l2_kib,vectors", [
    (512, 2048, 2),  # 4 vectors: blocks of 1.18 MB, two of them pass 2 MiB
    (128, 2048, 4),  # 4 vectors: blocks of 295 KB
    (512, 1024, 2),  # 2 vectors: one block of 590 KB fits (Zen 4's L2)
])
def test_a_tile_of_more_than_two_channel_vectors_leaves_l2_room_for_the_next_block(channels, l2_kib, vectors):
    """A 3x3 conv on 4 x 4 at 16 lanes takes a channel tile of 4 vectors only where its block of
    weights and the next (`prefetch_next_block`) fit L2 together (`weight_block_fits`), else 2."""
    from nasir.lowering.target import cpu_target, set_target

    model = build([(1, channels, 4, 4)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", rand(channels, channels, 3, 3)), pads=(1,) * 4).named("conv")])
    level = model.transform("convert-nn-to-nest")
    set_target(level.module, cpu_target("x86-64-v4").with_overrides(l2_bytes=l2_kib * 1024))
    [conv] = [op for op in level.transform("default-schedule").module.walk() if isinstance(op, nest.ComputeOp)]
    sched = conv.get_schedule()
    assert sched.vector == "co.i" and sched.unroll.get("co.o.i", 1) == vectors, sched


BROADCAST_READERS = [  # (groups of the 3x3 conv, 1x1 conv's out channels, its stride, its groups, residual)
    (2, 256, 1, 1, False),  # ResNeXt's grouped 3x3 -> 1x1 128 -> 256
    (2, 128, 1, 1, True),  # the 1x1 conv adds the 3x3 conv's input (a residual read across its lanes)
    (1, 96, 2, 1, False),  # a stride-2 1x1 (a downsample) reads every other point of the blocks
    (2, 64, 1, 2, False),  # a grouped 1x1: its channel index is g * 64 + ci
]


@pytest.mark.parametrize("h", [8, 14])
@pytest.mark.parametrize("g3,o,stride,g1,residual", BROADCAST_READERS)
def test_a_1x1_conv_reads_its_input_channel_blocked(g3, o, stride, g1, residual, h):
    """A conv with lanes over output channels writing the input of a 1x1 conv that also runs lanes
    over its output channels stores it channel-blocked (pack-activations): the 1x1 conv broadcasts
    each point's channels from their block, its channel loop split by the lanes, the block unrolled
    where its FMAs stay within MAX_UNROLLED_BODY and a loop otherwise (on 14 x 14 an AVX-512 tile
    of 14 points x 2 vectors; it read NCHW before); torch's numbers."""
    c = 128
    # weights scaled by 1/sqrt(fan-in): outputs of order 1 (float32 sums in another order agree)
    w3, b3 = rand(c, c // g3, 3, 3) / (9 * c / g3) ** 0.5, rand(c)
    w1, b1 = rand(o, c // g1, 1, 1) / (c / g1) ** 0.5, rand(o)
    x = rand(1, c, h, h)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w3", w3), W("b3", b3), pads=(1,) * 4, groups=g3).named("conv3")
        relu = nn.ReluOp.new(conv.results[0]).named("relu")
        conv1 = nn.Conv2DOp.new(relu.results[0], W("w1", w1), W("b1", b1), strides=(stride,) * 2, groups=g1).named("conv1")
        if not residual:
            return [conv, relu, conv1]
        return [conv, relu, conv1, nn.AddOp.new(conv1.results[0], a[0]).named("add")]

    model = build([(1, c, h, h)], body)
    nests, width = scheduled_nests(model), lanes()
    assert nests["conv3"].get_schedule().vector == "co.i" and nests["conv1"].get_schedule().vector == "co.i"
    assert list(nests["conv3"].result.type.get_shape()) == [1, c // width, h, h, width]
    reader = nests["conv1"].get_schedule()
    assert ("ci", width) in reader.splits, reader
    if tile_points(nests["conv1"]) * width > MAX_UNROLLED_BODY:
        assert "ci.i" not in reader.unroll, reader
    else:
        assert reader.unroll["ci.i"] == width, reader
    y = F.conv2d(torch.tensor(x), torch.tensor(w3), torch.tensor(b3), padding=1, groups=g3).relu()
    want = F.conv2d(y, torch.tensor(w1), torch.tensor(b1), stride=stride, groups=g1)
    if residual:
        want = want + torch.tensor(x)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h", [14, 56])
def test_only_the_last_channel_tile_of_a_row_checks_its_points(h):
    """A 3x3 conv's channel tiles of 5 points on rows of 14 or 56 (AVX2: 2 x 5, a tail of 4 or 1)
    guard the points past the row's end in the row's last tile only, also in the padded first and
    last rows that keep a tile version with its checks (`_guarded_tile_of_width`): no weight or
    input read of the kernel is masked (before, every tile of those rows masked its reads: 1.15x
    the time of ResNet-34's 14 x 14 convs on Zen 4). Torch's numbers."""
    from nasir.lowering.loops_to_llvm.llvm_ir import to_llvm_ir
    from nasir.lowering.pipeline import LLVM

    c = 32
    w, b, x = rand(c, c, 3, 3) / (9 * c) ** 0.5, rand(c), rand(1, c, h, h)
    model = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", w), W("b", b), pads=(1,) * 4).named("conv")])
    assert "llvm.masked.load" not in to_llvm_ir(model.transform(str(LLVM)).module)
    want = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1)
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


def test_a_fused_row_prefetches_its_run_of_input_lines_once():
    """Two 1x1 convs on 32 x 32 (64 input channels, 2 x 6 tiles along the fused row `oh*ow` at
    AVX2): `down`, whose result the other's epilogue adds (pack-activations stores it channel-blocked)
    and `conv`, whose tile transposes its NCHW output. Each prefetches the input lines its tile
    reads a few channel steps ahead: the 6 neighbouring points of the flat plane are one run, at
    most 2 lines, so at most 2 prefetches a step, where a prefetch per point and channel vector (12
    a step, as `down` had) took the load ports from the broadcasts (ResNeXt-29's 64 -> 256
    downsample: 1.5x the time). Torch's numbers."""
    from nasir.lowering.pipeline import LLVM

    c, co = 64, 128
    x, w1, w2 = rand(1, c, 32, 32), rand(co, c, 1, 1) / 8, rand(co, c, 1, 1) / 8

    def body(a, W):
        down = nn.Conv2DOp.new(a[0], W("w1", w1)).named("down")
        conv = nn.Conv2DOp.new(a[0], W("w2", w2)).named("conv")
        return [down, conv, nn.AddOp.new(conv.result, down.result)]

    model = build([x.shape], body)
    nests = scheduled_nests(model)
    if lanes() == 8:  # AVX-512 runs lanes along the rows (no fused row)
        for name in ("down", "conv"):
            assert nests[name].get_schedule().fusions == [("oh", "ow")], name
        assert nests["down"].output_map != nests["conv"].output_map  # blocked, NCHW
        lowered = model.transform(str(LLVM.before("convert-loops-to-llvm")))
        steps = [[o.name for o in op.body.block.ops] for op in lowered.module.walk()
                 if isinstance(op, scf.ForOp) and any(o.name == "nasir.prefetch" for o in op.body.block.ops)]
        assert len(steps) >= 2  # both kernels prefetch, a channel step each loop iteration
        for ops in steps:
            assert ops.count("math.fma") <= 12 and ops.count("nasir.prefetch") <= 2, ops
    want = (F.conv2d(torch.tensor(x), torch.tensor(w2)) + F.conv2d(torch.tensor(x), torch.tensor(w1))).numpy()
    np.testing.assert_allclose(run(model, x), want, rtol=1e-4, atol=1e-4)


def test_a_1x1_conv_whose_input_leaves_l2_tiles_its_points_as_one_row():
    """A 1x1 conv on 32 x 32 with 256 input channels (1 MiB of input, more than half of any x86
    L2 it may run on) at AVX2 runs its 2 x 6 channel tile along the image's points as one row
    (`flat_row`), not along the image rows of 32, which end in a tile of 2 (ResNeXt-29's and
    DenseNet-121's 1x1 convs on 32 x 32: 0.95-0.97x the time), and adds the residual read as
    one row too. Torch's numbers at 1 and 2 threads."""
    ci, co = 256, 128
    w, x, r = rand(co, ci, 1, 1) / ci ** 0.5, rand(1, ci, 32, 32), rand(1, co, 32, 32)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w", w)).named("conv")
        return [conv, nn.AddOp.new(conv.result, a[1])]

    model = build([x.shape, r.shape], body)
    sched = scheduled_nests(model)["conv"].get_schedule()
    if lanes() == 8:
        assert sched.fusions == [("oh", "ow")] and sched.unroll["oh*ow.i"] == 6, sched
    want = (F.conv2d(torch.tensor(x), torch.tensor(w)) + torch.tensor(r)).numpy()
    np.testing.assert_allclose(run(model, x, r), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run(model, x, r, threads=2), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("h", [8, 7])
def test_a_1x1_conv_on_a_small_image_tiles_its_points_as_one_row(h):
    """A 1x1 conv on 8 x 8 or 7 x 7 points at AVX2 runs its channel tile along the image's points
    as one row (`flat_row`: 2 x 6 tiles over 64 or 49 points, the last one of 4 or 1; an image
    row has 8 or 7, where the tiles of 8 accumulators of 16 registers ran 1.07-1.17x the time),
    stores each channel's points as one vector across the ends of the image rows and adds the
    residual read the same way (`flat_fusion`), through the two axes merged into one
    (`LoopBuilder.merged`: a checked build finds every index inside its axis); without the
    residual, no read of the kernel is masked (only the last tile checks its points, also after a
    transposed store). Torch's numbers, at both widths, 2 threads and in a checked build."""
    from nasir.lowering.loops_to_llvm.llvm_ir import to_llvm_ir
    from nasir.lowering.pipeline import LLVM

    c = 64
    w, b, x = rand(c, c, 1, 1) / c ** 0.5, rand(c), rand(1, c, h, h)
    alone = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", w), W("b", b)).named("conv")])
    assert "llvm.masked.load" not in to_llvm_ir(alone.transform(str(LLVM)).module)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w", w), W("b", b)).named("conv")
        add = nn.AddOp.new(conv.result, a[0])
        return [conv, add, nn.ReluOp.new(add.result)]

    model = build([x.shape], body)
    sched = scheduled_nests(model)["conv"].get_schedule()
    if lanes() == 8:
        assert sched.fusions == [("oh", "ow")] and sched.unroll["oh*ow.i"] == 6, sched
    want = torch.relu(F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b)) + torch.tensor(x)).numpy()
    np.testing.assert_allclose(run(model, x), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run(model, x, threads=2), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(compile_llvm(model.module, checked=True)(x), want, rtol=1e-4, atol=1e-4)
