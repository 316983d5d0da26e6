"""Hostile ONNX files for test_hostile_files.py: a small real classifier, mutated, and a worker that
imports, compiles and runs each mutant the way a user would.

    python tests/onnx_mutants.py DIR     # runs every DIR/*.onnx, appends one JSON line per file
                                         # to DIR/results.jsonl ("start" first: a crash is seen)

Each result is {"case", "outcome", "detail"}, outcome one of: "error" (a NasirError: its message,
which must be one line), "match" (nasir's torch and llvm outputs equal ONNX Runtime's), "ran"
(ONNX Runtime refused the file, nasir ran it: shapes reported), or the defects: "traceback" (an
exception that is not a NasirError), "mismatch" (outputs differ from ONNX Runtime's).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def classifier() -> onnx.ModelProto:
    """conv -> batch norm -> relu -> max pool -> conv (+ residual) -> global pool -> flatten -> gemm."""
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         group=2),
        helper.make_node("Add", ["c2", "p1"], ["a2"], name="add2"),
        helper.make_node("GlobalAveragePool", ["a2"], ["g2"], name="gap"),
        helper.make_node("Flatten", ["g2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    var = numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "var")
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("g", 8), init("be", 8), init("mu", 8), var,
             init("w2", 8, 4, 3, 3), init("fc_w", 10, 8), init("fc_b", 10)]
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


Mutation = Callable[[onnx.ModelProto, np.random.Generator], "onnx.ModelProto | bytes"]


def _node(model: onnx.ModelProto, rng, op: str | None = None) -> onnx.NodeProto:
    nodes = [n for n in model.graph.node if op is None or n.op_type == op]
    return nodes[int(rng.integers(len(nodes)))]


def _set_ints(node: onnx.NodeProto, name: str, values: list[int]) -> None:
    for a in node.attribute:
        if a.name == name:
            node.attribute.remove(a)
            break
    node.attribute.append(helper.make_attribute(name, values))


def bad_attribute(model, rng):
    """A conv or pool attribute negative, zero or huge."""
    node = _node(model, rng, str(rng.choice(["Conv", "MaxPool"])))
    name = str(rng.choice(["kernel_shape", "strides", "pads", "dilations"] + (["group"] if node.op_type == "Conv" else [])))
    value = int(rng.choice([-3, -1, 0, 1 << 20, 1 << 40]))
    if name == "group":
        node.attribute.remove(next(a for a in node.attribute if a.name == "group")) \
            if any(a.name == "group" for a in node.attribute) else None
        node.attribute.append(helper.make_attribute("group", value))
    else:
        _set_ints(node, name, [value] * (4 if name == "pads" else 2))
    return model


def dangling_input(model, rng):
    """A node reads a value nothing defines."""
    node = _node(model, rng)
    node.input[int(rng.integers(len(node.input)))] = "nowhere"
    return model


def initializer_dtype(model, rng):
    """An initializer of another element type (int64, float64, float16, int8)."""
    t = model.graph.initializer[int(rng.integers(len(model.graph.initializer)))]
    array = numpy_helper.to_array(t)
    dtype = rng.choice([np.int64, np.float64, np.float16, np.int8])
    t.CopyFrom(numpy_helper.from_array(array.astype(dtype), t.name))
    return model


def initializer_size(model, rng):
    """An initializer whose dims do not match its data, or of another shape than its reader needs."""
    t = model.graph.initializer[int(rng.integers(len(model.graph.initializer)))]
    array = numpy_helper.to_array(t)
    if rng.integers(2):
        t.dims[0] = t.dims[0] + int(rng.choice([1, 5]))  # the data no longer fills the dims
    else:
        t.CopyFrom(numpy_helper.from_array(array.reshape(-1)[: max(1, array.size // 2)].copy(), t.name))
    return model


def input_dims(model, rng):
    """The input's dims zero, negative or symbolic."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    d = dims[int(rng.integers(len(dims)))]
    choice = int(rng.integers(3))
    if choice == 0:
        d.dim_value = 0
    elif choice == 1:
        d.dim_param = "batch"
    else:
        d.dim_value = 1 << 40
    return model


def unknown_op(model, rng):
    """A node of an op type no one defines, or of a custom domain."""
    node = _node(model, rng, "Relu")
    if rng.integers(2):
        node.op_type = "FancyRelu"
    else:
        node.domain = "com.example"
        model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def byte_flips(model, rng) -> bytes:
    data = bytearray(model.SerializeToString())
    for at in rng.integers(0, len(data), int(rng.integers(1, 8))):
        data[at] ^= 1 << int(rng.integers(8))
    return bytes(data)


def truncated(model, rng) -> bytes:
    data = model.SerializeToString()
    return data[: int(rng.integers(1, len(data)))]


MUTATIONS: dict[str, Mutation] = {f.__name__: f for f in (
    bad_attribute, dangling_input, initializer_dtype, initializer_size, input_dims, unknown_op, byte_flips, truncated)}


def mutants(per_class: int, seed: int = 0) -> Iterator[tuple[str, bytes]]:
    """(case name, file bytes): `per_class` seeded mutants of `classifier()` per mutation."""
    base = classifier()
    for name, mutate in MUTATIONS.items():
        for k in range(per_class):
            rng = np.random.default_rng([seed, k, len(name)])
            out = mutate(copy.deepcopy(base), rng)
            yield f"{name}-{k}", out if isinstance(out, bytes) else out.SerializeToString()


def run_case(path: Path) -> dict:
    """What a user gets from `path`: import, compile for torch and llvm, run on a seeded input."""
    import onnxruntime as ort

    import nasir
    from nasir.errors import NasirError

    try:
        model = nasir.load(path)
        x = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in model.input_shapes]
        outputs = {t: nasir.compile(model, target=t)(*x) for t in ("torch", "llvm")}
    except NasirError as e:
        return {"outcome": "error", "detail": str(e)}
    except Exception as e:  # noqa: BLE001 - the defect this worker exists to report
        return {"outcome": "traceback", "detail": f"{type(e).__name__}: {e}"}
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        expected = session.run(None, {i.name: v for i, v in zip(session.get_inputs(), x)})[0]
    except Exception as e:  # noqa: BLE001 - ONNX Runtime refusing the file
        return {"outcome": "ran", "detail": f"ONNX Runtime: {str(e).splitlines()[0][:200]}; nasir: "
                                            f"{[list(np.shape(o)) for o in outputs.values()]}"}
    for target, got in outputs.items():
        if np.shape(got) != np.shape(expected) or not np.allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True):
            return {"outcome": "mismatch", "detail": f"{target}: {np.shape(got)} vs ONNX Runtime's {np.shape(expected)}"}
    return {"outcome": "match", "detail": ""}


def main(folder: str) -> None:
    results = Path(folder) / "results.jsonl"
    with results.open("a") as log:
        for path in sorted(Path(folder).glob("*.onnx")):
            log.write(json.dumps({"case": path.stem, "outcome": "start"}) + "\n")
            log.flush()
            log.write(json.dumps({"case": path.stem, **run_case(path)}) + "\n")
            log.flush()


if __name__ == "__main__":
    main(sys.argv[1])
