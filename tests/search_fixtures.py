"""A small residual CNN to search on in tests, and an evaluator that crashes on purpose.

`tiny_resnet_onnx(path)` writes a seeded 3x16x16 -> 10 network with a stem, a residual block and a
strided block with a 1x1 downsample (batch norms kept), so every kind of choice and every block
boundary of a ResNet occurs, in a model a search evaluates in milliseconds.
"""

from __future__ import annotations

import ctypes
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from nasir.errors import NasirError
from nasir.search.evaluate import Evaluator, Outcome


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.downsample(x))


class TinyResNet(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = Block(width, width, 1)
        self.layer2 = Block(width, 2 * width, 2)
        self.fc = nn.Linear(2 * width, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(torch.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def tiny_resnet_onnx(path: Path, seed: int = 0, width: int = 16) -> Path:
    torch.manual_seed(seed)
    model = TinyResNet(width).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 16, 16),), str(path), dynamo=False, input_names=["input"],
                          output_names=["output"], opset_version=17, do_constant_folding=False)
    return path


def dense_only_onnx(path: Path) -> Path:
    """A network with no convolution: nothing for an architecture transform."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 10)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 4, 4),), str(path), dynamo=False, input_names=["input"],
                          output_names=["output"], opset_version=17, do_constant_folding=False)
    return path


class CrashingEvaluator(Evaluator):
    """Segfaults on candidates with `depthwise`, hangs on `seq2`, raises on `group4`."""

    def __call__(self, pipeline: str, enter_below: float | None = None) -> Outcome:
        if "depthwise" in pipeline:
            ctypes.string_at(0)
        if "index-split{dim=co at=16" in pipeline:
            time.sleep(3600)
        if "group{factor=4" in pipeline:
            raise NasirError("a deliberate failure")
        return super().__call__(pipeline, enter_below)
