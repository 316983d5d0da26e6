"""llvm backend: each kind of producer nest feeding each kind of consumer, against ONNX Runtime.

Decisions made for one nest are read by the next: default-schedule gives a conv lanes over its
output channels or along its rows, pack-activations stores its output NCHW16c (NCHW8c) when every
reader runs lanes over the same channels, a max pool reading it alone computes its rows in its own
kernel (`nasir.fuse_rows`), and nest-bufferize plans the arena around the kernels that result.
Issue 38: in a VGG block the fused pool's result took the arena bytes of the conv output that the
fused conv was still reading (silently wrong at both widths and any thread count).

Producers: 3x3 convs (with and without a ReLU epilogue) with channels that fill whole vectors at
both widths (128), at AVX2's only (24, 40, 72: 3, 5, 9 vectors of 8) or at neither (100), and
a 7x7 stride-2 conv run as Winograd. Consumers, each in its own chain of one model: max pools
(2x2, and 3x3 stride 2 whose windows overlap), an average pool, a conv and a residual add. Every
chain starts with a conv whose output the producer reads and ends with a 1x1 conv, so all of them
live in the arena. Each model runs at both vector widths (conftest's `cpu`), on 1 and 2 threads.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from test_llvm_backend import build, rand, run, scheduled_nests, with_winograd
from xdsl.dialects import bufferization, func

import nasir
from nasir.dialects import nest, nn
from nasir.dialects.attributes import FUSE_ROWS, WINOGRAD
from nasir.errors import LoweringError
from nasir.lowering.passes import run_pipeline
from nasir.lowering.pipeline import LLVM

pytestmark = pytest.mark.usefixtures("cpu")  # every test at both vector widths (conftest.py)

SIZE = 16
CONSUMERS = ["maxpool", "maxpool3", "avgpool", "conv", "add"]


def agrees_with_onnxruntime(path, winograd: bool = False) -> nasir.Model:
    """nasir's llvm code (for the `cpu` fixture's CPU), on 1 and 2 threads, and ONNX Runtime agree
    on every output of the file at an input of normal draws (`winograd`: its convs with a wide
    strided row window run as Winograd at either width); returns the model."""
    model = with_winograd(nasir.load(path)) if winograd else nasir.load(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal(model.input_shapes[0]).astype(np.float32)
    want = session.run(None, {session.get_inputs()[0].name: x})
    exe = nasir.compile(model)
    for threads in (1, 2):
        exe.threads = threads
        got = exe(x)
        for g, w, out in zip(got if isinstance(got, list) else [got], want, session.get_outputs()):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{out.name}, {threads} threads")
    return model


@pytest.fixture(scope="module")
def vgg_block(tmp_path_factory):
    """Issue 38's VGG block (conv-ReLU-conv-ReLU-max pool-conv, 64 and 128 channels) as ONNX."""
    torch.manual_seed(0)
    conv, relu = torch.nn.Conv2d, torch.nn.ReLU
    net = torch.nn.Sequential(conv(3, 64, 3, padding=1), relu(), conv(64, 64, 3, padding=1), relu(),
                              torch.nn.MaxPool2d(2, 2), conv(64, 128, 3, padding=1)).eval()
    path = tmp_path_factory.mktemp("vgg") / "vgg_block.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice, as in nasir.zoo
        torch.onnx.export(net, (torch.randn(1, 3, SIZE, SIZE),), str(path), opset_version=13, dynamo=False)
    return path


def test_vgg_block(vgg_block):
    """Issue 38: the max pool computes the second conv's rows (FUSE_ROWS) while that conv reads the
    first conv's output, which the pool's result must not overwrite."""
    model = agrees_with_onnxruntime(vgg_block)
    scheduled = model.transform(str(LLVM.before("pack-activations")))
    assert any(FUSE_ROWS.on(op) for op in scheduled.module.walk() if isinstance(op, nest.ComputeOp))


def chains(producer: str, channels: int, relu: bool) -> onnx.ModelProto:
    """One chain per consumer, each its own: conv 3 -> `channels` -> ReLU -> the producer (a 3x3
    conv, or a 7x7 stride-2 one: "winograd") [-> ReLU] -> the consumer -> 1x1 conv to 16 channels,
    an output. The residual add adds the producer's input (a 1x1 stride-2 conv of it after the
    strided producer). Weights scaled by 1/sqrt(fan-in): values stay near 1."""
    rng = np.random.default_rng(0)
    inits, nodes = {}, []

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(x, out, o, i, k, stride=1):
        inits[out + ".w"] = (rng.standard_normal((o, i, k, k)) / (i * k * k) ** 0.5).astype(np.float32)
        inits[out + ".b"] = rng.standard_normal(o).astype(np.float32)
        return node("Conv", [x, out + ".w", out + ".b"], out, kernel_shape=[k, k], strides=[stride] * 2,
                    pads=[k // 2] * 4)

    k, stride = (7, 2) if producer == "winograd" else (3, 1)
    for consumer in CONSUMERS:
        a = node("Relu", [conv("x", f"{consumer}.in", channels, 3, 3)], f"{consumer}.in.relu")
        p = conv(a, f"{consumer}.producer", channels, channels, k, stride)
        p = node("Relu", [p], f"{consumer}.producer.relu") if relu else p
        y = f"{consumer}.consumer"
        if consumer == "maxpool":
            node("MaxPool", [p], y, kernel_shape=[2, 2], strides=[2, 2])
        elif consumer == "maxpool3":
            node("MaxPool", [p], y, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
        elif consumer == "avgpool":
            node("AveragePool", [p], y, kernel_shape=[2, 2], strides=[2, 2])
        elif consumer == "conv":
            conv(p, y, channels, channels, 3)
        else:
            node("Add", [p, a if stride == 1 else conv(a, f"{consumer}.skip", channels, channels, 1, stride)], y)
        conv(y, consumer, 16, channels, 1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    graph = helper.make_graph(nodes, "chains", [x],
                              [helper.make_tensor_value_info(c, TensorProto.FLOAT, None) for c in CONSUMERS],
                              initializer=[numpy_helper.from_array(v, name) for name, v in inits.items()])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    model.ir_version = 8
    return model


PRODUCERS = [  # (producer, channels, ReLU epilogue); test_vgg_block has 64 channels and a ReLU
    ("conv", 128, False),  # channel lanes, NCHW16c into the max pools, their kernels compute its rows
    ("conv", 24, True),  # 3 vectors of 8: packed for the pools with AVX2, rows along ow with AVX-512
    ("conv", 40, False),  # 5 and 9 vectors of 8: fused into the max pools with AVX2
    ("conv", 72, True),
    ("conv", 100, True),  # whole vectors at neither width: lanes along the rows, NCHW
    ("winograd", 64, True),  # 1-D Winograd, fused into the max pools
]


@pytest.mark.parametrize("producer,channels,relu", PRODUCERS)
def test_producer_into_each_consumer(tmp_path, producer, channels, relu):
    path = tmp_path / "chains.onnx"
    onnx.save(chains(producer, channels, relu), path)
    agrees_with_onnxruntime(path, winograd=producer == "winograd")


def test_kernel_writing_bytes_another_argument_holds_is_refused():
    """A memory plan out of step with the kernels (issue 38's: the pool's result over the conv
    output that the conv whose rows the pool's kernel computes reads) is refused when the kernels
    are made instead of running silently wrong. (The 3x3 convs run direct: as Winograd the second
    would take a scratch argument.)"""
    def body(a, W):
        first = nn.Conv2DOp.new(a[0], W("w1", rand(64, 3, 3, 3)), pads=(1,) * 4).named("first")
        second = nn.Conv2DOp.new(first.results[0], W("w2", rand(64, 64, 3, 3)), pads=(1,) * 4).named("second")
        pool = nn.MaxPoolOp.new(second.results[0], (2, 2), strides=(2, 2)).named("pool")
        return [first, second, pool, nn.Conv2DOp.new(pool.results[0], W("w3", rand(16, 64, 1, 1))).named("last")]

    model = with_winograd(build([(1, 3, 16, 16)], body), "never")
    assert FUSE_ROWS.on(scheduled_nests(model)["pool"])
    run_pipeline(model.module, str(LLVM.before("convert-nest-to-loops")))
    dest = {mat.source.owner.layer_name: mat.dest.owner for mat in model.func.body.block.ops
            if isinstance(mat, bufferization.MaterializeInDestinationOp)}
    dest["pool"].operands[1] = dest["first"].byte_shift  # arguments: first, w2, second, pool
    with pytest.raises(LoweringError, match="kernel 'second\\+pool': argument 3, which it writes, shares workspace "
                                            "bytes with argument 0"):
        run_pipeline(model.module, "convert-nest-to-loops")


def test_winograd_conv_writing_over_its_residual_keeps_noalias_on_its_scratch():
    """A Winograd conv (its scratch the last kernel argument) that writes its result over the
    residual it adds: the residual and the result share bytes and lose noalias, the scratch keeps
    it (before, the result kept it and the scratch lost it). torch's numbers. (A 1x1 conv reads the
    residual first, by broadcasts over its channels: it stays NCHW, as the Winograd conv's result
    is, at both widths; channel-blocked, it would not share that result's bytes.)"""
    ws, w, v, x = rand(64, 8, 1, 1), rand(64, 8, 7, 7) / 20, rand(8, 64, 1, 1) / 8, rand(1, 8, 32, 32)
    p = rand(8, 64, 1, 1) / 8

    def body(a, W):
        side = nn.Conv2DOp.new(a[0], W("ws", ws), strides=(2, 2)).named("side")
        relu = nn.ReluOp.new(side.results[0]).named("relu")
        probe = nn.Conv2DOp.new(relu.results[0], W("p", p)).named("probe")
        stem = nn.Conv2DOp.new(a[0], W("w", w), strides=(2, 2), pads=(3,) * 4).named("stem")
        add = nn.AddOp.new(stem.results[0], relu.results[0]).named("add")
        last = nn.Conv2DOp.new(add.results[0], W("v", v)).named("last")
        return [side, relu, probe, stem, add, last, nn.AddOp.new(last.results[0], probe.results[0]).named("sum")]

    model = with_winograd(build([(1, 8, 32, 32)], body))
    assert WINOGRAD.on(scheduled_nests(model)["stem"])
    lowered = model.transform(str(LLVM.before("convert-loops-to-llvm")))
    kernel = next(f for f in lowered.module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == "stem")
    # x, the packed weight, the residual, the result, the scratch
    assert ["llvm.noalias" in a.data for a in kernel.arg_attrs.data] == [True, True, False, False, True]
    t = {name: torch.from_numpy(a) for name, a in dict(ws=ws, w=w, v=v, p=p, x=x).items()}
    side = F.conv2d(t["x"], t["ws"], stride=2).relu()
    want = F.conv2d(F.conv2d(t["x"], t["w"], stride=2, padding=3) + side, t["v"]) + F.conv2d(side, t["p"])
    np.testing.assert_allclose(run(model, x), want.numpy(), rtol=1e-4, atol=1e-4)


def test_pool_whose_input_a_fused_pool_makes_is_not_fused_in_turn():
    """The fuzzer's conv -> max pool -> max pool (tests/regressions/fuzz-pool-after-fused-pool.onnx):
    both pools were marked to compute their producer's rows; the second held the first, whose
    producer conv no kernel then ran (0.74 off at both widths). The first pool keeps its conv, the
    second reads the first's result; a plan that fuses both again is refused, not run. The 4x4
    conv runs as Winograd (as it did by default with AVX-512 when the fuzzer found this; by
    default now it runs direct there, its 3 x 3 outputs too few for Winograd to pay)."""
    path = Path(__file__).parent / "regressions" / "fuzz-pool-after-fused-pool.onnx"
    model = agrees_with_onnxruntime(path, winograd=True)
    nests = scheduled_nests(model)
    assert FUSE_ROWS.on(nests["maxpool8"]) and not FUSE_ROWS.on(nests["maxpool9"])
    run_pipeline(model.module, str(LLVM.before("convert-nest-to-loops")))
    second = next(op for op in model.module.walk() if isinstance(op, nest.ComputeOp) and op.layer_name == "maxpool9")
    FUSE_ROWS.set(second, True)
    with pytest.raises(LoweringError, match="no kernel computes the rows of 'conv7'"):
        run_pipeline(model.module, "convert-nest-to-loops")


def test_of_three_max_pools_in_a_row_the_first_computes_its_producers_rows(monkeypatch):
    """conv -> sigmoid -> max pool -> max pool -> max pool (the fuzzer's seed 1796074389): default-
    schedule marked the pools to compute their producer's rows in the order of a set, so a later
    pool could be marked before the one it reads, and both were fused ("no kernel computes the
    rows of 'conv'"). In program order, whatever order the nests on lanes over channels come in
    (here last first), the first pool fuses its conv, the second reads its input whole (the third
    may compute the second's rows). Torch's numbers."""
    from nasir.lowering.schedule import default_schedule

    settle = default_schedule._settle

    def last_first(module, blocked):
        left = settle(module, blocked)
        return [n for n in reversed(list(blocked)) if n in left]

    monkeypatch.setattr(default_schedule, "_settle", last_first)
    x, w, b = rand(1, 192, 12, 12), rand(64, 192, 3, 3) / 40, rand(64)

    def body(a, W):
        conv = nn.Conv2DOp.new(a[0], W("w", w), W("b", b), strides=(2, 2), pads=(1,) * 4).named("conv")
        ops = [conv, nn.SigmoidOp.new(conv.result)]
        for k, (kernel, ceil) in enumerate((((2, 2), True), ((1, 1), False), ((1, 1), False))):
            ops.append(nn.MaxPoolOp.new(ops[-1].results[0], kernel, strides=(2, 2), ceil_mode=ceil).named(f"pool{k}"))
        return ops

    model = build([x.shape], body)
    nests = scheduled_nests(model)
    fused = [FUSE_ROWS.on(nests[f"pool{k}"]) for k in range(3)]
    assert fused[:2] == [True, False] and not (fused[1] and fused[2]), fused  # pool2 may compute pool1's rows
    y = torch.sigmoid(F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1))
    y = F.max_pool2d(F.max_pool2d(F.max_pool2d(y, 2, 2, ceil_mode=True), 1, 2), 1, 2)
    np.testing.assert_allclose(run(model, x), y.numpy(), rtol=1e-4, atol=1e-4)
