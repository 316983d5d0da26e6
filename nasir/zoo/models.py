"""Model zoo: standard CNN architectures in plain PyTorch (no torchvision).

Every builder takes ``dataset`` ("cifar10": 32x32 input, 10 classes; "imagenet": 224x224 input,
1000 classes) and returns an ``nn.Module``. Submodules are named like torchvision's reference
implementations (``conv1``, ``bn1``, ``layer1.0.conv1``, ``features.denseblock1.denselayer1``, ...)
because the ONNX node names the exporter emits come from them.

Weights are not trained: ``nasir.zoo.init.init_weights`` draws them.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "NUM_CLASSES",
    "BasicBlock",
    "DenseNet",
    "MobileNetV2",
    "ResNeXtBottleneck",
    "ResNeXtCifar",
    "ResNet",
    "WideResNet",
    "densenet121",
    "densenet161",
    "mobilenet_v2",
    "resnet18",
    "resnet34",
    "resnext29_2x64d",
    "wrn_40_2",
]

NUM_CLASSES = {"cifar10": 10, "imagenet": 1000}


def _num_classes(dataset: str) -> int:
    try:
        return NUM_CLASSES[dataset]
    except KeyError:
        raise ValueError(f"unknown dataset {dataset!r}; valid: {sorted(NUM_CLASSES)}") from None


# --------------------------------------------------------------------------------------------
# ResNet (He et al. 2016), BasicBlock variants: ResNet-18 / ResNet-34
# --------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: list[int], dataset: str = "cifar10") -> None:
        super().__init__()
        num_classes = _num_classes(dataset)
        self.inplanes = 64
        if dataset == "imagenet":
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        else:  # CIFAR stem: 3x3 stride 1, no max pool
            self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool: nn.Module = (
            nn.MaxPool2d(3, stride=2, padding=1) if dataset == "imagenet" else nn.Identity()
        )
        self.layer1 = self._make_layer(64, layers[0], 1)
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * BasicBlock.expansion, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(self.inplanes, planes, stride)]
        self.inplanes = planes * BasicBlock.expansion
        layers += [BasicBlock(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(dataset: str = "cifar10") -> ResNet:
    return ResNet([2, 2, 2, 2], dataset)


def resnet34(dataset: str = "cifar10") -> ResNet:
    return ResNet([3, 4, 6, 3], dataset)


# --------------------------------------------------------------------------------------------
# ResNeXt-29 for CIFAR (Xie et al. 2017, Sec. 5.3): 3 stages x 3 bottleneck blocks,
# output widths 256/512/1024, bottleneck width D = cardinality * base_width * 2^stage.
# --------------------------------------------------------------------------------------------


class ResNeXtBottleneck(nn.Module):
    def __init__(
        self, in_channels: int, out_channels: int, stride: int, cardinality: int, width: int
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)  # conv_reduce
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(
            width, width, 3, stride=stride, padding=1, groups=cardinality, bias=False
        )
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)  # conv_expand
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNeXtCifar(nn.Module):
    def __init__(
        self,
        depth: int = 29,
        cardinality: int = 2,
        base_width: int = 64,
        widen_factor: int = 4,
        dataset: str = "cifar10",
    ) -> None:
        super().__init__()
        if dataset != "cifar10":
            raise ValueError("ResNeXt-29 is a CIFAR-only network")
        num_classes = _num_classes(dataset)
        assert (depth - 2) % 9 == 0, "depth must be 9n+2"
        n = (depth - 2) // 9
        stages = [64, 64 * widen_factor, 128 * widen_factor, 256 * widen_factor]
        self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        in_ch = stages[0]
        for i in range(3):
            out_ch = stages[i + 1]
            width = cardinality * base_width * (2**i)
            blocks = []
            for j in range(n):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(ResNeXtBottleneck(in_ch, out_ch, stride, cardinality, width))
                in_ch = out_ch
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(stages[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnext29_2x64d(dataset: str = "cifar10") -> ResNeXtCifar:
    return ResNeXtCifar(depth=29, cardinality=2, base_width=64, dataset=dataset)


# --------------------------------------------------------------------------------------------
# DenseNet-BC (Huang et al. 2017)
# --------------------------------------------------------------------------------------------


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(out)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int):
        super().__init__()
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size)
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, 1, bias=False)
        self.pool = nn.AvgPool2d(2, stride=2)


class DenseNet(nn.Module):
    def __init__(
        self,
        growth_rate: int = 32,
        block_config: tuple[int, ...] = (6, 12, 24, 16),
        num_init_features: int = 64,
        bn_size: int = 4,
        compression: float = 0.5,
        dataset: str = "cifar10",
    ) -> None:
        super().__init__()
        num_classes = _num_classes(dataset)
        self.features = nn.Sequential()
        if dataset == "imagenet":
            self.features.add_module(
                "conv0", nn.Conv2d(3, num_init_features, 7, stride=2, padding=3, bias=False)
            )
            self.features.add_module("norm0", nn.BatchNorm2d(num_init_features))
            self.features.add_module("relu0", nn.ReLU(inplace=True))
            self.features.add_module("pool0", nn.MaxPool2d(3, stride=2, padding=1))
        else:  # DenseNet-BC CIFAR stem: one 3x3 conv with 2*growth_rate channels
            num_init_features = 2 * growth_rate
            self.features.add_module(
                "conv0", nn.Conv2d(3, num_init_features, 3, stride=1, padding=1, bias=False)
            )
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate)
            self.features.add_module(f"denseblock{i + 1}", block)
            num_features += num_layers * growth_rate
            if i != len(block_config) - 1:
                out_features = int(num_features * compression)
                self.features.add_module(
                    f"transition{i + 1}", _Transition(num_features, out_features)
                )
                num_features = out_features
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(num_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.features(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.classifier(x)


def densenet121(dataset: str = "cifar10") -> DenseNet:
    return DenseNet(32, (6, 12, 24, 16), 64, dataset=dataset)


def densenet161(dataset: str = "cifar10") -> DenseNet:
    return DenseNet(48, (6, 12, 36, 24), 96, dataset=dataset)


# --------------------------------------------------------------------------------------------
# MobileNetV2 (Sandler et al. 2018)
# --------------------------------------------------------------------------------------------


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU(nn.Sequential):
    """Conv2d -> BatchNorm2d -> ReLU6 (torchvision's Conv2dNormActivation: children 0, 1, 2)."""

    def __init__(
        self,
        in_planes: int,
        out_planes: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
    ) -> None:
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(
                in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False
            ),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU(inp, hidden_dim, kernel_size=1))  # pointwise expand
        layers += [
            ConvBNReLU(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),  # depthwise
            nn.Conv2d(hidden_dim, oup, 1, bias=False),  # pointwise linear
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, width_mult: float = 1.0, dataset: str = "cifar10") -> None:
        super().__init__()
        num_classes = _num_classes(dataset)
        # t (expansion), c (channels), n (repeats), s (first stride)
        setting = [
            [1, 16, 1, 1],
            [6, 24, 2, 2],
            [6, 32, 3, 2],
            [6, 64, 4, 2],
            [6, 96, 3, 1],
            [6, 160, 3, 2],
            [6, 320, 1, 1],
        ]
        stem_stride = 2
        if dataset == "cifar10":
            # Common CIFAR variant: stride-1 stem and stride 1 in the first 24-channel stage
            # (32x32 -> 4x4 at the last stage instead of 1x1).
            stem_stride = 1
            setting[1][3] = 1
        input_channel = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU(3, input_channel, stride=stem_stride)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(
                    InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t)
                )
                input_channel = output_channel
        features.append(ConvBNReLU(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last_channel, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.classifier(x)


def mobilenet_v2(dataset: str = "cifar10") -> MobileNetV2:
    return MobileNetV2(1.0, dataset)


# --------------------------------------------------------------------------------------------
# Wide ResNet (Zagoruyko & Komodakis 2016), pre-activation blocks, CIFAR only
# --------------------------------------------------------------------------------------------


class WideBasicBlock(nn.Module):
    """BN-ReLU-Conv3x3-BN-ReLU-Conv3x3 with a 1x1 projection shortcut when shapes change."""

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_planes != out_planes:
            self.shortcut = nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = self.relu1(self.bn1(x))
        # the projection shortcut sees the pre-activated input (as in the reference code)
        identity = x if self.shortcut is None else self.shortcut(o)
        out = self.conv1(o)
        out = self.conv2(self.relu2(self.bn2(out)))
        return out + identity


class WideResNet(nn.Module):
    def __init__(self, depth: int = 40, widen_factor: int = 2, dataset: str = "cifar10") -> None:
        super().__init__()
        if dataset != "cifar10":
            raise ValueError("Wide ResNet is a CIFAR-only network")
        num_classes = _num_classes(dataset)
        assert (depth - 4) % 6 == 0, "depth must be 6n+4"
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False)
        in_planes = widths[0]
        for i in range(3):
            blocks = []
            for j in range(n):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(WideBasicBlock(in_planes, widths[i + 1], stride))
                in_planes = widths[i + 1]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.bn1 = nn.BatchNorm2d(widths[3])
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        x = self.relu(self.bn1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def wrn_40_2(dataset: str = "cifar10") -> WideResNet:
    return WideResNet(40, 2, dataset)
