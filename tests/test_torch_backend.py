"""TorchProgram as a trainable module: parameters, batch-norm buffers, train-mode batch statistics.

The oracle is the same network written with plain torch.nn layers.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

import nasir
from nasir.errors import NasirError
from nasir.frontend.onnx_import import import_onnx
from nasir.lowering.nest_to_torch.program import TorchProgram
from nasir.runtime.torch_executable import compile_torch


def _conv_bn_relu(tmp_path):
    rng = np.random.default_rng(1)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "scale": rng.standard_normal(4).astype(np.float32), "bias": rng.standard_normal(4).astype(np.float32),
             "mean": rng.standard_normal(4).astype(np.float32),
             "var": (np.abs(rng.standard_normal(4)) + 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, (4, 3, 6, 6))],
                              [helper.make_tensor_value_info("y", 1, (4, 4, 6, 6))],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "m.onnx")
    return import_onnx(tmp_path / "m.onnx"), inits


def _reference(inits) -> torch.nn.Module:
    conv, bn = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(inits["w"]))
        bn.weight.copy_(torch.from_numpy(inits["scale"]))
        bn.bias.copy_(torch.from_numpy(inits["bias"]))
        bn.running_mean.copy_(torch.from_numpy(inits["mean"]))
        bn.running_var.copy_(torch.from_numpy(inits["var"]))
    return torch.nn.Sequential(conv, bn, torch.nn.ReLU())


def test_eval_matches_torch(tmp_path):
    model, inits = _conv_bn_relu(tmp_path)
    x = torch.randn(4, 3, 6, 6)
    with torch.no_grad():
        expected = _reference(inits).eval()(x).numpy()
    np.testing.assert_allclose(compile_torch(model.module)(x.numpy()), expected, rtol=1e-4, atol=1e-4)


def test_train_mode_uses_batch_statistics(tmp_path):
    model, inits = _conv_bn_relu(tmp_path)
    program, reference = TorchProgram(model.module).train(), _reference(inits).train()
    x = torch.randn(4, 3, 6, 6)
    y = program(x)
    np.testing.assert_allclose(y.detach().numpy(), reference(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    # Running statistics are buffers updated like BatchNorm2d's; the weight store is untouched.
    assert {name for name, _ in program.named_buffers()} == {"stats.mean", "stats.var"}
    np.testing.assert_allclose(program.weight("mean").numpy(), reference[1].running_mean.numpy(), rtol=1e-5)
    np.testing.assert_array_equal(model.weights["mean"], inits["mean"])
    # Weights are trainable parameters.
    y.sum().backward()
    assert program.weight("w").grad is not None and program.weight("w").grad.shape == (4, 3, 3, 3)


@pytest.mark.parametrize("target, options, message", [
    ("torch", {"threads": 2}, "target 'torch' takes no option 'threads' \\(it takes: none\\)"),
    ("torch", {"profile": True}, "target 'torch' takes no option 'profile'"),
    ("llvm", {"vectorize": False}, "target 'llvm' takes no option 'vectorize' \\(it takes: threads, profile, cpu, checked, tuning, tune\\)"),
    ("tvm", {"threads": 2}, "target 'tvm' takes no option 'threads' \\(it takes: profile, tune_trials, tuning_dir, transfer\\)"),
    ("cuda", {"cpu": "znver3"}, "target 'cuda' takes no option 'cpu' \\(it takes: arch, tune_trials, tuning_dir, transfer\\)"),
    ("tpu", {}, "unknown target 'tpu' \\(choose from llvm, torch, tvm, cuda\\)"),
])
def test_compile_rejects_options_its_target_lacks(tmp_path, target, options, message):
    """An option the target would ignore (the torch backend runs on torch's own threads) or does
    not know is an error that names it, not silently dropped or a TypeError."""
    model, _ = _conv_bn_relu(tmp_path)
    with pytest.raises(NasirError, match=message):
        nasir.compile(model, target=target, **options)


def test_compile_torch_with_default_threads(tmp_path):
    model, inits = _conv_bn_relu(tmp_path)
    x = torch.randn(4, 3, 6, 6)
    with torch.no_grad():
        expected = _reference(inits).eval()(x).numpy()
    np.testing.assert_allclose(nasir.compile(model, target="torch", threads=1)(x.numpy()), expected,
                               rtol=1e-4, atol=1e-4)
