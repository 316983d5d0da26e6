"""CUDA kernels compiled when the model is built, not when its library is loaded.

TVM's CUDA codegen hands the kernels' CUDA source to the CUDA runtime's module factory, which
compiles it through the `tvm_callback_cuda_compile` hook; where TVM's CUDA runtime library is not
loaded (any machine without a GPU), it keeps the *source* instead, and the saved library then
compiles it at load time, which needs TVM's 250 MB compiler library and nvcc or NVRTC on the GPU
machine. `building_kernels(archs, nvcc)` makes the build compile: it loads TVM's CUDA runtime
library (`libtvm_runtime_cuda.so`; where no CUDA driver is installed, after a stand-in
`libcuda.so.1` whose every call fails, made once with the C compiler nvcc uses) and routes the hook
to `compile_kernels`, nvcc for the named architectures. The library then holds a fatbin:

    with building_kernels(["sm_90"], nvcc):
        library = tvm.compile(mod, target=cuda_target)     # nvcc runs here, once
    library.export_library("model.so")                     # host code + fatbin; loads with TVM's runtime alone

A kernel nvcc or ptxas rejects (too much shared memory, too many registers) is a `LoweringError`
naming it, at build time.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import tvm
import tvm_ffi

from nasir.errors import BackendUnavailableError, LoweringError

COMPILE_HOOK = "tvm_callback_cuda_compile"
"""The global function TVM's CUDA runtime calls with a module's CUDA source."""

STAND_IN_DRIVER = """\
/* libcuda.so.1 for a machine without a CUDA driver: every call TVM's CUDA runtime makes fails
   with CUDA_ERROR_STUB_LIBRARY (34); loading it lets that runtime build and save modules. */
#define FAIL(name) int name(void) { return 34; }
FAIL(cuDeviceGetName) FAIL(cuFuncSetAttribute) FAIL(cuLaunchKernelEx) FAIL(cuModuleGetFunction)
FAIL(cuModuleLoadData) FAIL(cuModuleUnload) FAIL(cuTensorMapEncodeTiled)
int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_STUB_LIBRARY"; return 0; }
int cuGetErrorString(int e, const char **s) { *s = "no CUDA driver on this machine"; return 0; }
"""


def tvm_library(name: str) -> Path:
    """A shared library of the installed apache-tvm (`libtvm_runtime_cuda.so`, ...)."""
    return Path(tvm.__file__).parent / "lib" / name


def _stand_in_driver() -> Path:
    """`libcuda.so.1` built from STAND_IN_DRIVER in the user's cache (once)."""
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nasir" / "cuda-stand-in"
    library = folder / "libcuda.so.1"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / "libcuda.c"
        source.write_text(STAND_IN_DRIVER)
        made = folder / f"libcuda.so.1.{os.getpid()}"
        try:
            subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(made), str(source)],
                           check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise BackendUnavailableError(f"target 'cuda' on a machine without a CUDA driver needs a C compiler "
                                          f"(cc) to make a stand-in libcuda.so.1: {e}") from None
        made.replace(library)
    return library


def load_cuda_runtime() -> None:
    """Load TVM's CUDA runtime library into this process (once), after a stand-in CUDA driver where
    none is installed; afterwards TVM builds CUDA modules compiled, and `tvm.cuda(0).exist` tells
    whether a GPU is there."""
    if tvm_ffi.get_global_func("ffi.Module.create.cuda", allow_missing=True) is not None:
        return
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        ctypes.CDLL(str(_stand_in_driver()), mode=ctypes.RTLD_GLOBAL)
    try:
        ctypes.CDLL(str(tvm_library("libtvm_runtime_cuda.so")), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise BackendUnavailableError(f"target 'cuda' needs TVM's CUDA runtime library: {e}") from None


class KernelsRejected(LoweringError):
    """nvcc or ptxas refused a module's kernels; `kernels` names those the message names."""

    def __init__(self, message: str, kernels: list[str]) -> None:
        super().__init__(message)
        self.kernels = kernels


def _rejected_kernels(message: str) -> list[str]:
    """The kernels ptxas names in `message` (its errors start "Entry function 'NAME' ...")."""
    return sorted(set(re.findall(r"[Ee]ntry function '(\w+)'", message)))


def compile_kernels(source: str, archs: list[str], nvcc: str) -> bytes:
    """`source` (a module's kernels) compiled by `nvcc` into one fatbin for each of `archs` (sm_XY)."""
    gencode = [flag for arch in archs for flag in ("-gencode", f"arch=compute_{arch[3:]},code={arch}")]
    with tempfile.TemporaryDirectory(prefix="nasir-cuda-") as folder:
        cu, fatbin = Path(folder) / "kernels.cu", Path(folder) / "kernels.fatbin"
        cu.write_text(source)
        command = [nvcc, "--fatbin", "-O3", *gencode, "-o", str(fatbin), str(cu)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            kernels = _rejected_kernels(done.stderr)
            named = f"kernel {', '.join(kernels)}" if kernels else "the model's kernels"
            errors = [line.strip() for line in done.stderr.splitlines() if "error" in line] or [done.stderr.strip()]
            raise KernelsRejected(f"nvcc could not compile {named} for {', '.join(archs)}: "
                                  f"{'; '.join(errors)[:2000]}", kernels)
        return fatbin.read_bytes()


@contextmanager
def building_kernels(archs: list[str], nvcc: str):
    """While inside, TVM's CUDA builds compile their kernels with `compile_kernels` for `archs`.
    Yields a list: a LoweringError a step of the build puts there (before raising, as the hook does)
    is raised in place of the error TVM makes of it."""
    load_cuda_runtime()
    before = tvm_ffi.get_global_func(COMPILE_HOOK, allow_missing=True)
    failure: list[BaseException] = []

    def hook(source: str) -> bytes:
        try:
            return compile_kernels(source, archs, nvcc)
        except LoweringError as e:  # TVM turns the hook's exception into its own: keep ours
            failure.append(e)
            raise

    tvm_ffi.register_global_func(COMPILE_HOOK, hook, override=True)
    try:
        yield failure
    except Exception:
        if failure:
            raise failure[0] from None
        raise
    finally:
        if before is not None:
            tvm_ffi.register_global_func(COMPILE_HOOK, before, override=True)
