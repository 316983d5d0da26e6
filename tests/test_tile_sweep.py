"""experiments/tile_sweep.py (issue 52): the tiles it times for a conv, and its report's sums."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from test_tuning import two_convs

from nasir.lowering.schedule.default_schedule import tunable
from nasir.lowering.schedule.schedules import schedule_for
from nasir.lowering.target import resolve_target
from nasir.tuning.host import tunable_nests

_spec = importlib.util.spec_from_file_location(
    "tile_sweep", Path(__file__).resolve().parents[1] / "experiments" / "tile_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def test_the_sweep_starts_with_the_cost_models_schedule_and_names_each_tile_once():
    """conv 16 -> 32 3x3 on 14 x 14 for an AVX2 CPU (no code is run): spatial tiles of 4 to 14
    accumulators (16 registers but 2) and channel tiles of 2 vectors of 8 channels by up to 14 // 2
    points, each schedule once."""
    target = resolve_target("znver3")
    _, groups = tunable_nests(two_convs(), "znver3")
    conv1 = next(ops[0] for ops in groups.values() if ops[0].layer_name == "conv1")
    shape = tunable(conv1, target)
    named = sweep.tiles(shape, target)
    assert next(iter(named)) == "default" and named["default"] == schedule_for(shape, target)
    keys = [str(s.to_attr()) for s in named.values()]
    assert len(set(keys)) == len(keys)
    channel = {name for name in named if name.startswith("ch")}
    assert {"ch1x14", "ch2x7"} <= channel and not {"ch3x1", "ch2x8"} & channel, "2 vectors of 8 of 32 channels"
    assert {"sp2x7", "sp8x1"} <= set(named) and "sp4x7" not in named, "spatial tiles of 4 to 14 accumulators"


def test_the_report_sums_each_nest_over_its_layers(tmp_path, capsys):
    nests = [{"layers": ["a", "b"], "domain": "", "macs": 1, "ms": {"default": 2.0, "sp4x2": 1.5, "ch2x6": 1.0},
              "tuning": ["default", "sp4x2"]},
             {"layers": ["c"], "domain": "", "macs": 1, "ms": {"default": 3.0, "ch1x8": 2.5}, "tuning": ["default"]}]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"model": "m", "dataset": "d", "cpu": "znver3", "nests": nests}))
    sweep.report([path])
    row = capsys.readouterr().out.splitlines()[1].split()
    # cost model 2 x 2 + 3; nasir tune's best 2 x 1.5 + 3; the sweep's best 2 x 1 + 2.5
    assert row[-4:] == ["2", "7.00", "6.00", "4.50"]
