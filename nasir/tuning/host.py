"""Schedules tuned on the host: `nasir tune MODEL`, `nasir.tune(model)`, `compile(..., tune=True)`.

For each distinct conv or gemm of a model (by `nest_signature`: its shape, stride, groups and fused
epilogue), the few schedules the cost model ranks highest, the spatial schedule with each other
register tile (a grouped conv with fewer channels a group than lanes has only those) and the
channel plan with its other register tiles, up to all registers but 4 in accumulators
(`candidate_schedules(..., tiles=True)`), are compiled alone and their kernel calls timed by
per-call timers, without the copies of a whole call, the candidates of a nest in turn round by
round (`KernelTimes.calls_ms_together`, the search's kernel cache), and the fastest goes into the tuning
database (`nasir.lowering.schedule.tuned`) under the target CPU's name, where default-schedule
finds it in every later compile of any model with that nest. A nest the database already holds
for the CPU is not timed again.

Alone is not inside the network: a schedule that won alone is kept only where the model's own layers
with it run faster, profiled inside the whole model compiled with the new schedules and with the
cost model's, in turn (`in_network`); elsewhere the database gets the cost model's schedule. Then
the whole model is timed so again, and where the kept ones run it slower, every one of them is left
to the cost model. The winners go into the database once checked (the check compiles with a copy): a
tuning stopped before leaves their nests to be timed again. On Zen 4, ResNeXt-29's 8-lane convs
tuned alone ran the network 1.08x slower: its grouped 3x3 convs on 8 x 8 won alone (1.05-1.14x) and
ran 1.18x slower inside it, and its 1x1 convs on 16 x 16 that won alone with lanes along the rows
(1.03-1.20x) ran 1.42-1.51x slower there, between convs that store their results channel-blocked;
two runs of the same tuning chose differently for 13 of its 18 convs, times alone moving as much as
the gains.

    report = nasir.tune(nasir.load("resnet34.onnx"))       # about 15 distinct convs, about 15 schedules each
    report.gain                                            # sum of cost-model times / tuned, alone
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from nasir.console import step
from nasir.dialects import nest
from nasir.dialects.schedule import Schedule
from nasir.lowering.pipeline import LLVM
from nasir.lowering.schedule.default_schedule import tunable
from nasir.lowering.schedule.schedules import candidate_schedules
from nasir.lowering.schedule.tuned import NO_TUNING, TuningDatabase, default_tuning_db, nest_signature
from nasir.lowering.target import CPUTarget, resolve_target, runnable_target, set_target, target_of
from nasir.measure.kernels import TOTAL, KernelTimes, default_kernel_cache, profiled_in_turn, standalone
from nasir.model import Model
from nasir.reference import seeded_inputs
from nasir.runtime.llvm_executable import LLVMExecutable, compile_llvm

TOP = 4
"""Schedules of the cost model's ranking timed per nest (its choice and the next three), before
the other register tiles of the spatial schedule and of the channel plan."""
MARGIN = 0.02
"""How much faster than the cost model's choice another schedule must run alone to be kept, and its
layers inside the network (a closer time is within the noise of a median of seven)."""
NETWORK_ROUNDS = 5
"""Rounds of `in_network`: each profiles the model with the tuned schedules and with the cost
model's (`profiled_in_turn`); a layer's time is the median of its rounds' medians."""
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
    network: tuple[float, float] | None = None
    """Its layers' ms inside the whole model with the schedule that won alone and with the cost
    model's (`in_network`); None where none but the cost model's won alone."""
    rejected: int | None = None
    """The candidate that won alone and ran its layers, or the whole network, slower inside it (the
    cost model's is kept)."""

    @property
    def chosen(self) -> int | None:
        """Which candidate is kept (0: the cost model's), None if it came from the database."""
        return self.timed.index(self.ms) if self.timed else None

    @property
    def slower_inside(self) -> bool:
        """Whether its layers ran slower inside the network with its winner alone (within `MARGIN`)."""
        return self.network is not None and self.network[0] > self.network[1] * (1 - MARGIN)

    @property
    def network_gain(self) -> float | None:
        """Its layers inside the network: the cost model's time over the winner's alone."""
        return self.network[1] / self.network[0] if self.network else None


@dataclass
class TuningReport:
    cpu: str
    database: Path
    nests: list[TunedNest]
    seconds: float = 0.0
    network: tuple[float, float] | None = None
    """The whole model's ms with the schedules kept after the check of each inside it and with the
    cost model's (`in_network`); None where none but the cost model's won alone. Where the kept
    ones ran it slower, every one of them was left to the cost model."""

    @property
    def gain(self) -> float:
        """The model's nests alone, each layer counted: cost-model time over tuned time."""
        default = sum(n.default_ms * len(n.layers) for n in self.nests)
        tuned = sum(n.ms * len(n.layers) for n in self.nests)
        return default / tuned if tuned else 1.0

    @property
    def network_gain(self) -> float | None:
        """The whole model: its time with the cost model's schedules over its time with the kept ones
        (`network`), None where nothing was checked."""
        return self.network[1] / self.network[0] if self.network else None


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
    console = Console(stderr=True, quiet=not progress)
    with Progress(*columns, disable=not progress, transient=True, console=console) as bar:
        task = bar.add_task(f"{len(groups)} distinct nests", total=len(groups))
        # the nests whose winner alone is not the cost model's: op, the two schedules; stored once
        # checked inside the network (an interrupted tuning leaves them to be timed again)
        pending: dict[str, tuple[nest.ComputeOp, Schedule, Schedule]] = {}
        for signature, ops in groups.items():
            layers = [op.layer_name for op in ops]
            row = db.row(target.cpu, signature)
            if row is not None:
                nests.append(TunedNest(layers, signature, row[1], row[2]))
            else:
                schedules = candidate_schedules(tunable(ops[0], target), target, top, tiles=True)[:trials]
                timed = kernels.calls_ms_together([with_schedule(level, ops[0], s) for s in schedules])
                best = min(range(len(timed)), key=timed.__getitem__)
                best = best if timed[best] < timed[0] * (1 - MARGIN) else 0
                nests.append(TunedNest(layers, signature, timed[best], timed[0], timed))
                if best:
                    pending[signature] = (ops[0], schedules[0], schedules[best])
                else:
                    db.store(target.cpu, ops[0], schedules[0], timed[0], timed[0])
            bar.advance(task)
    network = None
    if pending:
        with tempfile.TemporaryDirectory(prefix="nasir-tune-") as tmp:
            network = _check_in_network(model, target.cpu, threads, db, TuningDatabase(Path(tmp) / "trial.db"),
                                        [n for n in nests if n.signature in pending], pending, kernels.lock, console)
        for n in (n for n in nests if n.signature in pending):
            op, cost_model, winner = pending[n.signature]
            db.store(target.cpu, op, cost_model if n.rejected is not None else winner, n.ms, n.default_ms)
    return TuningReport(target.cpu, db.path, nests, time.perf_counter() - start, network)


def _check_in_network(model: Model, cpu: str, threads: int, db: TuningDatabase, trial: TuningDatabase,
                      checked: list[TunedNest], pending: dict, lock: Path,
                      console: Console) -> tuple[float, float] | None:
    """Check `checked`, the nests whose winner alone (`pending`) is not the cost model's, inside the
    network (`in_network`), in `trial`, a copy of `db` with the winners: a nest whose layers run
    slower there is left to the cost model (`rejected`), then all of them where the network with
    the others runs slower whole. Returns the whole network's ms with the kept ones and with the
    cost model's, None where none is kept."""
    db.db.backup(trial.db)
    for op, _, winner in (pending[n.signature] for n in checked):
        trial.store(cpu, op, winner, 0.0, 0.0)
    with step(console, f"checking {len(checked)} schedules inside the network"):
        cost_model = compile_llvm(model.module, threads=threads, profile=True, cpu=cpu, tuning=NO_TUNING)
        tuned_ms, default_ms = in_network(model, cost_model, trial.path, lock)
    for n in checked:
        n.network = (sum(tuned_ms.get(layer, 0.0) for layer in n.layers),
                     sum(default_ms.get(layer, 0.0) for layer in n.layers))
        if n.slower_inside:
            _reject(n, trial, cpu, pending[n.signature])
    kept = [n for n in checked if n.rejected is None]
    if not kept:
        return None
    if len(kept) < len(checked):  # the network without those slower inside it
        with step(console, f"timing the network with the {len(kept)} kept"):
            tuned_ms, default_ms = in_network(model, cost_model, trial.path, lock)
    if tuned_ms[TOTAL] > default_ms[TOTAL]:  # slower whole: the cost model's everywhere
        for n in kept:
            _reject(n, trial, cpu, pending[n.signature])
    return tuned_ms[TOTAL], default_ms[TOTAL]


def _reject(n: TunedNest, trial: TuningDatabase, cpu: str, schedules: tuple) -> None:
    """Leave `n` to the cost model: its winner alone ran slower inside the network."""
    op, cost_model, _ = schedules
    trial.store(cpu, op, cost_model, n.default_ms, n.default_ms)
    n.rejected, n.ms = n.chosen, n.default_ms


def in_network(model: Model, cost_model: LLVMExecutable, database: Path, lock: Path,
               rounds: int = NETWORK_ROUNDS) -> tuple[dict[str, float], dict[str, float]]:
    """Each layer's ms inside `model` compiled whole with the tuning `database`, for the CPU and
    threads of `cost_model` (the model compiled with per-call timers and the cost model's
    schedules alone), and inside `cost_model`, profiled in turn for `rounds` (`profiled_in_turn`):
    the medians, tuned then cost model's, the whole call's under `TOTAL`. A conv runs after its
    producer in the network, its input and weights where that left them (in L2, in L3, stored
    channel-blocked or not), which its standalone timing does not see.

        cost_model = compile_llvm(model.module, profile=True, cpu="znver3", tuning="none")
        tuned, default = in_network(model, cost_model, Path("tuning.db"), TIMING_LOCK)
        tuned["layer2_layer2.1_conv1_Conv"], default["layer2_layer2.1_conv1_Conv"]   # 0.951, 0.668
    """
    tuned = compile_llvm(model.module, threads=cost_model.threads, profile=True, cpu=cost_model.compiled_for,
                         tuning=str(database))
    inputs = seeded_inputs(model)
    samples = profiled_in_turn([tuned, cost_model], [inputs, inputs], rounds, lock)
    tuned_ms, default_ms = ({layer: float(np.median([r[layer] for r in rounds_of])) for layer in rounds_of[0]}
                            for rounds_of in samples)
    return tuned_ms, default_ms


def with_schedule(model: Model, op: nest.ComputeOp, schedule) -> Model:
    """`op` alone (`standalone`) with `schedule`."""
    alone = standalone(model, op)
    set_target(alone.module, target_of(model.module))
    for clone in alone.module.walk():
        if isinstance(clone, nest.ComputeOp):
            clone.properties["schedule"] = schedule.to_attr()
    return alone
