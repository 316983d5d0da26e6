"""pad-planes: a ResNeXt-like block on 32 x 32 and 16 x 16 images (planes 4 KiB and 1 KiB apart)
compiled for llvm at both vector widths against ONNX Runtime, with the tensors the pass pads and
their padding rows poisoned with NaN: a 3x3 conv reads row H of a padded plane as zero padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import lanes_of
from onnx import helper
from onnx_graphs import Initializers, onnxruntime_case, save_graph
from test_llvm_backend import build, rand

from nasir.dialects import nest, nn
from nasir.dialects.attributes import PAD_ROWS
from nasir.dialects.shapes import shape_of
from nasir.frontend.onnx_import import import_onnx
from nasir.lowering.passes import run_pipeline
from nasir.lowering.pipeline import LLVM
from nasir.measure.kernels import standalone
from nasir.runtime.llvm_executable import compile_llvm
from nasir.tuning.host import tunable_nests


def _block(path) -> None:
    """x (64 x 32 x 32) -> 1x1 128 -> grouped 3x3 -> 1x1 64 (+ x) -> 1x1 64 (+ its input) -> 1x1
    stride 2 -> 1x1 -> max pool 2x2 -> 3x3 -> mean."""
    inits = Initializers()
    weight, bias = inits.conv_weight, inits.bias

    n = helper.make_node
    nodes = [
        n("Conv", ["x", weight("w1", (128, 64, 1, 1)), bias("b1", 128)], ["c1"]),
        n("Relu", ["c1"], ["a"]),
        n("Conv", ["a", weight("w2", (128, 32, 3, 3)), bias("b2", 128)], ["c2"], pads=[1, 1, 1, 1], group=4),
        n("Relu", ["c2"], ["b"]),
        n("Conv", ["b", weight("w3", (64, 128, 1, 1)), bias("b3", 64)], ["c3"]),
        n("Add", ["c3", "x"], ["s"]),
        n("Relu", ["s"], ["d"]),
        n("Conv", ["d", weight("w7", (64, 64, 1, 1)), bias("b7", 64)], ["c7"]),
        n("Add", ["c7", "d"], ["s7"]),
        n("Relu", ["s7"], ["d7"]),
        n("Conv", ["d7", weight("w4", (96, 64, 1, 1)), bias("b4", 96)], ["e"], strides=[2, 2]),
        n("Conv", ["e", weight("w5", (96, 96, 1, 1)), bias("b5", 96)], ["f"]),
        n("MaxPool", ["f"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p", weight("w6", (32, 96, 3, 3)), bias("b6", 32)], ["g"], pads=[1, 1, 1, 1]),
        n("ReduceMean", ["g"], ["y"], axes=[2, 3], keepdims=0),
    ]
    save_graph(path, "block", nodes, inits, (1, 64, 32, 32), (1, 32))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    path = tmp_path_factory.mktemp("pad_planes") / "block.onnx"
    _block(path)
    return onnxruntime_case(path, (1, 64, 32, 32))


def through_pad_planes(path: str):
    """The ONNX file's module lowered by the llvm pipeline up to and with pad-planes."""
    module = import_onnx(path).module
    run_pipeline(module, str(LLVM.until("pad-planes")))
    return module


def test_the_block_matches_onnxruntime_with_its_1x1_inputs_padded(case, cpu):
    path, x, expected = case
    module = through_pad_planes(path)
    padded = {op.layer_name: shape_of(op.result) for op in module.walk()
              if isinstance(op, nest.ComputeOp) and PAD_ROWS.on(op)}
    # every 4 KiB plane pads, also a (read by the grouped 3x3 conv, with its zero padding in row H)
    # and x's successors d and d7 (each read by a residual add, written in place); b and e (16 x 16)
    # too, unless their 1x1 reader and their writer run lanes over output channels: then the
    # reader broadcasts them from channel blocks (pack-activations); f pads where its max pool does not
    # read it channel-blocked; p (8 x 8, 256 bytes) does not
    nests = {op.layer_name: op for op in module.walk() if isinstance(op, nest.ComputeOp)}
    assert padded.pop("conv") == (1, 128, 33, 32)  # a
    assert padded.pop("conv_2") == (1, 64, 33, 32)  # d
    assert padded.pop("conv_3") == (1, 64, 33, 32)  # d7
    lanes = lanes_of(cpu)
    for writer, reader, (c, h, w) in (("conv_1", "conv_2", (128, 32, 32)), ("conv_4", "conv_5", (96, 16, 16))):
        if {nests[writer].get_schedule().vector, nests[reader].get_schedule().vector} == {"co.i"}:
            assert shape_of(nests[writer].result) == (1, c // lanes, h, w, lanes)  # b, e: blocked
        else:
            assert padded.pop(writer) == (1, c, h + 1, w)  # b, e
    assert padded in ({}, {"conv_5": (1, 96, 17, 16)})
    exe = compile_llvm(import_onnx(path).module, threads=2)
    exe.workspace.view(np.float32)[:] = np.nan  # what the padding rows hold: never read as data
    np.testing.assert_allclose(exe(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("group", [1, 8])
def test_a_3x3_conv_reads_the_padding_row_of_its_input_as_zero(tmp_path, cpu, group):
    """x -> 1x1 conv -> a (64 x 32 x 32, padded) -> 3x3 conv with padding 1 (dense: lanes along
    the rows; 8 groups of 8 channels: lanes over the output channels, broadcasts of a): output
    row 31 reads row 32 of a, the padding row, here NaN; it must be read as the zero padding."""
    inits = Initializers()
    nodes = [helper.make_node("Conv", ["x", inits.conv_weight("w1", (64, 64, 1, 1)), inits.bias("b1", 64)], ["a"]),
             helper.make_node("Conv", ["a", inits.conv_weight("w2", (64, 64 // group, 3, 3)), inits.bias("b2", 64)],
                              ["y"], pads=[1, 1, 1, 1], group=group)]
    save_graph(tmp_path / "two.onnx", "two", nodes, inits, (1, 64, 32, 32), (1, 64, 32, 32))
    path, x, expected = onnxruntime_case(tmp_path / "two.onnx", (1, 64, 32, 32))
    module = through_pad_planes(path)
    assert [shape_of(op.result) for op in module.walk() if PAD_ROWS.on(op)] == [(1, 64, 33, 32)]
    exe = compile_llvm(import_onnx(path).module)
    exe.workspace.view(np.float32)[:] = np.nan
    np.testing.assert_allclose(exe(x), expected, rtol=1e-4, atol=1e-4)


def test_a_nest_timed_alone_runs_on_the_padded_planes_it_gets_in_a_compile(cpu):
    """`standalone` (the kernel timings of `nasir tune` and the search): a 1x1 conv 32 -> 48 on
    16 x 16 takes its argument and writes its result with a padding row below each plane; fed
    planes whose padding row is NaN, its 16 rows are PyTorch's conv."""
    w = rand(48, 32, 1, 1)
    model = build([(1, 32, 16, 16)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("w", w), None, (1, 1), (0,) * 4, (1, 1), 1).named("conv")])
    level, groups = tunable_nests(model, None)
    (ops,) = groups.values()
    alone = standalone(level, ops[0])
    assert "(tensor<1x32x17x16xf32>, tensor<48x32x1x1xf32>) -> tensor<1x48x17x16xf32>" in alone.text()
    x = rand(1, 32, 16, 16)
    planes = np.full((1, 32, 17, 16), np.nan, np.float32)
    planes[:, :, :16] = x
    got = compile_llvm(alone.transform("default-schedule").module)(planes)
    want = F.conv2d(torch.tensor(x), torch.tensor(w)).numpy()
    assert got.shape == (1, 48, 17, 16)
    np.testing.assert_allclose(got[:, :, :16], want, rtol=1e-4, atol=1e-4)
