"""meta_schedule tuning and transfer-tuning of the TVM backend's nest PrimFuncs.

    compile(model, target="tvm", tune_trials=64)   # time 64 schedules (TVM's meta_schedule) over
                                                   # the distinct unscheduled nests, keep the best
    compile(model, target="tvm")                   # later: those records, from the user's database
    compile(other, target="tvm")                   # nests without a record: transfer-tuning

Records are a meta_schedule JSON database (`database_workload.json`, `database_tuning_record.json`),
one folder per target under `tuning_dir` (default: the user's cache, `$NASIR_CACHE_DIR/tvm`):
`llvm-znver4`, `cuda-sm_90`. Only nests without a nasir schedule attribute are tuned or take
records; a scheduled nest keeps the schedule its pipeline gave it.

Transfer-tuning (Gibson and Cano, PACT 2022): a nest the database has no record for takes the
schedule of a record of the same class (the same PrimFunc up to its extents and constants, so a
conv with other channel counts or image size, `nest_class`), the record's trace replayed with its
tile sizes refitted to the new extents (`refit_tiles`). The `CANDIDATES` records nearest in shape
are tried; where the target's device is here they are timed, the fastest kept and stored as a record
of its own, else the nearest that applies is used. A nest neither tuned nor transferred gets the
backend's default schedule.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from tvm import s_tir, tirx
from tvm.s_tir import meta_schedule as ms
from tvm.target import codegen
from tvm.ir.utils import derived_object

from nasir.errors import BackendUnavailableError, NasirError
from nasir.lowering.nest_to_tvm.bounds import target_limits, violations
from nasir.lowering.nest_to_tvm.intrinsics import import_tensor_intrinsics
from nasir.lowering.schedule.tuned import cache_dir

BUILD_TIMEOUT_S = 600.0
"""Seconds meta_schedule's builder may take per candidate (its default, 30, is what one build of a
conv took on a loaded 2-core machine; a timed-out candidate leaves its nest without a record)."""
CANDIDATES = 3
"""Records of the same class a transferred nest tries (the nearest in shape first)."""
NO_TUNING = "none"
"""`tuning_dir="none"`: no database; every unscheduled nest gets the default schedule."""


def default_tuning_dir() -> Path:
    """The user's records: `tvm/` in nasir's cache folder."""
    return cache_dir() / "tvm"


def records_folder(target: tvm.target.Target, tuning_dir: str | Path | None) -> Path:
    """Where `target`'s records live under `tuning_dir` (default: `default_tuning_dir`)."""
    return Path(tuning_dir or default_tuning_dir()) / target_key(target)


def target_key(target: tvm.target.Target) -> str:
    """The database folder of `target`: `llvm-<this CPU>` (records are timed on it) or `cuda-<arch>`."""
    if target.kind.name == "cuda":
        return f"cuda-{target.attrs['arch']}"
    return f"{target.kind.name}-{target.attrs.get('mcpu') or codegen.llvm_get_system_cpu()}"


def device_of(target: tvm.target.Target):
    """The device `target`'s code runs on here."""
    return tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)


def workload(func: tirx.PrimFunc) -> tvm.IRModule:
    """`func` as meta_schedule's workload: the module of one function, `main` (meta_schedule names a
    task's function so where it has no global_symbol, as `tune` hands it over)."""
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def nest_class(func: tirx.PrimFunc) -> str:
    """`func`'s TVMScript with every number erased: equal for nests that differ only in extents,
    strides, paddings or constants (the class transfer-tuning moves schedules within)."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", workload(func).script(show_meta=False))


def _shapes(func: tirx.PrimFunc) -> list[tuple[int, ...]]:
    """The shapes of `func`'s buffer parameters."""
    return [tuple(int(d) for d in info.shape) for info in ms.arg_info.ArgInfo.from_prim_func(func)]


def shape_distance(a: tirx.PrimFunc, b: tirx.PrimFunc) -> float:
    """How far apart two nests of one class are: the sum of |log ratio| of their buffers' dims."""
    return sum(abs(math.log(x / y)) for p, q in zip(_shapes(a), _shapes(b)) for x, y in zip(p, q))


def refit_tiles(extent: int, factors: list[int]) -> list[int]:
    """Tile sizes `factors` (outermost first) of one loop refitted to `extent`: from the innermost,
    each the largest divisor of what is left no larger than before; the outermost takes the rest.

        refit_tiles(64, [2, 8, 2, 2]) -> [2, 8, 2, 2]      refit_tiles(48, [2, 8, 2, 2]) -> [2, 6, 2, 2]
    """
    left, inner = extent, []
    for factor in reversed(factors[1:]):
        fit = max(d for d in range(1, min(factor, left) + 1) if left % d == 0)
        inner.append(fit)
        left //= fit
    return [left, *reversed(inner)]


def _replay(trace: s_tir.Trace, func: tirx.PrimFunc) -> s_tir.Schedule | None:
    """`trace` replayed on a copy of `func` (a Schedule can change the functions it is given in
    place) with its tile decisions refitted; None where it does not apply."""
    sch = s_tir.Schedule(tvm.ir.load_json(tvm.ir.save_json(workload(func))))

    def decide(inst, inputs, attrs, decision):
        if inst.kind.name == "SamplePerfectTile":
            return refit_tiles(int(sch.get(inputs[0]).extent), [int(f) for f in decision])
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=False, decision_provider=decide)
    except Exception:  # noqa: BLE001 - a trace that does not fit raises TVM's own errors
        return None
    return sch


@derived_object
class ProgressCallback(ms.measure_callback.PyMeasureCallback):
    """Advances a rich progress bar by each batch of measured candidates."""

    def __init__(self, bar: Progress, task) -> None:
        self.bar, self.task = bar, task

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.bar.advance(self.task, len(measure_candidates))


@contextmanager
def _quiet_meta_schedule():
    """meta_schedule's INFO log (a table per round) off the terminal; it stays in work_dir/logs."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    before = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(before)


class TVMTuning:
    """The tuning records of one target: `schedule(func)` gives a nest's PrimFunc its tuned or
    transferred schedule; `tune(funcs, trials)` adds records; `counts` says what each nest got."""

    def __init__(self, target: tvm.target.Target, tuning_dir: str | Path | None = None, transfer: bool = True):
        self.target = target
        self.folder = records_folder(target, tuning_dir)
        if any(p.exists() and not p.is_dir() for p in (self.folder.parent, self.folder)):
            raise NasirError(f"tuning_dir: {self.folder.parent} is a file, not a folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.database = ms.database.JSONDatabase(work_dir=str(self.folder))
        self.transfer = transfer
        self.counts: Counter[str] = Counter()
        self._classes: dict[str, dict[int, tuple[float, ms.database.TuningRecord]]] | None = None

    @property
    def can_time(self) -> bool:
        """Whether the target's device is here to time schedules on."""
        return bool(device_of(self.target).exist)

    def tune(self, funcs: dict[str, tirx.PrimFunc], trials: int, progress: bool = False) -> None:
        """Run meta_schedule for `trials` measured schedules in all over `funcs` (name -> PrimFunc);
        the records go to the database."""
        if trials <= 0:
            raise NasirError(f"tune_trials must be a positive number of schedules, got {trials}")
        if not self.can_time:
            raise BackendUnavailableError(f"tuning for {target_key(self.target)} times schedules on its device "
                                          "and there is none here (records transfer without one)")
        if not funcs:
            return
        columns = (TextColumn("tvm tuning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, disable=not progress, transient=True, console=Console(stderr=True)) as bar, \
                _quiet_meta_schedule():
            task = bar.add_task("", total=trials)
            callbacks = [ms.measure_callback.AddToDatabase(), ms.measure_callback.RemoveBuildArtifact(),
                         ProgressCallback(bar, task)]
            import_tensor_intrinsics()
            builder = ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S, initializer=import_tensor_intrinsics)
            ms.tune_tir(tvm.IRModule({name: f.without_attr("global_symbol") for name, f in funcs.items()}),
                        self.target, str(self.folder), max_trials_global=trials,
                        num_trials_per_iter=min(64, max(1, trials // len(funcs))),
                        builder=builder, database=self.database,
                        cost_model="random", measure_callbacks=callbacks, seed=0)
        self._classes = None  # new records: the class index is read again

    def schedule(self, func: tirx.PrimFunc) -> tirx.PrimFunc | None:
        """`func` with its record's schedule, else a transferred one; None with neither."""
        mod = workload(func)
        record = self.database.query_tuning_record(mod, self.target, "main") \
            if self.database.has_workload(mod) else None
        sch = None if record is None else self._replay(record.trace, func)
        if sch is not None:
            self.counts["tuned"] += 1
            return sch.mod["main"]
        sch = self._transferred(func) if self.transfer else None
        if sch is None:
            self.counts["default"] += 1
            return None
        self.counts["transferred"] += 1
        return sch.mod["main"]

    def _replay(self, trace: s_tir.Trace, func: tirx.PrimFunc) -> s_tir.Schedule | None:
        """`trace` replayed on `func` (`_replay`); None where it does not apply or, on a GPU, where
        the kernel it makes breaks the target's limits (`bounds.violations`: a transferred tile's
        shared memory or threads, an access outside a buffer)."""
        sch = _replay(trace, func)
        if sch is None or self.target.kind.name != "cuda":
            return sch
        return None if violations(sch.mod["main"], *target_limits(self.target)) else sch

    def _best_by_class(self) -> dict[str, dict[int, tuple[float, ms.database.TuningRecord]]]:
        """Per class (`nest_class`), the best record (mean seconds, record) of each of its workloads;
        read from the database once."""
        if self._classes is None:
            self._classes = {}
            for record in self.database.get_all_tuning_records():
                if record.run_secs:
                    self._add(record)
        return self._classes

    def _add(self, record: ms.database.TuningRecord) -> None:
        best = self._classes.setdefault(nest_class(record.workload.mod["main"]), {})
        key = tvm_ffi.structural_hash(record.workload.mod)
        secs = float(np.mean([float(s) for s in record.run_secs]))
        if key not in best or secs < best[key][0]:
            best[key] = (secs, record)

    def _same_class(self, func: tirx.PrimFunc) -> list[ms.database.TuningRecord]:
        """The best record of each workload of `func`'s class, nearest in shape first."""
        best = self._best_by_class().get(nest_class(func), {})
        return sorted((r for _, r in best.values()), key=lambda r: shape_distance(func, r.workload.mod["main"]))

    def _transferred(self, func: tirx.PrimFunc) -> s_tir.Schedule | None:
        fitted = []
        for record in self._same_class(func):
            sch = self._replay(record.trace, func)
            if sch is not None:
                fitted.append(sch)
                if len(fitted) == CANDIDATES or not self.can_time:
                    break
        if not fitted or not self.can_time:
            return fitted[0] if fitted else None
        timed = [(self._seconds(sch), sch) for sch in fitted]
        secs, sch = min(timed, key=lambda t: t[0])
        if math.isinf(secs):
            return None
        record = ms.database.TuningRecord(sch.trace, self.database.commit_workload(workload(func)), [secs],
                                          self.target, ms.arg_info.ArgInfo.from_prim_func(func))
        self.database.commit_tuning_record(record)
        self._add(record)
        return sch

    def _seconds(self, sch: s_tir.Schedule) -> float:
        """Median seconds of one run of the scheduled function; inf where it fails to build."""
        try:
            built = tvm.compile(sch.mod, target=self.target).jit()
        except Exception:  # noqa: BLE001 - TVM's build errors
            return math.inf
        device = device_of(self.target)
        args = [tvm.runtime.tensor(np.zeros(shape, "float32"), device) for shape in _shapes(sch.mod["main"])]
        timer = built.time_evaluator("main", device, number=3, repeat=5, min_repeat_ms=5)
        return float(np.median(timer(*args).results))
