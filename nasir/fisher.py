"""Fisher Potential: the capacity legality of architecture transforms (BlockSwap, Turner et al. 2020).

An analysis, not a rewrite: it runs a model through the torch backend (`TorchProgram`, training
mode, so batch-norm uses batch statistics) on one labelled minibatch, backpropagates the
cross-entropy loss, and for every measured activation A (N x C x H x W) with g = dLoss/dA computes
BlockSwap's

    Delta_c = 1/(2N) * sum_n ( sum_{i,j} A[n,c,i,j] * g[n,c,i,j] )^2,    Delta_layer = sum_c Delta_c,

(`FisherReport.delta`) and, as the layer's capacity, that Delta in units of the layer's own signal

    Fisher_layer = Delta_layer / ( mean(A^2) * mean(g^2) )        (means over all N*C*H*W elements)

(`FisherReport.layers`); Fisher(net) = sum over layers. Architecture transforms are accepted when
the candidate's value at initialisation is not below the original's (`check_capacity`;
`nasir.transform(..., capacity_check=...)` runs it). docs/fisher.md has the numbers behind this.

Why the normalisation (issue 39): Delta_layer is quadratic in g, and g at a layer is the loss
gradient carried back through every layer after it, so a transform changes the Delta of layers it
does not touch by the square of the change in backward gain it makes. The spatial bottleneck is the
extreme case: its expand copy's adjoint sums the gradients of the B positions it fills (alike at
initialisation: global average pooling gives every position of a channel the same gradient) and the
strided conv hands the sum to the few input positions it reads. 4x4 on the first conv of ResNet-34's
three layer4 blocks raises the input-gradient norm of every earlier layer about 3.4x and their
Delta 11x; the stem's Delta rises 11x though nothing before layer4 changed (plain PyTorch hooks
give the same figures). Dividing by mean(g^2) makes a layer's value blind to the scale of the error
signal that reaches it and sensitive only to how its channels align with its direction; dividing by
mean(A^2) makes it blind to the scale of its weights, which batch-norm already removes from the
function (without it a re-initialised grouped conv reads up to 1.95x higher only because the
transforms' Kaiming fan-in draw is larger than the zoo's fan-out one). Both are per layer and per element: Delta stays a
sum over channels and over each channel's positions, so a layer that computes fewer channels or
positions sums fewer products (a per-channel cosine would instead reward smaller maps).

Which activations: BlockSwap measures each residual block's output before the add. nasir has no
block structure in its IR, so it measures every convolution at what it computes: each `mac` nest
with a 4-D output (and each `nn.conv2d` of a model not yet lowered), named by its layer. A spatially
bottlenecked conv is measured at its Oh/B x Ow/B output with the gradient that reaches it (the
`<layer>.expand` copy after it is its consumer); the parts of an `index-split` or `unshare` layer
are one layer, joined as their `<layer>.concat` joins them (channel parts side by side, row parts
summed inside each channel's product), so an index-split leaves every value unchanged. The classifier
(gemm) is left out as in BlockSwap. The value is whatever the op produces, so fused epilogues
(bias, ReLU, residual add from `fuse-epilogue`) are inside it: compare models at the same level,
before epilogue fusion.

    report = fisher_potential(model, x, y)      # model batch == len(x)
    report.total, report.layers["layer1.0.conv1"], report.delta["layer1.0.conv1"]
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
decisions flip, which never happens at 16 (`python experiments/fisher_speed.py --rank` prints the study;
made before the normalisation above).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.ir import SSAValue

from nasir.data import minibatch
from nasir.dialects import nest, nn
from nasir.dialects.shapes import shape_of
from nasir.errors import LegalityError, ShapeError
from nasir.lowering.nest_to_torch.program import TorchProgram
from nasir.model import Model


@dataclass
class FisherReport:
    """Per-layer Fisher Potential (layer name -> Fisher_layer, program order), their total, the
    loss, and BlockSwap's unnormalised Delta_layer of each layer (`delta`)."""

    layers: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    delta: dict[str, float] = field(default_factory=dict)
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
        parts = {v: _Part.of(a, g) for (v, a), g in zip(activations.items(), grads)}
        report = FisherReport(loss=float(loss.detach()))
        for name, root in _layers(program).items():
            whole = _assemble(root, parts)
            report.delta[name], report.layers[name] = whole.delta(), whole.potential()
    report.total = float(sum(report.layers.values()))
    return report


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


def _record(program: TorchProgram) -> dict[SSAValue, torch.Tensor]:
    """Make `program` keep the output of every measured op (by its IR value) in the returned dict."""
    activations: dict[SSAValue, torch.Tensor] = {}

    def recording(value, fn):
        def run(op, args):
            out = fn(op, args)
            if not out.requires_grad:  # weights are frozen: an op that no gradient reaches yet is a leaf
                out.requires_grad_()
            activations[value] = out
            return out
        return run

    program.steps = [(op, recording(op.results[0], fn) if measured(op) else fn, operands)
                     for op, fn, operands in program.steps]
    return activations


_PART = re.compile(r"[.]part[0-9]+$")


def _layers(program: TorchProgram) -> dict[str, SSAValue]:
    """Each measured layer (program order) and the value that holds its whole output: a measured
    op's result, or, for the parts of an index-split layer, the `<layer>.concat` that joins them.
    A spatial bottleneck's `<layer>.expand` copy is stepped over, not measured: the layer is
    measured at what it computes."""
    layers: dict[str, SSAValue] = {}
    for op, _, _ in program.steps:
        if measured(op):
            name, value = op.layer_name, op.results[0]
            while True:
                users = [u.operation for u in value.uses]
                if len(users) != 1:
                    break
                user, base = users[0], _PART.sub("", name)
                if isinstance(user, nest.ComputeOp) and user.layer_name == f"{name}.expand":
                    value = user.results[0]
                elif isinstance(user, nn.ConcatOp) and base != name and user.layer_name == f"{base}.concat":
                    name, value = base, user.results[0]
                else:
                    break
            layers.setdefault(name, value)
    return layers


@dataclass
class _Part:
    """What Fisher Potential needs of (part of) one layer's output a with gradient g: the per-example,
    per-channel inner products <a, g> (N x C) and the sums of a^2 and g^2 over their elements."""

    dots: torch.Tensor
    a2: float
    g2: float
    count: int

    @staticmethod
    def of(a: torch.Tensor, g: torch.Tensor | None) -> _Part:
        a = a.detach()
        if g is None:  # the activation does not reach the loss
            g = torch.zeros_like(a)
        dots = torch.einsum("nchw,nchw->nc", a, g).double()  # one batched dot product in float32
        return _Part(dots, float(torch.linalg.vector_norm(a)) ** 2, float(torch.linalg.vector_norm(g)) ** 2, a.numel())

    def join(self, other: _Part, channels: bool) -> _Part:
        """The parts of a layer split along channels (their products side by side) or along
        positions (each channel's products summed)."""
        dots = torch.cat([self.dots, other.dots], 1) if channels else self.dots + other.dots
        return _Part(dots, self.a2 + other.a2, self.g2 + other.g2, self.count + other.count)

    def delta(self) -> float:
        """BlockSwap's Delta_layer: sum_c 1/(2N) sum_n <a_nc, g_nc>^2."""
        return float((self.dots ** 2).sum() / (2 * self.dots.shape[0]))

    def potential(self) -> float:
        """Delta_layer in units of the layer's own mean squared activation and gradient (see the
        module docstring): 0 for a layer whose output or gradient is zero."""
        scale = (self.a2 / self.count) * (self.g2 / self.count)
        return self.delta() / scale if scale > 0 else 0.0


def _assemble(value: SSAValue, parts: dict[SSAValue, _Part]) -> _Part:
    """The `_Part` of a layer's whole output `value` (see `_layers`)."""
    if value in parts:
        return parts[value]
    op = value.owner
    if isinstance(op, nn.ConcatOp):
        pieces = [_assemble(v, parts) for v in op.operands]
        whole = pieces[0]
        for piece in pieces[1:]:
            whole = whole.join(piece, channels=op.axis.value.data == 1)
        return whole
    return _assemble(op.operands[0], parts)  # a spatial bottleneck's expand copy


def _loss(logits, labels: np.ndarray) -> torch.Tensor:
    logits = logits[0] if isinstance(logits, tuple) else logits
    if logits.dim() != 2 or logits.shape[0] != len(labels):
        raise ShapeError(f"fisher_potential: the first output must be N x classes logits, got {tuple(logits.shape)}")
    if labels.min() < 0 or labels.max() >= logits.shape[1]:
        raise ShapeError(f"fisher_potential: labels must lie in 0..{logits.shape[1] - 1}")
    return F.cross_entropy(logits, torch.from_numpy(labels))


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
