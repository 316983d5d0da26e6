"""Tuning on the host (nasir/tuning/host.py, lowering/schedule/tuned.py): the candidate schedules compute
the conv, the database's schedule is the one compiles use, and `nasir tune` times each distinct conv
once and keeps the fastest."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import foreign, lanes_of
from test_llvm_backend import build, rand

import nasir
from nasir.dialects import nest, nn
from nasir.errors import NasirError
from nasir.lowering.schedule.default_schedule import ALL_PLANS, tunable
from nasir.lowering.schedule.schedules import candidate_schedules, schedule_for
from nasir.lowering.schedule.tuned import TuningDatabase, nest_class
from nasir.lowering.target import host_target, resolve_target
from nasir.runtime.llvm_executable import compile_llvm
from nasir.tuning.host import tunable_nests, tune, with_schedule

pytestmark = pytest.mark.usefixtures("cpu")  # both vector widths (conftest.py)

W1, B1, W2, B2 = rand(32, 16, 3, 3), rand(32), rand(64, 32, 1, 1), rand(64)


def two_convs():
    """conv 16 -> 32 3x3 + ReLU on 14 x 14, then a strided 1x1 conv 32 -> 64."""
    return build([(1, 16, 14, 14)], lambda a, W: [
        c1 := nn.Conv2DOp.new(a[0], W("w1", W1), W("b1", B1), (1, 1), (1,) * 4, (1, 1), 1).named("conv1"),
        r := nn.ReluOp.new(c1.results[0]),
        nn.Conv2DOp.new(r.results[0], W("w2", W2), W("b2", B2), (2, 2), (0,) * 4, (1, 1), 1).named("conv2")])


def reference(x: np.ndarray) -> np.ndarray:
    """The oracle: the same network in PyTorch."""
    t = lambda a: torch.tensor(a)  # noqa: E731
    y = F.relu(F.conv2d(t(x), t(W1), t(B1), 1, 1))
    return F.conv2d(y, t(W2), t(B2), 2).numpy()


def test_every_candidate_schedule_computes_the_conv_and_the_first_is_the_cost_models():
    model = two_convs()
    target = resolve_target(None)
    level, groups = tunable_nests(model, None)
    assert len(groups) == 2, "both convs have a choice of schedules"
    x = rand(1, 16, 14, 14)
    t = lambda a: torch.tensor(a)  # noqa: E731
    want = F.relu(F.conv2d(t(x), t(W1), t(B1), 1, 1)).numpy()  # conv1 alone, its ReLU fused
    conv1 = next(ops[0] for ops in groups.values() if ops[0].layer_name == "conv1")
    shape = tunable(conv1, target)
    schedules = candidate_schedules(shape, target, 4)
    assert schedules[0] == schedule_for(shape, target)
    assert len(schedules) == 4 and len({str(s.to_attr()) for s in schedules}) == 4
    for schedule in schedules:
        exe = compile_llvm(with_schedule(level, conv1, schedule).module)
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)


def test_the_tuning_space_holds_the_wider_register_tiles_and_each_computes_the_conv():
    """Beyond the cost model's ranking and its spatial tiles: the channel plan's other register
    tiles, its other loop order, and spatial tiles beyond the cost model's accumulator budget,
    within all registers but 4 (12 of AVX2's 16, 28 of AVX-512's 32), every one computing the conv
    (PyTorch)."""
    model = two_convs()
    target = resolve_target(None)
    level, groups = tunable_nests(model, None)
    conv1 = next(ops[0] for ops in groups.values() if ops[0].layer_name == "conv1")
    shape = tunable(conv1, target)
    schedules = candidate_schedules(shape, target, 4, tiles=True)
    keys = [str(s.to_attr()) for s in schedules]
    assert len(set(keys)) == len(keys) and schedules[0] == schedule_for(shape, target)
    accumulators = [math.prod(f for loop, f in s.unroll.items() if loop not in ("ci", "kh", "kw")) for s in schedules]
    assert max(accumulators) == target.registers - 4, "a tile of all registers but 4"
    assert "co.i" in {s.vector for s in schedules[4:]}, "the channel plan's other tiles"
    first = lambda order, prefix: next(i for i, loop in enumerate(order) if loop.startswith(prefix))  # noqa: E731
    assert {first(s.order, "oh") < first(s.order, "co.o") for s in schedules if s.vector == "co.i"} == {True, False}, \
        "the channel plan with its channel blocks outside the rows and inside them"
    x = rand(1, 16, 14, 14)
    t = lambda a: torch.tensor(a)  # noqa: E731
    want = F.relu(F.conv2d(t(x), t(W1), t(B1), 1, 1)).numpy()
    for schedule in schedules[4:]:
        exe = compile_llvm(with_schedule(level, conv1, schedule).module)
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4, err_msg=str(schedule.to_attr()))


WG = rand(16, 4, 3, 3)


def test_a_grouped_conv_with_fewer_channels_a_group_than_lanes_is_tuned_over_its_register_tiles():
    """4 channels a group (16 -> 16, 4 groups): no channel plan at 8 or 16 lanes, once untunable;
    now the spatial schedule with each legal register tile, every one computing the conv (PyTorch)."""
    model = build([(1, 16, 14, 14)], lambda a, W: [
        nn.Conv2DOp.new(a[0], W("wg", WG), None, (1, 1), (1,) * 4, (1, 1), 4).named("grouped")])
    target = resolve_target(None)
    level, groups = tunable_nests(model, None)
    (ops,) = groups.values()
    shape = tunable(ops[0], target)
    assert len(candidate_schedules(shape, target, 4)) == 1, "the cost model's ranking has one schedule"
    schedules = candidate_schedules(shape, target, 4, tiles=True)
    assert schedules[0] == schedule_for(shape, target)
    assert len(schedules) >= 3 and len({str(s.to_attr()) for s in schedules}) == len(schedules)
    assert {s.vector for s in schedules} == {schedules[0].vector}, "lanes along ow in each: only the tile differs"
    x = rand(1, 16, 14, 14)
    want = F.conv2d(torch.tensor(x), torch.tensor(WG), None, 1, 1, 1, 4).numpy()
    for schedule in schedules:
        exe = compile_llvm(with_schedule(level, ops[0], schedule).module)
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)


def scheduled(model, tuning: str) -> dict[str, str]:
    """Each nest's schedule after default-schedule with `tuning`."""
    level = model.transform("fold-batch-norm,convert-nn-to-nest,lower-batch-norm,fuse-epilogue,"
                            f'default-schedule{{tuning="{tuning}"}}')
    return {op.layer_name: str(op.schedule) for op in level.module.walk() if isinstance(op, nest.ComputeOp)}


def test_compiles_take_the_databases_schedule_for_their_cpu_only(tmp_path):
    model = two_convs()
    target = resolve_target(None)
    level, groups = tunable_nests(model, None)
    conv2 = next(ops[0] for ops in groups.values() if ops[0].layer_name == "conv2")
    second = candidate_schedules(tunable(conv2, target), target, 2)[1]
    path = tmp_path / "tuning.db"
    db = TuningDatabase(path)
    db.store(target.cpu, conv2, second, 1.0, 2.0)
    db.store("some-other-cpu", next(iter(groups.values()))[0], second, 1.0, 2.0)
    plain, tuned = scheduled(model, "none"), scheduled(model, str(path))
    assert tuned["conv2"] == str(second.to_attr()) != plain["conv2"]
    assert tuned["conv1"] == plain["conv1"], "an entry for another CPU is not used"
    x = rand(1, 16, 14, 14)
    exe = nasir.compile(model, tuning=str(path))
    np.testing.assert_allclose(exe(x), reference(x), rtol=1e-4, atol=1e-4)


W3, B3 = rand(48, 32, 3, 3), rand(48)


def two_shapes_of_one_class():
    """conv 16 -> 32 3x3 + ReLU on 14 x 14, then conv 32 -> 48 3x3 + ReLU on 14 x 14: one class
    (same maps, epilogue, dims), two shapes."""
    return build([(1, 16, 14, 14)], lambda a, W: [
        c1 := nn.Conv2DOp.new(a[0], W("w1", W1), W("b1", B1), (1, 1), (1,) * 4, (1, 1), 1).named("conv1"),
        r := nn.ReluOp.new(c1.results[0]),
        c2 := nn.Conv2DOp.new(r.results[0], W("w3", W3), W("b3", B3), (1, 1), (1,) * 4, (1, 1), 1).named("conv2"),
        nn.ReluOp.new(c2.results[0])])


def test_a_tuned_register_tile_transfers_to_other_shapes_of_its_class(tmp_path):
    model = two_shapes_of_one_class()
    target = resolve_target(None)
    level, groups = tunable_nests(model, None)
    conv = {ops[0].layer_name: ops[0] for ops in groups.values()}
    assert nest_class(conv["conv1"]) == nest_class(conv["conv2"]) and len(groups) == 2
    tile = lambda s: (s.vector, s.unroll)  # noqa: E731
    plain = scheduled(model, "none")
    own = {name: candidate_schedules(tunable(op, target), target, ALL_PLANS, tiles=True) for name, op in conv.items()}
    # a tile of conv1 that conv2 also has, not the cost model's for conv2
    donor = next(s for s in own["conv1"][1:] if tile(s) in [tile(t) for t in own["conv2"]]
                 and str(s.to_attr()) != plain["conv1"]
                 and tile(s) != tile(next(t for t in own["conv2"] if str(t.to_attr()) == plain["conv2"])))
    path = tmp_path / "tuning.db"
    TuningDatabase(path).store(target.cpu, conv["conv1"], donor, 1.0, 1.0)
    assert scheduled(model, str(path))["conv2"] == plain["conv2"], "a tile no faster than the cost model's stays home"
    TuningDatabase(path).store(target.cpu, conv["conv1"], donor, 1.0, 2.0)
    tuned = scheduled(model, str(path))
    assert tuned["conv1"] == str(donor.to_attr())
    got = next(t for t in own["conv2"] if str(t.to_attr()) == tuned["conv2"])
    assert tile(got) == tile(donor) and tuned["conv2"] != plain["conv2"]
    x = rand(1, 16, 14, 14)
    t = lambda a: torch.tensor(a)  # noqa: E731
    expected = F.relu(F.conv2d(F.relu(F.conv2d(t(x), t(W1), t(B1), 1, 1)), t(W3), t(B3), 1, 1)).numpy()
    np.testing.assert_allclose(nasir.compile(model, tuning=str(path))(x), expected, rtol=1e-4, atol=1e-4)


def test_tune_keeps_the_fastest_timed_schedule_and_a_second_run_times_nothing(tmp_path, cpu):
    model = two_convs()
    db, kernels = tmp_path / "tuning.db", tmp_path / "kernels.db"
    if foreign(cpu):
        with pytest.raises(NasirError, match=f"^cannot tune for {cpu} on this CPU .* does not run here, so it "
                                             f"cannot be timed; run nasir tune on a {cpu} machine$"):
            tune(model, database=db, kernel_cache=kernels)
        assert not db.exists(), "nothing written"
        return
    first = tune(model, database=db, kernel_cache=kernels)
    assert len(first.nests) == 2 and all(len(n.timed) >= 4 for n in first.nests)  # + the other spatial tiles
    for n in first.nests:
        assert n.default_ms == n.timed[0]
        assert n.ms == min(n.timed) or n.ms == n.timed[0], "the fastest, or the cost model's when within the noise"
    rows = sqlite3.connect(db).execute("select cpu, ms from schedules").fetchall()
    assert sorted(ms for _, ms in rows) == sorted(n.ms for n in first.nests)
    assert {cpu for cpu, _ in rows} == {resolve_target(None).cpu}
    timed_kernels = sqlite3.connect(kernels).execute("select count(*) from kernels").fetchone()[0]
    second = tune(model, database=db, kernel_cache=kernels)
    assert [n.timed for n in second.nests] == [[], []] and [n.ms for n in second.nests] == [n.ms for n in first.nests]
    assert sqlite3.connect(kernels).execute("select count(*) from kernels").fetchone()[0] == timed_kernels
    x = rand(1, 16, 14, 14)
    exe = nasir.compile(model, tune=True, tuning=str(db))
    np.testing.assert_allclose(exe(x), reference(x), rtol=1e-4, atol=1e-4)


def test_tuning_times_kernel_calls_not_whole_calls(tmp_path, cpu, monkeypatch):
    """A whole call copies the nest's inputs in and its result out: for a small nest a third of
    its time, the same for every candidate. Tuning times the kernel calls alone (per-call timers)."""
    from nasir.measure.kernels import KernelTimes

    monkeypatch.setattr(KernelTimes, "measure", lambda self, model: pytest.fail("tuning timed a whole call"))
    if foreign(cpu):  # nothing timed: the CPU's code does not run here
        with pytest.raises(NasirError, match="cannot be timed"):
            tune(two_convs(), database=tmp_path / "tuning.db", kernel_cache=tmp_path / "kernels.db")
        return
    report = tune(two_convs(), database=tmp_path / "tuning.db", kernel_cache=tmp_path / "kernels.db")
    assert len(report.nests) == 2 and all(n.ms > 0 for n in report.nests)


def test_a_nests_candidates_are_profiled_in_turn_and_cached_together(tmp_path, monkeypatch):
    """`calls_ms_together` compiles every candidate first, then profiles them round by round (a
    load that comes and goes slows each alike); where the cache lacks one, all are timed again."""
    import nasir.measure.kernels as kernels
    from nasir.runtime.profile import Profile, ProfileRow

    runs = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def profile(self, *inputs, repeat, warmup):
            runs.append(self.name)
            ms = {"a": 2.0, "b": 1.0}[self.name] + 0.01 * len(runs)
            return Profile([ProfileRow("conv", "k", 1, ms, 1.0)], ms, 0.0, 1)

    compiled = []

    def compile_llvm(module, **options):
        compiled.append(module)
        return Fake("ab"[len(compiled) - 1])

    monkeypatch.setattr(kernels, "compile_llvm", compile_llvm)
    model = two_convs()
    level, groups = tunable_nests(model, None)
    target = resolve_target(None)
    op = next(iter(groups.values()))[0]
    alones = [with_schedule(level, op, s) for s in candidate_schedules(tunable(op, target), target, 2, tiles=True)[:2]]
    times = kernels.KernelTimes(tmp_path / "kernels.db", target.cpu, 1)
    first = times.calls_ms_together(alones, rounds=3)
    assert runs == ["a", "b"] * 3 and len(compiled) == 2
    assert first == [pytest.approx(2.03), pytest.approx(1.04)], "each candidate's median round"
    runs.clear(), compiled.clear()
    assert times.calls_ms_together(alones, rounds=3) == first and runs == [] and compiled == [], "cached: nothing timed"
    times.db.execute("delete from kernels where rowid = (select min(rowid) from kernels)")
    times.calls_ms_together(alones, rounds=3)
    assert runs == ["a", "b"] * 3, "one missing: both timed again, together"


def test_tune_times_at_most_trials_schedules_a_conv_the_cost_models_first(tmp_path, cpu):
    if foreign(cpu):
        return  # nothing is timed (test_tune_keeps_the_fastest_timed_schedule_and_a_second_run_times_nothing)
    model, kernels = two_convs(), tmp_path / "kernels.db"
    level, groups = tunable_nests(model, cpu)
    target = resolve_target(cpu)
    assert all(len(candidate_schedules(tunable(ops[0], target), target, 4, tiles=True)) > 2 for ops in groups.values())
    report = tune(model, database=tmp_path / "tuning.db", kernel_cache=kernels, trials=2)
    assert [len(n.timed) for n in report.nests] == [2, 2] and all(n.default_ms == n.timed[0] for n in report.nests)
    assert sqlite3.connect(kernels).execute("select count(*) from kernels").fetchone()[0] == 4


@pytest.mark.parametrize("whole", [1.9, 2.1], ids=["faster-whole", "slower-whole"])
def test_a_schedule_that_won_alone_and_runs_slower_inside_the_network_leaves_the_cost_models(tmp_path, cpu,
                                                                                            monkeypatch, whole):
    """Tuning times a conv alone; a winner there is kept only where its layers run faster inside the
    whole model, and the whole model with the kept ones too. Times stubbed: the second candidate of
    each conv wins alone; inside the network conv1's runs slower, conv2's faster; the whole model
    with conv2's takes `whole` ms against the cost model's 2.0."""
    import nasir.tuning.host as host
    from nasir.measure.kernels import TOTAL, KernelTimes

    if foreign(cpu):
        return  # nothing is timed (test_tune_keeps_the_fastest_timed_schedule_and_a_second_run_times_nothing)
    monkeypatch.setattr(KernelTimes, "calls_ms_together", lambda self, alones: [1.0, 0.5])
    inside = iter([({"conv1": 1.3, "conv2": 0.6, TOTAL: 1.9}, {"conv1": 1.0, "conv2": 1.0, TOTAL: 2.0}),
                   ({"conv1": 1.0, "conv2": 0.6, TOTAL: whole}, {"conv1": 1.0, "conv2": 1.0, TOTAL: 2.0})])
    monkeypatch.setattr(host, "in_network", lambda *args, **kwargs: next(inside))
    model, db = two_convs(), tmp_path / "tuning.db"
    report = tune(model, database=db, kernel_cache=tmp_path / "kernels.db", trials=2)
    conv1, conv2 = report.nests
    assert (conv1.layers, conv2.layers) == (["conv1"], ["conv2"])
    assert (conv1.network, conv1.rejected, conv1.chosen, conv1.ms) == ((1.3, 1.0), 1, 0, 1.0)
    kept = whole < 2.0
    assert (conv2.network, conv2.rejected, conv2.chosen, conv2.ms) == (
        ((0.6, 1.0), None, 1, 0.5) if kept else ((0.6, 1.0), 1, 0, 1.0))
    assert report.network == (whole, 2.0) and report.network_gain == pytest.approx(2.0 / whole)
    level, groups = tunable_nests(model, cpu)
    target = resolve_target(cpu)
    first, second = ([str(s.to_attr()) for s in candidate_schedules(tunable(ops[0], target), target, 4, tiles=True)[:2]]
                     for ops in groups.values())
    stored = TuningDatabase(db)
    assert [str(stored.lookup(target.cpu, ops[0]).to_attr()) for ops in groups.values()] == [
        first[0], second[1] if kept else second[0]]
    rows = sqlite3.connect(db).execute("select ms, default_ms from schedules").fetchall()
    assert sorted(rows) == ([(0.5, 1.0), (1.0, 1.0)] if kept else [(1.0, 1.0), (1.0, 1.0)])


def test_where_every_winner_runs_faster_inside_the_network_it_is_profiled_once(tmp_path, cpu, monkeypatch):
    """The first check's build is then the network with the kept schedules: its whole time is the
    verdict, no second build."""
    import nasir.tuning.host as host
    from nasir.measure.kernels import TOTAL, KernelTimes

    if foreign(cpu):
        return  # nothing is timed
    monkeypatch.setattr(KernelTimes, "calls_ms_together", lambda self, alones: [1.0, 0.5])
    checks = iter([({"conv1": 0.7, "conv2": 0.6, TOTAL: 1.5}, {"conv1": 1.0, "conv2": 1.0, TOTAL: 2.0})])
    monkeypatch.setattr(host, "in_network", lambda *args, **kwargs: next(checks))
    report = tune(two_convs(), database=tmp_path / "tuning.db", kernel_cache=tmp_path / "kernels.db", trials=2)
    assert [(n.chosen, n.rejected) for n in report.nests] == [(1, None), (1, None)]
    assert report.network == (1.5, 2.0)


def test_a_tuning_stopped_during_the_check_inside_the_network_stores_no_unchecked_winner(tmp_path, cpu,
                                                                                         monkeypatch):
    """Ctrl-C while the network is checked: the winners alone are not in the database, so the same
    command times those nests again (the cost model's choices, stored as timed, are kept)."""
    import nasir.tuning.host as host
    from nasir.measure.kernels import KernelTimes

    if foreign(cpu):
        return  # nothing is timed
    timings = []

    def alone(self, alones):  # conv1's second candidate wins alone the first time, nothing after
        timings.append(len(alones))
        return [1.0, 0.5] if len(timings) == 1 else [1.0, 1.0]

    monkeypatch.setattr(KernelTimes, "calls_ms_together", alone)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(host, "in_network", interrupted)
    db = tmp_path / "tuning.db"
    with pytest.raises(KeyboardInterrupt):
        tune(two_convs(), database=db, kernel_cache=tmp_path / "kernels.db", trials=2)
    assert sqlite3.connect(db).execute("select ms, default_ms from schedules").fetchall() == [(1.0, 1.0)]
    again = tune(two_convs(), database=db, kernel_cache=tmp_path / "kernels.db", trials=2)
    assert timings == [2, 2, 2], "conv1 timed again, conv2 from the database"
    assert [n.timed for n in again.nests] == [[1.0, 1.0], []]


def test_in_network_profiles_every_tuned_layer_inside_the_model(tmp_path, cpu):
    """The check inside the network times the layers tuning names (its keys are their names)."""
    from nasir.measure.kernels import TIMING_LOCK
    from nasir.tuning.host import in_network

    if foreign(cpu):
        return  # the CPU's code does not run here
    model, db = two_convs(), tmp_path / "tuning.db"
    report = tune(model, database=db, kernel_cache=tmp_path / "kernels.db", trials=2)
    cost_model = compile_llvm(model.module, profile=True, cpu=cpu, tuning="none")
    tuned, default = in_network(model, cost_model, db, TIMING_LOCK, rounds=2)
    for n in report.nests:
        assert all(tuned[layer] > 0 and default[layer] > 0 for layer in n.layers), (n.layers, tuned)


def test_tune_is_an_llvm_option():
    with pytest.raises(NasirError, match="target 'torch' takes no option 'tune'"):
        nasir.compile(two_convs(), target="torch", tune=True)


def test_the_cli_tunes_a_model_and_names_its_database(tmp_path, cpu):
    """NASIR_CPU (the `cpu` fixture) names the CPU; one that this machine cannot run is a one-line error."""
    path = two_convs().save(tmp_path / "m.mlir")
    db = tmp_path / "t.db"
    done = subprocess.run([sys.executable, "-m", "nasir.cli.main", "tune", str(path), "--db", str(db), "--trials", "3"],
                          capture_output=True, text=True, timeout=600)
    if foreign(cpu):
        assert done.returncode == 1 and done.stderr.strip().splitlines() == [
            f"nasir: error: cannot tune for {cpu} on this CPU ({host_target().cpu}, {host_target().lanes} lanes): "
            f"its {lanes_of(cpu)}-lane code does not run here, so it cannot be timed; run nasir tune on a {cpu} machine"]
        return
    assert done.returncode == 0, done.stderr
    assert "2 distinct convs (2 timed, 0 from the database)" in " ".join(done.stdout.split())
    timed = [line.split("│")[2].strip() for line in done.stdout.splitlines() if line.startswith("│ conv")]
    assert timed == ["3", "3"], "--trials 3: three schedules timed a conv"
    assert str(db) in done.stdout.replace("\n", "")


def test_the_cli_says_what_the_checks_inside_the_network_found():
    from nasir.cli.main import network_verdict
    from nasir.tuning.host import TunedNest, TuningReport

    def report(network, *nests):
        return TuningReport("znver3", "t.db", list(nests), 1.0, network)

    plain = TunedNest(["a"], "s0", 1.0, 1.0, [1.0, 1.2])
    assert network_verdict(report(None, plain)) == ""
    slower = TunedNest(["b"], "s1", 1.0, 1.0, [1.0, 0.5], network=(1.3, 1.0), rejected=1)
    faster = TunedNest(["c"], "s2", 0.5, 1.0, [1.0, 0.5], network=(0.6, 1.0))
    assert network_verdict(report((1.9, 2.0), plain, slower, faster)) == (
        "; of the 2 winners alone that were not the cost model's, 1 ran their layers slower inside the network; "
        "with the 1 other, the whole network runs 1.053x as fast")
    undone = TunedNest(["c"], "s2", 1.0, 1.0, [1.0, 0.5], network=(0.6, 1.0), rejected=1)
    assert network_verdict(report((2.1, 2.0), slower, undone)).endswith(
        "; the 1 other ran the whole network 0.952x as fast: all left to the cost model")
