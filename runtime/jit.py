"""Native code for LLVM IR: MCJIT in-process, or a shared library on disk (`exe.save`).

Both expose the same entry: `main(inputs..., outputs..., weights, workspace)` over raw pointers,
and the `nasir_num_threads` global read by the parallel loops (libgomp's GOMP_parallel).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from functools import cache
from pathlib import Path

from nasir.errors import LoweringError
from nasir.lowering.loops_to_llvm.convert import THREADS_GLOBAL
from nasir.lowering.target import CPUTarget

ENTRY = "main"


@cache
def load_openmp() -> str:
    """Make libgomp's symbols visible to the JIT (process-wide; torch's if torch loaded it, with
    the spin count `nasir.SPIN_COUNT` set); returns the library path."""
    import llvmlite.binding as llvm

    for find in (lambda: "libgomp.so.1", lambda: ctypes.util.find_library("gomp"), _torch_gomp):
        candidate = find()  # lazily: looking in torch's folder imports torch (seconds)
        if not candidate:
            continue
        try:
            ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            llvm.load_library_permanently(candidate)
            return candidate
        except OSError:
            continue
    raise LoweringError("libgomp (GNU OpenMP runtime) not found: it runs the parallel loops")


def _torch_gomp() -> str | None:
    try:
        import torch

        libs = Path(torch.__file__).parent / "lib"
        found = sorted(libs.glob("libgomp*.so*"))
        return str(found[0]) if found else None
    except ImportError:
        return None


class JITModule:
    """LLVM IR compiled in-process with MCJIT; keeps the engine alive as long as it is used."""

    def __init__(self, optimized_module, target: CPUTarget):
        import llvmlite.binding as llvm

        load_openmp()
        self.engine = llvm.create_mcjit_compiler(optimized_module, target.target_machine(jit=True))
        self.engine.finalize_object()
        self.engine.run_static_constructors()
        self.entry_address = self.engine.get_function_address(ENTRY)
        self.threads_address = self.engine.get_global_value_address(THREADS_GLOBAL)

    def global_address(self, name: str) -> int:
        return self.engine.get_global_value_address(name)


class SharedLibrary:
    """A library written by `write_shared_library`, loaded with ctypes."""

    def __init__(self, path: str | Path):
        load_openmp()
        self.lib = ctypes.CDLL(str(path))
        self.entry_address = ctypes.cast(getattr(self.lib, ENTRY), ctypes.c_void_p).value
        self.threads_address = ctypes.addressof(ctypes.c_int.in_dll(self.lib, THREADS_GLOBAL))

    def global_address(self, name: str) -> int:
        return ctypes.addressof(ctypes.c_int64.in_dll(self.lib, name))


def write_shared_library(optimized_module, path: str | Path, target: CPUTarget) -> Path:
    """Object code for `target` from LLVM, linked with `cc -shared` against libgomp."""
    path = Path(path)
    obj = path.with_suffix(".o")
    obj.write_bytes(target.target_machine().emit_object(optimized_module))
    gomp = load_openmp()
    cmd = [os.environ.get("CC", "cc"), "-shared", "-o", str(path), str(obj)]
    cmd += [gomp] if os.path.isabs(gomp) else ["-l:" + gomp]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise LoweringError(f"linking {path} failed ({' '.join(cmd)}): {getattr(e, 'stderr', e)}") from None
    finally:
        obj.unlink(missing_ok=True)
    return path
