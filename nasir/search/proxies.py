"""Zero-cost accuracy proxies: scores of a network at its present weights on one minibatch, to be
ranked against trained accuracy (`experiments/ground_truth.py`, issue 51).

Each proxy takes a model at nest level (as the search holds candidates) and numpy data; the
"layer weights" are the weights that convolutions and gemms (`mac` nests) contract, 2-D or more:

- `grad_norm`: sum over layer weights of ||dL/dW|| (L: mean cross-entropy on the minibatch);
- `snip`: sum over layer weights of sum |W * dL/dW|;
- `synflow`: every weight and bias made |W|, batch norm made the identity (scale 1, shift 0,
  statistics 0 and 1), an all-ones input of one example, R = sum of the outputs;
  score = sum over layer weights of sum |W * dR/dW|, in float64 (no data, no labels);
- `jacob_cov` (NASWOT): over the minibatch, each example's binary code of which ReLU outputs are
  positive; K[i, j] = positions where codes i and j agree; score = log |det K|;
- `zico`: the minibatch in `parts` parts, the gradients of each part's loss; per layer weight,
  log of the sum over its elements of mean|g| / std(g) across parts (elements with std 0 left
  out); score = sum over layer weights.

Abdelfattah et al., ICLR 2021 (grad_norm, snip, synflow); Mellor et al., ICML 2021 (NASWOT);
Li et al., ICLR 2023 (ZiCo). Fisher Potential is `nasir.fisher`.

    scores = {name: fn(model, x, y) for name, fn in PROXIES.items()}
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, main_func, weights_of
from nasir.errors import NasirError
from nasir.model import Model


def layer_weights(model: Model) -> list[str]:
    """Names of the weights that `mac` nests (convolutions, gemms) contract, 2-D or more, in order."""
    names: list[str] = []
    for op in main_func(model.module).walk():
        if isinstance(op, nest.ComputeOp) and op.combiner.data == "mac":
            for v in op.inputs:
                if isinstance(v.owner, nn.WeightOp) and len(v.owner.result.type.get_shape()) >= 2 \
                        and v.owner.key not in names:
                    names.append(v.owner.key)
    if not names:
        raise NasirError("the model has no convolution or gemm weights for a proxy to score (run convert-nn-to-nest "
                         "first)")
    return names


def _program(model: Model, batch: int):
    program = model.at_batch(batch).to_torch().train()
    program.zero_grad(set_to_none=True)
    return program


def _gradients(model: Model, x: np.ndarray, y: np.ndarray) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(layer weight -> value, layer weight -> dL/dW) for the mean cross-entropy on (x, y)."""
    program = _program(model, len(x))
    loss = F.cross_entropy(program(torch.from_numpy(x)), torch.from_numpy(np.asarray(y, np.int64)))
    loss.backward()
    weights = {k: program.weight(k) for k in layer_weights(model)}
    return {k: w.detach() for k, w in weights.items()}, {k: w.grad.detach() for k, w in weights.items()}


def grad_norm(model: Model, x: np.ndarray, y: np.ndarray) -> float:
    _, grads = _gradients(model, x, y)
    return float(sum(g.norm() for g in grads.values()))


def snip(model: Model, x: np.ndarray, y: np.ndarray) -> float:
    weights, grads = _gradients(model, x, y)
    return float(sum((weights[k] * grads[k]).abs().sum() for k in weights))


def synflow(model: Model, x: np.ndarray, y: np.ndarray | None = None) -> float:
    """See the module docstring; `x` gives only the input's shape, `y` is not used."""
    store = WeightStore(weights_of(model.module))
    for op in main_func(model.module).walk():
        if isinstance(op, nn.BatchNormOp):
            for v, value in zip(op.operands[1:], (1.0, 0.0, 0.0, 1.0)):
                if isinstance(v.owner, nn.WeightOp):
                    store[v.owner.key] = np.full(v.owner.result.type.get_shape(), value, np.float32)
    plain = Model(model.module.clone(), store).at_batch(1)
    program = plain.to_torch().eval().double()
    with torch.no_grad():
        for p in program.parameters():
            p.abs_()
    ones = torch.ones((1, *x.shape[1:]), dtype=torch.float64)
    program(ones).sum().backward()
    return float(sum((program.weight(k) * program.weight(k).grad).abs().sum().detach() for k in layer_weights(model)))


def jacob_cov(model: Model, x: np.ndarray, y: np.ndarray | None = None) -> float:
    """log |det K| of the ReLU activity codes of the examples of `x` (`y` is not used)."""
    relus = {op.layer_name for op in main_func(model.module).walk()
             if isinstance(op, nest.ComputeOp) and any(kind == "relu" for kind, _, _ in op.steps)}
    if not relus:
        raise NasirError("jacob_cov needs ReLUs: the model has none (at nest level)")
    program = _program(model, len(x))
    program.taps = relus
    with torch.no_grad():
        program(torch.from_numpy(x))
    codes = torch.cat([t.flatten(1) > 0 for t in program.tapped.values()], 1).double()
    k = codes @ codes.T + (1 - codes) @ (1 - codes).T
    return float(torch.linalg.slogdet(k)[1])


def zico(model: Model, x: np.ndarray, y: np.ndarray, parts: int = 2) -> float:
    """See the module docstring: `parts` equal parts of the minibatch (at least 2)."""
    if parts < 2 or len(x) < parts:
        raise NasirError(f"zico needs at least 2 parts of the minibatch, each one example or more (got {parts} "
                         f"parts of {len(x)})")
    size = len(x) // parts
    grads = [_gradients(model, x[i * size:(i + 1) * size], y[i * size:(i + 1) * size])[1] for i in range(parts)]
    score = 0.0
    for k in grads[0]:
        g = torch.stack([part[k] for part in grads]).double()
        std = g.std(0, unbiased=False)
        kept = std > 0
        total = (g.abs().mean(0)[kept] / std[kept]).sum()
        if total > 0:
            score += float(torch.log(total))
    return score


PROXIES = {"grad_norm": grad_norm, "snip": snip, "synflow": synflow, "jacob_cov": jacob_cov, "zico": zico}
"""Each proxy by name: fn(model, x, y) -> score (higher: more accurate, by the proxy)."""
