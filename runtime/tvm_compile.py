"""`compile_tvm` / `compile_cuda`: a nasir module -> TVM library -> `TVMExecutable`.

Data flow: nn IR --TVM_PIPELINE--> nest IR --to_relax--> Relax + PrimFuncs --tvm.compile--> library
(weights inside, as Relax constants) --> `relax.VirtualMachine` on the target's device.

    exe = compile_tvm(module)                 # TVM's own CPU code: runs here
    exe = compile_cuda(module, arch="sm_90")  # GPU code: compiles without a GPU, runs where one is
"""

from __future__ import annotations

import time

from xdsl.dialects.builtin import ModuleOp

from nasir.dialects.module import io_names, io_shapes
from nasir.lowering.nest_to_tvm.build import build, target_of
from nasir.lowering.nest_to_tvm.program import lower_to_nest, to_relax
from nasir.runtime.tvm_executable import TVMExecutable


def _compile(module: ModuleOp, target: str, arch: str | None = None) -> TVMExecutable:
    start = time.perf_counter()
    (input_names, output_names), (input_shapes, output_shapes) = io_names(module), io_shapes(module)
    library = build(to_relax(lower_to_nest(module), gpu=target == "cuda"), target, arch)
    tvm_target = target_of(target, arch)
    meta = {"backend": "tvm", "target": target, "tvm_target": str(tvm_target),
            "arch": str(tvm_target.attrs["arch"]) if target == "cuda" else None,
            "input_names": input_names, "output_names": output_names,
            "input_shapes": [list(s) for s in input_shapes], "output_shapes": [list(s) for s in output_shapes],
            "compile_seconds": time.perf_counter() - start}
    return TVMExecutable(library, meta)


def compile_tvm(module: ModuleOp) -> TVMExecutable:
    """Compile `module` (nn and/or nest ops, with its weight store) with TVM for this CPU."""
    return _compile(module, "tvm")


def compile_cuda(module: ModuleOp, arch: str | None = None) -> TVMExecutable:
    """Compile `module` with TVM for a CUDA GPU of `arch` (sm_XY; default: this machine's GPU, else
    sm_90); needs TVM with CUDA and nvcc, not a GPU (running it does)."""
    return _compile(module, "cuda", arch)
