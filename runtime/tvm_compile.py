"""`compile_tvm` / `compile_cuda`: a nasir module -> TVM library -> `TVMExecutable`.

Data flow: nn IR --TVM_PIPELINE--> nest IR --to_relax--> Relax + PrimFuncs --tvm.compile--> library
(code only: the weights are `main`'s parameters after the inputs, kept beside it) -->
`relax.VirtualMachine` on the target's device, called with the inputs and the weights.

    exe = compile_tvm(module)                 # TVM's own CPU code: runs here
    exe = compile_cuda(module, arch="sm_90")  # GPU code: compiles without a GPU, runs where one is
    exe = compile_tvm(module, tune_trials=64) # meta_schedule first (records: lowering/nest_to_tvm/tuning.py)
"""

from __future__ import annotations

import time

from xdsl.dialects.builtin import ModuleOp

from nasir.dialects import nest, nn
from nasir.dialects.module import io_names, io_shapes, main_func, weights_of
from nasir.dialects.nest import macs
from nasir.errors import NasirError
from nasir.lowering.nest_to_tvm.build import build, cuda_archs, tvm_target_of
from nasir.lowering.nest_to_tvm.program import lower_to_nest, symbol, to_relax, tunable_funcs, unfused, weight_keys
from nasir.lowering.nest_to_tvm.tuning import NO_TUNING, TVMTuning, records_folder
from nasir.runtime.tvm_executable import TVMExecutable


def _calls(module: ModuleOp) -> list[dict]:
    """The kernel calls of @main in order (layer, kernel, MACs, class): one per nest and per nn op that is
    not a weight or a reshape (Relax makes those no call)."""
    calls = []
    for op in main_func(module).body.block.ops:
        if isinstance(op, nest.ComputeOp):
            calls.append({"layer": op.layer_name, "kernel": symbol(op.layer_name), "macs": macs(op),
                          "class": op.layer_class})
        elif isinstance(op, nn.NNOp) and not isinstance(op, (nn.WeightOp, nn.ReshapeOp)):
            calls.append({"layer": op.layer_name, "kernel": op.name, "macs": 0, "class": op.name})
    return calls


def _tuning(nests: ModuleOp, tvm_target, tune_trials: int, tuning_dir: str | None, transfer: bool
            ) -> TVMTuning | None:
    """The target's tuning records (tuned first for `tune_trials`), or None: `tuning_dir="none"`, or
    the default folder has none and nothing is to be tuned."""
    if tuning_dir == NO_TUNING:
        if tune_trials:
            raise NasirError('tune_trials needs a tuning_dir to keep the records in, not "none"')
        return None
    if tuning_dir is None and not tune_trials and not records_folder(tvm_target, None).is_dir():
        return None
    tuning = TVMTuning(tvm_target, tuning_dir, transfer)
    if tune_trials:
        tuning.tune(tunable_funcs(nests), tune_trials, progress=True)
    return tuning


def _compile(module: ModuleOp, target: str, arch: str | None = None, profile: bool = False, tune_trials: int = 0,
             tuning_dir: str | None = None, transfer: bool = True) -> TVMExecutable:
    start = time.perf_counter()
    (input_names, output_names), (input_shapes, output_shapes) = io_names(module), io_shapes(module)
    tvm_target = tvm_target_of(target, arch)
    nests = lower_to_nest(module)
    tuning = _tuning(nests, tvm_target, tune_trials, tuning_dir, transfer)
    mod = to_relax(nests, tvm_target, tuning=tuning)
    if profile:
        mod = unfused(mod)
    library = build(mod, target, arch)
    store, keys = weights_of(nests), weight_keys(nests)
    meta = {"backend": "tvm", "target": target, "tvm_target": str(tvm_target),
            "arch": ",".join(cuda_archs(arch)) if target == "cuda" else None,
            "input_names": input_names, "output_names": output_names,
            "input_shapes": [list(s) for s in input_shapes], "output_shapes": [list(s) for s in output_shapes],
            "weights": [{"name": key, "shape": list(store[key].shape)} for key in keys],
            "compile_seconds": time.perf_counter() - start,
            "tuning": None if tuning is None else {"folder": str(tuning.folder), **tuning.counts}}
    if profile:
        meta["profile"] = {"calls": _calls(nests)}
    return TVMExecutable(library, meta, [store[key] for key in keys])


def compile_tvm(module: ModuleOp, profile: bool = False, tune_trials: int = 0, tuning_dir: str | None = None,
                transfer: bool = True) -> TVMExecutable:
    """Compile `module` (nn and/or nest ops, with its weight store) with TVM for this CPU; `profile`:
    one kernel call per layer (no fusion), timed by `TVMExecutable.profile`. `tune_trials`: first
    time that many meta_schedule schedules over the unscheduled nests; `tuning_dir`: the records'
    folder (default: the user's cache; "none": no records); `transfer`: nests without a record take
    one of their class's (see lowering/nest_to_tvm/tuning.py)."""
    return _compile(module, "tvm", profile=profile, tune_trials=tune_trials, tuning_dir=tuning_dir,
                    transfer=transfer)


def compile_cuda(module: ModuleOp, arch: str | None = None, tune_trials: int = 0, tuning_dir: str | None = None,
                 transfer: bool = True) -> TVMExecutable:
    """Compile `module` with TVM for a CUDA GPU of `arch` (sm_XY, or several: "sm_80,sm_90", one
    library for both; default: this machine's GPU, else sm_90); needs TVM with CUDA and nvcc, not a
    GPU (running it does, and so does `tune_trials`; records in `tuning_dir` transfer without one)."""
    return _compile(module, "cuda", arch, tune_trials=tune_trials, tuning_dir=tuning_dir, transfer=transfer)
