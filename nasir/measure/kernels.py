"""Nests compiled and timed alone, each once: the shared kernel-timing cache of the search and tuning.

`standalone(model, op)` makes a model of one nest (its weights `w0`, `w1`, ..., its data inputs
@main's arguments, its name `nest`), so nests that compute the same way print the same; its text,
with the host CPU, the target CPU, the threads and the compiler (`compiler_digest`), is the
signature under which `KernelTimes` keeps its median time in an SQLite table. By default every
search and every `nasir tune` of the user shares one (`default_kernel_cache()`: `kernels.db` in
`$NASIR_CACHE_DIR`, else `~/.cache/nasir/`; safe to delete). Timing holds a lock file
(`timing_lock`), so the processes of one machine time one thing at a time.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import llvmlite
import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Region

from nasir import dialects, lowering, runtime
from nasir.dialects import nest, nn
from nasir.dialects.attributes import PAD_ROWS
from nasir.dialects.module import WeightStore
from nasir.lowering.schedule.pad_planes import aliased, padded
from nasir.lowering.schedule.tuned import cache_dir
from nasir.lowering.target import CPU_ENV, host_target, set_target
from nasir.model import Model
from nasir.reference import seeded_inputs
from nasir.runtime.llvm_executable import compile_llvm
from nasir.runtime.profile import Profile
from nasir.transforms.nest_spec import is_weight
from nasir.transforms.rebatch import nest_at_batch

REPEAT = 7
ROUNDS = 5
"""Rounds in which `KernelTimes.calls_ms_together` profiles its nests in turn."""
TIMING_LOCK = Path(tempfile.gettempdir()) / "nasir-timing.lock"
"""One timing at a time on a machine, whichever search or worker asks."""
TOTAL = ""
"""The key of a profile's whole time."""


def standalone(model: Model, op: nest.ComputeOp, batch: int | None = None, planes: bool = True) -> Model:
    """A model of `op` alone: its data inputs become @main's arguments, its weights `w0`, `w1`, ...
    and its name `nest`, so nests that compute the same way print the same.

    `batch`: the nest at that batch instead of its own, so the search's candidate at the Fisher
    batch gives the kernels of the batch-1 network it stands for (printed identically to those
    of that network transformed itself); `NotBatched` when the batch is not its first dimension.
    Its arguments and result have the padding rows pad-planes would give them in a compile (NCHW
    planes a multiple of 1 KiB apart), so it is timed on the planes it runs on (an argument's
    padding row is read as a row of it: a 3x3 conv reads row H unguarded, which in a compile is
    guarded padding); `planes=False` keeps the nest's own types (a model to
    transform further, as synthesis does, not to time)."""
    data = [v for v in op.inputs if not is_weight(v)]
    types = [v.type for v in data]
    result_type, domain = op.result.type, op.domain
    if batch is not None:
        types, result_type, domain = nest_at_batch(op, batch)
    # the planes pad-planes would give it in a compile
    types = [padded(t) if planes and aliased(t) else t for t in types]
    pad_result = planes and aliased(result_type)
    if pad_result:
        result_type = padded(result_type)
    block = Block(arg_types=types)
    mapping = dict(zip(data, block.args))
    store = WeightStore()
    for v in op.inputs:
        if is_weight(v) and v not in mapping:
            w = nn.WeightOp.make(f"w{len(store)}", v.type.get_shape())
            store[w.key] = model.weights[v.owner.key]
            block.add_op(w)
            mapping[v] = w.result
    properties = {**op.properties, "name": StringAttr("nest"), "domain": domain}
    clone = nest.ComputeOp.create(operands=[mapping[v] for v in op.inputs], properties=properties,
                                  result_types=[result_type])
    if pad_result:
        PAD_ROWS.set(clone, 1)
    block.add_ops([clone, func.ReturnOp(clone.result)])
    main = func.FuncOp("main", (types, [result_type]), Region(block))
    return Model(ModuleOp([main]), store, [f"x{k}" for k in range(len(data))], ["y"])


def nest_key(op: nest.ComputeOp, batch: int | None) -> tuple:
    """What `standalone(model, op, batch)` is made of: `op`'s properties but its name, its operand
    and result types, which operands are weights, and the batch (equal keys, equal modules)."""
    properties = tuple(sorted((k, v) for k, v in op.properties.items() if k != "name"))
    return batch, properties, tuple((v.type, is_weight(v)) for v in op.inputs), op.result.type


def default_kernel_cache() -> Path:
    """The user's kernel cache: `kernels.db` in nasir's cache folder (`cache_dir`:
    `$NASIR_CACHE_DIR`, else `$XDG_CACHE_HOME/nasir/` or `~/.cache/nasir/`)."""
    return cache_dir() / "kernels.db"


@functools.cache
def compiler_digest() -> str:
    """What decides the code a nest compiles to: the source of nasir's dialects, lowering and
    runtime, and llvmlite's version (a changed compiler never reuses an old kernel's time)."""
    h = hashlib.sha256(llvmlite.__version__.encode())
    for package in (dialects, lowering, runtime):
        for path in sorted(Path(package.__path__[0]).rglob("*.py")):
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def signature(model: Model, options: str) -> str:
    return hashlib.sha256(f"{options}\n{model.text()}".encode()).hexdigest()[:24]


class KernelTimes:
    """Times (ms) of standalone nests by signature, in an SQLite file shared by the workers (of a
    search, of `nasir tune`)."""

    def __init__(self, path: Path, cpu: str | None, threads: int, lock: Path = TIMING_LOCK):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("create table if not exists kernels (signature text primary key, ms real)")
        self.lock, self.cpu, self.threads = lock, cpu, threads
        self.options = (f"host={host_target().cpu} cpu={cpu or os.environ.get(CPU_ENV) or 'host'} threads={threads} "
                        f"compiler={compiler_digest()}")
        self.seen: dict[tuple, float] = {}

    def nest_ms(self, model: Model, op: nest.ComputeOp, batch: int | None = None) -> float:
        """The time of `op` alone (`standalone`) with the schedule it gets in a compile: its own,
        else the tuning database's or the cost model's (so a tuned schedule is a new kernel).
        Remembered for this object by what the standalone module is made of (`nest_key`), so a
        search's unchanged and repeated layers skip building and scheduling it again."""
        key = nest_key(op, batch)
        if key not in self.seen:
            self.seen[key] = self.kernel_ms(self.as_compiled(model, op, batch))
        return self.seen[key]

    def as_compiled(self, model: Model, op: nest.ComputeOp, batch: int | None = None) -> Model:
        """`op` alone (`standalone`) as a compile runs it: for this CPU, split by `presum` (an
        expanded window summed first, which a nest given its schedule would skip) and by
        `subsample-strided-1x1` (a strided 1x1 conv's input subsampled first), scheduled."""
        alone = standalone(model, op, batch)
        set_target(alone.module, self.cpu)
        return alone.transform("presum,subsample-strided-1x1,default-schedule")

    def timed(self, op: nest.ComputeOp, batch: int | None = None) -> bool:
        """Whether `nest_ms(model, op, batch)` is known to this object (costs no compile)."""
        return nest_key(op, batch) in self.seen

    def kernel_ms(self, alone: Model) -> float:
        """The time of a whole call of a standalone nest (`standalone`) as it is scheduled
        (`measure`), measured once."""
        key = signature(alone, self.options)
        row = self.db.execute("select ms from kernels where signature = ?", (key,)).fetchone()
        if row is not None:
            return row[0]
        ms = self.measure(alone)
        self.db.execute("insert or replace into kernels values (?, ?)", (key, ms))
        return ms

    def calls_ms_together(self, alones: list[Model], rounds: int = ROUNDS) -> list[float]:
        """The median ms of each standalone nest's kernel calls, without the copies of a whole
        call (on a Zen 3, 0.04 ms of the 0.17 a 1x1 conv of 2 M MACs takes whole: ResNet-34's
        downsample convs), from per-call timers: all compiled first, then profiled in turn for
        `rounds` of `REPEAT` runs, so that a load that comes and goes meanwhile slows each alike
        (timed one after the other, two tunings of ResNeXt-29 chose differently for 13 of its 18
        convs). Remembered together: where the cache holds every one, nothing is timed; else all
        are timed again."""
        keys = [signature(alone, self.options + " timer=calls") for alone in alones]
        rows = [self.db.execute("select ms from kernels where signature = ?", (key,)).fetchone() for key in keys]
        if all(row is not None for row in rows):
            return [row[0] for row in rows]
        exes = [compile_llvm(alone.module, threads=self.threads, cpu=self.cpu, profile=True) for alone in alones]
        samples = profiled_in_turn(exes, [seeded_inputs(alone) for alone in alones], rounds, self.lock, warmup=1)
        ms = [float(np.median([sum(v for layer, v in layers.items() if layer != TOTAL) for layers in rounds_of]))
              for rounds_of in samples]
        self.db.executemany("insert or replace into kernels values (?, ?)", list(zip(keys, ms)))
        return ms

    def profile(self, model: Model) -> dict[str, float]:
        """Each layer's time (ms) inside `model` compiled whole, and the whole (`TOTAL`)."""
        exe = compile_llvm(model.module, threads=self.threads, cpu=self.cpu, profile=True)
        with timing_lock(self.lock):
            return layer_ms(exe.profile(*seeded_inputs(model), repeat=REPEAT, warmup=2))

    def measure(self, model: Model) -> float:
        """Median ms of `model` compiled whole, timed under the machine's timing lock."""
        exe = compile_llvm(model.module, threads=self.threads, cpu=self.cpu)
        inputs = seeded_inputs(model)
        with timing_lock(self.lock):
            return exe.benchmark(*inputs, repeat=REPEAT, warmup=2)["median_ms"]

def layer_ms(profile: Profile) -> dict[str, float]:
    """Each layer's ms in `profile` (the calls of a layer summed), and the whole call's (`TOTAL`)."""
    layers = {TOTAL: profile.total_ms}
    for row in profile.rows:
        layers[row.layer] = layers.get(row.layer, 0.0) + row.ms
    return layers


def profiled_in_turn(exes: list, inputs: list[list[np.ndarray]], rounds: int, lock: Path,
                     warmup: int = 2) -> list[list[dict[str, float]]]:
    """Executables compiled with per-call timers, profiled in turn (`REPEAT` runs each) for `rounds`,
    under the machine's timing `lock`: a load that comes and goes slows each alike. For each
    executable, its rounds' `layer_ms`."""
    samples: list[list[dict[str, float]]] = [[] for _ in exes]
    with timing_lock(lock):
        for _ in range(rounds):
            for exe, x, rounds_of in zip(exes, inputs, samples):
                rounds_of.append(layer_ms(exe.profile(*x, repeat=REPEAT, warmup=warmup)))
    return samples


@contextmanager
def timing_lock(path: Path) -> Iterator[None]:
    """One timing at a time on this machine (an exclusive lock on `path`)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
