"""TVM targets and `tvm.compile` of a converted module: the last step of the TVM backend.

    build(to_relax(lower_to_nest(module)), "tvm")             # TVM's own CPU code (llvm), runs here
    build(to_relax(lower_to_nest(module)), "cuda", "sm_90")   # a GPU library; nvcc needed, no GPU

Targets are TVM's dicts: "tvm" is `{"kind": "llvm", "num-cores": ...}` (see `host_cpu`), "cuda"
`{"kind": "cuda", "arch": ...}` with the host code for this machine's CPU. TVM's default Relax
pipeline of the target schedules the PrimFuncs (for CUDA: dlight's default GPU rules bind their
parallel loops to blockIdx/threadIdx; a rule that fails on a function leaves it to the next,
`DeclineOnError`; then every kernel's accesses are proven inside their buffers and its threads
a block within the target's, `bounds.py`).
CUDA kernels are compiled by nvcc for the target's architecture during the build (cuda.py: the
library holds a fatbin and loads with TVM's runtime alone). What is missing for a target is one
`BackendUnavailableError` naming it.
"""

from __future__ import annotations

import os
import re
import shutil

import tvm
from tvm import relax
from tvm.ir.base import from_json_graph_str
from tvm.relax.backend.cuda import pipeline as cuda
from tvm.s_tir import dlight as dl

from nasir.errors import BackendUnavailableError, NasirError
from nasir.lowering.nest_to_tvm.bounds import checking_bounds, violations
from nasir.lowering.nest_to_tvm.cuda import building_kernels, load_cuda_runtime

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
    load_cuda_runtime()
    device = tvm.cuda(0)
    return f"sm_{device.compute_version.replace('.', '')}" if device.exist else None


def require_cuda_compiler() -> None:
    """Raise `BackendUnavailableError` unless TVM can make CUDA code here."""
    if tvm.get_global_func("target.build.cuda", allow_missing=True) is None:
        raise BackendUnavailableError("target 'cuda' needs TVM built with CUDA; this apache-tvm has no CUDA codegen")
    if nvcc_path() is None:
        raise BackendUnavailableError("target 'cuda' needs nvcc (the CUDA toolkit) to compile GPU code: "
                                      "none on PATH, CUDA_HOME or /usr/local/cuda")


def host_cpu() -> dict:
    """TVM's llvm target for this machine: its cores (meta_schedule's parallel loops need them) and
    no `mcpu`: naming the CPU made TVM's code for nasir's default schedules slower (ResNet-18 cifar10
    on a Zen 4: 97 ms generic x86-64, 104 ms x86-64-v3, 362 ms znver4)."""
    return {"kind": "llvm", "num-cores": os.cpu_count() or 1}


def cuda_archs(arch: str | None) -> list[str]:
    """The GPU architectures `arch` names, lowest first: one ("sm_90") or several ("sm_80,sm_90":
    one library whose fatbin runs on both); default: this machine's GPU, else CUDA_ARCH."""
    names = {a.strip() for a in (arch or gpu_arch() or CUDA_ARCH).split(",") if a.strip()}
    if not names or any(not re.fullmatch(r"sm_\d+a?", a) for a in names):
        raise NasirError(f"arch {arch!r}: expected a GPU architecture sm_XY, or several separated by commas "
                         f"(sm_80,sm_90)")
    return sorted(names, key=lambda a: int(re.sub(r"\D", "", a)))


CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "registers_per_block": 65536,
               "thread_warp_size": 32}
"""A thread block's limits on every architecture nasir builds for (sm_50 to sm_120, CUDA's table of
compute capabilities): threads, static shared memory (without the opt-in to more), 32-bit registers."""


def cuda_limits(arch: str) -> dict[str, int]:
    """A thread block's limits on GPUs of `arch`: read from this machine's GPU where it is one,
    else CUDA_LIMITS (registers per block are not among what TVM reads from a device)."""
    if gpu_arch() != arch:
        return dict(CUDA_LIMITS)
    device = tvm.cuda(0)
    return {**CUDA_LIMITS, "max_threads_per_block": device.max_threads_per_block,
            "max_shared_memory_per_block": device.max_shared_memory_per_block, "thread_warp_size": device.warp_size}


def tvm_target_of(name: str, arch: str | None = None) -> tvm.target.Target:
    """TVM's target for nasir's target `name` ("tvm": this CPU, or "cuda"; `arch`: cuda's sm_XY, or
    several: the schedules are made for the lowest, within its limits, `cuda_limits`)."""
    if name == "cuda":
        lowest = cuda_archs(arch)[0]
        limits = cuda_limits(lowest)
        return tvm.target.Target({"kind": "cuda", "arch": lowest, "max_num_threads": limits["max_threads_per_block"],
                                  **limits}, host=host_cpu())
    return tvm.target.Target(host_cpu())


class DeclineOnError(dl.ScheduleRule):
    """A dlight rule that declines (None) a function it fails on, whose schedule needs more shared
    memory per thread block than the target has, or whose schedule reads outside a buffer
    (`bounds.out_of_bounds`), so that the next rule schedules it: dlight's Matmul rule asserts on
    some grouped convs (ResNeXt's) instead of declining them; its GeneralReduction keeps a grouped
    conv's whole output in shared memory (800 KB for the first grouped conv of ResNet-34 at 224 px;
    ptxas refuses it); and its Matmul rule stages a padded conv's input in shared memory before the
    padding's guard, reading rows and columns outside the image (-3..225 of the 224 px stem)."""

    def __init__(self, rule: dl.ScheduleRule) -> None:
        self.rule = rule

    def apply(self, func, target, tunable):
        try:  # on a copy: a failed schedule may have changed the function it was given
            copy = from_json_graph_str(tvm.ir.save_json(func))  # TVM's own format: no upgrade pass
            scheduled = self.rule.apply(copy, target, tunable)
        except Exception:  # noqa: BLE001 - dlight's assertions and TVM's schedule errors
            return None
        limit = int(target.attrs["max_shared_memory_per_block"])
        schedules = scheduled if isinstance(scheduled, list) else [scheduled]
        if scheduled is None or any(violations(s.mod["main"], max_shared_bytes=limit) for s in schedules):
            return None
        return scheduled


def cuda_pipeline(target: tvm.target.Target, failures: list | None = None) -> tvm.transform.Pass:
    """TVM's default CUDA pipeline with each of dlight's default GPU rules in `DeclineOnError`,
    then `bounds.checking_bounds` (its LoweringError also put in `failures`)."""
    rules = [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    legalize = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
                relax.transform.FuseOps(), relax.transform.FuseTIR(),
                dl.ApplyDefaultSchedule(*(DeclineOnError(r) for r in rules[:-1]), rules[-1]),
                checking_bounds(target, failures)]

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with target:
            return tvm.transform.Sequential([*cuda.library_dispatch_passes(target), *legalize,
                                             *cuda.dataflow_lower_passes(target), *cuda.finalize_passes(target)])(mod)

    return pipeline


def build(mod: tvm.IRModule, name: str, arch: str | None = None) -> tvm.runtime.Executable:
    """`tvm.compile` of `mod` (a `to_relax` result) for nasir's target `name`."""
    target = tvm_target_of(name, arch)
    if name != "cuda":
        return tvm.compile(mod, target=target)
    require_cuda_compiler()
    with building_kernels(cuda_archs(arch), nvcc_path()) as failures:
        return tvm.compile(mod, target=target, relax_pipeline=cuda_pipeline(target, failures))
