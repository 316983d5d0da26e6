"""Tuning for a machine that has TVM's runtime and nothing to compile with (a GPU machine here: no
package registry, 64 MiB carried, too little for TVM's compiler): candidate schedules built on the
build machine, timed on the target's machine with the runtime alone, the times read back into the
tuning records (`lowering/nest_to_tvm/tuning.py`) that every later compile for the target uses.

    nasir tune resnet34 --dataset imagenet --target cuda --arch sm_90 --export tune-out --trials 32
    python3 tune-out/time_candidates.py        # on the GPU machine: tune-out/times.json
    nasir tune --import tune-out               # back on the build machine: the records
    nasir.compile(model, target="cuda", arch="sm_90")     # tuned schedules, transferred to other nests

Export (`export_candidates`): for each distinct unscheduled nest (`program.tunable_nests`), for a GPU
nasir's own schedules, "registers" at each tile of `schedule.GPU.variants` (64 to 512 threads a
block by 1 to 8 channels a thread) and "shared" (the reduction staged through shared memory,
`staged.py`) at each of `Staged.variants`, then up to `trials` candidates drawn from
meta_schedule's design spaces (its replay-trace strategy: the design spaces' traces replayed with
fresh random decisions, post-processed); each proven inside its buffers and, for a GPU, within the
target's threads and shared memory a block (`bounds.violations`) and lowered by TVM's TIR pipeline
(`_lowers`); the nest's candidates compiled together for the target (one nvcc run; a
kernel ptxas refuses is left out) into one library, a function per candidate; nests in worker
processes (a nest whose build fails is left out, to the default schedules). The folder:

    OUT/manifest.json              target, device, per nest its arguments' shapes, its library and
                                   its candidates: function name and family
    OUT/tasks/NEST/workload.json   the nest's PrimFunc (TVM's JSON)
    OUT/tasks/NEST/traces.json.gz  each candidate's schedule trace (TVM's JSON), for the import
                                   (compressed: a ResNet-34 export's traces are 10 MB as text)
    OUT/tasks/NEST/candidates.so   the candidates, compiled: functions c0, c1, ...
    OUT/time_candidates.py         the timer (nasir/gpu_check/timer.py), OUT/runner.py beside it
    OUT/runtime/                   TVM's runtime for Python 3.12, for cuda (as `nasir gpu-check`'s;
                                   not where OUT is inside such a folder: the timer uses the folder's)

Import (`import_times`): each candidate with a time becomes a tuning record of its nest for the
target (`TVMTuning`'s database: `tuning_dir/cuda-sm_90`), as if meta_schedule had measured it; the
fastest of each family per nest is reported beside the fastest of all (which of nasir's schedule
families should be the default for which nest is the GPU's to say).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path

import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from nasir.errors import NasirError
from nasir.lowering.nest_to_tvm import schedule
from nasir.lowering.nest_to_tvm.bounds import target_limits, violations
from nasir.lowering.nest_to_tvm.build import cuda_archs, nvcc_path, require_cuda_compiler, tvm_target_of
from nasir.lowering.nest_to_tvm.cuda import KernelsRejected, building_kernels
from nasir.lowering.nest_to_tvm.intrinsics import import_tensor_intrinsics
from nasir.lowering.nest_to_tvm.program import lower_to_nest, tunable_nests
from nasir.lowering.nest_to_tvm.staged import Staged, staged_schedule
from nasir.lowering.nest_to_tvm.tuning import TVMTuning, target_key, workload
from nasir.model import Model

MANIFEST = "manifest.json"
TIMES = "times.json"
TIMER = "time_candidates.py"
TRACES = "traces.json.gz"


def _candidates(func: tvm.tirx.PrimFunc, op, target: tvm.target.Target, trials: int, seed: int
                ) -> list[tuple[str, s_tir.Schedule]]:
    """The distinct schedules of `func` (the PrimFunc of `op`) worth timing, each with its family: on
    a GPU nasir's own, "registers" (`schedule.gpu_schedule` at each of `GPU.variants`' tiles) and
    "shared" (`staged.staged_schedule` at each of `Staged.variants`'), then up to `trials` of
    "meta_schedule" (samples of its design spaces, post-processed)."""
    found = []
    if target.kind.name == "cuda":
        max_threads, max_shared_bytes = target_limits(target)
        main = workload(func)["main"]
        found = [("registers", schedule.gpu_schedule(main, op, variant))
                 for variant in schedule.GPU.of(target).variants(max_threads)]
        found += [("shared", staged_schedule(main, op, tile, max_shared_bytes))
                  for tile in Staged.variants(max_threads)]
    import_tensor_intrinsics()  # TuneContext imports them: 40 s or more without
    context = ms.TuneContext(mod=workload(func), target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name="main", num_threads=1, rand_state=seed)
    spaces = context.generate_design_space()
    context.pre_tuning(max_trials=trials, num_trials_per_iter=trials, design_spaces=spaces)
    found += [("meta_schedule", c.sch) for c in context.generate_measure_candidates() or []]
    context.post_tuning()
    unique = {}
    for family, sch in found:
        if sch is not None:
            unique.setdefault(tvm.ir.save_json(sch.trace.as_json()), (family, sch))
    return list(unique.values())


def _lowers(sch: s_tir.Schedule, target: tvm.target.Target) -> bool:
    """Whether TVM's TIR pipeline lowers the GPU candidate: some of meta_schedule's samples meet TVM's
    own internal errors there (cross-thread reductions of ResNet-34's average pool: "Check failed:
    (!load_remap_.count(alloc_key))"), which would fail the library of the nest's other candidates.
    (A CPU candidate is not checked: that pipeline's host passes run only inside a whole build.)"""
    if target.kind.name != "cuda":
        return True
    lower, _, _ = tvm.tirx.get_tir_pipeline("default")
    func = sch.mod["main"].with_attr("global_symbol", "main").with_attr("target", target)
    try:
        with target:
            lower(tvm.IRModule({"main": func}))
    except Exception:  # noqa: BLE001 - TVM's internal errors
        return False
    return True


def _build(candidates: dict[str, s_tir.Schedule], target: tvm.target.Target, archs: list[str]
           ) -> tuple[tvm.runtime.Module, list[str]]:
    """One library of the `candidates` (name -> schedule) that build: a function of each name, and
    those names. Built together (one nvcc run for a nest's candidates); a kernel nvcc or ptxas
    rejects is left out and the rest built again."""
    names = list(candidates)
    while names:
        mod = tvm.IRModule({name: candidates[name].mod["main"].with_attr("global_symbol", name) for name in names})
        if target.kind.name != "cuda":
            return tvm.compile(mod, target=target), names
        try:
            with building_kernels(archs, nvcc_path()):
                return tvm.compile(mod, target=target), names
        except KernelsRejected as e:
            rejected = {kernel.removesuffix("_kernel") for kernel in e.kernels} & set(names)
            if not rejected:
                raise
            names = [name for name in names if name not in rejected]
    raise NasirError("no candidate of the nest builds")


@lru_cache(maxsize=1)
def _nests(model_path: str) -> dict:
    """`tunable_nests` of the model saved at `model_path` (once per worker process)."""
    from nasir.api import load

    return tunable_nests(lower_to_nest(load(model_path).module))


def _export_nest(model_path: str, name: str, out: Path, target: str, arch: str | None, trials: int,
                 seed: int) -> dict:
    """One nest's candidates drawn, checked, built and written under `out`/tasks/`name`; its
    manifest entry. Runs in a worker process."""
    func, op = _nests(model_path)[name]
    tvm_target = tvm_target_of(target, arch)
    folder = out / "tasks" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "workload.json").write_text(tvm.ir.save_json(workload(func)))
    limits = target_limits(tvm_target) if target == "cuda" else ()
    inside = [(family, sch) for family, sch in _candidates(func, op, tvm_target, trials, seed)
              if not violations(sch.mod["main"], *limits) and _lowers(sch, tvm_target)]
    archs = cuda_archs(arch) if target == "cuda" else []
    library, built = _build({f"c{k}": sch for k, (_, sch) in enumerate(inside)}, tvm_target, archs)
    library.export_library(str(folder / "candidates.so"))
    candidates = [{"function": f"c{k}", "family": family} for k, (family, _) in enumerate(inside) if f"c{k}" in built]
    traces = {f"c{k}": tvm.ir.save_json(sch.trace.as_json()) for k, (_, sch) in enumerate(inside) if f"c{k}" in built}
    with gzip.open(folder / TRACES, "wt") as f:
        json.dump(traces, f)
    args = [[[int(d) for d in info.shape], str(info.dtype)] for info in ms.arg_info.ArgInfo.from_prim_func(func)]
    return {"name": name, "workload": str((folder / "workload.json").relative_to(out)),
            "traces": str((folder / TRACES).relative_to(out)), "args": args,
            "library": str((folder / "candidates.so").relative_to(out)), "candidates": candidates}


def export_candidates(model: Model, out: str | Path, target: str = "cuda", arch: str | None = None,
                      trials: int = 32, seed: int = 0, workers: int | None = None,
                      progress: Callable[[str], None] = print) -> Path:
    """Write the export folder `out` (see the module docstring) for `model`'s distinct unscheduled
    nests on nasir's `target` ("cuda" for `arch`, or "tvm": this CPU), `workers` nests at a time
    (processes; default: a CPU each). nvcc takes most of the time (seconds a candidate, its kernels
    unrolled): ResNet-34 at 224 px has 18 distinct nests."""
    if trials <= 0:
        raise NasirError(f"trials must be a positive number of candidates per nest, got {trials}")
    if target == "cuda":
        require_cuda_compiler()
    tvm_target = tvm_target_of(target, arch)
    archs = cuda_archs(arch) if target == "cuda" else []
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(tunable_nests(lower_to_nest(model.module)))
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nasir-tune-") as tmp, \
            ProcessPoolExecutor(workers or os.cpu_count() or 1, mp_context=get_context("spawn")) as pool:
        saved = str(model.save(Path(tmp) / "model.mlir"))
        futures = {pool.submit(_export_nest, saved, name, out, target, arch, trials, seed): name for name in names}
        done = {}
        for k, future in enumerate(as_completed(futures), 1):
            name = futures[future]
            try:
                done[name] = future.result()
                what = f"{len(done[name]['candidates'])} candidates built"
            except Exception as e:  # noqa: BLE001 - TVM's errors: the nest is left to the defaults
                what = f"left out ({str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__})"
            progress(f"{name} ({k} of {len(names)}): {what}, {time.perf_counter() - begin:.0f} s")
    tasks = [done[name] for name in names if name in done]
    manifest = {"target": target, "arch": ",".join(archs) or None, "target_key": target_key(tvm_target),
                "device": "cuda" if target == "cuda" else "cpu", "tasks": tasks}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    here = Path(__file__).parents[1] / "gpu_check"
    shutil.copy(here / "timer.py", out / TIMER)
    shutil.copy(here / "runner.py", out / "runner.py")
    if target == "cuda" and not (out.parent / "runtime").is_dir():  # a GPU check folder's runtime serves
        from nasir.gpu_check import write_runtime

        write_runtime(out)
    count = sum(len(t["candidates"]) for t in tasks)
    progress(f"wrote {out}: {count} candidates of {len(tasks)} nests; on the target's machine: "
             f"python3 {out}/{TIMER}, then here: nasir tune --import {out}")
    return out


def candidate_traces(out: Path, task: dict) -> dict[str, str]:
    """The schedule traces (TVM's JSON) of the candidates of `task` (an entry of `out`'s manifest),
    by function name."""
    with gzip.open(out / task["traces"], "rt") as f:
        return json.load(f)


@dataclass
class Imported:
    """What `import_times` stored: records per nest, and the folder of the target's records."""

    records: dict[str, int]
    best_ms: dict[str, float]
    folder: Path
    family_best_ms: dict[str, dict[str, float]]
    """Per nest, the fastest candidate of each schedule family (registers, shared, meta_schedule)."""


def import_times(out: str | Path, tuning_dir: str | Path | None = None) -> Imported:
    """Read `out`/times.json (the timer's) into the target's tuning records under `tuning_dir`
    (default: the user's); every candidate with a time becomes a record of its nest."""
    out = Path(out)
    if not (out / TIMES).exists():
        raise NasirError(f"{out / TIMES} does not exist: run python3 {out / TIMER} on the target's machine first "
                         f"and bring {TIMES} back into {out}")
    manifest = json.loads((out / MANIFEST).read_text())
    times = json.loads((out / TIMES).read_text())["times"]
    tuning = TVMTuning(tvm_target_of(manifest["target"], manifest["arch"]), tuning_dir)
    if target_key(tuning.target) != manifest["target_key"]:
        raise NasirError(f"{out} was exported for {manifest['target_key']}; this machine's target is "
                         f"{target_key(tuning.target)}: import it where it was exported")
    records, best, families = {}, {}, {}
    for task in manifest["tasks"]:
        mod = tvm.ir.load_json((out / task["workload"]).read_text())
        entry = tuning.database.commit_workload(mod)
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        traces = candidate_traces(out, task)
        stored = 0
        for candidate in task["candidates"]:
            seconds = times.get(task["name"], {}).get(candidate["function"])
            if not isinstance(seconds, float):
                continue
            sch = s_tir.Schedule(mod)
            s_tir.Trace.apply_json_to_schedule(tvm.ir.load_json(traces[candidate["function"]]), sch)
            tuning.database.commit_tuning_record(ms.database.TuningRecord(sch.trace, entry, [seconds], tuning.target,
                                                                          args))
            stored += 1
            best[task["name"]] = min(best.get(task["name"], seconds), seconds)
            family = families.setdefault(task["name"], {})
            kind = candidate["family"]
            family[kind] = min(family.get(kind, seconds), seconds)
        records[task["name"]] = stored
    return Imported(records, {name: s * 1e3 for name, s in best.items()}, tuning.folder,
                    {name: {kind: s * 1e3 for kind, s in kinds.items()} for name, kinds in families.items()})
