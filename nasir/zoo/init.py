"""Seeded weights for the zoo's untrained models: Kaiming normal for convolutions, and every
BatchNorm given random affine parameters and calibrated running statistics, so inference exercises
the whole BatchNorm computation rather than an identity.
"""

from __future__ import annotations

import torch
from torch import nn


def init_weights(model: nn.Module, seed: int = 0, image_size: int | None = None) -> nn.Module:
    """Seeded Kaiming init, random BatchNorm affine parameters, calibrated BatchNorm statistics.

    Convolutions get Kaiming-normal weights (fan_out, ReLU gain) drawn after
    ``torch.manual_seed(seed)``; the global RNG state is restored afterwards, so building a model
    has no side effect on it. BatchNorm weights ~ U(0.5, 1.5) and biases ~ N(0, 0.1) come from a
    ``torch.Generator`` seeded with ``seed``. Running statistics start as running_mean ~ N(0, 0.1),
    running_var ~ U(0.5, 1.5); when ``image_size`` is given they are then replaced by the batch
    statistics of one train-mode forward pass on seeded N(0, 1) input of that resolution. Random
    statistics alone do not normalise anything, so deep nets (DenseNet's concatenations above all)
    would blow activations up to 1e12; calibrated ones keep every layer's output O(1) while still
    being non-trivial (data-dependent, far from mean 0 / var 1), which makes inference checks
    meaningful. The model is left in eval mode.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.kaiming_uniform_(m.weight, a=5**0.5)
                bound = 1.0 / m.in_features**0.5
                nn.init.uniform_(m.bias, -bound, bound)
    gen = torch.Generator().manual_seed(seed)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for m in bns:
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
        if image_size is not None and bns:
            x = torch.randn(4, 3, image_size, image_size, generator=gen)
            momenta = [m.momentum for m in bns]
            for m in bns:
                m.reset_running_stats()
                m.momentum = None  # cumulative average: after one batch, exactly its statistics
            model.train()
            model(x)
            for m, mom in zip(bns, momenta):
                m.momentum = mom
                m.num_batches_tracked.zero_()
    return model.eval()
