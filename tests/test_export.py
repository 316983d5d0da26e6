"""Export: `to_torch` gives a trainable module, `to_onnx` a file ONNX Runtime runs with equal outputs.

Oracles are independent of the exported code: the plain torch module the model was imported from,
and a plain torch module with a grouped conv holding the transformed model's weights.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from test_fisher import SmallNet, export

from nasir.errors import NasirError
from nasir.runtime.torch_executable import compile_torch

BATCH = 2


@pytest.fixture(scope="module")
def net_and_model(tmp_path_factory):
    torch.manual_seed(1)
    net = SmallNet()
    with torch.no_grad():
        for bn in (net.bn1, net.bn2):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
    return net, export(net, tmp_path_factory.mktemp("export") / "small.onnx", batch=BATCH)


def batch(seed=0):
    return np.random.default_rng(seed).standard_normal((BATCH, 3, 8, 8)).astype(np.float32)


def run_onnx(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def test_to_torch_matches_the_source_module_in_both_modes(net_and_model):
    net, model = net_and_model
    net = copy.deepcopy(net)  # a training-mode forward updates its batch-norm running statistics
    x = torch.from_numpy(batch())
    module = model.transform("convert-nn-to-nest").to_torch(training=True)
    assert module.training
    net.train()
    with torch.no_grad():
        np.testing.assert_allclose(module(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)
    net.eval()
    module.eval()
    with torch.no_grad():
        np.testing.assert_allclose(module(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)


def test_gradients_flow_to_every_parameter(net_and_model):
    _, model = net_and_model
    module = model.transform("convert-nn-to-nest,group{factor=2 layers=\"conv2.*\"}").to_torch(training=True)
    loss = F.cross_entropy(module(torch.from_numpy(batch())), torch.tensor([1, 7]))
    loss.backward()
    params = dict(module.named_parameters())
    assert len(params) == 11  # conv weights and biases (5), batch-norm scales and shifts (4), fc (2)
    for name, p in params.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_state_dict_round_trips_and_training_returns_to_the_model(net_and_model):
    _, model = net_and_model
    nested = model.transform("convert-nn-to-nest")
    module = nested.to_torch(training=True)
    optimiser = torch.optim.SGD(module.parameters(), lr=0.1)
    x = torch.from_numpy(batch(3))
    for _ in range(2):
        optimiser.zero_grad()
        F.cross_entropy(module(x), torch.tensor([0, 3])).backward()
        optimiser.step()
    state = {k: v.clone() for k, v in module.state_dict().items()}
    fresh = nested.to_torch()
    fresh.load_state_dict(state)
    module.eval()
    fresh.eval()
    with torch.no_grad():
        expected = module(x).numpy()
        np.testing.assert_array_equal(fresh(x).numpy(), expected)
    trained = nested.from_torch(module)
    np.testing.assert_allclose(compile_torch(trained.module)(x.numpy()), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(compile_torch(nested.module)(x.numpy()), expected, atol=1e-4)  # original unchanged
    with pytest.raises(NasirError, match="takes the module made by to_torch"):
        nested.from_torch(torch.nn.Linear(2, 2))


def test_onnx_export_of_the_imported_model_matches_the_source(net_and_model, tmp_path):
    net, model = net_and_model
    x = batch(4)
    with torch.no_grad():
        expected = net.eval()(torch.from_numpy(x)).numpy()
    for level in (model, model.transform("convert-nn-to-nest")):
        path = level.to_onnx(tmp_path / "m.onnx")
        onnx.checker.check_model(str(path))
        np.testing.assert_allclose(run_onnx(path, x), expected, rtol=1e-4, atol=1e-4)


def test_onnx_export_of_a_grouped_model_matches_a_plain_grouped_module(net_and_model, tmp_path):
    net, model = net_and_model
    grouped = model.transform("convert-nn-to-nest,group{factor=2 layers=\"conv2.*\"}")
    conv2 = next(op for op in grouped.ops() if getattr(op, "layer_name", "").startswith("conv2"))
    weight = grouped.weights[conv2.inputs[1].owner.key]
    assert weight.shape == (8, 4, 3, 3)
    reference = SmallNet()
    reference.load_state_dict(net.state_dict())
    reference.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False, groups=2)
    with torch.no_grad():
        reference.conv2.weight.copy_(torch.tensor(weight))
        x = batch(5)
        expected = reference.eval()(torch.from_numpy(x)).numpy()
    path = grouped.to_onnx(tmp_path / "g.onnx")
    np.testing.assert_allclose(run_onnx(path, x), expected, rtol=1e-4, atol=1e-4)


def test_generic_nest_path_exports(net_and_model, tmp_path):
    """A shifted conv reads an asymmetric window: it exports as Pad then Conv."""
    _, model = net_and_model
    shifted = model.transform("convert-nn-to-nest,shift{dim=ow offset=1 layers=\"conv3.*\"}")
    path = shifted.to_onnx(tmp_path / "s.onnx")
    x = batch(6)
    np.testing.assert_allclose(run_onnx(path, x), compile_torch(shifted.module)(x), rtol=1e-4, atol=1e-4)
