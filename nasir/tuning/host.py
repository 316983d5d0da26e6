"""Schedules tuned on the host: `nasir tune MODEL`, `nasir.tune(model)`, `compile(..., tune=True)`.

For each distinct conv or gemm of a model (by `nest_signature`: its shape, stride, groups and fused
epilogue), the few schedules the cost model ranks highest, the spatial schedule with each other
register tile (a grouped conv with fewer channels a group than lanes has only those) and the
channel plan with its other register tiles, up to all registers but 4 in accumulators
(`candidate_schedules(..., tiles=True)`), are compiled alone and their kernel calls timed by
per-call timers, without the copies of a whole call (`nasir.measure.kernels.KernelTimes`, the
search's kernel cache), and the fastest goes into the tuning
database (`nasir.lowering.schedule.tuned`) under the target CPU's name, where default-schedule
finds it in every later compile of any model with that nest. A nest the database already holds
for the CPU is not timed again.

    report = nasir.tune(nasir.load("resnet34.onnx"))       # about 15 distinct convs, about 15 schedules each
    report.gain                                            # sum of cost-model times / tuned, alone
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from nasir.dialects import nest
from nasir.lowering.pipeline import LLVM
from nasir.lowering.schedule.default_schedule import tunable
from nasir.lowering.schedule.schedules import candidate_schedules
from nasir.lowering.schedule.tuned import TuningDatabase, default_tuning_db, nest_signature
from nasir.lowering.target import CPUTarget, resolve_target, runnable_target, set_target, target_of
from nasir.measure.kernels import KernelTimes, default_kernel_cache, standalone
from nasir.model import Model

TOP = 4
"""Schedules of the cost model's ranking timed per nest (its choice and the next three), before
the other register tiles of the spatial schedule and of the channel plan."""
MARGIN = 0.02
"""How much faster than the cost model's choice another schedule must run alone to be kept (a
closer time is within the noise of a median of seven)."""
SCHEDULED = str(LLVM.before("default-schedule"))
"""The passes before default-schedule: the nests tuning times are those it schedules."""


@dataclass
class TunedNest:
    """One distinct nest: the `layers` that have it, its schedules' times alone (the cost model's
    choice first; empty if it came from the database) and the chosen one's (`ms`)."""

    layers: list[str]
    signature: str
    ms: float
    default_ms: float
    timed: list[float] = field(default_factory=list)

    @property
    def chosen(self) -> int | None:
        """Which candidate won (0: the cost model's), None if it came from the database."""
        return self.timed.index(self.ms) if self.timed else None


@dataclass
class TuningReport:
    cpu: str
    database: Path
    nests: list[TunedNest]
    seconds: float = 0.0

    @property
    def gain(self) -> float:
        """The model's nests alone, each layer counted: cost-model time over tuned time."""
        default = sum(n.default_ms * len(n.layers) for n in self.nests)
        tuned = sum(n.ms * len(n.layers) for n in self.nests)
        return default / tuned if tuned else 1.0


def tunable_nests(model: Model, cpu: str | None) -> tuple[Model, dict[str, list[nest.ComputeOp]]]:
    """`model` at default-schedule's level for `cpu` and its nests that take a cost-model schedule
    with more than one candidate, grouped by signature (first seen first)."""
    target = resolve_target(cpu)
    level = model.clone()
    set_target(level.module, target)
    level = level.transform(SCHEDULED)
    groups: dict[str, list[nest.ComputeOp]] = {}
    for op in level.module.walk():
        if isinstance(op, nest.ComputeOp) and (shape := tunable(op, target)) is not None:
            if len(candidate_schedules(shape, target, 2, tiles=True)) > 1:
                groups.setdefault(nest_signature(op), []).append(op)
    return level, groups


def timeable_target(cpu: str | None) -> CPUTarget:
    """The target `cpu` names (see `resolve_target`), if this machine can run and so time its code;
    else NasirError."""
    return runnable_target(cpu, "tune", "nasir tune")


def tune(model: Model, cpu: str | None = None, threads: int = 1, database: str | Path | None = None,
         kernel_cache: str | Path | None = None, top: int = TOP, trials: int | None = None,
         progress: bool = False) -> TuningReport:
    """Tune every distinct nest of `model` that the database lacks for `cpu` (default: NASIR_CPU,
    else the host), timed with `threads`; the database is `database` (default: the user's). At
    most `trials` schedules a nest, best first (default: all its candidates, about 12 to 16 on
    ResNet-18's convs). A CPU with wider vectors than this machine's cannot be timed here:
    NasirError."""
    start = time.perf_counter()
    target = timeable_target(cpu)
    db = TuningDatabase(database or default_tuning_db())
    kernels = KernelTimes(Path(kernel_cache or default_kernel_cache()), target.cpu, threads)
    level, groups = tunable_nests(model, target.cpu)
    nests = []
    columns = (TextColumn("tuning {task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress, transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"{len(groups)} distinct nests", total=len(groups))
        for signature, ops in groups.items():
            layers = [op.layer_name for op in ops]
            row = db.row(target.cpu, signature)
            if row is not None:
                nests.append(TunedNest(layers, signature, row[1], row[2]))
            else:
                schedules = candidate_schedules(tunable(ops[0], target), target, top, tiles=True)[:trials]
                timed = [kernels.kernel_ms(with_schedule(level, ops[0], s), calls_only=True) for s in schedules]
                best = min(range(len(timed)), key=timed.__getitem__)
                best = best if timed[best] < timed[0] * (1 - MARGIN) else 0
                db.store(target.cpu, ops[0], schedules[best], timed[best], timed[0])
                nests.append(TunedNest(layers, signature, timed[best], timed[0], timed))
            bar.advance(task)
    return TuningReport(target.cpu, db.path, nests, time.perf_counter() - start)


def with_schedule(model: Model, op: nest.ComputeOp, schedule) -> Model:
    """`op` alone (`standalone`) with `schedule`."""
    alone = standalone(model, op)
    set_target(alone.module, target_of(model.module))
    for clone in alone.module.walk():
        if isinstance(clone, nest.ComputeOp):
            clone.properties["schedule"] = schedule.to_attr()
    return alone
