"""ONNX frontend + torch backend against ONNX Runtime, op by op and on exporter-style graphs.

Each case is a small graph built with onnx.helper; nasir imports it, runs it with the torch backend,
and the result must match ONNX Runtime (the independent oracle) to 1e-4.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from nasir import zoo
from nasir.dialects import nn
from nasir.errors import FrontendError, ShapeError, UnsupportedOpError
from nasir.frontend.onnx_import import import_onnx
from nasir.runtime.llvm_executable import compile_llvm
from nasir.runtime.torch_executable import compile_torch

RNG = np.random.default_rng(0)


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def make_model(nodes, inputs: dict, initializers: dict | None = None, opset: int = 17,
               outputs: tuple[str, ...] = ("y",), weights_as_inputs: bool = False) -> onnx.ModelProto:
    initializers = initializers or {}
    graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    if weights_as_inputs:
        graph_inputs += [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                         for n, v in initializers.items()]
    graph = helper.make_graph(
        nodes, "g", graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset > 9 else 4
    return onnx.shape_inference.infer_shapes(model)  # graph outputs need a (possibly unknown) shape


def check(tmp_path, model: onnx.ModelProto, input_shapes=None, feeds: dict | None = None, llvm: bool = False):
    """Import + torch backend (and with `llvm` a checked llvm build, at the CPU the environment
    names) vs ONNX Runtime; returns the nasir Model."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    m = import_onnx(path, input_shapes)
    feeds = feeds or {n: rand(*s) for n, s in zip(m.input_names, m.input_shapes)}
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    executables = [compile_torch(m.module)] + ([compile_llvm(m.module, checked=True)] if llvm else [])
    for exe in executables:
        got = exe(*[feeds[n] for n in m.input_names])
        got = got if isinstance(got, list) else [got]
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4, err_msg=exe.target)
    return m


def node(op, inputs, outputs=("y",), name="", **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=name or None, **attrs)


X4 = {"x": (2, 4, 9, 9)}

CONV_CASES = {
    "plain": dict(),
    "groups": dict(group=2),
    "depthwise": dict(group=4),
    "strides": dict(strides=[2, 2]),
    "dilations": dict(dilations=[2, 2], pads=[2, 2, 2, 2]),
    "pads": dict(pads=[1, 1, 1, 1]),
    "asymmetric_pads": dict(pads=[0, 1, 2, 1]),
    "same_upper": dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    "same_lower": dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    "valid": dict(auto_pad="VALID"),
    "no_bias": dict(no_bias=True),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(tmp_path, case):
    attrs = dict(CONV_CASES[case])
    no_bias = attrs.pop("no_bias", False)
    group = attrs.get("group", 1)
    inits = {"w": rand(8, 4 // group, 3, 3), "b": rand(8)}
    ins = ["x", "w"] if no_bias else ["x", "w", "b"]
    if no_bias:
        del inits["b"]
    check(tmp_path, make_model([node("Conv", ins, kernel_shape=[3, 3], **attrs)], X4, inits))


def test_conv1d(tmp_path):
    model = make_model([node("Conv", ["x", "w", "b"], pads=[1, 2], strides=[2])], {"x": (2, 3, 10)},
                       {"w": rand(5, 3, 3), "b": rand(5)})
    check(tmp_path, model)


@pytest.mark.parametrize("attrs,a_shape,b_shape,c", [
    (dict(), (3, 5), (5, 4), (4,)),
    (dict(alpha=0.5, beta=2.0), (3, 5), (5, 4), (3, 4)),
    (dict(transA=1), (5, 3), (5, 4), (1, 4)),
    (dict(transB=1, alpha=1.5), (3, 5), (4, 5), (4,)),
    (dict(transA=1, transB=1), (5, 3), (4, 5), None),
])
def test_gemm(tmp_path, attrs, a_shape, b_shape, c):
    inits = {"b": rand(*b_shape)}
    ins = ["a", "b"]
    if c is not None:
        inits["c"] = rand(*c)
        ins.append("c")
    check(tmp_path, make_model([node("Gemm", ins, **attrs)], {"a": a_shape}, inits, opset=13))


def test_matmul(tmp_path):
    nodes = [node("MatMul", ["x", "w"], ["t"]), node("MatMul", ["t", "z"])]
    check(tmp_path, make_model(nodes, {"x": (2, 3, 4), "z": (2, 5, 6)}, {"w": rand(4, 5)}))


@pytest.mark.parametrize("op,attrs,opset", [
    ("Relu", {}, 17), ("Sigmoid", {}, 17), ("HardSwish", {}, 17),
    ("LeakyRelu", {}, 17), ("LeakyRelu", dict(alpha=0.3), 17),
    ("HardSigmoid", {}, 17), ("HardSigmoid", dict(alpha=0.3, beta=0.4), 17),
    ("Clip", dict(min=-0.5, max=0.7), 9), ("Clip", dict(max=0.2), 9),
    ("Softmax", {}, 11), ("Softmax", dict(axis=1), 11), ("Softmax", dict(axis=1), 13),
    ("Softmax", dict(axis=-2), 13), ("Softmax", dict(axis=2), 9),
    ("LRN", dict(size=3), 13), ("LRN", dict(size=5, alpha=0.01, beta=0.5, bias=2.0), 13),
    ("Dropout", {}, 13), ("Identity", {}, 13),
    ("GlobalAveragePool", {}, 13), ("GlobalMaxPool", {}, 13),
])
def test_unary(tmp_path, op, attrs, opset):
    check(tmp_path, make_model([node(op, ["x"], **attrs)], {"x": (2, 6, 5, 4)}, opset=opset))


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """The ONNX LRN formula, written out (ONNX Runtime only runs odd sizes)."""
    out = np.empty_like(x)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        square_sum = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        out[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    return out


@pytest.mark.parametrize("size", [2, 3, 4])
def test_lrn_even_and_odd_sizes(tmp_path, size):
    model = make_model([node("LRN", ["x"], size=size, alpha=0.5, beta=0.75, bias=1.5)], {"x": (2, 6, 3, 3)})
    onnx.save(model, tmp_path / "m.onnx")
    x = rand(2, 6, 3, 3)
    got = compile_torch(import_onnx(tmp_path / "m.onnx").module)(x)
    np.testing.assert_allclose(got, lrn_reference(x, size, 0.5, 0.75, 1.5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (-0.2, None), (None, 0.3), (None, None)])
def test_clip_input_form(tmp_path, bounds):
    inits = {k: np.array(v, np.float32) for k, v in zip(("lo", "hi"), bounds) if v is not None}
    ins = ["x", "lo" if bounds[0] is not None else "", "hi" if bounds[1] is not None else ""]
    check(tmp_path, make_model([node("Clip", ins)], {"x": (3, 7)}, inits, opset=13))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("b_shape,b_const", [((4, 1, 1), True), ((1,), True), ((), True),
                                              ((5,), False), ((2, 1, 3, 1), False)])
def test_binary_broadcast(tmp_path, op, b_shape, b_const):
    inits = {"b": np.abs(rand(*b_shape)) + 0.5} if b_const else {}
    inputs = {"x": (2, 4, 3, 5)} | ({} if b_const else {"b": b_shape})
    check(tmp_path, make_model([node(op, ["x", "b"])], inputs, inits))


def test_binary_legacy_broadcast_axis(tmp_path):
    """Opset < 7 `broadcast=1, axis=1`: b lines up with x's channel dim."""
    model = make_model([node("Add", ["x", "b"], broadcast=1, axis=1)], {"x": (2, 4, 3, 3)},
                       {"b": rand(4)}, opset=6)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    m = import_onnx(path)
    x = rand(2, 4, 3, 3)
    np.testing.assert_allclose(compile_torch(m.module)(x), x + model_b(model)[None, :, None, None], rtol=1e-5)


def model_b(model) -> np.ndarray:
    return numpy_helper.to_array(model.graph.initializer[0])


def test_sum_variadic(tmp_path):
    m = check(tmp_path, make_model([node("Sum", ["x", "b", "c"])], {"x": (2, 3, 4), "c": (3, 1)},
                                   {"b": rand(4)}))
    assert sum(isinstance(op, nn.AddOp) for op in m.ops()) == 2


def test_batch_norm(tmp_path):
    inits = {"s": rand(4), "bias": rand(4), "mean": rand(4), "var": np.abs(rand(4)) + 0.1}
    check(tmp_path, make_model([node("BatchNormalization", ["x", "s", "bias", "mean", "var"], epsilon=1e-3)],
                               X4, inits))


POOL_CASES = [
    ("MaxPool", dict(kernel_shape=[3, 3])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER")),
    ("AveragePool", dict(kernel_shape=[3, 3])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[0, 1, 2, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[0, 1, 2, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER", count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], auto_pad="VALID")),
]


@pytest.mark.parametrize("op,attrs", POOL_CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(POOL_CASES)])
def test_pool(tmp_path, op, attrs):
    check(tmp_path, make_model([node(op, ["x"], **attrs)], {"x": (1, 3, 8, 8)}, opset=19))


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_flatten(tmp_path, axis):
    check(tmp_path, make_model([node("Flatten", ["x"], axis=axis)], {"x": (2, 3, 4, 5)}))


@pytest.mark.parametrize("target,allowzero", [([0, -1], 0), ([2, 0, -1, 5], 0), ([-1, 10], 1), ([6, 20], 0)])
def test_reshape(tmp_path, target, allowzero):
    nodes = [node("Reshape", ["x", "s"], allowzero=allowzero)]
    check(tmp_path, make_model(nodes, {"x": (2, 3, 4, 5)}, {"s": np.array(target, np.int64)}, opset=14))


@pytest.mark.parametrize("perm", [None, [0, 2, 3, 1], [3, 1, 0, 2]])
def test_transpose(tmp_path, perm):
    attrs = {} if perm is None else {"perm": perm}
    check(tmp_path, make_model([node("Transpose", ["x"], **attrs)], {"x": (2, 3, 4, 5)}))


def test_concat_negative_axis_with_constant(tmp_path):
    nodes = [node("Concat", ["x", "c", "z"], axis=-3)]
    check(tmp_path, make_model(nodes, {"x": (1, 2, 3, 3), "z": (1, 4, 3, 3)}, {"c": rand(1, 1, 3, 3)}))


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(tmp_path, opset):
    if opset < 13:
        nodes = [node("Unsqueeze", ["x"], ["u"], axes=[0, -1]), node("Squeeze", ["u"], ["s"], axes=[0]),
                 node("Squeeze", ["s"])]
        inits = {}
    else:
        nodes = [node("Unsqueeze", ["x", "a"], ["u"]), node("Squeeze", ["u", "b"], ["s"]),
                 node("Squeeze", ["s"])]
        inits = {"a": np.array([0, -1], np.int64), "b": np.array([0], np.int64)}
    m = check(tmp_path, make_model(nodes, {"x": (3, 1, 4)}, inits, opset=opset))
    assert m.output_shapes == [(3, 4)]


def test_constant_and_constant_of_shape(tmp_path):
    nodes = [
        node("Constant", [], ["k"], value=numpy_helper.from_array(rand(3, 1), "k")),
        node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([1, 4], np.int64), "shape")),
        node("ConstantOfShape", ["shape"], ["fill"],
             value=numpy_helper.from_array(np.array([0.25], np.float32), "v")),
        node("Add", ["x", "k"], ["t"]),
        node("Mul", ["t", "fill"]),
    ]
    m = check(tmp_path, make_model(nodes, {"x": (3, 4)}, opset=13))
    assert np.allclose(m.weights["fill"], 0.25) and m.weights["fill"].shape == (1, 4)


@pytest.mark.parametrize("opset,value", [(9, 0.0), (9, 1.5), (13, 0.0), (13, -2.0), (18, 0.5)])
def test_pad(tmp_path, opset, value):
    pads = [0, 0, 1, 2, 0, 0, 2, 0]
    if opset < 11:
        nodes, inits = [node("Pad", ["x"], pads=pads, value=value)], {}
    elif opset < 18:
        nodes = [node("Pad", ["x", "p", "v"])]
        inits = {"p": np.array(pads, np.int64), "v": np.array(value, np.float32)}
    else:
        nodes = [node("Pad", ["x", "p", "v", "axes"])]
        inits = {"p": np.array([1, 2, 2, 0], np.int64), "v": np.array(value, np.float32),
                 "axes": np.array([2, -1], np.int64)}
    check(tmp_path, make_model(nodes, {"x": (1, 2, 3, 4)}, inits, opset=opset))


# --- exporter-style graphs ---------------------------------------------------------------------

def test_caffe2_style_opset9_sum(tmp_path):
    """Opset 9, Caffe2-style: conv branches joined by variadic Sum, attribute-form Clip, Softmax."""
    inits = {"w1": rand(4, 3, 3, 3), "w2": rand(4, 3, 1, 1), "fc": rand(4 * 6 * 6, 5)}
    nodes = [
        node("Conv", ["x", "w1"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        node("Conv", ["x", "w2"], ["b"], name="conv_b"),
        node("Sum", ["a", "b", "x4"], ["s"], name="join"),
        node("Clip", ["s"], ["c"], min=0.0, max=6.0),
        node("Flatten", ["c"], ["f"]),
        node("MatMul", ["f", "fc"], ["l"]),
        node("Softmax", ["l"], ["y"]),
    ]
    m = check(tmp_path, make_model(nodes, {"x": (1, 3, 6, 6), "x4": (1, 4, 6, 6)}, inits, opset=9))
    assert [op.layer_name for op in m.ops() if isinstance(op, nn.AddOp)] == ["join", "join_1"]


def test_weights_as_graph_inputs(tmp_path):
    inits = {"conv.weight": rand(4, 3, 3, 3), "conv.bias": rand(4), "bn.scale": rand(4),
             "bn.b": rand(4), "bn.mean": rand(4), "bn.var": np.abs(rand(4)) + 0.5}
    nodes = [node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "bn.scale", "bn.b", "bn.mean", "bn.var"], ["y"])]
    model = make_model(nodes, {"x": (1, 3, 5, 5)}, inits, opset=9, weights_as_inputs=True)
    m = check(tmp_path, model)
    assert m.input_names == ["x"]
    assert set(m.weights) == set(inits)


def test_channel_shuffle(tmp_path):
    """ShuffleNet: Reshape(n, g, c/g, h, w) -> Transpose -> Reshape(n, c, h, w)."""
    nodes = [node("Reshape", ["x", "s1"], ["r"]), node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             node("Reshape", ["t", "s2"])]
    inits = {"s1": np.array([1, 2, 3, 4, 4], np.int64), "s2": np.array([1, -1, 4, 4], np.int64)}
    check(tmp_path, make_model(nodes, {"x": (1, 6, 4, 4)}, inits))


def test_shape_gather_flatten_chain(tmp_path):
    nodes = [
        node("GlobalAveragePool", ["x"], ["p"]),
        node("Shape", ["p"], ["shape"]),
        node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64), "zero")),
        node("Gather", ["shape", "zero"], ["n"], axis=0),
        node("Unsqueeze", ["n", "axes"], ["n1"]),
        node("Concat", ["n1", "minus1"], ["target"], axis=0),
        node("Cast", ["target"], ["target64"], to=TensorProto.INT64),
        node("Reshape", ["p", "target64"], ["f"]),
        node("Gemm", ["f", "w", "b"], transB=1),
    ]
    inits = {"axes": np.array([0], np.int64), "minus1": np.array([-1], np.int64), "w": rand(10, 8), "b": rand(10)}
    m = check(tmp_path, make_model(nodes, {"x": (2, 8, 3, 3)}, inits))
    assert set(m.weights) == {"w", "b"}  # integer shape tensors never become weights


def test_folded_weight_transform(tmp_path):
    """A Transpose of an initializer folds into a new weight."""
    nodes = [node("Transpose", ["w"], ["wt"]), node("MatMul", ["x", "wt"])]
    m = check(tmp_path, make_model(nodes, {"x": (2, 4)}, {"w": rand(3, 4)}))
    assert not any(isinstance(op, nn.TransposeOp) for op in m.ops())


def test_layer_and_weight_names(tmp_path):
    nodes = [node("Conv", ["x", "layer1/conv.weight"], ["a"], name="/layer1/conv/Conv"),
             node("Relu", ["a"], ["b"]), node("Relu", ["b"], ["c"], name="relu"),
             node("Relu", ["c"], ["y"], name="/layer1/conv/Conv")]
    onnx.save(make_model(nodes, {"x": (1, 2, 4, 4)}, {"layer1/conv.weight": rand(2, 2, 1, 1)}), tmp_path / "m.onnx")
    m = import_onnx(tmp_path / "m.onnx")  # duplicate node names: ONNX Runtime refuses the file
    assert [op.layer_name for op in m.ops()] == ["layer1_conv_Conv", "relu", "relu_1", "layer1_conv_Conv_1"]
    assert list(m.weights) == ["layer1_conv.weight"]


# --- bad input ---------------------------------------------------------------------------------

def _small_model() -> onnx.ModelProto:
    return make_model([node("Conv", ["x", "w"], ["c"]), node("Relu", ["c"])], {"x": (1, 3, 8, 8)},
                      {"w": rand(8, 3, 3, 3)})


def test_missing_file(tmp_path):
    with pytest.raises(FrontendError, match="no such file"):
        import_onnx(tmp_path / "nope.onnx")


def test_truncated_file(tmp_path):
    data = _small_model().SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrontendError, match="not a valid ONNX model"):
        import_onnx(path)


@pytest.mark.parametrize("content", [b"hello, this is not a model\n", b"", bytes(range(256)) * 4])
def test_not_onnx(tmp_path, content):
    path = tmp_path / "x.onnx"
    path.write_bytes(content)
    with pytest.raises(FrontendError, match="not a valid ONNX model"):
        import_onnx(path)


def test_unsupported_op_message(tmp_path):
    model = make_model([node("Conv", ["x", "w"], ["c"]), node("Erf", ["c"], name="head/erf")],
                       {"x": (1, 3, 8, 8)}, {"w": rand(8, 3, 3, 3)})
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedOpError) as err:
        import_onnx(tmp_path / "m.onnx")
    message = str(err.value)
    assert "'Erf'" in message and "head/erf" in message
    assert "supported op types" in message and "Conv" in message and "BatchNormalization" in message


def test_runtime_shape_op_is_unsupported(tmp_path):
    model = make_model([node("Gather", ["x", "idx"])], {"x": (4, 4)}, {"idx": np.array([1, 3], np.int64)}, opset=13)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedOpError, match="Gather node 'Gather' computes on a runtime tensor"):
        import_onnx(tmp_path / "m.onnx")


def test_slice_of_a_runtime_tensor(tmp_path):
    """Constant bounds (negative ones and steps > 1 too) on a runtime tensor: nn.slice."""
    model = make_model([node("Slice", ["x", "st", "en", "ax", "sp"])], {"x": (4, 6)},
                       {"st": np.array([1, -5], np.int64), "en": np.array([3, 100], np.int64),
                        "ax": np.array([0, 1], np.int64), "sp": np.array([1, 2], np.int64)}, opset=13)
    check(tmp_path, model, llvm=True)


def _dynamic_model(tmp_path):
    model = _small_model()
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, tmp_path / "d.onnx")
    return tmp_path / "d.onnx", model


def test_dynamic_dim_needs_input_shapes(tmp_path):
    path, _ = _dynamic_model(tmp_path)
    with pytest.raises(ShapeError) as err:
        import_onnx(path)
    message = str(err.value)
    assert "'x'" in message and "batch" in message and "dim 0" in message and "input_shapes=" in message


@pytest.mark.parametrize("shapes", [{"x": (2, 3, 8, 8)}, [(2, 3, 8, 8)]])
def test_dynamic_dim_with_input_shapes(tmp_path, shapes):
    _, model = _dynamic_model(tmp_path)
    m = check(tmp_path, model, input_shapes=shapes)
    assert m.input_shapes == [(2, 3, 8, 8)]


@pytest.mark.parametrize("shapes,match", [({"y": (1, 3, 8, 8)}, "inputs are"), ({"x": (2, 3, 9, 8)}, "dim 2"),
                                          ({"x": (2, 3, 8)}, "rank")])
def test_bad_input_shapes(tmp_path, shapes, match):
    path, _ = _dynamic_model(tmp_path)
    with pytest.raises(ShapeError, match=match):
        import_onnx(path, shapes)


def test_shape_mismatch_is_frontend_error(tmp_path):
    model = make_model([node("Conv", ["x", "w"], name="bad_conv")], {"x": (1, 3, 8, 8)}, {"w": rand(8, 5, 3, 3)})
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(FrontendError, match="bad_conv"):
        import_onnx(tmp_path / "m.onnx")


# --- zoo models --------------------------------------------------------------------------------

ZOO = [pytest.param(name, ds, marks=[pytest.mark.slow] if ds == "imagenet" else [], id=f"{name}-{ds}")
       for name in zoo.names() for ds in zoo.datasets(name)]


@pytest.mark.parametrize("name,dataset", ZOO)
def test_zoo_model_matches_onnxruntime(tmp_path, name, dataset):
    path = zoo.export_onnx(name, tmp_path / f"{name}.onnx", dataset=dataset)
    m = import_onnx(path)
    x = rand(*zoo.input_shape(name, dataset))
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {m.input_names[0]: x})
    np.testing.assert_allclose(compile_torch(m.module)(x), expected[0], rtol=1e-4, atol=1e-4)


def caffe2_style_classifier(mask_read: bool = False) -> onnx.ModelProto:
    """A Caffe2-era classifier (opset 7): weights listed as graph inputs, conv -> relu -> LRN ->
    max pool -> Dropout (inference, with its mask output) -> Sum of two branches -> Flatten ->
    Gemm. The mask is an output of the graph when `mask_read`."""
    nodes = [
        node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["c"], ["r"]),
        node("LRN", ["r"], ["n"], size=5, alpha=1e-4, beta=0.75),
        node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Dropout", ["p"], ["d", "mask"], name="n18", ratio=0.5),
        node("Sum", ["d", "p"], ["s"]),
        node("Flatten", ["s"], ["f"]),
        node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    inits = {"w": rand(8, 3, 3, 3), "b": rand(8), "fc_w": rand(10, 8 * 4 * 4), "fc_b": rand(10)}
    model = make_model(nodes, {"x": (1, 3, 8, 8)}, inits, opset=7, weights_as_inputs=True,
                       outputs=("y", "mask") if mask_read else ("y",))
    if mask_read:  # opset 7's shape inference leaves the mask's shape out
        model.graph.output[1].CopyFrom(helper.make_tensor_value_info("mask", TensorProto.FLOAT, (1, 8, 4, 4)))
    return model


def test_caffe2_era_graph_with_an_unread_dropout_mask(tmp_path, cpu):
    """Old exporters name a Dropout's mask output though nothing reads it: the import takes the
    graph (torch and llvm backends against ONNX Runtime)."""
    m = check(tmp_path, caffe2_style_classifier(), llvm=True)
    assert m.input_names == ["x"]


def test_a_read_dropout_mask_is_refused(tmp_path):
    onnx.save(caffe2_style_classifier(mask_read=True), tmp_path / "m.onnx")
    with pytest.raises(UnsupportedOpError, match="Dropout node 'n18': a Dropout mask output that is read"):
        import_onnx(tmp_path / "m.onnx")


@pytest.mark.parametrize("opset,keepdims", [(13, 1), (13, 0), (18, 1), (18, 0)])
def test_reduce_mean_over_the_spatial_axes(tmp_path, opset, keepdims):
    """What exporters write for a global average pool: `axes` an attribute before opset 18, an
    input from it on; keepdims=0 drops the two unit axes."""
    if opset < 18:
        model = make_model([node("ReduceMean", ["x"], axes=[2, -1], keepdims=keepdims)], {"x": (2, 6, 5, 4)},
                           opset=opset)
    else:
        model = make_model([node("ReduceMean", ["x", "axes"], keepdims=keepdims)], {"x": (2, 6, 5, 4)},
                           {"axes": np.array([2, 3], np.int64)}, opset=opset)
    check(tmp_path, model)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 3], 0), ([-1], 0), (None, 1)])
def test_reductions_over_any_axes(tmp_path, op, axes, keepdims):
    """nn.reduce_mean / nn.reduce_sum over any axes (all when none are given), torch and a checked llvm
    build against ONNX Runtime."""
    extra = {} if axes is None else {"axes": axes}
    check(tmp_path, make_model([node(op, ["x"], keepdims=keepdims, **extra)], {"x": (2, 6, 5, 4)}, opset=11), llvm=True)


def test_reduction_to_a_scalar_is_refused(tmp_path):
    onnx.save(make_model([node("ReduceSum", ["x"], name="rs", keepdims=0)], {"x": (2, 3)}, opset=11), tmp_path / "m.onnx")
    with pytest.raises(UnsupportedOpError, match="ReduceSum node 'rs': a reduction to a rank-0 tensor"):
        import_onnx(tmp_path / "m.onnx")


def test_to_onnx_of_a_global_pool_model_reimports(tmp_path):
    """`Model.to_onnx` writes a global average pool as ReduceMean: the file imports again and the
    re-imported model gives ONNX Runtime's outputs on it, on the torch and llvm backends."""
    import nasir

    model = zoo.load("resnet18", dataset="cifar10")
    path = model.to_onnx(tmp_path / "r18.onnx")
    assert "ReduceMean" in {n.op_type for n in onnx.load(path).graph.node}
    again = nasir.load(path)
    x = rand(*again.input_shapes[0])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    for target in ("torch", "llvm"):
        np.testing.assert_allclose(nasir.compile(again, target=target)(x), expected, rtol=1e-4, atol=1e-4)


def test_tf_converted_nhwc_graph(tmp_path, cpu):
    """tf2onnx's pattern: an NHWC input transposed to NCHW, an explicit Pad node before an
    unpadded conv (asymmetric: TF's SAME with stride 2), ReLU, a max pool, and back to NHWC."""
    nodes = [
        node("Transpose", ["x"], ["nchw"], perm=[0, 3, 1, 2]),
        node("Pad", ["nchw", "pads"], ["padded"], mode="constant"),
        node("Conv", ["padded", "w", "b"], ["c"], name="conv", strides=[2, 2]),
        node("Relu", ["c"], ["r"]),
        node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Transpose", ["p"], ["y"], perm=[0, 2, 3, 1]),
    ]
    inits = {"pads": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "w": rand(8, 3, 3, 3), "b": rand(8)}
    check(tmp_path, make_model(nodes, {"x": (1, 17, 17, 3)}, inits, opset=13), llvm=True)


def test_keras_style_classifier(tmp_path, cpu):
    """keras2onnx's dense head: Flatten, MatMul with a weight, Add of a bias, ReLU, again, Softmax."""
    nodes = [
        node("Flatten", ["x"], ["f"]),
        node("MatMul", ["f", "w1"], ["m1"]), node("Add", ["m1", "b1"], ["a1"]), node("Relu", ["a1"], ["r1"]),
        node("MatMul", ["r1", "w2"], ["m2"]), node("Add", ["m2", "b2"], ["a2"]), node("Softmax", ["a2"], ["y"], axis=1),
    ]
    inits = {"w1": rand(4 * 5 * 5, 32), "b1": rand(32), "w2": rand(32, 10), "b2": rand(10)}
    check(tmp_path, make_model(nodes, {"x": (1, 4, 5, 5)}, inits, opset=13), llvm=True)


def _refused_by_both(tmp_path, model: onnx.ModelProto, message: str) -> None:
    """ONNX Runtime refuses the file (loading or running it), and nasir refuses it with `message`."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    feeds = {i.name: rand(*(d.dim_value for d in i.type.tensor_type.shape.dim)) for i in model.graph.input}
    with pytest.raises(Exception):  # noqa: B017 - ONNX Runtime's own error types
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(FrontendError, match=message):
        import_onnx(path)


def test_kernel_shape_contradicting_the_weight_is_refused(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3], pads=[2, 2, 2, 2])
    model = make_model([node], {"x": [1, 16, 8, 8]}, {"w": rand(32, 16, 5, 5)})
    _refused_by_both(tmp_path, model, r"Conv node 'conv': kernel_shape \[3, 3\] contradicts its weight's shape "
                                      r"\[32, 16, 5, 5\]")


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_batch_norm_parameters_of_another_float_type_are_refused(tmp_path, dtype):
    """Scale and bias of two types: ONNX's checker refuses it, as ONNX Runtime does. All four
    parameters of another float type than the data, which opset 15 allows: nasir, which computes
    in float32, refuses it in one line."""
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")
    params = {"s": rand(16).astype(dtype), "b": rand(16), "m": rand(16), "v": np.abs(rand(16)) + 0.5}
    model = make_model([node], {"x": [1, 16, 4, 4]}, params, opset=15)
    _refused_by_both(tmp_path, model, r"ONNX's checker rejects it: \[ShapeInferenceError\] \(op_type:BatchNormalization, "
                                      r"node name: bn\): B has inconsistent type tensor\(float\)")
    params = {k: v.astype(dtype) for k, v in params.items()}
    onnx.save(make_model([node], {"x": [1, 16, 4, 4]}, params, opset=15), tmp_path / "all.onnx")
    with pytest.raises(FrontendError, match=rf"BatchNormalization node 'bn': its scale 's' is {np.dtype(dtype)} "
                                            r"beside float32 data \(nasir computes in float32 only\)"):
        import_onnx(tmp_path / "all.onnx")


def test_a_conv_whose_weight_is_float64_beside_float32_data_is_refused(tmp_path):
    """ONNX's checker (strict type and shape inference) decides for every op, as ONNX Runtime's
    type check does: a float64 weight beside float32 data is refused, in one line."""
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                       {"x": [1, 3, 8, 8]}, {"w": rand(4, 3, 3, 3).astype(np.float64)})
    _refused_by_both(tmp_path, model, r"ONNX's checker rejects it: \[ShapeInferenceError\] \(op_type:Conv, node name: "
                                      r"conv\): W has inconsistent type tensor\(double\)")
