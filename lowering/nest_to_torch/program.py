"""The torch backend: a module's `@main` interpreted op by op in PyTorch.

`TorchProgram` is an `nn.Module` over a nasir module: weights of its store become Parameters
(batch-norm running statistics become buffers), and `forward` walks `@main`, running nn ops through
`nn_ops.LOWERINGS` and `nest.compute` ops through `nest_ops.run_compute`. In `train()` mode
batch-norm uses batch statistics (and updates its buffers), as `torch.nn.BatchNorm2d` does, so the
same program serves Fisher Potential and training (`Model.to_torch`);
`nasir.runtime.torch_executable` runs it for inference.

`frozen=True` is the program of an analysis that differentiates with respect to activations only
(Fisher Potential): weights are read-only views of the store's arrays (no copy, no gradient) and
training-mode batch-norm leaves its running statistics alone (its output is the same either way).

    program = TorchProgram(module).train()      # module: nn and/or nest ops, with its weight store
    program.taps = {"layer1_layer1.0_Add"}      # forward() keeps these layers' results in
    program(x); program.tapped                  # program.tapped (distillation's block outputs)
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from nasir.dialects import nest, nn
from nasir.dialects.module import main_func, weights_of
from nasir.errors import LoweringError
from nasir.lowering.nest_to_torch.nest_ops import run_compute
from nasir.lowering.nest_to_torch.nn_ops import LOWERINGS


def _kernel(op: Operation):
    if isinstance(op, nest.ComputeOp):
        return run_compute
    fn = LOWERINGS.get(type(op))
    if fn is None:
        raise LoweringError(f"the torch backend cannot run '{op.name}' "
                            f"(layer '{getattr(op, 'layer_name', '')}')")
    return fn


def _view(array: np.ndarray) -> torch.Tensor:
    """`array` as a float32 tensor, sharing its memory when it is float32 and contiguous."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # store arrays are read-only; a frozen program never writes them
        return torch.from_numpy(array)


class TorchProgram(torch.nn.Module):
    """`@main` of a model as a torch module; `weight(name)` is the tensor of store entry `name`."""

    def __init__(self, module: ModuleOp, momentum: float = 0.1, frozen: bool = False):
        super().__init__()
        self.momentum = momentum
        self.frozen = frozen
        self.func = main_func(module)
        self.params = torch.nn.ParameterDict()
        self.stats = torch.nn.Module()  # batch-norm running mean / var as buffers
        self.keys: dict[str, str] = {}  # store name -> ParameterDict / buffer key
        store = weights_of(module)
        stats = {o.owner.key for op in self.func.walk() if isinstance(op, nn.BatchNormOp)
                 for o in op.operands[3:] if isinstance(o.owner, nn.WeightOp)}
        self.steps: list[tuple[Operation, object, list[SSAValue]]] = []
        self.taps: set[str] = set()
        """Layer names whose results `forward` keeps in `tapped` (name -> tensor)."""
        self.tapped: dict[str, torch.Tensor] = {}
        for op in self.func.body.block.ops:
            if isinstance(op, nn.WeightOp):
                if op.key not in store:
                    raise LoweringError(f"weight '{op.key}' is not in the weight store")
                self._add_weight(op.key, store[op.key], buffer=op.key in stats)
            elif not isinstance(op, func.ReturnOp):
                self.steps.append((op, _kernel(op), list(op.operands)))

    def _add_weight(self, name: str, array: np.ndarray, buffer: bool) -> None:
        if name in self.keys:
            return
        key, n = name.replace(".", "_"), 1
        while key in self.params or hasattr(self.stats, key):
            key, n = f"{name.replace('.', '_')}_{n}", n + 1
        self.keys[name] = key
        if self.frozen:
            self.stats.register_buffer(key, _view(array))
            return
        tensor = torch.tensor(np.asarray(array), dtype=torch.float32)  # a copy: the store stays unchanged
        if buffer:
            self.stats.register_buffer(key, tensor)
        else:
            self.params[key] = torch.nn.Parameter(tensor)

    def weight(self, name: str) -> torch.Tensor:
        key = self.keys[name]
        return self.params[key] if key in self.params else getattr(self.stats, key)

    def forward(self, *inputs: torch.Tensor):
        env: dict[SSAValue, torch.Tensor] = dict(zip(self.func.body.block.args, inputs))
        for op in self.func.body.block.ops:
            if isinstance(op, nn.WeightOp):
                env[op.result] = self.weight(op.key)
        self.tapped = {}
        for op, fn, operands in self.steps:
            args = [env[o] for o in operands]
            if self.training and isinstance(op, nn.BatchNormOp):
                env[op.result] = self._train_batch_norm(op, args)
            else:
                env[op.result] = fn(op, args)
            if self.taps and getattr(op, "layer_name", "") in self.taps:
                self.tapped[op.layer_name] = env[op.result]
        ret = self.func.body.block.last_op
        outs = [env[o] for o in ret.operands]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def recalibrate(self, batches) -> None:
        """Set every batch norm's running statistics to the average of its batch statistics over
        `batches` (input tensors), the weights unchanged: after a rewrite or a few steps of
        training, running statistics lag behind the weights they describe."""
        mode, momentum = self.training, self.momentum
        self.train()
        with torch.no_grad():
            for k, x in enumerate(batches):
                self.momentum = 1.0 / (k + 1)  # the first batch replaces, later ones average in
                self(x)
        self.momentum = momentum
        self.train(mode)

    def _train_batch_norm(self, op: nn.BatchNormOp, args: list[torch.Tensor]) -> torch.Tensor:
        x, scale, bias, mean, var = args
        running = not self.frozen and all(isinstance(o.owner, nn.WeightOp) for o in op.operands[3:])
        return F.batch_norm(x, mean if running else None, var if running else None, scale, bias,
                            training=True, momentum=self.momentum, eps=op.epsilon.value.data)
