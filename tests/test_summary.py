"""Tests of nasir.summary: per-layer MACs and params against independent oracles (hand formulas,
PyTorch module parameters and buffers, forward hooks on the torch model, published MAC counts)."""

from __future__ import annotations

import functools

import pytest
from rich.console import Console
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region

import nasir
from nasir import zoo
from nasir.dialects import nn
from nasir.dialects.shapes import tensor
from nasir.model import Model


def small_model() -> Model:
    """conv 3->8 3x3 pad 1 (bias) -> bn -> relu -> depthwise 3x3 stride 2 -> maxpool -> gap ->
    reshape -> gemm 8->10 (trans_b), plus a batched matmul (2x4x5 @ 5x3) as a second output."""
    block = Block(arg_types=[tensor((1, 3, 16, 16)), tensor((2, 4, 5))])
    x, m = block.args
    ops = []

    def add(op):
        ops.append(op)
        return op.result

    def w(name, *shape):
        return add(nn.WeightOp.make(name, shape))

    c = add(nn.Conv2DOp.new(x, w("conv.w", 8, 3, 3, 3), w("conv.b", 8), pads=(1, 1, 1, 1)).named("conv"))
    bn = add(nn.BatchNormOp.new(c, w("bn.s", 8), w("bn.b", 8), w("bn.m", 8), w("bn.v", 8)).named("bn"))
    r = add(nn.ReluOp.new(bn).named("relu"))
    d = add(nn.Conv2DOp.new(r, w("dw.w", 8, 1, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1), groups=8).named("dw"))
    p = add(nn.MaxPoolOp.new(d, (2, 2), strides=(2, 2)).named("pool"))
    g = add(nn.GlobalAvgPoolOp.new(p).named("gap"))
    f = add(nn.ReshapeOp.new(g, (1, 8)).named("flatten"))
    y = add(nn.GemmOp.new(f, w("fc.w", 10, 8), w("fc.b", 10), trans_b=True).named("fc"))
    z = add(nn.MatMulOp.new(m, w("mm.w", 5, 3)).named("mm"))
    for op in ops:
        block.add_op(op)
    block.add_op(func.ReturnOp(y, z))
    fn = func.FuncOp("main", (list(block.arg_types), [y.type, z.type]), Region(block))
    module = ModuleOp([fn])
    module.verify()
    return Model(module)


def test_small_model_rows_match_hand_formulas():
    s = small_model().summary()
    rows = {r.name: r for r in s.rows}
    assert [r.name for r in s.rows] == ["conv", "bn", "relu", "dw", "pool", "gap", "flatten", "fc", "mm"]
    # N*Co*OH*OW*(Ci/G)*KH*KW
    assert rows["conv"].macs == 1 * 8 * 16 * 16 * 3 * 3 * 3
    assert rows["dw"].macs == 1 * 8 * 8 * 8 * 1 * 3 * 3
    assert rows["fc"].macs == 1 * 10 * 8          # M*N*K
    assert rows["mm"].macs == 2 * 4 * 3 * 5       # batch*M*N*K
    for name in ("bn", "relu", "pool", "gap", "flatten"):
        assert rows[name].macs == 0
    assert rows["conv"].params == 8 * 3 * 3 * 3 + 8
    assert rows["bn"].params == 4 * 8
    assert rows["dw"].params == 8 * 9
    assert rows["fc"].params == 10 * 8 + 10
    assert rows["mm"].params == 5 * 3
    assert rows["relu"].params == 0
    assert rows["dw"].shape == (1, 8, 8, 8) and rows["fc"].shape == (1, 10)
    assert rows["conv"].op == "nn.conv2d"
    assert s.total_macs == 55296 + 4608 + 80 + 120
    assert s.total_params == 224 + 32 + 72 + 90 + 15


def test_table_text_and_rich():
    s = small_model().summary()
    text = str(s)
    lines = text.splitlines()
    assert lines[0].split() == ["layer", "op", "output", "shape", "MACs", "params"]
    conv = next(line for line in lines if line.startswith("conv "))
    assert conv.split() == ["conv", "nn.conv2d", "1x8x16x16", "55,296", "224"]
    relu = next(line for line in lines if line.startswith("relu "))
    assert relu.split()[-2:] == ["-", "-"]
    assert lines[-1].split()[-2:] == ["60,104", "433"]
    # Columns are aligned: every row has the same width up to its last column.
    assert len({len(line) for line in (lines[0], conv)}) == 1
    console = Console(record=True, width=200)
    console.print(s)
    rendered = console.export_text()
    assert "nn.conv2d" in rendered and "60,104" in rendered and "433" in rendered
    assert len(s) == 9 and list(s) == s.rows


@functools.cache
def zoo_model(name: str, dataset: str) -> Model:
    return zoo.load(name, dataset)


def torch_oracle(name: str, dataset: str) -> tuple[int, int]:
    """(MACs, params) from the torch model: hooks on Conv2d/Linear, parameters + BN running stats."""
    import torch

    module = zoo.build_torch(name, dataset)
    macs = 0

    def hook(mod, inputs, output):
        nonlocal macs
        if isinstance(mod, torch.nn.Conv2d):
            kh, kw = mod.kernel_size
            macs += output.numel() * (mod.in_channels // mod.groups) * kh * kw
        else:
            macs += output.numel() * mod.in_features

    for mod in module.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        module(torch.zeros(zoo.input_shape(name, dataset)))
    params = sum(p.numel() for p in module.parameters())
    params += sum(b.numel() for n, b in module.named_buffers() if n.endswith(("running_mean", "running_var")))
    return macs, params


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_zoo_totals_match_torch(name):
    s = zoo_model(name, "cifar10").summary()
    assert (s.total_macs, s.total_params) == torch_oracle(name, "cifar10")


def test_nest_level_macs_match_nn_level():
    model = zoo_model("resnet18", "cifar10")
    nest_summary = model.transform("convert-nn-to-nest").summary()
    assert nest_summary.total_macs == model.summary().total_macs
    assert nest_summary.total_params == model.summary().total_params
    assert any(r.op == "nest.compute mac" for r in nest_summary.rows)


# Published: ResNet-18 1.82 GMACs, ResNet-34 3.67 GMACs at 224x224 (He et al. 2016, Table 1 FLOPs
# = multiply-adds; torchvision model cards list 1.81 / 3.66 GFLOPS).
@pytest.mark.parametrize("name,gmacs", [
    ("resnet18", 1.82),
    pytest.param("resnet34", 3.67, marks=pytest.mark.slow),
])
def test_imagenet_resnet_macs_match_published(name, gmacs):
    s = zoo_model(name, "imagenet").summary()
    assert s.total_macs == pytest.approx(gmacs * 1e9, rel=0.01)


def test_summary_of_loaded_text_model(tmp_path):
    model = small_model()
    path = tmp_path / "m.mlir"
    path.write_text(model.text())
    assert nasir.load(path).summary().rows == model.summary().rows
