"""Differential tests: graphs hypothesis draws, compiled for llvm, against ONNX Runtime.

Single ops the developers did not pick: convs (stride 1-3, dilation 1-3, pads 0-3 on each side,
groups, kernels 1-7, images 1-40 wide including one-pixel outputs), max and average pools (ceil
mode, padding) and gemms, and small chains (conv, batch norm, relu, a residual add, a pool, a
concat), each at both vector widths (conftest's WIDTHS; in `make pytest-avx2`'s pass the AVX-512
ones alone, compiled only, a sixth as many: `conftest.drawn_cpus`, `conftest.draws`) and with 1 or 2 threads,
compiled as checked builds (a load or store outside its buffer raises `BoundsError`).
The draws are derandomized (the same cases every run, so CI is reproducible); the run's summary
prints how many cases of each kind ran (conftest.py). A failure hypothesis finds is shrunk to a small case; add it as an
`@example` so it stays a regression test.
"""

from __future__ import annotations

import numpy as np
import pytest
import onnx
import onnxruntime as ort
from conftest import CASES, compiled_only, draws, drawn_cpus
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import nasir
from nasir.errors import ForeignCPUError

CPUS = drawn_cpus()
pytestmark = pytest.mark.widths  # draws its CPU from both widths (conftest.py)


def cases(n: int):
    """hypothesis settings for `n` derandomized examples over both widths (`conftest.draws`: fewer
    where the test draws only the CPUs this machine cannot run); compiles take seconds: no deadline."""
    return settings(max_examples=draws(n), deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def onnx_file(tmp_path, node, x_shape, inits: dict, opset: int = 13):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    model.ir_version = 8
    path = tmp_path / f"{node.op_type}_{len(list(tmp_path.iterdir()))}.onnx"
    onnx.save(model, path)
    return path


def agrees_with_onnxruntime(record, path, x: np.ndarray, cpu: str, threads: int) -> None:
    """nasir's checked llvm code for `cpu` and ONNX Runtime on the file; `record` is the test's
    record_property, which counts the case. Code this machine cannot run is checked as conftest's
    `compiled_only` does, inside the case: a ForeignCPUError reaching hypothesis would end the
    test at the first such draw (hypothesis takes it for a failure, and conftest's hook for a pass)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    exe = nasir.compile(nasir.load(path), cpu=cpu, threads=threads, checked=True)
    try:
        got = exe(x)
    except ForeignCPUError as e:
        compiled_only(e.executable, record)
        return
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    record(CASES, path.stem.split("_")[0])


def window(draw, extent: int, k: int, d: int, stride: int):
    """Pads (before, after) up to 3 that leave at least one output along an axis of `extent`."""
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    if extent + before + after < d * (k - 1) + 1:
        after = d * (k - 1) + 1 - extent - before
    return before, after


@st.composite
def convs(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, o = groups * draw(st.integers(1, 4)), groups * draw(st.integers(1, 6))
    k, stride, d = draw(st.integers(1, 7)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    (t, b), (l, r) = window(draw, h, k, d, stride), window(draw, w, k, d, stride)
    return dict(c=c, o=o, groups=groups, k=k, stride=stride, dilation=d, h=h, w=w, pads=[t, l, b, r],
                cpu=draw(st.sampled_from(CPUS)), threads=draw(st.sampled_from([1, 2])))


@given(case=convs())
@cases(80)
@example(case=dict(c=6, o=10, groups=1, k=2, stride=3, dilation=2, h=12, w=31, pads=[3, 3, 3, 3],  # issue 24
                   cpu="x86-64-v3", threads=1))
# a weight packed by blocks of lanes that straddled the groups (2 output channels a group): refused
@example(case=dict(c=4, o=8, groups=4, k=3, stride=1, dilation=1, h=1, w=1, pads=[1, 1, 1, 1], cpu="x86-64-v3", threads=1))
@example(case=dict(c=32, o=64, groups=32, k=3, stride=1, dilation=1, h=1, w=1, pads=[1, 1, 1, 1], cpu="x86-64-v4",
                   threads=2))
def test_conv(tmp_path, record_property, case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, case["c"], case["h"], case["w"])).astype(np.float32)
    wt = rng.standard_normal((case["o"], case["c"] // case["groups"], case["k"], case["k"])).astype(np.float32)
    bias = rng.standard_normal(case["o"]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[case["k"]] * 2, strides=[case["stride"]] * 2,
                            dilations=[case["dilation"]] * 2, pads=case["pads"], group=case["groups"])
    path = onnx_file(tmp_path, node, x.shape, {"w": wt, "b": bias})
    agrees_with_onnxruntime(record_property, path, x, case["cpu"], case["threads"])


@st.composite
def pools(draw):
    k, stride = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    h, w = draw(st.integers(k, 30)), draw(st.integers(k, 30))
    pads = [draw(st.integers(0, k // 2)) for _ in range(4)]  # ONNX Runtime: pads below the kernel
    return dict(kind=draw(st.sampled_from(["MaxPool", "AveragePool"])), k=k, stride=stride, h=h, w=w, pads=pads,
                ceil=draw(st.sampled_from([0, 1])), c=draw(st.integers(1, 20)),
                cpu=draw(st.sampled_from(CPUS)), threads=draw(st.sampled_from([1, 2])))


@given(case=pools())
@cases(60)
def test_pool(tmp_path, record_property, case):
    x = np.random.default_rng(0).standard_normal((1, case["c"], case["h"], case["w"])).astype(np.float32)
    attrs = dict(kernel_shape=[case["k"]] * 2, strides=[case["stride"]] * 2, pads=case["pads"], ceil_mode=case["ceil"])
    node = helper.make_node(case["kind"], ["x"], ["y"], **attrs)
    agrees_with_onnxruntime(record_property, onnx_file(tmp_path, node, x.shape, {}), x, case["cpu"], case["threads"])


@given(rows=st.integers(1, 4), k=st.integers(1, 70), n=st.integers(1, 70), trans_b=st.sampled_from([0, 1]),
       cpu=st.sampled_from(CPUS), threads=st.sampled_from([1, 2]))
@cases(20)
def test_gemm(tmp_path, record_property, rows, k, n, trans_b, cpu, threads):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=trans_b)
    path = onnx_file(tmp_path, node, x.shape, {"b": b, "c": rng.standard_normal(n).astype(np.float32)})
    agrees_with_onnxruntime(record_property, path, x, cpu, threads)



@st.composite
def chains(draw):
    """conv -> [batch norm] -> [relu] -> [+ a second conv of the input] -> [pool] -> [concat with
    its own relu, along channels]: the shapes of a block, drawn."""
    c, o = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    k, stride = draw(st.sampled_from([1, 3, 5])), draw(st.integers(1, 2))
    pool = draw(st.sampled_from([None, "MaxPool", "AveragePool"]))
    # the conv's outputs ((h - 1) // stride + 1 along h, its pads k // 2) at least the pool's 2 x 2 window
    least = max(k, stride + 1) if pool else k
    h, w = draw(st.integers(least, 24)), draw(st.integers(least, 24))
    return dict(c=c, o=o, k=k, stride=stride, h=h, w=w, bn=draw(st.booleans()), relu=draw(st.booleans()),
                residual=draw(st.booleans()), pool=pool, ceil=draw(st.sampled_from([0, 1])),
                concat=draw(st.booleans()), cpu=draw(st.sampled_from(CPUS)), threads=draw(st.sampled_from([1, 2])))


@given(case=chains())
@cases(28)
def test_chain(tmp_path, record_property, case):
    rng = np.random.default_rng(1)

    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    k, pad = case["k"], case["k"] // 2
    conv = dict(kernel_shape=[k, k], strides=[case["stride"]] * 2, pads=[pad] * 4)
    inits = {"w": rand(case["o"], case["c"], k, k), "b": rand(case["o"])}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t0"], **conv)]
    last = "t0"

    def add(op, inputs, **attrs):
        nonlocal last
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        last = out

    if case["bn"]:
        inits.update(g=rand(case["o"]), be=rand(case["o"]), mu=rand(case["o"]),
                     var=np.abs(rand(case["o"])) + 0.5)
        add("BatchNormalization", [last, "g", "be", "mu", "var"])
    if case["relu"]:
        add("Relu", [last])
    if case["residual"]:
        inits["w2"] = rand(case["o"], case["c"], k, k)
        nodes.append(helper.make_node("Conv", ["x", "w2"], ["side"], **conv))
        add("Add", [last, "side"])
    if case["pool"]:
        add(case["pool"], [last], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=case["ceil"])
    if case["concat"]:
        before = last
        add("Relu", [before])
        add("Concat", [before, last], axis=1)
    nodes[-1].output[0] = "y"
    x = rand(1, case["c"], case["h"], case["w"])
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    model.ir_version = 8
    path = tmp_path / f"Chain_{len(list(tmp_path.iterdir()))}.onnx"
    onnx.save(model, path)
    agrees_with_onnxruntime(record_property, path, x, case["cpu"], case["threads"])
