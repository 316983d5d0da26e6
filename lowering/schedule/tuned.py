"""The tuning database: schedules timed fastest on a CPU, by nest signature, for default-schedule.

`nasir tune` (`nasir.tuning.host`) times the few schedules the cost model ranks highest for each
distinct nest and stores the fastest here; default-schedule then gives a nest the stored schedule
of its signature on the module's target CPU where there is one, else the cost model's. One SQLite
file, by default in the user's cache (`default_tuning_db()`: `$NASIR_CACHE_DIR/tuning.db`, else
`$XDG_CACHE_HOME/nasir/` or `~/.cache/nasir/`), shared by every model (a conv shape tuned once
serves every model that has it) and shareable as a file (`default-schedule{tuning=PATH}`,
`nasir.compile(..., tuning=PATH)`, `nasir tune --db PATH`). A row:

    cpu      = "znver4"                      the target CPU's LLVM name
    nest     = "5d0c..."                     `nest_signature`: what the nest computes, names erased
    schedule = '{"splits": [["co", 16]], "order": [...], "vector": "co.i", ...}'
    ms, default_ms                           its time and the cost model's choice's, alone

Transfer-tuning: beside each row, the nest's class (`nest_class`: the signature without the
extents, so a 3x3 stride-1 conv with a bias and a ReLU of any channel count and size) and its
extents. A nest of a class whose other shapes tuning found faster than the cost model's choice
(`donors`, nearest shape first) gets, of its own candidate schedules, the one with the donor's
vector loop and register tile (default-schedule's `transferred`): ResNet-34's 128-channel 3x3 convs
tuned, its 256-channel ones take their tile without being timed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sqlite3
from pathlib import Path

from xdsl.utils.exceptions import VerifyException

from nasir.dialects import nest
from nasir.dialects.schedule import Schedule
from nasir.lowering.schedule.pad_planes import ALIASING_BYTES
from nasir.transforms.nest_spec import is_weight

NO_TUNING = "none"
"""The `tuning` option that turns the database off (`default-schedule{tuning=none}`)."""
SCHEMA = ("create table if not exists schedules (cpu text, nest text, schedule text, ms real, default_ms real, "
          "primary key (cpu, nest))")
CLASSES = "create table if not exists classes (cpu text, nest text, class text, extents text, primary key (cpu, nest))"
TRANSFER_GAIN = 0.02
"""How much faster than the cost model's choice a tuned schedule must have run for its register tile
to be given to other shapes of its class (tuning's own margin)."""


def cache_dir() -> Path:
    """nasir's folder in the user's cache: `$NASIR_CACHE_DIR`, else `$XDG_CACHE_HOME/nasir`, else
    `~/.cache/nasir` (safe to delete)."""
    folder = os.environ.get("NASIR_CACHE_DIR")
    if folder:
        return Path(folder)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nasir"


def default_tuning_db() -> Path:
    return cache_dir() / "tuning.db"


MEMORY_LAYOUT = f"planes padded at {ALIASING_BYTES} bytes"
"""How the llvm backend lays out the activations a tuned nest reads and writes (pad-planes), part of
every signature: a schedule timed on other planes (aliased ones, before pad-planes) is not the one
to give a nest now, so the database forgets it."""


def nest_signature(op: nest.ComputeOp) -> str:
    """What `op` computes, its name and schedule left out: its properties, its operands' types and
    which operands are weights, and the `MEMORY_LAYOUT` it runs on. Two convs of one shape, stride
    and fused epilogue share it, in any model (the layer's place in the graph does not count)."""
    properties = sorted((k, str(v)) for k, v in op.properties.items() if k not in ("name", "schedule"))
    operands = [(str(v.type), is_weight(v)) for v in op.inputs]
    text = repr((properties, operands, str(op.result.type), MEMORY_LAYOUT))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def nest_class(op: nest.ComputeOp) -> str:
    """`nest_signature` without the extents: the properties but the domain, the domain's dim names
    and how many are parallel, the operands' ranks and which are weights, the `MEMORY_LAYOUT`."""
    properties = sorted((k, str(v)) for k, v in op.properties.items() if k not in ("name", "schedule", "domain"))
    domain = ([n for n, _ in op.domain.dims], len(op.domain.parallel))
    operands = [(len(v.type.get_shape()), is_weight(v)) for v in op.inputs]
    text = repr((properties, domain, operands, len(op.result.type.get_shape()), MEMORY_LAYOUT))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def shape_distance(a: list[int], b: list[int]) -> float:
    """How far apart two extents of one class are: the sum of |log2| of their ratios."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b))


def schedule_json(schedule: Schedule) -> str:
    return json.dumps(dataclasses.asdict(schedule))


def schedule_from_json(text: str) -> Schedule:
    d = json.loads(text)
    return Schedule(splits=[(n, f) for n, f in d["splits"]], fusions=[(a, b) for a, b in d["fusions"]],
                    order=d["order"], vector=d["vector"], unroll=d["unroll"], parallel=d["parallel"],
                    pack={int(k): v for k, v in d["pack"].items()})


class TuningDatabase:
    """The schedules of one tuning database file (module doc). Opening a file that does not exist
    for reading (`create=False`) gives an empty database and writes nothing."""

    def __init__(self, path: str | Path, create: bool = True):
        self.path = Path(path)
        self.db = None
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if create or self.path.exists():
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self.db.execute(SCHEMA)
            self.db.execute(CLASSES)

    def lookup(self, cpu: str, op: nest.ComputeOp) -> Schedule | None:
        """The stored schedule of `op`'s signature on `cpu`, None if there is none (or it does
        not fit the nest's domain: a file from another compiler)."""
        row = self.row(cpu, nest_signature(op))
        if row is None:
            return None
        schedule = schedule_from_json(row[0])
        try:
            schedule.verify(op.domain)
        except VerifyException:
            return None
        return schedule

    def row(self, cpu: str, signature: str) -> tuple[str, float, float] | None:
        if self.db is None:
            return None
        return self.db.execute("select schedule, ms, default_ms from schedules where cpu = ? and nest = ?",
                               (cpu, signature)).fetchone()

    def store(self, cpu: str, op: nest.ComputeOp, schedule: Schedule, ms: float, default_ms: float) -> None:
        """Keep `schedule` (`ms` alone, the cost model's `default_ms`) for `op`'s signature on `cpu`."""
        signature = nest_signature(op)
        self.db.execute("insert or replace into schedules values (?, ?, ?, ?, ?)",
                        (cpu, signature, schedule_json(schedule), ms, default_ms))
        self.db.execute("insert or replace into classes values (?, ?, ?, ?)",
                        (cpu, signature, nest_class(op), json.dumps([e for _, e in op.domain.dims])))

    def donors(self, cpu: str, op: nest.ComputeOp) -> list[Schedule]:
        """The tuned schedules of `op`'s class on `cpu` that ran faster than the cost model's choice
        by `TRANSFER_GAIN`, other shapes than `op`'s, the nearest shape first (`shape_distance`)."""
        if self.db is None:
            return []
        rows = self.db.execute(
            "select s.schedule, c.extents from schedules s join classes c on s.cpu = c.cpu and s.nest = c.nest "
            "where s.cpu = ? and c.class = ? and s.nest != ? and s.ms < s.default_ms * ?",
            (cpu, nest_class(op), nest_signature(op), 1 - TRANSFER_GAIN)).fetchall()
        extents = [e for _, e in op.domain.dims]
        rows.sort(key=lambda row: shape_distance(json.loads(row[1]), extents))
        return [schedule_from_json(text) for text, _ in rows]


def tuning_database(option: str) -> TuningDatabase | None:
    """The database a `tuning` option names: "" the user's (`default_tuning_db`), "none" none, else
    that file."""
    if option == NO_TUNING:
        return None
    return TuningDatabase(option or default_tuning_db(), create=False)
