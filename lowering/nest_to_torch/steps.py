"""Epilogue steps in PyTorch: one definition per step of `nest.EPILOGUE_STEPS`, shared by the
nest level (`nest_ops`, a nest's epilogue) and the graph level (`nn_ops`, an element-wise nn op is
its `STEP`):

    apply_step("elu", x, None, [1.0])      ->  F.elu(x, 1.0)
    apply_step("prelu", x, slope, [])      ->  torch.where(x < 0, x * slope, x)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from nasir.errors import LoweringError

Tensor = torch.Tensor

BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "min": torch.minimum, "max": torch.maximum,
    "prelu": lambda x, slope: torch.where(x < 0, x * slope, x),
}
"""Steps with an operand: `fn(value, operand)`."""

UNARY: dict[str, Callable[[Tensor, list[float]], Tensor]] = {
    "relu": lambda x, p: torch.relu(x),
    "sigmoid": lambda x, p: torch.sigmoid(x),
    "hard_swish": lambda x, p: F.hardswish(x),
    "tanh": lambda x, p: torch.tanh(x),
    "exp": lambda x, p: torch.exp(x),
    "log": lambda x, p: torch.log(x),
    "sqrt": lambda x, p: torch.sqrt(x),
    "abs": lambda x, p: torch.abs(x),
    "neg": lambda x, p: torch.neg(x),
    "sign": lambda x, p: torch.sign(x),
    "softplus": lambda x, p: F.softplus(x),
    "leaky_relu": lambda x, p: F.leaky_relu(x, p[0]),
    "clip": lambda x, p: x.clamp(p[0], p[1]),
    "hard_sigmoid": lambda x, p: (x * p[0] + p[1]).clamp(0.0, 1.0),
    "scale": lambda x, p: x * p[0],
    "elu": lambda x, p: F.elu(x, p[0]),
    "selu": lambda x, p: p[1] * F.elu(x, p[0]),
    "shrink": lambda x, p: torch.where(x < -p[0], x + p[1], torch.where(x > p[0], x - p[1], torch.zeros_like(x))),
}
"""Steps without an operand: `fn(value, params)`."""


def apply_step(kind: str, x: Tensor, operand: Tensor | None, params: list[float]) -> Tensor:
    """One epilogue step on `x` (`operand`: the step's input, for the BINARY ones)."""
    if operand is not None and kind in BINARY:
        return BINARY[kind](x, operand)
    if operand is None and kind in UNARY:
        return UNARY[kind](x, params)
    raise LoweringError(f"torch backend: epilogue step '{kind}' is not implemented")
