"""Every register tile of a model's convs, timed: what the cost model and `nasir tune` leave on the
table (issue 52).

    python experiments/tile_sweep.py resnext29_2x64d --cpu znver3 --out data/tiles-znver3-resnext29.json
    python experiments/tile_sweep.py --report data/tiles-znver3-*.json

For each distinct conv or gemm of the model that default-schedule gives the cost model's choice
(`nasir.tuning.host.tunable_nests`), compiled alone and timed as `nasir tune` times it
(`nasir.measure.kernels.KernelTimes`, one thread): the cost model's schedule (`default`), the spatial
schedule with every register tile of c output channels x r rows (`sp{c}x{r}`) and the channel plan
with every tile of r_col channel vectors x r_row points (`ch{r_col}x{r_row}`), from 4 to all
registers but 2 accumulators. One nest at a time is appended to `--out`, so an interrupted sweep
resumes where it stopped.

`--report` sums each file's nests over the layers that have them: the cost model's time, the best
of what `nasir tune` times (`candidate_schedules(..., tiles=True)`), and the best of the sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tempfile
from pathlib import Path

import nasir
from nasir.lowering.schedule.default_schedule import tunable
from nasir.measure.kernels import KernelTimes
from nasir.lowering.schedule.schedules import (
    candidate_schedules,
    channel_vector_plan,
    channel_vector_schedule,
    schedule_for,
    spatial_vector_schedule,
)
from nasir.lowering.target import resolve_target
from nasir.tuning.host import tunable_nests, with_schedule

CHANNELS, ROWS = (1, 2, 3, 4, 6, 8), (1, 2, 3, 4, 6, 7)
"""Output channels and rows of the spatial tiles swept."""


def tiles(n, target) -> dict[str, object]:
    """The swept schedules of nest shape `n` by name, the cost model's first; a schedule that two
    names make is kept under the first."""
    most = target.registers - 2
    named = {"default": schedule_for(n, target)}
    for c in CHANNELS:
        for r in ROWS:
            if 4 <= c * r <= most:
                named[f"sp{c}x{r}"] = spatial_vector_schedule(n, target, (c if c > 1 else None, r if r > 1 else None))
    plan = channel_vector_plan(n, target)
    if plan is not None:
        for r_col in (1, 2, 3, 4):
            for r_row in range(1, min(plan.row_extent, most // r_col) + 1):
                if r_col * r_row >= 4 and (plan.col_extent // target.lanes) % r_col == 0:
                    tile = dataclasses.replace(plan, r_col=r_col, r_row=r_row)
                    named[f"ch{r_col}x{r_row}"] = channel_vector_schedule(n, tile, target)
    seen, unique = set(), {}
    for name, schedule in named.items():
        if (key := str(schedule.to_attr())) not in seen:
            seen.add(key)
            unique[name] = schedule
    return unique


def sweep(model_name: str, dataset: str, cpu: str, out: Path, kernels: Path) -> None:
    target = resolve_target(cpu)
    level, groups = tunable_nests(nasir.zoo.load(model_name, dataset), target.cpu)
    rows = json.loads(out.read_text())["nests"] if out.exists() else []
    times = KernelTimes(kernels, target.cpu, 1)
    for i, ops in enumerate(groups.values()):
        if i < len(rows):
            continue
        n = tunable(ops[0], target)
        named = tiles(n, target)
        timed = {name: times.kernel_ms(with_schedule(level, ops[0], s)) for name, s in named.items()}
        tuning = [str(s.to_attr()) for s in candidate_schedules(n, target, 4, tiles=True)]
        keys = {str(s.to_attr()): name for name, s in named.items()}
        rows.append({"layers": [op.layer_name for op in ops], "domain": str(ops[0].domain),
                     "macs": math.prod(e for _, e in n.dims), "ms": timed,
                     "tuning": [keys[k] for k in tuning if k in keys]})
        best = min(timed, key=timed.get)
        print(f"[{i}] x{len(ops)} {ops[0].domain}: default {timed['default']:.3f} ms, best {best} "
              f"{timed[best]:.3f} ({timed['default'] / timed[best]:.2f}x)", flush=True)
        out.write_text(json.dumps({"model": model_name, "dataset": dataset, "cpu": target.cpu, "nests": rows},
                                  indent=1))


def report(paths: list[Path]) -> None:
    print(f"{'model':<26}{'cpu':<9}{'nests':>6}{'cost model ms':>15}{'nasir tune ms':>15}{'sweep best ms':>15}")
    for path in paths:
        data = json.loads(path.read_text())
        total = {"default": 0.0, "tuning": 0.0, "best": 0.0}
        for row in data["nests"]:
            layers, ms = len(row["layers"]), row["ms"]
            total["default"] += ms["default"] * layers
            total["tuning"] += min(ms[k] for k in row["tuning"]) * layers
            total["best"] += min(ms.values()) * layers
        print(f"{data['model'] + ' ' + data['dataset']:<26}{data['cpu']:<9}{len(data['nests']):>6}"
              f"{total['default']:>15.2f}{total['tuning']:>15.2f}{total['best']:>15.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="a zoo model name")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--cpu", default=None, help="an LLVM CPU name whose code runs here (default: the host)")
    parser.add_argument("--out", type=Path, help="the sweep's JSON (resumed if it exists)")
    parser.add_argument("--kernels", type=Path, default=Path(tempfile.gettempdir()) / "nasir-tile-sweep.db",
                        help="the kernel times' cache")
    parser.add_argument("--report", type=Path, nargs="+", help="sum these sweeps instead")
    args = parser.parse_args(argv)
    if args.report:
        report(args.report)
    elif args.model and args.out:
        sweep(args.model, args.dataset, args.cpu, args.out, args.kernels)
    else:
        parser.error("give a model and --out, or --report FILES")


if __name__ == "__main__":
    main()
