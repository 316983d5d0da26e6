"""ONNX files of hand-built graphs for the whole-graph tests: one input x, one output y."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


class Initializers:
    """A graph's constants, seeded: conv weights scaled by their fan-in, biases near 0."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.tensors: list[onnx.TensorProto] = []

    def const(self, name: str, array) -> str:
        self.tensors.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def conv_weight(self, name: str, shape) -> str:
        fan_in = int(np.prod(shape[1:]))
        return self.const(name, (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    def bias(self, name: str, n: int) -> str:
        return self.const(name, (0.1 * self.rng.standard_normal(n)).astype(np.float32))


def save_graph(path, name: str, nodes, inits: Initializers, x_shape, y_shape) -> None:
    """`nodes` from x (`x_shape`) to y (`y_shape`) as a checked opset-17 ONNX file."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                              initializer=inits.tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def onnxruntime(path, x: np.ndarray) -> np.ndarray:
    """ONNX Runtime's (CPU) first output of the ONNX file at `path` for the input `x`: the oracle."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def onnxruntime_case(path, x_shape, seed: int = 1) -> tuple[str, np.ndarray, np.ndarray]:
    """(path, a seeded standard-normal x of `x_shape`, ONNX Runtime's y for it): the oracle's case."""
    x = np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)
    return str(path), x, onnxruntime(path, x)
