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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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

    def store(self, cpu: str, signature: str, schedule: Schedule, ms: float, default_ms: float) -> None:
        self.db.execute("insert or replace into schedules values (?, ?, ?, ?, ?)",
                        (cpu, signature, schedule_json(schedule), ms, default_ms))


def tuning_database(option: str) -> TuningDatabase | None:
    """The database a `tuning` option names: "" the user's (`default_tuning_db`), "none" none, else
    that file."""
    if option == NO_TUNING:
        return None
    return TuningDatabase(option or default_tuning_db(), create=False)
