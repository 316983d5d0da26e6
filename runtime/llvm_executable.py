"""`compile_llvm(module)`: a nasir module -> native code through the llvm lowering pipeline -> Executable.

Data flow: nn IR --LLVM_PIPELINE--> llvm dialect --llvm_ir--> LLVM IR --O3--> MCJIT. The weights
are packed once into one 64-byte aligned buffer at the offsets nest-bufferize chose; the workspace
arena is allocated once; each call is one ctypes call of `main(inputs, outputs, weights, workspace)`.
`save(dir)` writes `model.so` (cc -shared), `weights.npy` and `meta.json`; `load(dir)` runs them.
Code for a CPU with wider vectors than the host's (`cpu="x86-64-v4"` on an AVX2 machine) is
compiled and can be saved, but not run here.
"""

from __future__ import annotations

import ctypes
import json
import time
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from nasir.dialects.attributes import (
    BOUNDS_CHECKS,
    PROFILE,
    PROFILE_OFFSET,
    TARGET,
    VECTORS,
    WEIGHT_OFFSETS,
    WEIGHTS_BYTES,
    WORKSPACE_BYTES,
)
from nasir.dialects.module import WeightStore, attach_weights, io_names, io_shapes, weights_of
from nasir.errors import BoundsError, ForeignCPUError, NasirError
from nasir.lowering.bufferize import ALIGN
from nasir.lowering.loops_to_llvm.convert import BOUNDS_GLOBALS
from nasir.lowering.loops_to_llvm.llvm_ir import float_vectors, optimize, to_llvm_ir
from nasir.lowering.passes import gc_paused, run_pipeline
from nasir.lowering.pipeline import llvm_pipeline
from nasir.lowering.target import CPUTarget, host_target, set_target, target_of
from nasir.runtime.executable import Executable
from nasir.runtime.jit import JITModule, SharedLibrary, write_shared_library
from nasir.runtime.profile import Profile


def aligned_empty(nbytes: int, align: int = ALIGN) -> np.ndarray:
    """A uint8 buffer of `nbytes` whose data pointer is `align`-byte aligned."""
    raw = np.zeros(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start: start + nbytes]


def pack_weights(model_weights: dict[str, np.ndarray], offsets: dict[str, int], nbytes: int) -> np.ndarray:
    buf = aligned_empty(nbytes)
    for name, off in offsets.items():
        data = np.ascontiguousarray(model_weights[name], np.float32).view(np.uint8).reshape(-1)
        buf[off: off + data.size] = data
    return buf


class LLVMExecutable(Executable):
    """Native code for one model: one call of the entry per inference."""

    target = "llvm"

    def __init__(self, native, meta: dict, weights: np.ndarray, optimized_module=None, threads: int = 1,
                 compiled_for: CPUTarget | None = None, code_vectors: dict[str, set[int]] | None = None):
        super().__init__(meta["input_names"], [tuple(s) for s in meta["input_shapes"]], meta["output_names"])
        self.native = native
        self.meta = meta
        self.output_shapes = [tuple(s) for s in meta["output_shapes"]]
        self.weights = weights
        self.workspace = aligned_empty(max(1, meta["workspace_bytes"]))
        self.workspace_bytes = meta["workspace_bytes"]
        self._module = optimized_module
        self.compiled_for = compiled_for
        """The CPU this code was compiled for (see `nasir.lowering.target`); None for code
        loaded from disk (meta's "cpu" and "lanes" name it)."""
        self.code_vectors = code_vectors
        """The float32 vector widths of each function of the code as nasir generated it (before
        LLVM's optimisation, `llvm_ir.float_vectors`); meta's "vectors" says which widths the
        schedules gave each kernel. None for code loaded from disk."""
        n_args = len(self.input_shapes) + len(self.output_shapes) + 2
        self._entry = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * n_args)(native.entry_address)
        self.threads = threads
        self.compile_seconds = meta.get("compile_seconds", 0.0)
        self._bounds = None
        if "bounds_checks" in meta:
            self._bounds = [ctypes.c_int64.from_address(native.global_address(g)) for g in BOUNDS_GLOBALS]

    @property
    def threads(self) -> int:
        return ctypes.c_int.from_address(self.native.threads_address).value

    @threads.setter
    def threads(self, n: int) -> None:
        if int(n) < 1:
            raise NasirError(f"threads must be >= 1, got {n}")
        ctypes.c_int.from_address(self.native.threads_address).value = int(n)

    @property
    def runs_here(self) -> bool:
        """Whether this machine can run the code (not wider vectors than its own)."""
        return self.meta["lanes"] <= host_target().lanes

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if not self.runs_here:
            raise ForeignCPUError(f"this code was compiled for {self.meta['cpu']} ({self.meta['lanes']}-lane vectors) "
                                  f"and cannot run on this CPU ({host_target().cpu}, {host_target().lanes} lanes): "
                                  f"save() it and run it there, or compile with cpu='host'", self)
        outputs = [np.empty(s, np.float32) for s in self.output_shapes]
        ptrs = [a.ctypes.data for a in arrays] + [o.ctypes.data for o in outputs]
        self._entry(*ptrs, self.weights.ctypes.data, self.workspace.ctypes.data)
        if self._bounds is not None and self._bounds[0].value:
            self._raise_bounds_error()
        return outputs

    def _raise_bounds_error(self):
        """The access a checked build caught outside its buffer (see convert-loops-to-llvm)."""
        number, axis, index = (slot.value for slot in self._bounds)
        for slot in self._bounds:
            slot.value = 0
        check = self.meta["bounds_checks"][number - 1]
        where = f"index {index} on axis {axis}" if axis >= 0 else f"lanes from element {index}"
        raise BoundsError(f"kernel '{check['kernel']}' would {check['access']} {check['operand']} "
                          f"({check['type']}) out of bounds: {where}")

    def profile(self, *inputs, repeat: int = 20, warmup: int = 2) -> Profile:
        """Per kernel call: its time over `repeat` runs on `inputs` (see `nasir.runtime.profile`); needs
        an executable compiled with `profile=True`."""
        info = self.meta.get("profile")
        if info is None:
            raise NasirError("this executable was compiled without profiling: compile it with profile=True")
        ticks = self.workspace[info["offset"]: info["offset"] + 8 * (len(info["calls"]) + 1)].view(np.int64)
        times, runs = [], []
        for ms in self.timed_runs(inputs, repeat, warmup, before_each=lambda: ticks.fill(0)):
            times.append(ms)
            runs.append(ticks.copy())
        # medians per call: a run the OS interrupts inflates one call, not the profile
        return Profile.from_ticks(info["calls"], runs, float(np.median(times)), self.threads)

    def save(self, path: str | Path) -> Path:
        """Write a directory with `model.so`, `weights.npy` and `meta.json` for `nasir.runtime.load`."""
        if self._module is None:
            raise NasirError("this executable was loaded from disk; save the original instead")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_shared_library(self._module, path / "model.so", self.compiled_for)
        np.save(path / "weights.npy", np.asarray(self.weights))
        (path / "meta.json").write_text(json.dumps(self.meta, indent=1))
        return path


def lower_to_llvm_dialect(module: ModuleOp, profile: bool = False, cpu: str | CPUTarget | None = None,
                          checked: bool = False, tuning: str | Path | None = None) -> ModuleOp:
    """A copy of `module` through LLVM_PIPELINE for `cpu` (a name LLVM knows, "host", a description, or None:
    the module's own `nasir.target`, else the host; see `nasir.lowering.target`); `profile`:
    with per-call tick counters, see `nasir.runtime.profile`; `checked`: every load and store of the kernels
    checks its indices (`BoundsError`); `tuning`: the tuning database default-schedule reads (a file,
    "none"; default: the user's, see `nasir.lowering.schedule.tuned`).
    The nest-level result is verified; the loop and llvm levels are not: verifying tens of
    thousands of ops costs as much as building them, and LLVM verifies the IR made from them
    (`nasir.lowering.loops_to_llvm.llvm_ir.optimize`)."""
    pipeline = llvm_pipeline(profile, checked, tuning)
    out = module.clone()
    attach_weights(out, WeightStore(weights_of(module)))
    if cpu is not None or not TARGET.on(out):
        set_target(out, cpu)
    run_pipeline(out, str(pipeline.before("convert-nest-to-loops")))
    run_pipeline(out, str(pipeline.since("convert-nest-to-loops")), verify=False)
    return out


@gc_paused()
def compile_llvm(module: ModuleOp, threads: int = 1, profile: bool = False,
                 cpu: str | CPUTarget | None = None, checked: bool = False,
                 tuning: str | Path | None = None) -> LLVMExecutable:
    """Compile `module` (nn and/or nest ops, with its weight store) to native code for `cpu` (by
    default the host; see the module docstring and `lower_to_llvm_dialect`); `profile` times every
    kernel call for `LLVMExecutable.profile` (two counter reads and an add a call); `checked` makes a
    call that reads or writes outside a buffer raise `BoundsError` instead; `tuning` names the
    tuning database of schedules (a file, or "none"; default: the user's). Its keyword parameters
    are the options `nasir.compile` takes for the llvm target."""
    start = time.perf_counter()
    return executable_of(module, lower_to_llvm_dialect(module, profile, cpu, checked, tuning), threads, start)


def executable_of(module: ModuleOp, lowered: ModuleOp, threads: int = 1, start: float | None = None) -> LLVMExecutable:
    """Native code of `lowered`, `module` at the llvm dialect level (after convert-loops-to-llvm,
    with its profile counters or bounds checks if that pass made them)."""
    start = time.perf_counter() if start is None else start
    target = target_of(lowered)
    (input_names, output_names), (input_shapes, output_shapes) = io_names(module), io_shapes(module)
    offsets = WEIGHT_OFFSETS.get(lowered)
    meta = {
        "input_names": input_names, "output_names": output_names,
        "input_shapes": [list(s) for s in input_shapes], "output_shapes": [list(s) for s in output_shapes],
        "workspace_bytes": WORKSPACE_BYTES.get(lowered),
        "weights_bytes": WEIGHTS_BYTES.get(lowered),
        "cpu": target.cpu, "lanes": target.lanes,
    }
    if BOUNDS_CHECKS.on(lowered):
        meta["bounds_checks"] = BOUNDS_CHECKS.get(lowered)
    if PROFILE.on(lowered):
        meta["profile"] = {"offset": PROFILE_OFFSET.get(lowered), "calls": PROFILE.get(lowered)}
    meta["vectors"] = VECTORS.get(lowered, [])
    weights = pack_weights(weights_of(lowered), offsets, meta["weights_bytes"])
    ir_text = to_llvm_ir(lowered)
    optimized = optimize(ir_text, target)
    native = JITModule(optimized, target)
    meta["compile_seconds"] = time.perf_counter() - start
    return LLVMExecutable(native, meta, weights, optimized, threads, target, float_vectors(ir_text))


def load(path: str | Path, threads: int = 1) -> LLVMExecutable:
    """Run a directory written by `LLVMExecutable.save` without recompiling."""
    path = Path(path)
    if not (path / "meta.json").exists():
        raise NasirError(f"{path}: not a saved nasir executable (no meta.json)")
    meta = json.loads((path / "meta.json").read_text())
    raw = np.load(path / "weights.npy")
    weights = aligned_empty(raw.size)
    weights[:] = raw
    return LLVMExecutable(SharedLibrary(path / "model.so"), meta, weights, None, threads)
