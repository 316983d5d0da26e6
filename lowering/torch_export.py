"""Export of a (transformed) model: a trainable PyTorch module, and an ONNX file.

The end of the search flow: a candidate network found by transforming IR leaves nasir to be trained
or deployed elsewhere. Both exports are the torch backend's `TorchProgram` (the reference semantics
of every nest: fast paths to `torch.nn.functional` for recognised convs and pools, gather + einsum
for anything else), so what is exported computes what nasir's backends compute.

    module = to_torch(model)          # nn.Module: parameters = the weight store, train()/eval()
    ...train module...
    trained = from_torch(model, module)    # the same IR with the trained weights
    to_onnx(model, "net.onnx")         # Conv/Einsum/Gather/... nodes; ONNX Runtime runs it

ONNX export uses torch's TorchScript exporter (`dynamo=False`): it works offline and traces the
interpreter loop into a flat graph (index tensors of the generic path become constants).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from nasir.errors import NasirError
from nasir.model import Model, WeightStore


def to_torch(model: Model):
    """A trainable `torch.nn.Module` computing `model` (in training mode, as torch modules start)."""
    from nasir.lowering.torch_backend import TorchProgram

    return TorchProgram(model).train()


def from_torch(model: Model, module) -> Model:
    """A copy of `model` whose weights are the current parameters and buffers of `module`.

    `module` is a `to_torch(model)` result (or one with the same state_dict keys, e.g. after
    `load_state_dict`); the original model is unchanged.
    """
    from nasir.lowering.torch_backend import TorchProgram

    if not isinstance(module, TorchProgram):
        raise NasirError(f"from_torch takes the module made by to_torch, got {type(module).__name__}")
    out = model.clone()
    store = WeightStore(out.weights)
    for name in module.keys:
        if name not in store:
            raise NasirError(f"from_torch: weight '{name}' of the module is not in the model")
        value = module.weight(name).detach().cpu().numpy().astype(np.float32)
        if value.shape != store[name].shape:
            raise NasirError(f"from_torch: weight '{name}' has shape {value.shape}, the model {store[name].shape}")
        store[name] = value
    return Model(out.module, store, out.input_names, out.output_names)


def to_onnx(model: Model, path: str | Path, opset: int = 17) -> Path:
    """Write `model` (inference form: batch-norm with running statistics) as an ONNX file."""
    import torch

    program = to_torch(model).eval()
    examples = tuple(torch.zeros(shape) for shape in model.input_shapes)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript exporter deprecation and tracer notices
        with torch.no_grad():
            torch.onnx.export(program, examples, str(path), dynamo=False, export_params=True,
                              opset_version=opset, input_names=list(model.input_names),
                              output_names=list(model.output_names))
    return path
