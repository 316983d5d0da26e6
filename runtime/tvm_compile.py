"""`compile_tvm` / `compile_cuda`: a nasir module -> TVM library -> `TVMExecutable`.

Data flow: nn IR --TVM_PIPELINE--> nest IR --to_relax--> Relax + PrimFuncs --tvm.compile--> library
(weights inside, as Relax constants) --> `relax.VirtualMachine` on the target's device.

    exe = compile_tvm(module)                 # TVM's own CPU code: runs here
    exe = compile_cuda(module, arch="sm_90")  # GPU code: compiles without a GPU, runs where one is
"""

from __future__ import annotations

import time

from xdsl.dialects.builtin import ModuleOp

from nasir.dialects import nest, nn
from nasir.dialects.module import io_names, io_shapes, main_func
from nasir.dialects.nest import macs
from nasir.lowering.nest_to_tvm.build import build, target_of
from nasir.lowering.nest_to_tvm.program import lower_to_nest, symbol, to_relax, unfused
from nasir.runtime.tvm_executable import TVMExecutable


def _calls(module: ModuleOp) -> list[dict]:
    """The kernel calls of @main in order (layer, kernel, MACs): one per nest and per nn op that is
    not a weight or a reshape (Relax makes those no call)."""
    calls = []
    for op in main_func(module).body.block.ops:
        if isinstance(op, nest.ComputeOp):
            calls.append({"layer": op.layer_name, "kernel": symbol(op.layer_name), "macs": macs(op)})
        elif isinstance(op, nn.NNOp) and not isinstance(op, (nn.WeightOp, nn.ReshapeOp)):
            calls.append({"layer": op.layer_name, "kernel": op.name, "macs": 0})
    return calls


def _compile(module: ModuleOp, target: str, arch: str | None = None, profile: bool = False) -> TVMExecutable:
    start = time.perf_counter()
    (input_names, output_names), (input_shapes, output_shapes) = io_names(module), io_shapes(module)
    nests = lower_to_nest(module)
    mod = to_relax(nests, gpu=target == "cuda")
    if profile:
        mod = unfused(mod)
    library = build(mod, target, arch)
    tvm_target = target_of(target, arch)
    meta = {"backend": "tvm", "target": target, "tvm_target": str(tvm_target),
            "arch": str(tvm_target.attrs["arch"]) if target == "cuda" else None,
            "input_names": input_names, "output_names": output_names,
            "input_shapes": [list(s) for s in input_shapes], "output_shapes": [list(s) for s in output_shapes],
            "compile_seconds": time.perf_counter() - start}
    if profile:
        meta["profile"] = {"calls": _calls(nests)}
    return TVMExecutable(library, meta)


def compile_tvm(module: ModuleOp, profile: bool = False) -> TVMExecutable:
    """Compile `module` (nn and/or nest ops, with its weight store) with TVM for this CPU; `profile`:
    one kernel call per layer (no fusion), timed by `TVMExecutable.profile`."""
    return _compile(module, "tvm", profile=profile)


def compile_cuda(module: ModuleOp, arch: str | None = None) -> TVMExecutable:
    """Compile `module` with TVM for a CUDA GPU of `arch` (sm_XY; default: this machine's GPU, else
    sm_90); needs TVM with CUDA and nvcc, not a GPU (running it does)."""
    return _compile(module, "cuda", arch)
