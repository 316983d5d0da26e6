"""`nasir check MODEL --bisect` (issue 38): the first node whose output differs from ONNX Runtime's.

A model made wrong on purpose (the llvm backend's HardSwish epilogue computing a ReLU instead,
monkeypatched) must be named at its HardSwish node, with its shapes and the lowering choice of the
conv nest that computes it; the same model with the backend intact must report agreement. The
prefix graphs of `nasir.cli.bisect` are compared with ONNX Runtime, the oracle.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from test_tools import run_main

from nasir.cli import main as cli
from nasir.fuzz.graphs import onnx_model
from nasir.lowering.nest_to_loops import epilogue as epilogue_module


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    """conv 3->16 -> ReLU -> conv 16->16 -> HardSwish -> max pool 2x2 -> conv 16->8, on 8x8."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.standard_normal((16, 3, 3, 3)) / 5, "w2": rng.standard_normal((16, 16, 3, 3)) / 12,
             "w3": rng.standard_normal((8, 16, 1, 1)) / 4}
    conv = dict(kernel_shape=[3, 3], pads=[1] * 4)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", **conv),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Conv", ["b", "w2"], ["c"], name="conv2", **conv),
             helper.make_node("HardSwish", ["c"], ["d"], name="hswish"),
             helper.make_node("MaxPool", ["d"], ["e"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["e", "w3"], ["y"], name="conv3", kernel_shape=[1, 1])]
    path = tmp_path_factory.mktemp("bisect") / "block.onnx"
    onnx.save(onnx_model(nodes, {k: v.astype(np.float32) for k, v in inits.items()}, [1, 3, 8, 8]), path)
    return path


def test_agreeing_model_reports_agreement(block, capsys):
    code, out, _ = run_main(cli.main, capsys, "check", block, "--bisect")
    assert code == 0, out
    assert "PASS" in out and "first differing" not in out


def test_wrong_node_is_named_with_its_shapes_and_lowering(block, capsys, monkeypatch):
    right = epilogue_module.epilogue

    def wrong(b, kind, v, operands, params):
        return right(b, "relu" if kind == "hard_swish" else kind, v, operands, params)

    monkeypatch.setattr(epilogue_module, "epilogue", wrong)
    code, out, _ = run_main(cli.main, capsys, "check", block, "--bisect", "--cpu", "x86-64-v3")
    assert code == 1, out
    assert "FAIL" in out
    line = " ".join(out[out.index("first differing"):].split())  # rich wraps long lines
    assert "node 'hswish' (HardSwish): inputs [1, 16, 8, 8] -> outputs [1, 16, 8, 8]" in line, line
    assert "lowered as channel (mac), plain -> plain, hard_swish" in line, line
