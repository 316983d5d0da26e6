"""nasir.zoo: standard CNNs (ResNet, ResNeXt, DenseNet, MobileNetV2, WRN) as PyTorch and ONNX.

Public API::

    names()                          -> sorted model names
    datasets(name)                   -> datasets the model is defined for
    input_shape(name, dataset)       -> (1, 3, H, W)
    build_torch(name, dataset, seed) -> seeded torch.nn.Module in eval mode
    export_onnx(name, path, ...)     -> path of a static-shape ONNX file
    load(name, dataset, seed)        -> nasir.Model (via ONNX and nasir.load)

Unknown names and unsupported datasets raise `nasir.errors.ZooError`.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from nasir import api
from nasir.errors import ZooError

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["build_torch", "datasets", "export_onnx", "input_shape", "load", "names", "num_classes", "torch_builder"]

_BOTH = ("cifar10", "imagenet")
_CIFAR = ("cifar10",)

# name -> (builder attribute in nasir.zoo.models, datasets it supports)
_REGISTRY: dict[str, tuple[str, tuple[str, ...]]] = {
    "densenet121": ("densenet121", _BOTH),
    "densenet161": ("densenet161", _BOTH),
    "mobilenet_v2": ("mobilenet_v2", _BOTH),
    "resnet18": ("resnet18", _BOTH),
    "resnet34": ("resnet34", _BOTH),
    "resnext29_2x64d": ("resnext29_2x64d", _CIFAR),
    "wrn_40_2": ("wrn_40_2", _CIFAR),
}

_RESOLUTION = {"cifar10": 32, "imagenet": 224}
_CLASSES = {"cifar10": 10, "imagenet": 1000}


def names() -> list[str]:
    """All zoo model names, sorted."""
    return sorted(_REGISTRY)


def _entry(name: str) -> tuple[str, tuple[str, ...]]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ZooError(
            f"unknown zoo model {name!r}; valid names: {', '.join(names())}"
        ) from None


def datasets(name: str) -> tuple[str, ...]:
    """The datasets (input resolution + class count) `name` is defined for."""
    return _entry(name)[1]


def torch_builder(name: str) -> str:
    """The function of `nasir.zoo.models` that builds `name` (plain PyTorch)."""
    return _entry(name)[0]


def _check(name: str, dataset: str) -> str:
    builder, supported = _entry(name)
    if dataset not in supported:
        raise ZooError(
            f"zoo model {name!r} does not support dataset {dataset!r}; "
            f"valid datasets for {name}: {', '.join(supported)}"
        )
    return builder


def input_shape(name: str, dataset: str = "cifar10") -> tuple[int, int, int, int]:
    """NCHW input shape with batch 1, e.g. (1, 3, 32, 32) for CIFAR-10."""
    _check(name, dataset)
    r = _RESOLUTION[dataset]
    return (1, 3, r, r)


def num_classes(name: str, dataset: str = "cifar10") -> int:
    """Number of output classes of `name` built for `dataset`."""
    _check(name, dataset)
    return _CLASSES[dataset]


def build_torch(name: str, dataset: str = "cifar10", seed: int = 0) -> torch.nn.Module:
    """Build `name` for `dataset` with seeded weights and BatchNorm statistics, in eval mode."""
    builder = _check(name, dataset)
    import torch

    from nasir.zoo import models
    from nasir.zoo.init import init_weights

    ctor: Callable[[str], torch.nn.Module] = getattr(models, builder)
    # Construction (default inits) and calibration draw from the global RNG: seed it, and restore
    # the caller's stream afterwards.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ctor(dataset)
        init_weights(model, seed, image_size=_RESOLUTION[dataset])
    return model.eval()


def export_onnx(
    name: str,
    path: str | os.PathLike[str],
    dataset: str = "cifar10",
    seed: int = 0,
    batch: int = 1,
    opset: int = 17,
    fold_batch_norm: bool = False,
    image_size: int | None = None,
) -> str:
    """Export `name` to ONNX at `path` (static shapes, input "input", output "output").

    BatchNormalization nodes are kept by default (the network as trained: Fisher Potential runs it in
    training mode); `fold_batch_norm=True` folds them into the convolutions as deployment exports do.
    `image_size` exports the same network (same weights) for square inputs of that side instead of
    the dataset's (the zoo's networks pool globally before the classifier).

    Uses the TorchScript exporter (``dynamo=False``): it works offline without onnxscript and
    names nodes after the module hierarchy ("/layer1/layer1.0/conv1/Conv").
    """
    import torch

    model = build_torch(name, dataset, seed)
    _, channels, height, width = input_shape(name, dataset)
    shape = (batch, channels, *((image_size, image_size) if image_size else (height, width)))
    example = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        with torch.no_grad():
            torch.onnx.export(
                model,
                (example,),
                path,
                dynamo=False,
                export_params=True,
                do_constant_folding=fold_batch_norm,
                opset_version=opset,
                input_names=["input"],
                output_names=["output"],
            )
    return path


def load(name: str, dataset: str = "cifar10", seed: int = 0):  # -> nasir.Model
    """Export `name` to a temporary ONNX file and import it with `nasir.load`."""
    _check(name, dataset)
    with tempfile.TemporaryDirectory(prefix="nasir-zoo-") as tmp:
        path = export_onnx(name, os.path.join(tmp, f"{name}_{dataset}.onnx"), dataset, seed)
        return api.load(path)
