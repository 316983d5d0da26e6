"""Fisher Potential: the capacity legality of architecture transforms (BlockSwap, Turner et al. 2020).

An analysis, not a rewrite: it runs a model through the torch backend (`TorchProgram`, training
mode, so batch-norm uses batch statistics) on one labelled minibatch, backpropagates the
cross-entropy loss, and for every measured activation A (N x C x H x W) with g = dLoss/dA computes

    Delta_c = 1/(2N) * sum_n ( sum_{i,j} A[n,c,i,j] * g[n,c,i,j] )^2,    Delta_layer = sum_c Delta_c,

and Fisher(net) = sum over layers. Architecture transforms are accepted when the candidate's value
at initialisation is not below the original's (`check_capacity`; `Model.transform(..., capacity_check=...)` runs it).

Which activations: BlockSwap measures each residual block's output before the add. nasir has no
block structure in its IR, so it measures the output of every convolution: each `mac` nest with a
4-D output (and each `nn.conv2d` of a model not yet lowered), named by its layer. The classifier
(gemm) is left out as in BlockSwap. The value is whatever the op produces, so fused epilogues
(bias, ReLU, residual add from `fuse-epilogue`) are inside it: compare models at the same level,
before epilogue fusion. The parts of an `index-split` conv are measured separately and their sum
equals the unsplit conv's value (Delta sums over channels, and the parts partition the channels).

    report = fisher_potential(model, x, y)      # model batch == len(x)
    report.total, report.layers["layer1.0.conv1"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from nasir.data import minibatch
from nasir.dialects import nest, nn
from nasir.dialects.shapes import shape_of
from nasir.errors import LegalityError, ShapeError
from nasir.lowering.nest_to_torch.program import TorchProgram

if TYPE_CHECKING:  # the model module imports this one (Model.transform's capacity check)
    from nasir.model import Model


@dataclass
class FisherReport:
    """Per-layer Fisher Potential (layer name -> Delta_layer, program order), their total, the loss."""

    layers: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    loss: float = 0.0

    def __str__(self) -> str:
        width = max([len(n) for n in self.layers] + [5])
        rows = [f"{'layer':<{width}}  fisher"] + [f"{n:<{width}}  {v:.6g}" for n, v in self.layers.items()]
        return "\n".join(rows + [f"{'total':<{width}}  {self.total:.6g}"])


@dataclass
class CapacityResult:
    """Outcome of `check_capacity`: accepted, both Fisher totals, and why."""

    accepted: bool
    candidate: float
    original: float
    reason: str


def measured(op) -> bool:
    """Whether Fisher Potential measures the output of `op` (see the module docstring)."""
    if isinstance(op, nest.ComputeOp):
        return op.kind == "mac" and len(shape_of(op.result)) == 4
    return isinstance(op, nn.Conv2DOp)


def fisher_potential(model: Model, inputs: np.ndarray, labels: np.ndarray, seed: int = 0) -> FisherReport:
    """Fisher Potential of `model` on one minibatch (`inputs` N x C x H x W, integer `labels` N)."""
    inputs = np.asarray(inputs, dtype=np.float32)
    labels = np.asarray(labels).astype(np.int64).reshape(-1)
    expected = model.input_shapes[0]
    if tuple(inputs.shape) != tuple(expected):
        raise ShapeError(f"fisher_potential: inputs of shape {inputs.shape} but the model takes {expected}; "
                         f"import the model at batch {inputs.shape[0]} (e.g. nasir.zoo.export_onnx(..., batch=N))")
    if len(labels) != inputs.shape[0]:
        raise ShapeError(f"fisher_potential: {inputs.shape[0]} inputs but {len(labels)} labels")
    torch.manual_seed(seed)
    program = TorchProgram(model.module).train()
    activations: dict[str, torch.Tensor] = {}

    def recording(name, fn):
        def run(op, args):
            activations[name] = out = fn(op, args)
            return out
        return run

    program.steps = [(op, recording(op.layer_name, fn) if measured(op) else fn, operands)
                     for op, fn, operands in program.steps]
    logits = program(torch.from_numpy(inputs))
    logits = logits[0] if isinstance(logits, tuple) else logits
    if logits.dim() != 2 or logits.shape[0] != len(labels):
        raise ShapeError(f"fisher_potential: the first output must be N x classes logits, got {tuple(logits.shape)}")
    if labels.min() < 0 or labels.max() >= logits.shape[1]:
        raise ShapeError(f"fisher_potential: labels must lie in 0..{logits.shape[1] - 1}")
    loss = F.cross_entropy(logits, torch.from_numpy(labels))
    if not activations:
        raise LegalityError("fisher_potential: the model has no convolution to measure")
    grads = torch.autograd.grad(loss, list(activations.values()), allow_unused=True)
    report = FisherReport(loss=float(loss.detach()))
    n = inputs.shape[0]
    for (name, a), g in zip(activations.items(), grads):
        if g is None:  # the activation does not reach the loss
            value = 0.0
        else:
            per_example = (a.detach().double() * g.double()).sum(dim=(2, 3))
            value = float((per_example ** 2).sum() / (2 * n))
        report.layers[name] = value
    report.total = float(sum(report.layers.values()))
    return report


def check_capacity(candidate: Model, original: Model, inputs: np.ndarray, labels: np.ndarray,
                   seed: int = 0) -> CapacityResult:
    """Accept `candidate` unless its Fisher Potential is below `original`'s on the same minibatch.

    Both models are measured as given, so both should be at initialisation (zoo models are seeded
    fresh networks; architecture transforms re-initialise what they change with seeded Kaiming).
    """
    cand = fisher_potential(candidate, inputs, labels, seed).total
    orig = fisher_potential(original, inputs, labels, seed).total
    if cand < orig:
        return CapacityResult(False, cand, orig,
                              f"Fisher Potential {cand:.6g} is below the original's {orig:.6g} "
                              f"({100 * (1 - cand / orig):.1f}% less capacity at initialisation)")
    return CapacityResult(True, cand, orig, f"Fisher Potential {cand:.6g} >= the original's {orig:.6g}")


def require_capacity(candidate: Model, original: Model, pipeline: str, data=None,
                     batch: int | None = None, seed: int = 0) -> CapacityResult:
    """Raise LegalityError unless `candidate` (made by `pipeline`) keeps `original`'s capacity."""
    if isinstance(data, tuple):
        inputs, labels = data
    else:
        shape = original.input_shapes[0]
        classes = original.output_shapes[0][-1]
        inputs, labels = minibatch(data, batch or shape[0], seed, tuple(shape[1:]), classes)
    result = check_capacity(candidate, original, inputs, labels, seed)
    if not result.accepted:
        raise LegalityError(f"capacity check rejects '{pipeline}': {result.reason}")
    return result
