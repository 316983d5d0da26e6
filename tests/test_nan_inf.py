"""NaN and infinities through the llvm backend come out as ONNX Runtime (or torch) gives them.

Every op whose code compares values (max pools, ReLU, clip and the other clamped activations, as
ops of their own and as epilogues fused into a conv, softmax's running max) runs on inputs holding
NaN, +inf and -inf among ordinary numbers, and on all-NaN and all-infinite inputs, compiled for an
AVX2 CPU (znver3, 8 lanes) and an AVX-512 one (znver4, 16 lanes); channel and row counts leave
vector tails. maxnum/minnum-style code would turn NaN into numbers (issue 30).

Oracle: ONNX Runtime, except for max pools. ORT's MaxPool and GlobalMaxPool do not follow one NaN
rule: MaxPool gives NaN for some windows holding a NaN and a number for others, and -3.4e38 for an
all-NaN window; GlobalMaxPool skips NaN (and, next to +inf, returned 1.0 on a probe). There torch is
the oracle: a window holding a NaN has max NaN, as IEEE `maximum` and numpy's `max` say.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import nasir
from nasir.errors import ForeignCPUError

CPUS = ("znver3", "znver4")
SHAPE = (1, 35, 9, 11)


def graph_file(path, nodes, initializers=()) -> str:
    """An ONNX file of `nodes` from input x (SHAPE) to output y, its shape inferred."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_empty_tensor_value_info("y")], initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    return str(path)


def const(name: str, value) -> onnx.TensorProto:
    value = np.asarray(value, np.float32)
    return helper.make_tensor(name, TensorProto.FLOAT, value.shape, value.ravel().tolist())


def conv_then(node: onnx.NodeProto, *initializers):
    """A 3x3 conv whose output `node` takes (fused into the conv as an epilogue)."""
    w = np.random.default_rng(3).standard_normal((35, 35, 3, 3)).astype(np.float32) * 0.1
    conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    node.input[0] = "c"
    return [conv, node], [const("w", w), *initializers]


CASES = {
    "relu": lambda: ([helper.make_node("Relu", ["x"], ["y"])], []),
    "clip": lambda: ([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [const("lo", -0.5), const("hi", 0.75)]),
    "leaky_relu": lambda: ([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1)], []),
    "hard_sigmoid": lambda: ([helper.make_node("HardSigmoid", ["x"], ["y"])], []),
    "hard_swish": lambda: ([helper.make_node("HardSwish", ["x"], ["y"])], []),
    "conv_relu": lambda: conv_then(helper.make_node("Relu", ["c"], ["y"])),
    "conv_clip": lambda: conv_then(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]), const("lo", 0.0), const("hi", 6.0)),
    "softmax": lambda: ([helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=1)],
                        [helper.make_tensor("s", TensorProto.INT64, [2], [35, 99])]),
}
POOLS = {
    "max_pool_3x3_s1_p1": (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), lambda x: F.max_pool2d(x, 3, 1, 1)),
    "max_pool_3x3_s2_p1": (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), lambda x: F.max_pool2d(x, 3, 2, 1)),
    "max_pool_2x2_s2": (dict(kernel_shape=[2, 2], strides=[2, 2]), lambda x: F.max_pool2d(x, 2, 2)),
}


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mixed = rng.standard_normal(SHAPE).astype(np.float32)
    where = rng.random(SHAPE)
    mixed[where < 0.04] = np.nan
    mixed[(where >= 0.04) & (where < 0.07)] = np.inf
    mixed[(where >= 0.07) & (where < 0.10)] = -np.inf
    sparse = rng.standard_normal(SHAPE).astype(np.float32)
    sparse.flat[rng.choice(sparse.size, 12, replace=False)] = np.nan  # NaN in a few windows only
    return {"mixed": mixed, "sparse_nan": sparse, "all_nan": np.full(SHAPE, np.nan, np.float32),
            "all_inf": np.full(SHAPE, np.inf, np.float32), "all_minus_inf": np.full(SHAPE, -np.inf, np.float32)}


def compiled(path: str, cpu: str):
    return nasir.compile(nasir.load(path), target="llvm", threads=1, cpu=cpu)


def run(exe, x: np.ndarray) -> np.ndarray | None:
    """The executable's output, or None where this machine cannot run code for its CPU."""
    try:
        return exe(x)
    except ForeignCPUError:
        return None


def assert_same(got, want, what: str) -> None:
    if got is None:
        return
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN at other places"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("case", CASES)
def test_like_onnxruntime(tmp_path, case, cpu):
    nodes, initializers = CASES[case]()
    path = graph_file(tmp_path / f"{case}.onnx", nodes, initializers=initializers)
    exe = compiled(path, cpu)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for name, x in inputs().items():
        assert_same(run(exe, x), session.run(None, {"x": x})[0], f"{case} on {name} ({cpu})")


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("pool", POOLS)
def test_max_pool_like_torch(tmp_path, pool, cpu):
    attrs, oracle = POOLS[pool]
    path = graph_file(tmp_path / f"{pool}.onnx", [helper.make_node("MaxPool", ["x"], ["y"], **attrs)])
    exe = compiled(path, cpu)
    for name, x in inputs().items():
        assert_same(run(exe, x), oracle(torch.from_numpy(x)).numpy(), f"{pool} on {name} ({cpu})")


@pytest.mark.parametrize("cpu", CPUS)
def test_global_max_pool_like_torch(tmp_path, cpu):
    path = graph_file(tmp_path / "gmp.onnx", [helper.make_node("GlobalMaxPool", ["x"], ["y"])])
    exe = compiled(path, cpu)
    for name, x in inputs().items():
        assert_same(run(exe, x), torch.from_numpy(x).amax((2, 3), keepdim=True).numpy(), f"global max pool on {name} ({cpu})")
