"""Export of a (transformed) model: a trainable PyTorch module, and an ONNX file.

The end of the search flow: a candidate network found by transforming IR leaves nasir to be trained
or deployed elsewhere. Both exports are the torch backend's `TorchProgram` (the reference semantics
of every nest: fast paths to `torch.nn.functional` for recognised convs and pools, gather + einsum
for anything else), so what is exported computes what nasir's backends compute.

    program = to_torch(module, training=True)   # nn.Module, any batch size: parameters = the weight store
    ...train program...
    trained = from_torch(module, program)    # a copy of the IR with the trained weights
    to_onnx(module, "net.onnx")           # Conv/MatMul/Pad/Concat/... nodes; ONNX Runtime runs it,
                                          # nasir.load imports it again

ONNX export uses torch's TorchScript exporter (`dynamo=False`): it works offline and traces the
interpreter loop into a flat graph (index tensors of the generic path become constants). Constant
folding is off, so a batch norm stays a BatchNormalization node instead of being folded into its
conv: a trained network nasir writes can be transformed and fine-tuned again with its batch norms
(a grouped conv's inherited weights need them to renormalise its outputs). Each node is named
after its layer (`_name_nodes`). Every
architecture transform's nests take the fast path (nest_ops.py), whose ops nasir imports again:
a file nasir writes (`Model.to_onnx`, a search's best.onnx) is a file `nasir.load` reads
(tests/test_export_round_trip.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp

from nasir.dialects.module import WeightStore, attach_weights, io_names, io_shapes, weights_of
from nasir.errors import NasirError
from nasir.lowering.nest_to_torch.program import TorchProgram


def to_torch(module: ModuleOp, training: bool = False) -> TorchProgram:
    """A trainable `torch.nn.Module` computing `module` on a batch of any size; in eval mode (batch-norm
    with running statistics, as inference and ONNX Runtime compute it) unless `training`."""
    return TorchProgram(module).train(training)


def from_torch(module: ModuleOp, program: TorchProgram) -> ModuleOp:
    """A copy of `module` whose weights are the current parameters and buffers of `program`.

    `program` is a `to_torch(module)` result (or one with the same state_dict keys, e.g. after
    `load_state_dict`); the original module is unchanged.
    """
    if not isinstance(program, TorchProgram):
        raise NasirError(f"from_torch takes the module made by to_torch, got {type(program).__name__}")
    store = WeightStore(weights_of(module))
    for name in program.keys:
        if name not in store:
            raise NasirError(f"from_torch: weight '{name}' of the module is not in the model")
        value = program.weight(name).detach().cpu().numpy().astype(np.float32)
        if value.shape != store[name].shape:
            raise NasirError(f"from_torch: weight '{name}' has shape {value.shape}, the model {store[name].shape}")
        store[name] = value
    out = module.clone()
    attach_weights(out, store)
    return out


def to_onnx(module: ModuleOp, path: str | Path, opset: int = 17, dynamic_batch: bool = False) -> Path:
    """Write `module` (inference form: batch-norm with running statistics) as an ONNX file; with
    `dynamic_batch` its inputs and outputs take a batch of any size (axis 0, named "batch"; importing
    such a file again takes `input_shapes`, as for any dynamic dim)."""
    program = to_torch(module)
    layers = _scoped(program)
    examples = tuple(torch.zeros(shape) for shape in io_shapes(module)[0])
    inputs, outputs = io_names(module)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript exporter deprecation and tracer notices
        with torch.no_grad():
            torch.onnx.export(program, examples, str(path), dynamo=False, export_params=True,
                              do_constant_folding=False,  # batch norms stay: fine-tuning the file needs them
                              opset_version=opset, input_names=inputs, output_names=outputs,
                              dynamic_axes={name: {0: "batch"} for name in inputs + outputs} if dynamic_batch else None)
    _name_nodes(path, layers)
    return path


class _Step(torch.nn.Module):
    """One step of a `TorchProgram` as a submodule, so that the exporter scopes its nodes."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, op, args):
        return self.fn(op, args)


SCOPE = "layers"


def _scoped(program: TorchProgram) -> dict[str, str]:
    """Run each step of `program` through a submodule `layers.sN` (the exporter names its nodes
    `/layers/sN/Conv`, ...); returns sN -> the step's layer name."""
    scopes, layers = torch.nn.ModuleDict(), {}
    for i, (op, fn, operands) in enumerate(program.steps):
        key = f"s{i}"
        scopes[key] = _Step(fn)
        program.steps[i] = (op, scopes[key], operands)
        layers[key] = getattr(op, "layer_name", "") or ""
    program.add_module(SCOPE, scopes)
    return layers


def _name_nodes(path: Path, layers: dict[str, str]) -> None:
    """Name each node of the ONNX file at `path` after its step's layer: the node whose op type ends
    the layer's name (a `..._Conv` layer's Conv), else the step's last node, takes the layer name
    itself; its other nodes `layer.OpType`, made unique. So a file nasir writes imports with the
    layer names it had, and a pipeline's `layers=` patterns apply to it."""
    import re

    import onnx

    model = onnx.load(str(path))
    steps: dict[str, list] = {}
    for node in model.graph.node:
        m = re.match(rf"^/(?:{SCOPE}/)?(s\d+)/", node.name)
        if m and layers.get(m.group(1)):
            steps.setdefault(m.group(1), []).append(node)
    used = {node.name for node in model.graph.node}
    for key, nodes in steps.items():
        layer = layers[key]
        main = next((n for n in nodes if layer.endswith(f"_{n.op_type}")), nodes[-1])
        for node in [main] + [n for n in nodes if n is not main]:
            base = layer if node is main else f"{layer}.{node.op_type}"
            name, k = base, 1
            while name in used:
                name, k = f"{base}_{k}", k + 1
            used.discard(node.name)
            used.add(name)
            node.name = name
    onnx.save(model, str(path))
