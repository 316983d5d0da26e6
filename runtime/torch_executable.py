"""The torch backend's executable: `TorchProgram` in eval mode, float32, without autograd, on a
batch of any size.

    exe = compile_torch(module)      # module: nn and/or nest ops
    y = exe(x)                       # numpy in, numpy out
"""

from __future__ import annotations

import numpy as np
import torch
from xdsl.dialects.builtin import ModuleOp

from nasir.dialects.module import io_names, io_shapes
from nasir.lowering.nest_to_torch.program import TorchProgram
from nasir.runtime.executable import Executable


class TorchExecutable(Executable):
    """A model run by `TorchProgram` in eval mode, float32, without autograd."""

    target = "torch"
    any_batch = True

    def __init__(self, module: ModuleOp):
        inputs, outputs = io_names(module)
        super().__init__(inputs, io_shapes(module)[0], outputs)
        self.program = TorchProgram(module).eval()

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = self.program(*(torch.from_numpy(a if a.flags.writeable else a.copy()) for a in arrays))
        outs = out if isinstance(out, tuple) else (out,)
        return [o.detach().cpu().numpy() for o in outs]


def compile_torch(module: ModuleOp) -> TorchExecutable:
    """Compile `module` (nn and/or nest ops, with its weight store) for the torch backend."""
    return TorchExecutable(module)
