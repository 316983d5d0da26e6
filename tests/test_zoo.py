"""Tests of nasir.zoo: architectures against published parameter counts, and ONNX export against
ONNX Runtime (an independent executor) on seeded random input."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from nasir import zoo
from nasir.errors import NasirError, ZooError

import onnxruntime as ort  # noqa: E402  (the oracle; a dev dependency)

ALL = [
    "densenet121",
    "densenet161",
    "mobilenet_v2",
    "resnet18",
    "resnet34",
    "resnext29_2x64d",
    "wrn_40_2",
]
CIFAR_ONLY = {"resnext29_2x64d", "wrn_40_2"}
CASES = [
    (n, d) for n in ALL for d in (("cifar10",) if n in CIFAR_ONLY else ("cifar10", "imagenet"))
]
CLASSES = {"cifar10": 10, "imagenet": 1000}
RES = {"cifar10": 32, "imagenet": 224}

# Published parameter counts (torchvision model cards for the ImageNet nets; the WRN paper /
# reference code for WRN-40-2; Xie et al. CIFAR ResNeXt-29 2x64d ~ 9.13M). Relative tolerance.
PUBLISHED = {
    ("resnet18", "imagenet"): (11_689_512, 1e-4),
    ("resnet34", "imagenet"): (21_797_672, 1e-4),
    ("densenet121", "imagenet"): (7_978_856, 1e-4),
    ("densenet161", "imagenet"): (28_681_000, 1e-4),
    ("mobilenet_v2", "imagenet"): (3_504_872, 1e-4),
    ("resnet18", "cifar10"): (11_173_962, 1e-4),  # kuangliu/pytorch-cifar ResNet18
    ("wrn_40_2", "cifar10"): (2_243_546, 5e-3),
    ("resnext29_2x64d", "cifar10"): (9_130_000, 5e-3),
}


@functools.lru_cache(maxsize=None)
def _model(name: str, dataset: str, seed: int = 0) -> nn.Module:
    return zoo.build_torch(name, dataset, seed)


def _input(name: str, dataset: str, seed: int = 123, batch: int = 1) -> torch.Tensor:
    shape = (batch, *zoo.input_shape(name, dataset)[1:])
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _nparams(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# ----------------------------------------------------------------------------------- registry


def test_names_sorted_and_complete():
    assert zoo.names() == ALL
    assert zoo.names() == sorted(zoo.names())


@pytest.mark.parametrize("name", ALL)
def test_datasets(name):
    expected = ("cifar10",) if name in CIFAR_ONLY else ("cifar10", "imagenet")
    assert tuple(zoo.datasets(name)) == expected


@pytest.mark.parametrize("name,dataset", CASES)
def test_input_shape(name, dataset):
    r = RES[dataset]
    assert tuple(zoo.input_shape(name, dataset)) == (1, 3, r, r)


def test_unknown_name_raises_zoo_error_listing_names():
    assert issubclass(ZooError, NasirError)
    for call in (
        lambda: zoo.build_torch("resnet19"),
        lambda: zoo.datasets("resnet19"),
        lambda: zoo.input_shape("resnet19", "cifar10"),
        lambda: zoo.export_onnx("resnet19", "/tmp/never-written.onnx"),
        lambda: zoo.load("resnet19"),
    ):
        with pytest.raises(ZooError) as ei:
            call()
        msg = str(ei.value)
        assert "resnet19" in msg
        for n in ALL:
            assert n in msg


@pytest.mark.parametrize("name", sorted(CIFAR_ONLY))
def test_cifar_only_nets_reject_imagenet(name, tmp_path):
    for call in (
        lambda: zoo.build_torch(name, "imagenet"),
        lambda: zoo.input_shape(name, "imagenet"),
        lambda: zoo.export_onnx(name, tmp_path / "x.onnx", dataset="imagenet"),
    ):
        with pytest.raises(ZooError) as ei:
            call()
        assert "imagenet" in str(ei.value) and "cifar10" in str(ei.value)
    assert not (tmp_path / "x.onnx").exists()


def test_unknown_dataset_raises_zoo_error():
    with pytest.raises(ZooError, match="cifar10"):
        zoo.build_torch("resnet18", "mnist")


# ------------------------------------------------------------------------------ architectures


@pytest.mark.parametrize("name,dataset", sorted(PUBLISHED))
def test_parameter_count_matches_published(name, dataset):
    expected, rel = PUBLISHED[(name, dataset)]
    got = _nparams(_model(name, dataset))
    assert got == pytest.approx(expected, rel=rel), f"{name}/{dataset}: {got} params"


@pytest.mark.parametrize(
    "name", ["resnet18", "resnet34", "densenet121", "densenet161", "mobilenet_v2"]
)
def test_cifar_and_imagenet_differ_only_in_stem_and_head(name):
    ci, im = _model(name, "cifar10"), _model(name, "imagenet")
    head = {"resnet18": 512, "resnet34": 512, "densenet121": 1024, "densenet161": 2208,
            "mobilenet_v2": 1280}[name]
    head_diff = (1000 - 10) * (head + 1)
    # Only stem and classifier differ for ResNet / MobileNet: fixed, computable difference.
    if name.startswith("resnet"):
        stem_diff = 64 * 3 * (49 - 9)
    elif name == "mobilenet_v2":
        stem_diff = 0
    else:  # DenseNet: imagenet stem conv0 7x7 (init feats) + norm0 vs cifar 3x3 conv (2*growth)
        g, init = (32, 64) if name == "densenet121" else (48, 96)
        assert init == 2 * g  # so every later layer has the same width
        stem_diff = init * 3 * (49 - 9) + 2 * init
    assert _nparams(im) - _nparams(ci) == head_diff + stem_diff


@pytest.mark.parametrize("name,dataset", CASES)
def test_build_output_shape_finite_and_eval(name, dataset):
    m = _model(name, dataset)
    assert not m.training
    assert all(not b.training for b in m.modules())
    with torch.no_grad():
        y = m(_input(name, dataset))
    assert tuple(y.shape) == (1, CLASSES[dataset])
    assert torch.isfinite(y).all()
    # Logits are O(1) and not degenerate: BN statistics actually normalise.
    assert 1e-3 < y.std().item() < 100


def test_seed_determinism_and_variation():
    a = zoo.build_torch("resnet18", "cifar10", seed=0)
    b = zoo.build_torch("resnet18", "cifar10", seed=0)
    c = zoo.build_torch("resnet18", "cifar10", seed=1)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    assert not torch.equal(a.bn1.running_mean, c.bn1.running_mean)
    # building does not disturb the caller's global RNG stream
    torch.manual_seed(7)
    r1 = torch.rand(3)
    torch.manual_seed(7)
    zoo.build_torch("wrn_40_2", "cifar10", seed=3)
    assert torch.equal(torch.rand(3), r1)


@pytest.mark.parametrize("name,dataset", CASES)
def test_batchnorm_stats_are_nontrivial(name, dataset):
    bns = [b for b in _model(name, dataset).modules() if isinstance(b, nn.BatchNorm2d)]
    assert bns
    means = torch.cat([b.running_mean for b in bns])
    vars_ = torch.cat([b.running_var for b in bns])
    weights = torch.cat([b.weight.detach() for b in bns])
    biases = torch.cat([b.bias.detach() for b in bns])
    assert means.abs().max() > 0.05 and (vars_ - 1).abs().max() > 0.05
    assert (vars_ > 0).all()
    assert (weights - 1).abs().max() > 0.05 and biases.abs().max() > 0.05


def _spatial_before_pool(m: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    seen = {}

    def hook(mod, inp, out):
        seen["s"] = inp[0].shape  # returns None: leaves the output alone

    h = m.avgpool.register_forward_hook(hook)
    try:
        with torch.no_grad():
            m(x)
    finally:
        h.remove()
    return tuple(seen["s"][2:])


@pytest.mark.parametrize(
    "name,dataset,hw",
    [
        ("resnet18", "cifar10", (4, 4)),
        ("resnet18", "imagenet", (7, 7)),
        ("resnet34", "cifar10", (4, 4)),
        ("densenet121", "cifar10", (4, 4)),
        ("densenet161", "imagenet", (7, 7)),
        ("mobilenet_v2", "cifar10", (4, 4)),
        ("mobilenet_v2", "imagenet", (7, 7)),
        ("resnext29_2x64d", "cifar10", (8, 8)),
        ("wrn_40_2", "cifar10", (8, 8)),
    ],
)
def test_final_feature_map_size(name, dataset, hw):
    assert _spatial_before_pool(_model(name, dataset), _input(name, dataset)) == hw


def test_structure_and_torchvision_style_names():
    r = dict(_model("resnet18", "cifar10").named_modules())
    expected = {"conv1", "bn1", "layer1.0.conv1", "layer2.0.downsample.0", "layer4.1.bn2", "fc"}
    assert expected <= set(r)
    assert r["conv1"].kernel_size == (3, 3) and r["conv1"].stride == (1, 1)
    assert not any(isinstance(mod, nn.MaxPool2d) for mod in r.values())
    ri = dict(_model("resnet34", "imagenet").named_modules())
    assert ri["conv1"].kernel_size == (7, 7) and ri["conv1"].stride == (2, 2)
    assert isinstance(ri["maxpool"], nn.MaxPool2d)
    assert "layer3.5.conv2" in ri and "layer3.6" not in ri

    x = dict(_model("resnext29_2x64d", "cifar10").named_modules())
    assert x["layer1.0.conv2"].groups == 2 and x["layer1.0.conv2"].in_channels == 128
    assert x["layer3.2.conv2"].in_channels == 512 and x["layer3.2.conv3"].out_channels == 1024
    assert "layer3.2" in x and "layer3.3" not in x and "layer4" not in x

    d = dict(_model("densenet161", "imagenet").named_modules())
    assert d["features.conv0"].out_channels == 96
    assert d["features.denseblock1.denselayer1.conv2"].out_channels == 48
    assert "features.denseblock3.denselayer36" in d and "features.denseblock4.denselayer24" in d
    assert d["classifier"].in_features == 2208
    dc = dict(_model("densenet121", "cifar10").named_modules())
    assert dc["features.conv0"].kernel_size == (3, 3) and dc["features.conv0"].out_channels == 64
    assert "features.pool0" not in dc and dc["classifier"].in_features == 1024

    mb = _model("mobilenet_v2", "imagenet")
    assert any(isinstance(mod, nn.ReLU6) for mod in mb.modules())
    assert sum(isinstance(mod, nn.Conv2d) and mod.groups > 1 for mod in mb.modules()) == 17

    w = dict(_model("wrn_40_2", "cifar10").named_modules())
    assert [w[f"layer{i}.0.conv1"].out_channels for i in (1, 2, 3)] == [32, 64, 128]
    assert "layer1.5" in w and "layer1.6" not in w  # (40 - 4) / 6 = 6 blocks per stage
    assert w["fc"].in_features == 128


# ------------------------------------------------------------------------------------ ONNX


def _ort_run(path: str, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["input"]
    assert [o.name for o in sess.get_outputs()] == ["output"]
    return sess.run(["output"], {"input": x})[0]


@pytest.mark.parametrize("name,dataset", CASES)
def test_export_onnx_matches_torch_under_onnxruntime(name, dataset, tmp_path):
    path = zoo.export_onnx(name, tmp_path / f"{name}.onnx", dataset=dataset, seed=0)
    assert str(path) == str(tmp_path / f"{name}.onnx")
    model = onnx.load(path)
    onnx.checker.check_model(model)
    # static shapes
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == list(zoo.input_shape(name, dataset))
    out_dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == [1, CLASSES[dataset]]
    assert any(o.domain in ("", "ai.onnx") and o.version == 17 for o in model.opset_import)

    x = _input(name, dataset)
    with torch.no_grad():
        expected = _model(name, dataset)(x).numpy()
    got = _ort_run(path, x.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_export_node_names_follow_module_hierarchy(tmp_path):
    path = zoo.export_onnx("resnet18", tmp_path / "r18.onnx")
    g = onnx.load(path).graph
    names = {n.name for n in g.node}
    assert "/conv1/Conv" in names
    assert "/layer1/layer1.0/conv1/Conv" in names
    assert "/fc/Gemm" in names
    ops = [n.op_type for n in g.node]
    assert ops.count("BatchNormalization") == 20  # kept by default


def test_export_can_fold_batch_norm(tmp_path):
    g = onnx.load(zoo.export_onnx("resnet18", tmp_path / "r18.onnx", fold_batch_norm=True)).graph
    ops = [n.op_type for n in g.node]
    assert "BatchNormalization" not in ops
    assert ops.count("Conv") == 20


def test_export_batch_and_seed(tmp_path):
    p = zoo.export_onnx("wrn_40_2", tmp_path / "w.onnx", batch=3, seed=5)
    x = _input("wrn_40_2", "cifar10", batch=3)
    with torch.no_grad():
        expected = zoo.build_torch("wrn_40_2", "cifar10", seed=5)(x).numpy()
        other_seed = _model("wrn_40_2", "cifar10", 0)(x).numpy()
    got = _ort_run(p, x.numpy())
    assert got.shape == (3, 10)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert not np.allclose(got, other_seed, rtol=1e-3, atol=1e-3)


def test_export_at_another_image_size_keeps_the_weights(tmp_path):
    p = zoo.export_onnx("resnet18", tmp_path / "r18-16.onnx", batch=2, image_size=16)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _model("resnet18", "cifar10")(x).numpy()
    got = _ort_run(p, x.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
