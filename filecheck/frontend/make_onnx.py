"""Write a tiny ONNX model for the frontend's lit tests: `python make_onnx.py CASE OUT.onnx`.

lit tests cannot ship binary .onnx files comfortably, so each RUN line builds its input here first:

    // RUN: %python %S/make_onnx.py conv %t.onnx && nasir-opt %t.onnx | filecheck %s

Weights are seeded random arrays; the graphs are small enough to read in the CHECK lines.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def value(name: str, *shape: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def conv():
    """Conv (3x3, pad 1, bias) -> Relu."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    return nodes, [value("x", 1, 3, 8, 8)], [value("z", 1, 4, 8, 8)], [weight("W", 4, 3, 3, 3), weight("B", 4)]


def gemm():
    """Flatten -> Gemm (transB) -> Softmax."""
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flatten", axis=1),
             helper.make_node("Gemm", ["f", "W", "B"], ["y"], name="fc", transB=1),
             helper.make_node("Softmax", ["y"], ["z"], name="softmax", axis=1)]
    return nodes, [value("x", 1, 4, 2, 2)], [value("z", 1, 10)], [weight("W", 10, 16), weight("B", 10)]


def pool():
    """MaxPool (3x3, stride 2, pad 1) -> AveragePool (2x2) -> GlobalAveragePool."""
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["m"], ["a"], name="avgpool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["a"], ["z"], name="gap")]
    return nodes, [value("x", 1, 4, 16, 16)], [value("z", 1, 4, 1, 1)], []


def residual():
    """Conv -> BatchNormalization -> Add(input) -> Relu: a ResNet block's tail."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("BatchNormalization", ["c", "S", "B", "M", "V"], ["n"], name="bn", epsilon=1e-5),
             helper.make_node("Add", ["n", "x"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["z"], name="relu")]
    var = numpy_helper.from_array(RNG.uniform(0.5, 1.5, 4).astype(np.float32), "V")
    return (nodes, [value("x", 1, 4, 8, 8)], [value("z", 1, 4, 8, 8)],
            [weight("W", 4, 4, 1, 1), weight("S", 4), weight("B", 4), weight("M", 4), var])


def unsupported():
    """A graph with an op nasir does not implement (Einsum)."""
    nodes = [helper.make_node("Einsum", ["x", "x"], ["z"], name="the_einsum", equation="ij,ij->ij")]
    return nodes, [value("x", 2, 2)], [value("z", 2, 2)], []


CASES = {f.__name__: f for f in (conv, gemm, pool, residual, unsupported)}


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in CASES:
        sys.exit(f"usage: make_onnx.py {{{'|'.join(CASES)}}} OUT.onnx")
    case, out = sys.argv[1:]
    nodes, inputs, outputs, inits = CASES[case]()
    graph = helper.make_graph(nodes, case, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    main()
