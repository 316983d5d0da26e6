"""Architecture transforms (group, depthwise, bottleneck, unfold/fold, shift, index-split, unshare)
and the papers' compositions, each compared with an independent PyTorch reference module.

Graphs are built with the nn builders, lowered with convert-nn-to-nest, transformed with the same
pipeline strings users write, and run with the torch backend. The references are plain
torch.nn.functional written from BACKGROUND.md's definitions (grouped conv = F.conv2d(groups=G),
Seq 2 = cat(full conv, grouped conv), ...), fed with the weights of the transformed model (or the
original weights sliced by hand, for init=inherit).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region

import nasir
from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore
from nasir.dialects.nest import macs as op_macs
from nasir.dialects.shapes import shape_of, tensor
from nasir.errors import LegalityError, PassError
from nasir.model import Model
from nasir.transforms import compositions as C

TOL = dict(rtol=1e-4, atol=1e-4)


class Net:
    """A tiny @main builder with seeded weights; `model()` lowers it to nest IR."""

    def __init__(self, shape=(2, 8, 8, 8), seed=0):
        self.rng = np.random.default_rng(seed)
        self.block = Block(arg_types=[tensor(shape)])
        self.store = WeightStore()
        self.x = self.rng.standard_normal(shape).astype(np.float32)

    def weight(self, name, shape, positive=False):
        value = self.rng.standard_normal(shape).astype(np.float32)
        self.store[name] = np.abs(value) + 0.5 if positive else value
        op = nn.WeightOp.make(name, shape)
        self.block.add_op(op)
        return op.result

    def add(self, op):
        self.block.add_op(op)
        return op.result

    def conv(self, name, x, co, k=3, pad=1, bias=True, stride=1):
        ci = shape_of(x)[1]
        w = self.weight(f"{name}.weight", (co, ci, k, k))
        b = self.weight(f"{name}.bias", (co,)) if bias else None
        return self.add(nn.Conv2DOp.new(x, w, b, strides=(stride, stride), pads=(pad,) * 4).named(name))

    def bn(self, name, x):
        c = shape_of(x)[1]
        params = [self.weight(f"{name}.{p}", (c,), positive=p in ("scale", "var"))
                  for p in ("scale", "bias", "mean", "var")]
        return self.add(nn.BatchNormOp.new(x, *params).named(name))

    def model(self, result) -> Model:
        self.block.add_op(func.ReturnOp(result))
        fn = func.FuncOp("main", ([self.block.args[0].type], [result.type]), Region(self.block))
        return Model(ModuleOp([fn]), self.store).transform("convert-nn-to-nest")

    def t(self, name):
        return torch.from_numpy(self.store[name])


def run(model: Model, x: np.ndarray) -> torch.Tensor:
    out = nasir.compile(model, target="torch")(x)
    return torch.from_numpy(np.asarray(out[0] if isinstance(out, (list, tuple)) else out))


def nest_op(model: Model, layer: str) -> nest.ComputeOp:
    return next(op for op in model.ops() if isinstance(op, nest.ComputeOp) and op.layer_name == layer)


def w(model: Model, layer: str, k: int = 1) -> torch.Tensor:
    """Input k (1: the weight, 2: the bias) of nest `layer` in the transformed model."""
    return torch.tensor(model.weights[nest_op(model, layer).inputs[k].owner.key])  # a copy: seeded weights are read-only


def macs(model: Model, layer: str) -> int:
    return op_macs(nest_op(model, layer))


def one_conv(co=8, ci=8, k=3, pad=1, seed=0, bias=True):
    net = Net((2, ci, 8, 8), seed)
    return net, net.model(net.conv("conv", net.block.args[0], co, k, pad, bias))


# --- group / depthwise -------------------------------------------------------------------------

def test_group_equals_grouped_conv():
    net, m = one_conv()
    g = m.transform(C.grouped("conv", 2))
    assert tuple(w(g, "conv").shape) == (8, 4, 3, 3)
    assert macs(g, "conv") * 2 == macs(m, "conv")
    ref = F.conv2d(torch.from_numpy(net.x), w(g, "conv"), w(g, "conv", 2), padding=1, groups=2)
    torch.testing.assert_close(run(g, net.x), ref, **TOL)


def test_group_twice_multiplies_groups_and_inherit_keeps_block_diagonal():
    net, m = one_conv()
    g = m.transform("group{factor=2 layers=conv init=inherit},group{factor=2 layers=conv init=inherit}")
    assert nest_op(g, "conv").domain.extent("g") == 4
    full = net.t("conv.weight")
    # output channel o in group o // 2 keeps input channels of its group only
    expected = torch.stack([full[o, (o // 2) * 2:(o // 2) * 2 + 2] for o in range(8)])
    torch.testing.assert_close(w(g, "conv"), expected)
    ref = F.conv2d(torch.from_numpy(net.x), expected, net.t("conv.bias"), padding=1, groups=4)
    torch.testing.assert_close(run(g, net.x), ref, **TOL)


def test_depthwise_equals_depthwise_conv():
    net, m = one_conv(co=16, ci=8)
    d = m.transform(C.depthwise("conv"))
    assert "ci" not in nest_op(d, "conv").domain.dim_names
    assert tuple(w(d, "conv").shape) == (16, 1, 3, 3)
    ref = F.conv2d(torch.from_numpy(net.x), w(d, "conv"), w(d, "conv", 2), padding=1, groups=8)
    torch.testing.assert_close(run(d, net.x), ref, **TOL)


# --- the papers' sequences ---------------------------------------------------------------------

def _parts(model: Model, n: int):
    return [(w(model, f"conv.part{k}"), w(model, f"conv.part{k}", 2)) for k in range(n)]


def test_seq1_channel_parts_with_own_groups():
    net, m = one_conv(co=12, ci=8)
    s = m.transform(C.seq1("conv", groups=(1, 2, 4)))
    x = torch.from_numpy(net.x)
    ref = torch.cat([F.conv2d(x, wk, bk, padding=1, groups=g)
                     for (wk, bk), g in zip(_parts(s, 3), (1, 2, 4))], 1)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


def test_seq2_first_u_full_rest_grouped():
    net, m = one_conv(co=24, ci=8)
    s = m.transform(C.seq2("conv", u=16, g=2))
    (w0, b0), (w1, b1) = _parts(s, 2)
    assert tuple(w0.shape) == (16, 8, 3, 3) and tuple(w1.shape) == (8, 4, 3, 3)
    x = torch.from_numpy(net.x)
    ref = torch.cat([F.conv2d(x, w0, b0, padding=1), F.conv2d(x, w1, b1, padding=1, groups=2)], 1)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)
    assert macs(s, "conv.part0") + macs(s, "conv.part1") == macs(m, "conv") * (16 + 4) // 24


def test_seq3_parts_with_different_groups_inherit_slices():
    net, m = one_conv(co=8, ci=8)
    s = m.transform(C.seq3("conv", groups=(2, 4)).replace("}", " init=inherit}"))
    x, full, bias = torch.from_numpy(net.x), net.t("conv.weight"), net.t("conv.bias")
    w0 = torch.stack([full[o, (o // 2) * 4:(o // 2) * 4 + 4] for o in range(4)])
    w1 = torch.stack([full[4 + o, (o % 4) * 2:(o % 4) * 2 + 2] for o in range(4)])
    ref = torch.cat([F.conv2d(x, w0, bias[:4], padding=1, groups=2),
                     F.conv2d(x, w1, bias[4:], padding=1, groups=4)], 1)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


def test_seq3_bands_have_their_own_weights():
    net, m = one_conv()
    s = m.transform(C.seq3_bands("conv", parts=2))
    (w0, b0), (w1, b1) = _parts(s, 2)
    assert not torch.equal(w0, w1)
    x = torch.from_numpy(net.x)
    ref = torch.cat([F.conv2d(x, w0, b0, padding=1)[:, :, :4], F.conv2d(x, w1, b1, padding=1)[:, :, 4:]], 2)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


def test_index_split_is_meaning_preserving():
    net, m = one_conv()
    s = m.transform("index-split{dim=oh at=3 layers=conv},index-split{dim=co parts=2 layers=\"conv[.]part1\"}")
    ref = F.conv2d(torch.from_numpy(net.x), net.t("conv.weight"), net.t("conv.bias"), padding=1)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


@pytest.mark.parametrize("layers", ["conv", ".*conv.*"])  # a pattern that also matches conv.expand
def test_spatial_bottleneck(layers):
    net, m = one_conv(k=3, pad=1)
    s = m.transform(C.spatial_bottleneck(layers, b=2))
    assert macs(s, "conv") * 4 == macs(m, "conv")
    conv = nest_op(s, "conv")
    assert (conv.get_schedule().order or conv.domain.dim_names)[:4] == ["n", "co", "oh", "ow"]
    x = torch.from_numpy(net.x)
    small = F.conv2d(x, w(s, "conv"), w(s, "conv", 2), padding=1, stride=2)[:, :, :4, :4]
    ref = small.repeat_interleave(2, 2).repeat_interleave(2, 3)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


# --- window rewrites ---------------------------------------------------------------------------

def test_fold_pieces_1x3_and_3x1():
    net, m = one_conv()
    s = m.transform('index-split{dim=co parts=2 layers=conv},fold{dim=kh layers="conv.part0" init=inherit},'
                    'fold{dim=kw layers="conv.part1" init=inherit}')
    full, bias, x = net.t("conv.weight"), net.t("conv.bias"), torch.from_numpy(net.x)
    torch.testing.assert_close(w(s, "conv.part0"), full[:4, :, 1:2, :])
    ref = torch.cat([F.conv2d(x, full[:4, :, 1:2, :], bias[:4], padding=(0, 1)),
                     F.conv2d(x, full[4:, :, :, 1:2], bias[4:], padding=(1, 0))], 1)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


def test_unfold_1x1_to_3x1():
    net, m = one_conv(k=1, pad=0)
    u = m.transform("unfold{dim=oh size=3 layers=conv}")
    assert tuple(w(u, "conv").shape) == (8, 8, 3, 1)
    x = torch.from_numpy(net.x)
    torch.testing.assert_close(run(u, net.x), F.conv2d(x, w(u, "conv"), w(u, "conv", 2), padding=(1, 0)), **TOL)
    kept = m.transform("unfold{dim=ow size=3 layers=conv init=inherit}")  # centre tap: same function
    torch.testing.assert_close(run(kept, net.x), F.conv2d(x, net.t("conv.weight"), net.t("conv.bias")), **TOL)


@pytest.mark.parametrize("dim,offset", [("ow", -1), ("oh", 1)])
def test_shift_convolution(dim, offset):
    net, m = one_conv()
    s = m.transform(f"shift{{dim={dim} offset={offset} layers=conv}}")
    x = torch.from_numpy(net.x)
    # out[oh] = sum W[kh] * I[oh + kh - 1 + offset], I zero outside the image: a conv over the image
    # zero-padded by 2 on the shifted axis, read from row 1 + offset on.
    pads = (1, 1, 2, 2) if dim == "oh" else (2, 2, 1, 1)
    y = F.conv2d(F.pad(x, pads), w(s, "conv"), w(s, "conv", 2))
    ref = y.narrow(2 if dim == "oh" else 3, 1 + offset, 8)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)


# --- bottleneck with propagation ---------------------------------------------------------------

def conv_bn_relu_conv(seed=0):
    net = Net((2, 8, 8, 8), seed)
    y = net.conv("c1", net.block.args[0], 8)
    y = net.add(nn.ReluOp.new(net.bn("bn1", y)).named("relu1"))
    return net, net.model(net.conv("c2", y, 6))


def test_bottleneck_co_propagates_through_bn_relu_into_next_conv():
    """init=inherit keeps the 4 of 8 filters that carry most after the batch norm (filter norm
    times |scale| / sqrt(var + eps), computed here by hand), and the next conv reads exactly
    those channels."""
    net, m = conv_bn_relu_conv()
    b = m.transform("bottleneck{dim=co factor=2 layers=c1 init=inherit}")
    assert macs(b, "c1") * 2 == macs(m, "c1") and macs(b, "c2") * 2 == macs(m, "c2")
    t = net.t
    size = t("c1.weight").flatten(1).norm(dim=1) * t("bn1.scale").abs() / (t("bn1.var") + 1e-5).sqrt()
    keep = torch.sort(torch.topk(size, 4).indices).values
    assert keep.tolist() != [0, 1, 2, 3], "the seed's filters make the first four not the largest"
    x = F.conv2d(torch.from_numpy(net.x), t("c1.weight")[keep], t("c1.bias")[keep], padding=1)
    x = F.relu(F.batch_norm(x, t("bn1.mean")[keep], t("bn1.var")[keep], t("bn1.scale")[keep], t("bn1.bias")[keep],
                            eps=1e-5))
    ref = F.conv2d(x, t("c2.weight")[:, keep], t("c2.bias"), padding=1)
    torch.testing.assert_close(run(b, net.x), ref, **TOL)


def test_bottleneck_co_keeps_the_first_filters_of_each_group_without_trained_weights():
    """Without init=inherit (fresh weights) the kept channels are the first Co/B of each group."""
    net, m = conv_bn_relu_conv()
    b = m.transform("bottleneck{dim=co factor=2 layers=c1}")
    t = net.t
    mean = t("bn1.mean")[:4]
    bn = [v for k, v in b.weights.items() if k.startswith("bn1.mean")]
    assert any(np.allclose(v, mean.numpy()) for v in bn)


def test_bottleneck_co_kaiming_reinitialises_with_seed():
    net, m = conv_bn_relu_conv()
    a = m.transform("bottleneck{dim=co factor=2 layers=c1 seed=3}")
    b = m.transform("bottleneck{dim=co factor=2 layers=c1 seed=3}")
    c = m.transform("bottleneck{dim=co factor=2 layers=c1 seed=4}")
    assert torch.equal(w(a, "c1"), w(b, "c1")) and not torch.equal(w(a, "c1"), w(c, "c1"))
    assert abs(float(w(a, "c2").std()) - (2 / (4 * 9)) ** 0.5) < 0.1
    x = F.conv2d(torch.from_numpy(net.x), w(a, "c1"), w(a, "c1", 2), padding=1)
    bn = next(op for op in a.ops() if isinstance(op, nn.BatchNormOp))
    scale, shift, mean, var = (torch.from_numpy(a.weights[v.owner.key]) for v in bn.operands[1:])
    x = F.relu(F.batch_norm(x, mean, var, scale, shift, eps=1e-5))
    torch.testing.assert_close(run(a, net.x), F.conv2d(x, w(a, "c2"), w(a, "c2", 2), padding=1), **TOL)


def test_bottleneck_ci_reads_first_channels():
    net, m = one_conv()
    b = m.transform("bottleneck{dim=ci factor=4 layers=conv init=inherit}")
    x = torch.from_numpy(net.x)
    ref = F.conv2d(x[:, :2], net.t("conv.weight")[:, :2], net.t("conv.bias"), padding=1)
    torch.testing.assert_close(run(b, net.x), ref, **TOL)


# --- bad input ---------------------------------------------------------------------------------

def residual_block():
    net = Net((1, 8, 8, 8))
    y = net.conv("c1", net.block.args[0], 8)
    y = net.add(nn.AddOp.new(y, net.block.args[0]).named("add"))
    return net, net.model(net.add(nn.ReluOp.new(y).named("relu")))


@pytest.mark.parametrize("pipeline,error,words", [
    ("group{factor=3 layers=c1}", LegalityError, ["c1", "co", "8", "3"]),
    ("bottleneck{dim=co factor=5 layers=c1}", LegalityError, ["c1", "co", "8", "5"]),
    ("bottleneck{dim=kh factor=2 layers=c1}", PassError, ["kh", "co, ci, oh, ow"]),
    ("fold{dim=kh layers=add}", PassError, ["add", "convolution"]),
    ("group{factor=2 layers=\"layer[0-9]+\"}", PassError, ["layer[0-9]+", "matches no nest", "c1"]),
    ("bottleneck{dim=co factor=2 layers=c1}", LegalityError, ["c1", "co", "8 -> 4", "add", "residual"]),
    ("index-split{dim=co at=8 layers=c1}", LegalityError, ["c1", "at=8", "co = 8"]),
    ("group{factor=2 layers=c1},depthwise{layers=c1},group{factor=8 layers=c1}", PassError, ["c1", "ci"]),
])
def test_bad_input_names_layer_dim_value_and_leaves_model_unchanged(pipeline, error, words):
    _, m = residual_block()
    before, keys = m.text(), set(m.weights)
    with pytest.raises(error) as info:
        m.transform(pipeline)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert m.text() == before and set(m.weights) == keys


def test_failing_pass_in_place_leaves_module_untouched():
    """Inside one pass run: c1 would succeed, c2 fails; nothing of c1's rewrite may remain."""
    from nasir.lowering.passes import run_pipeline

    _, m = conv_bn_relu_conv()
    before, keys = m.text(), set(m.weights)
    with pytest.raises(LegalityError, match="c2"):
        run_pipeline(m.module, 'group{factor=4 layers="c1|c2"}')
    assert m.text() == before and set(m.weights) == keys


def test_inherit_without_values_is_a_clear_error():
    _, m = one_conv()
    m.weights.clear()
    g = m.transform("group{factor=2}")  # kaiming needs no values
    assert tuple(g.weights[nest_op(g, "conv").inputs[1].owner.key].shape) == (8, 4, 3, 3)
    with pytest.raises(PassError, match="init=inherit needs the trained value of weight 'conv.weight'"):
        m.transform("group{factor=2 init=inherit}")


# --- ResNet-34 ---------------------------------------------------------------------------------

def test_resnet34_group2_halves_block_conv_macs():
    from nasir import zoo

    model = zoo.load("resnet34", "cifar10")
    if not any(isinstance(op, nest.ComputeOp) for op in model.ops()):
        model = model.transform("convert-nn-to-nest")
    convs = [op.layer_name for op in model.ops()
             if isinstance(op, nest.ComputeOp) and op.kind == "mac" and "ci" in op.domain.dim_names]
    blocks = [name for name in convs if re.fullmatch(r"layer\d_layer\d\.\d+_conv[12]_Conv", name)]
    assert len(blocks) == 32, blocks
    grouped = model.transform(C.grouped("layer[0-9]_.*_conv[12]_Conv", 2))
    rows = {row.name: row for row in grouped.summary()}
    base = {row.name: row for row in model.summary()}
    for name in blocks:
        assert rows[name].macs * 2 == base[name].macs, name
    assert sum(base[n].macs for n in blocks) == 2 * sum(rows[n].macs for n in blocks)


def test_resnet34_group2_agrees_on_llvm_torch_and_onnx_runtime(tmp_path):
    """Issue 4's end-to-end check: the grouped ResNet-34 compiles on llvm, matches the torch backend,
    and its ONNX export gives the same outputs in ONNX Runtime."""
    import onnxruntime as ort

    import nasir
    from nasir import zoo

    model = zoo.load("resnet34", "cifar10").transform("convert-nn-to-nest")
    grouped = model.transform(C.grouped("layer[0-9]_.*_conv[12]_Conv", 2))
    x = np.random.default_rng(0).standard_normal(grouped.input_shapes[0]).astype(np.float32)
    expected = nasir.compile(grouped, target="torch")(x)
    np.testing.assert_allclose(nasir.compile(grouped, target="llvm")(x), expected, rtol=1e-4, atol=1e-4)
    path = grouped.to_onnx(tmp_path / "resnet34_g2.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pipeline", [
    "index-split{dim=co at=3 layers=c1}",
    "index-split{dim=oh parts=2 layers=c2}",
    "index-split{dim=ow at=5 layers=c1},index-split{dim=co parts=2 layers=c2}",
    "unshare{dim=oh parts=2 layers=c1 init=inherit}",
    "unshare{dim=ow parts=4 layers=c2 init=inherit}",
])
def test_function_preserving_transforms_keep_the_output(pipeline):
    """Index splits, and unshare with the trained weights copied into every band, compute the
    original network: the same outputs to 1e-5 on a conv, batch norm, relu, conv network."""
    net, m = conv_bn_relu_conv()
    s = m.transform(pipeline)
    assert s.text() != m.text()
    torch.testing.assert_close(run(s, net.x), run(m, net.x), rtol=1e-5, atol=1e-5)
