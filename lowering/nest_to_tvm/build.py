"""TVM targets and `tvm.compile` of a converted module: the last step of the TVM backend.

    build(to_relax(lower_to_nest(module)), "tvm")             # TVM's own CPU code (llvm), runs here
    build(to_relax(lower_to_nest(module)), "cuda", "sm_90")   # a GPU library; nvcc needed, no GPU

Targets are TVM's dicts: "tvm" is `{"kind": "llvm"}`, "cuda" `{"kind": "cuda", "arch": ...}` with
the host code for this machine's CPU. TVM's default Relax pipeline of the target schedules the
PrimFuncs (for CUDA: dlight's default GPU rules bind their parallel loops to blockIdx/threadIdx).
CUDA code is compiled with nvcc (TVM's default, NVRTC, needs cuda-bindings, which nasir does not
install). What is missing for a target is one `BackendUnavailableError` naming it.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager

import tvm

from nasir.errors import BackendUnavailableError

CUDA_ARCH = "sm_90"
"""The GPU architecture CUDA code is compiled for where no GPU says otherwise (H100)."""


def nvcc_path() -> str | None:
    """nvcc on PATH, else under CUDA_HOME or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return None


def gpu_arch() -> str | None:
    """`sm_XY` of this machine's first CUDA GPU, None without one."""
    device = tvm.cuda(0)
    return f"sm_{device.compute_version.replace('.', '')}" if device.exist else None


def require_cuda_compiler() -> None:
    """Raise `BackendUnavailableError` unless TVM can make CUDA code here."""
    if tvm.get_global_func("target.build.cuda", allow_missing=True) is None:
        raise BackendUnavailableError("target 'cuda' needs TVM built with CUDA; this apache-tvm has no CUDA codegen")
    if nvcc_path() is None:
        raise BackendUnavailableError("target 'cuda' needs nvcc (the CUDA toolkit) to compile GPU code: "
                                      "none on PATH, CUDA_HOME or /usr/local/cuda")


def target_of(name: str, arch: str | None = None) -> tvm.target.Target:
    """TVM's target for nasir's target `name` ("tvm" or "cuda"; `arch`: cuda's sm_XY)."""
    if name == "cuda":
        arch = arch or gpu_arch() or CUDA_ARCH
        return tvm.target.Target({"kind": "cuda", "arch": arch, "max_shared_memory_per_block": 49152},
                                 host={"kind": "llvm"})
    return tvm.target.Target({"kind": "llvm"})


@contextmanager
def _nvcc_mode():
    before = os.environ.get("TVM_CUDA_COMPILE_MODE")
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TVM_CUDA_COMPILE_MODE"]
        else:
            os.environ["TVM_CUDA_COMPILE_MODE"] = before


def build(mod: tvm.IRModule, name: str, arch: str | None = None) -> tvm.runtime.Executable:
    """`tvm.compile` of `mod` (a `to_relax` result) for nasir's target `name`."""
    target = target_of(name, arch)
    if name != "cuda":
        return tvm.compile(mod, target=target)
    require_cuda_compiler()
    with _nvcc_mode():
        return tvm.compile(mod, target=target)
