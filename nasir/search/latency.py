"""Latency of candidates on the llvm backend, estimated from per-nest timings cached for the search.

The original model is compiled once with profiling, which gives each conv's time inside the model
(`in_model_ms`, its fused epilogue included). A candidate changes some convs; each of its convs is
compiled and timed alone (`standalone`), as is the original conv it came from (a part `L.part1` or
`L` itself comes from `L`), and the layer's in-model time is scaled by that ratio:

    estimate = original's time + sum over convs L of in_model_ms(L) * (alone(new nests of L) / alone(L) - 1)

A nest's time alone is cached under its signature, the printed standalone module with names
erased (and the host CPU, the target CPU and the threads), so one layer shape with one transform
compiles and is timed once for the whole search, by whichever worker meets it first (the cache is
an SQLite table the workers share; searches may share it too: `kernel_cache`). Timing holds a
lock file, so the workers of one machine time one thing at a time. The front's members are then
compiled whole and measured (`KernelTimes.measure`), and the estimate is reported beside it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Region

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore
from nasir.lowering.target import CPU_ENV, host_target
from nasir.model import Model
from nasir.runtime.llvm_executable import compile_llvm
from nasir.search.space import conv_nests
from nasir.tools.reference import seeded_inputs
from nasir.transforms.nest_spec import is_weight

REPEAT = 7
TIMING_LOCK = Path(tempfile.gettempdir()) / "nasir-timing.lock"
"""One timing at a time on a machine, whichever search or worker asks."""
TOTAL = ""
"""The key of a profile's whole time."""


def standalone(model: Model, op: nest.ComputeOp) -> Model:
    """A model of `op` alone: its data inputs become @main's arguments, its weights `w0`, `w1`, ...
    and its name `nest`, so nests that compute the same way print the same."""
    data = [v for v in op.inputs if not is_weight(v)]
    block = Block(arg_types=[v.type for v in data])
    mapping = dict(zip(data, block.args))
    store = WeightStore()
    for v in op.inputs:
        if is_weight(v) and v not in mapping:
            w = nn.WeightOp.make(f"w{len(store)}", v.type.get_shape())
            store[w.key] = model.weights[v.owner.key]
            block.add_op(w)
            mapping[v] = w.result
    clone = op.clone(value_mapper=mapping)
    clone.properties["name"] = StringAttr("nest")
    block.add_ops([clone, func.ReturnOp(clone.result)])
    main = func.FuncOp("main", ([v.type for v in data], [op.result.type]), Region(block))
    return Model(ModuleOp([main]), store, [f"x{k}" for k in range(len(data))], ["y"])


def signature(model: Model, options: str) -> str:
    return hashlib.sha256(f"{options}\n{model.text()}".encode()).hexdigest()[:24]


class KernelTimes:
    """Times (ms) of standalone nests by signature, in an SQLite file shared by the workers."""

    def __init__(self, path: Path, cpu: str | None, threads: int, lock: Path = TIMING_LOCK):
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("create table if not exists kernels (signature text primary key, ms real)")
        self.lock, self.cpu, self.threads = lock, cpu, threads
        self.options = f"host={host_target().cpu} cpu={cpu or os.environ.get(CPU_ENV) or 'host'} threads={threads}"

    def nest_ms(self, model: Model, op: nest.ComputeOp) -> float:
        alone = standalone(model, op)
        key = signature(alone, self.options)
        row = self.db.execute("select ms from kernels where signature = ?", (key,)).fetchone()
        if row is not None:
            return row[0]
        ms = self.measure(alone)
        self.db.execute("insert or replace into kernels values (?, ?)", (key, ms))
        return ms

    def profile(self, model: Model) -> dict[str, float]:
        """Each layer's time (ms) inside `model` compiled whole, and the whole (`TOTAL`)."""
        exe = compile_llvm(model.module, threads=self.threads, cpu=self.cpu, profile=True)
        with timing_lock(self.lock):
            profile = exe.profile(*seeded_inputs(model), repeat=REPEAT, warmup=2)
        layers: dict[str, float] = {TOTAL: profile.total_ms}
        for row in profile.rows:
            layers[row.layer] = layers.get(row.layer, 0.0) + row.ms
        return layers

    def measure(self, model: Model) -> float:
        """Median ms of `model` compiled whole, timed under the machine's timing lock."""
        exe = compile_llvm(model.module, threads=self.threads, cpu=self.cpu)
        inputs = seeded_inputs(model)
        with timing_lock(self.lock):
            return exe.benchmark(*inputs, repeat=REPEAT, warmup=2)["median_ms"]


class LatencyModel:
    """The original's profile and its convs' times alone; estimates for candidates (module doc)."""

    def __init__(self, original: Model, kernels: KernelTimes, profile: dict[str, float] | None = None):
        self.kernels = kernels
        self.profile = profile if profile is not None else kernels.profile(original)
        self.original_ms = self.profile[TOTAL]
        self.alone = {op.layer_name: kernels.nest_ms(original, op) for op in conv_nests(original)}

    def estimate(self, candidate: Model) -> float:
        new: dict[str, float] = {}
        for op in conv_nests(candidate):
            layer = origin(op.layer_name, self.alone)
            new[layer] = new.get(layer, 0.0) + self.kernels.nest_ms(candidate, op)
        change = sum(self.profile.get(layer, 0.0) * (new.get(layer, 0.0) / alone - 1)
                     for layer, alone in self.alone.items() if alone > 0)
        return max(self.original_ms + change, 1e-6)


def origin(name: str, layers: dict[str, float]) -> str:
    """The original layer a candidate's nest comes from: itself, or `L` for `L.part1`, `L.expand`."""
    while name not in layers and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


@contextmanager
def timing_lock(path: Path) -> Iterator[None]:
    """One timing at a time on this machine (an exclusive lock on `path`)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
