"""A whole CNN with realistic channel counts (16-256) that puts the element-wise, data-movement and
reduction ops of ONNX's CNN exports between its convolutions, on llvm at both vector widths and on
the torch backend, against ONNX Runtime.

    Conv 16->32, PRelu, reflect Pad, Conv 32->64, Elu, ConvTranspose 64->48 (stride 2), Tanh, Split,
    Max / Min, Sqrt(Abs(Sub)), Concat, edge Pad, Conv 48->128 (stride 2), Selu, ReduceSum over W,
    Div, ReduceMean over C, Expand, Tile, Sub, Pow, Neg, Exp, Conv 128->256 (1x1), Softplus,
    ReduceMean over H and W, LogSoftmax
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_graphs import Initializers, onnxruntime_case, save_graph

from nasir.frontend.onnx_import import import_onnx
from nasir.runtime.llvm_executable import compile_llvm
from nasir.runtime.torch_executable import compile_torch


def _graph(path) -> None:
    inits = Initializers()
    const, conv_weight, bias, rng = inits.const, inits.conv_weight, inits.bias, inits.rng

    n = helper.make_node
    nodes = [
        n("Conv", ["x", conv_weight("w1", (32, 16, 3, 3)), bias("b1", 32)], ["c1"], pads=[1, 1, 1, 1]),
        n("PRelu", ["c1", const("slope", rng.uniform(0.05, 0.3, (32, 1, 1)).astype(np.float32))], ["p1"]),
        n("Pad", ["p1", const("pads1", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], ["r1"], mode="reflect"),
        n("Conv", ["r1", conv_weight("w2", (64, 32, 3, 3)), bias("b2", 64)], ["c2"]),
        n("Elu", ["c2"], ["e2"], alpha=0.7),
        n("ConvTranspose", ["e2", conv_weight("w3", (64, 48, 3, 3)), bias("b3", 48)], ["t3"],
          strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        n("Tanh", ["t3"], ["h3"]),
        n("Split", ["h3", const("halves", np.array([24, 24], np.int64))], ["sa", "sb"], axis=1),
        n("Max", ["sa", "sb"], ["hi"]),
        n("Min", ["sa", "sb"], ["lo"]),
        n("Sub", ["hi", "lo"], ["gap"]),
        n("Abs", ["gap"], ["agap"]),
        n("Sqrt", ["agap"], ["root"]),
        n("Concat", ["hi", "root"], ["cat"], axis=1),
        n("Pad", ["cat", const("pads2", np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64))], ["e3"], mode="edge"),
        n("Conv", ["e3", conv_weight("w4", (128, 48, 3, 3)), bias("b4", 128)], ["c4"], strides=[2, 2]),
        n("Selu", ["c4"], ["s4"]),
        n("ReduceSum", ["s4", const("w_axis", np.array([3], np.int64))], ["rows"], keepdims=1),
        n("Abs", ["rows"], ["arows"]),
        n("Add", ["arows", const("one", np.ones((1,), np.float32))], ["den"]),
        n("Div", ["s4", "den"], ["q4"]),
        n("ReduceMean", ["q4"], ["cmean"], axes=[1], keepdims=1),
        n("Expand", ["cmean", const("to", np.array([1, 64, 1, 1], np.int64))], ["wide"]),
        n("Tile", ["wide", const("reps", np.array([1, 2, 1, 1], np.int64))], ["mean128"]),
        n("Sub", ["q4", "mean128"], ["centred"]),
        n("Pow", ["centred", const("two", np.full((1,), 2.0, np.float32))], ["sq"]),
        n("Neg", ["sq"], ["nsq"]),
        n("Exp", ["nsq"], ["bump"]),
        n("Conv", ["bump", conv_weight("w5", (256, 128, 1, 1)), bias("b5", 256)], ["c5"]),
        n("Softplus", ["c5"], ["sp"]),
        n("ReduceMean", ["sp"], ["pooled"], axes=[2, 3], keepdims=0),
        n("LogSoftmax", ["pooled"], ["y"], axis=1),
    ]
    save_graph(path, "cnn_ops", nodes, inits, (1, 16, 16, 16), (1, 256))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    path = tmp_path_factory.mktemp("cnn_ops") / "cnn_ops.onnx"
    _graph(path)
    return onnxruntime_case(path, (1, 16, 16, 16))


def test_on_torch(case):
    path, x, expected = case
    np.testing.assert_allclose(compile_torch(import_onnx(path).module)(x), expected, rtol=1e-4, atol=1e-4)


def test_on_llvm(case, cpu):
    path, x, expected = case
    np.testing.assert_allclose(compile_llvm(import_onnx(path).module, threads=2)(x), expected, rtol=1e-4, atol=1e-4)
