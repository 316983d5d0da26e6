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
    check = FisherCheck(original, x, y)         # a search: the original measured once
    check(candidate).accepted

Cost (ResNet-34 cifar10, batch 16, one core of an AMD EPYC Zen 4): about 0.78 s per evaluation, all
but a few percent of it the convolutions' forward and input-gradient FLOPs (those of a plain torch
ResNet-34 take 0.70 s): weights are not copied and get no gradient (the analysis differentiates
with respect to activations only), every conv an architecture transform makes runs as F.conv2d,
and `threads=1` keeps torch's threads from spinning against the other workers on the cores. A
search measures the original once (`FisherCheck`) and runs one evaluation per core. Batch 16 is
the smallest batch that keeps the ranking: at batch 8 (or at 16 x 16 images) the candidates'
Fisher ratios rank worse against the consensus of other minibatches and some clear accept/reject
decisions flip, which never happens at 16 (`python benchmarks/fisher_speed.py --rank` prints the study).
"""

from __future__ import annotations

from contextlib import contextmanager
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


def fisher_potential(model: Model, inputs: np.ndarray, labels: np.ndarray, seed: int = 0,
                     threads: int | None = None) -> FisherReport:
    """Fisher Potential of `model` on one minibatch (`inputs` N x C x H x W, integer `labels` N).

    `threads`: torch's intra-op thread count for this evaluation (None: as set); a search running
    one evaluation per core wants 1 (torch's threads then do not fight the other workers)."""
    inputs, labels = _checked_batch(model, inputs, labels)
    torch.manual_seed(seed)
    with torch_threads(threads):
        program = TorchProgram(model.module, frozen=True).train()
        activations = _record(program)
        loss = _loss(program(torch.from_numpy(inputs)), labels)
        if not activations:
            raise LegalityError("fisher_potential: the model has no convolution to measure")
        grads = torch.autograd.grad(loss, list(activations.values()), allow_unused=True)
        layers = {name: _delta(a, g) for (name, a), g in zip(activations.items(), grads)}
    return FisherReport(layers, float(sum(layers.values())), float(loss.detach()))


def _checked_batch(model: Model, inputs, labels) -> tuple[np.ndarray, np.ndarray]:
    inputs = np.asarray(inputs, dtype=np.float32)
    labels = np.asarray(labels).astype(np.int64).reshape(-1)
    expected = model.input_shapes[0]
    if tuple(inputs.shape) != tuple(expected):
        raise ShapeError(f"fisher_potential: inputs of shape {inputs.shape} but the model takes {expected}; "
                         f"import the model at batch {inputs.shape[0]} (e.g. nasir.zoo.export_onnx(..., batch=N))")
    if len(labels) != inputs.shape[0]:
        raise ShapeError(f"fisher_potential: {inputs.shape[0]} inputs but {len(labels)} labels")
    return inputs, labels


@contextmanager
def torch_threads(threads: int | None):
    if threads is None or threads == torch.get_num_threads():  # setting it is not free: only on a change
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _record(program: TorchProgram) -> dict[str, torch.Tensor]:
    """Make `program` keep the output of every measured op (by layer name) in the returned dict."""
    activations: dict[str, torch.Tensor] = {}

    def recording(name, fn):
        def run(op, args):
            out = fn(op, args)
            if not out.requires_grad:  # weights are frozen: an op that no gradient reaches yet is a leaf
                out.requires_grad_()
            activations[name] = out
            return out
        return run

    program.steps = [(op, recording(op.layer_name, fn) if measured(op) else fn, operands)
                     for op, fn, operands in program.steps]
    return activations


def _loss(logits, labels: np.ndarray) -> torch.Tensor:
    logits = logits[0] if isinstance(logits, tuple) else logits
    if logits.dim() != 2 or logits.shape[0] != len(labels):
        raise ShapeError(f"fisher_potential: the first output must be N x classes logits, got {tuple(logits.shape)}")
    if labels.min() < 0 or labels.max() >= logits.shape[1]:
        raise ShapeError(f"fisher_potential: labels must lie in 0..{logits.shape[1] - 1}")
    return F.cross_entropy(logits, torch.from_numpy(labels))


def _delta(a: torch.Tensor, g: torch.Tensor | None) -> float:
    """Delta_layer of activation `a` with gradient `g`: the per-example, per-channel sums in float32
    (one batched dot product), their squares summed in float64."""
    if g is None:  # the activation does not reach the loss
        return 0.0
    per_example = torch.einsum("nchw,nchw->nc", a.detach(), g).double()
    return float((per_example ** 2).sum() / (2 * a.shape[0]))


class FisherCheck:
    """The capacity rule of a search: the original's Fisher Potential measured once on one minibatch,
    then each call measures a candidate against it (`check_capacity` measures both every time).

        check = FisherCheck(original, x, y, threads=1)
        check(candidate).accepted, check.original
    """

    def __init__(self, original: Model, inputs: np.ndarray, labels: np.ndarray, seed: int = 0,
                 threads: int | None = None):
        self.inputs, self.labels, self.seed, self.threads = inputs, labels, seed, threads
        self.original = fisher_potential(original, inputs, labels, seed, threads).total

    def __call__(self, candidate: Model) -> CapacityResult:
        cand = fisher_potential(candidate, self.inputs, self.labels, self.seed, self.threads).total
        return _verdict(cand, self.original)


def _verdict(cand: float, orig: float) -> CapacityResult:
    """NAS-PTE's rule: accept unless the candidate's Fisher Potential is below the original's."""
    if cand < orig:
        return CapacityResult(False, cand, orig,
                              f"Fisher Potential {cand:.6g} is below the original's {orig:.6g} "
                              f"({100 * (1 - cand / orig):.1f}% less capacity at initialisation)")
    return CapacityResult(True, cand, orig, f"Fisher Potential {cand:.6g} >= the original's {orig:.6g}")


def check_capacity(candidate: Model, original: Model, inputs: np.ndarray, labels: np.ndarray,
                   seed: int = 0) -> CapacityResult:
    """Accept `candidate` unless its Fisher Potential is below `original`'s on the same minibatch.

    Both models are measured as given, so both should be at initialisation (zoo models are seeded
    fresh networks; architecture transforms re-initialise what they change with seeded Kaiming).
    A search checking many candidates against one original uses `FisherCheck`.
    """
    return FisherCheck(original, inputs, labels, seed)(candidate)


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
