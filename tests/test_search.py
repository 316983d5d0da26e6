"""The architecture search (issue 26) on a small residual CNN: space, reproducibility, capacity of
what it accepts, durability (SIGKILL and resume), failing evaluations, Ray, and the CLI's refusals.

One search runs once per module (`first`) and the tests read it; the others start their own.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import onnxruntime as ort
import optuna
import pytest
from search_fixtures import dense_only_onnx, tiny_resnet_onnx

import nasir
from nasir.cli.main import parser
from nasir.data import minibatch
from nasir.dialects import nest
from nasir.dialects.shapes import shape_of
from nasir.errors import NasirError, PassError
from nasir.fisher import fisher_potential
from nasir.lowering.passes import pipeline_steps, with_init
from nasir.measure.kernels import KernelTimes, compiler_digest, nest_key, standalone
from nasir.measure.timing import Spread, busy, interleaved, ratios
from nasir.search import strategies
from nasir.search.driver import CheckBar, Search, SearchOptions, default_init, measure_front, tell
from nasir.search.evaluate import ROUNDS, Outcome
from nasir.search.progress import SearchProgress
from nasir.search.proxies import synflow
from nasir.search.results import Candidate, pareto_front, passes, ranked
from nasir.search.sources import from_nn, load_source
from nasir.search.space import SearchSpace, conv_nests, layer_pattern
from nasir.search.workers import MEASURE
from nasir.summary import summarize

TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
BUDGET = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_resnet_onnx(tmp_path_factory.mktemp("model") / "tiny.onnx")


@pytest.fixture(scope="module")
def first(tiny, tmp_path_factory):
    return nasir.search(tiny, budget=BUDGET, out=tmp_path_factory.mktemp("first"), seed=0, progress=False,
                        capacity="fisher")


MILD = ("identity", "group2", "shift-oh", "shift-ow", "unshare-oh2")
"""Choices that take little away: most of `first`'s candidates change most convs a lot, and Fisher
Potential rejects them all; a search over these accepts some (one of eight at seed 0)."""


@pytest.fixture(scope="module")
def mild(tiny, tmp_path_factory):
    """A search over `MILD` choices: it keeps a best network (`first` keeps none). Their estimates
    are about the original's, so Fisher Potential is measured for all of them (`check_top=None`)."""
    return nasir.search(tiny, budget=BUDGET, out=tmp_path_factory.mktemp("mild"), seed=0, progress=False,
                        choices=MILD, check_top=None, capacity="fisher")


def lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


# --- the space ---------------------------------------------------------------------------------

def test_space_keeps_what_applies_and_says_why_not(tiny):
    model, _ = load_source(str(tiny), "cifar10", 2)
    space = {lc.layer: lc for lc in SearchSpace.of(model).layers}
    stem = space["conv1_Conv"]
    assert "group2" not in stem.choices and "not divisible" in stem.excluded["group2"]  # 3 input channels
    assert "group2" in space["layer1_conv1_Conv"].choices
    # the second conv of a block feeds the residual add: its output channels cannot change
    assert "bottleneck-co2" not in space["layer1_conv2_Conv"].choices
    assert "residual" in space["layer1_conv2_Conv"].excluded["bottleneck-co2"]
    assert "bottleneck-co2" in space["layer1_conv1_Conv"].choices


def test_a_candidate_is_the_pipeline_of_its_choices(tiny):
    model, _ = load_source(str(tiny), "cifar10", 2)
    space = SearchSpace.of(model, ("identity", "group2", "bottleneck-co2"))
    pipeline = space.pipeline({"layer1_conv1_Conv": "group2", "layer2_conv1_Conv": "bottleneck-co2"})
    assert pipeline == ('bottleneck{dim=co factor=2 layers="layer2_conv1_Conv"},'
                        'group{factor=2 layers="layer1_conv1_Conv"}')
    nests = {op.layer_name: op for op in model.transform(pipeline).module.walk() if isinstance(op, nest.ComputeOp)}
    assert shape_of(nests["layer1_conv1_Conv"].inputs[1]) == (16, 8, 3, 3)  # 2 groups of 8 input channels
    assert shape_of(nests["layer2_conv1_Conv"].result) == (1, 16, 8, 8)  # 32 -> 16 output channels
    assert shape_of(nests["layer2_conv2_Conv"].inputs[1]) == (32, 16, 3, 3)  # the next conv reads 16


def test_nests_timed_at_batch_1_from_the_fisher_batch_candidate(tiny):
    """The evaluator transforms only the candidate at the Fisher batch: its nests, taken at batch 1,
    must be the very kernels of the batch-1 network transformed by the same pipeline."""
    model, fisher_model = load_source(str(tiny), "cifar10", 4)
    space = SearchSpace.of(model)
    rng = np.random.default_rng(0)
    for _ in range(4):
        pipeline = space.pipeline({lc.layer: rng.choice(lc.choices) for lc in space.layers})
        one, many = model.transform(pipeline), fisher_model.transform(pipeline)
        assert [standalone(many, op, 1).text() for op in conv_nests(many)] == \
            [standalone(one, op).text() for op in conv_nests(one)]
        assert "tensor<4x" in standalone(many, conv_nests(many)[0]).text()  # the batch changed


def test_layer_pattern_matches_only_its_layer():
    import re

    assert re.fullmatch(layer_pattern("layer1.0_conv1"), "layer1.0_conv1")
    assert not re.fullmatch(layer_pattern("layer1.0_conv1"), "layer1x0_conv1")
    with pytest.raises(nasir.NasirError):
        layer_pattern('bad"name')


def test_passes_of_a_pipeline():
    assert passes('group{factor=2 layers="a|b"},fold{dim=kh layers="(?:a)[.]part0"},group{factor=4 layers="c"}') \
        == "group x2, fold"


def test_pareto_front_by_hand():
    def cand(n, ms, fisher, status="accepted"):
        return Candidate(n, f"p{n}", Outcome(status, score=fisher, estimate_ms=ms))

    pool = [cand(0, 10, 1.0), cand(1, 8, 1.2), cand(2, 9, 1.1), cand(3, 5, 1.05), cand(4, 1, 9, "rejected")]
    assert [c.number for c in pareto_front(pool)] == [3, 1]


class FakePool:
    """Answers measure jobs from a script: `times[number]` is the list of candidate ms per job
    (against an original of 10 ms); a number missing from it fails."""

    def __init__(self, times: dict[int, list[float]]):
        self.times, self.jobs, self.sent = times, [], []
        self.idle = 2

    def submit(self, number, pipeline, kind):
        assert kind == MEASURE
        self.jobs.append(number)
        self.sent.append(number)

    def results(self, wait):
        done = []
        for n in self.jobs:
            if n not in self.times:
                done.append((n, Outcome("failed", reason="boom")))
            else:
                ms = self.times[n].pop(0)
                done.append((n, Outcome("measured", measured_ms=ms, samples={"candidate": [ms, ms], "original": [10.0, 10.0]})))
        self.jobs = []
        return done


class FakeStudy:
    def __init__(self, attrs: dict):
        self.user_attrs = attrs

    def set_user_attr(self, key, value):
        self.user_attrs[key] = value


class FakeProgress:
    def __init__(self):
        self.notes, self.passes = [], []

    def measuring(self, n, pass_number):
        self.passes.append((pass_number, n))

    def measured(self):
        pass

    def note(self, text):
        self.notes.append(text)


def front_of(*numbers):
    return [Candidate(n, f"p{n}", Outcome("accepted", estimate_ms=n)) for n in numbers]


def test_front_measured_again_until_its_ranking_holds_and_a_failed_measurement_noted():
    """Member 1 was measured before an interruption; 2 fails; 3 is measured, then all again: the
    second pass ranks them as the first did, so it stops there, the rounds of both pooled."""
    study = FakeStudy({"measured": {"1": {"candidate": [5.0, 5.0], "original": [10.0, 10.0]}}})
    pool, progress, front = FakePool({1: [5.0], 3: [2.0, 2.5]}), FakeProgress(), front_of(1, 2, 3)
    measure_front(front, pool, study, progress)
    assert progress.passes == [(1, 2), (2, 3)] and pool.sent == [2, 3, 1, 2, 3]
    assert [c.measured_ms for c in front] == [5.0, None, 2.25]
    assert front[2].samples == {"candidate": [2.0, 2.0, 2.5, 2.5], "original": [10.0] * 4}
    assert front[2].speedup.median == 4.5 and front[0].speedup.median == 2.0
    assert [c.number for c in ranked(front)] == [3, 1] and front[0].ties == front[2].ties == []
    assert all("candidate 2" in note and "boom" in note for note in progress.notes) and len(progress.notes) == 2
    assert study.user_attrs["measured"]["3"] == front[2].samples and study.user_attrs["settled"] == [1, 2, 3]
    again = front_of(1, 2, 3)
    measure_front(again, FakePool({}), study, FakeProgress())  # resumed after it settled: nothing timed again
    assert [c.measured_ms for c in again] == [5.0, None, 2.25]


def test_a_front_whose_ranking_keeps_changing_is_measured_passes_times_and_reported_as_ties():
    pool, front = FakePool({1: [2.0, 4.0, 2.0], 2: [3.0, 2.0, 3.0], 4: [9.0, 9.0, 9.0]}), front_of(1, 2, 4)
    progress = FakeProgress()
    measure_front(front, pool, FakeStudy({}), progress, passes=3)
    assert progress.passes == [(1, 3), (2, 3), (3, 3)]
    assert [c.ties for c in front] == [[2], [1], []]
    assert len(front[0].samples["candidate"]) == 6


def test_interleaved_takes_turns_after_untimed_calls_on_a_fake_clock():
    """No timed assertion: each fn advances a fake clock by its own durations and logs its call;
    before each sample, untimed calls for WARM_MS (5 ms: three of a, one of b); a sample is the
    mean of the calls lasting `sample_ms` (4 ms: a's 1 + 3 ms, or its 3 + 1; b's one 6 ms call)."""
    now, log = [0.0], []

    def fn(name, *seconds):
        turns = itertools.cycle(seconds)

        def call():
            log.append(name)
            now[0] += next(turns)
        return call

    samples = interleaved({"a": fn("a", 0.001, 0.003), "b": fn("b", 0.006)}, rounds=3, warmup=1,
                          clock=lambda: now[0], sleep=lambda s: log.append("sleep"), sample_ms=4.0)
    assert log == ["a", "b"] + ["sleep", "a", "a", "a", "a", "a", "sleep", "b", "b"] * 3
    assert samples == {"a": [pytest.approx(2.0)] * 3, "b": [pytest.approx(6.0)] * 3}
    assert ratios(samples["b"], samples["a"]) == [pytest.approx(3.0)] * 3


def test_settle_waits_until_the_other_threads_stop_running():
    """On a fake clock and CPU counter: after its idle, `settle` polls until a window passes in
    which the other threads gained no CPU time (another runtime's spinning workers), and gives up
    after its longest wait; with no counter (not Linux) it only idles."""
    from nasir.measure.timing import settle

    def run(ticks, max_s=1.0):
        now, slept, counts = [0.0], [], iter(ticks)

        def sleep(s):
            slept.append(s)
            now[0] += s

        settle(0.03, cpu=lambda: next(counts), sleep=sleep, clock=lambda: now[0], poll_s=0.02, max_s=max_s)
        return slept

    assert run([5, 7, 9, 10, 10]) == [0.03, 0.02, 0.02, 0.02, 0.02]  # spinning for three windows, then idle
    assert run([3, 3]) == [0.03, 0.02]
    assert run(iter(range(100)), max_s=0.1) == [0.03] + [0.02] * 5     # never idle: 0.1 s more at most
    assert run([None]) == [0.03]


def test_other_threads_cpu_counts_a_spinning_thread():
    """A thread spinning while the caller sleeps adds CPU time to the other threads' count; the
    caller's own spinning does not."""
    import threading
    import time

    from nasir.measure.timing import other_threads_cpu

    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    before = other_threads_cpu()
    spinner = threading.Thread(target=spin, args=(0.6,))
    spinner.start()
    time.sleep(0.3)
    during = other_threads_cpu()
    spinner.join()
    assert before is not None and during > before
    quiet = other_threads_cpu()
    spin(0.3)  # the caller's own 30 ticks
    assert other_threads_cpu() - quiet <= 2


def test_spread_and_busy():
    s = Spread.of([4.0, 1.0, 3.0, 2.0, 100.0])
    assert (s.median, s.q1, s.q3, s.iqr) == (3.0, 2.0, 4.0, 2.0)
    assert s.overlaps(Spread.of([3.5, 3.9, 5.0])) and not s.overlaps(Spread.of([4.1, 4.2, 5.0]))
    assert busy((50.0, 52.0), (49.0, 52.0)) is None
    assert "40.0 after" in busy((50.0, 52.0), (40.0, 52.0))  # slower after
    assert busy((30.0, 52.0), (30.0, 52.0)) is not None      # steady, but far below its best run


# --- the strategies ----------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["evolution", "tpe"])
def test_strategies_told_the_space_draw_what_optuna_inferring_it_draws(strategy):
    """The samplers are given the search's joint space instead of inferring it from all trials at
    every ask (a cost that grew with the trials): their draws must equal those of Optuna's own
    sampler, with the same options and seeds, inferring it (past NSGA-II's first generation and
    TPE's startup trials, with pruned trials among them)."""
    choices = {f"layer{5 - k}": ["identity", "group2", "depthwise", "bottleneck2"][:2 + k % 3] for k in range(6)}
    cls, options = strategies.SAMPLERS[strategy]

    def drive(make) -> list[dict]:
        study = optuna.create_study(directions=list(strategies.DIRECTIONS))
        drawn = []
        for number in range(60):
            study.sampler = make(number)
            trial = study.ask()
            params = {name: trial.suggest_categorical(name, layer_choices) for name, layer_choices in choices.items()}
            drawn.append(params)
            if number % 4 == 3:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, [sum(map(len, params.values())), zlib.crc32(str(params).encode()) % 100 / 100])
        return drawn

    given = drive(lambda n: strategies.sampler(strategy, 0, n, strategies.joint_space(choices)))
    inferred = drive(lambda n: cls(seed=zlib.crc32(f"0:{n}".encode()), **options))
    assert given == inferred
    assert len({str(d) for d in given}) > 30


# --- one search --------------------------------------------------------------------------------

def test_search_writes_its_results(first):
    out = first.out
    rows = lines(out)
    assert len(rows) == BUDGET == len({r["pipeline"] for r in rows})
    assert {r["status"] for r in rows} <= {"accepted", "rejected", "skipped", "failed"}
    assert all(r["stage"] in ("legality", "properties", "capacity") for r in rows if r["status"] == "rejected")
    assert all(r["stage"] == "estimate" and r["score"] is None for r in rows if r["status"] == "skipped")
    assert (out / "pareto.png").stat().st_size > 0
    if first.best is not None:
        assert (out / "best.pipeline").read_text().strip() == f"convert-nn-to-nest,{first.best.pipeline}"
        assert (out / "best.onnx").stat().st_size > 0
        assert first.best in first.pareto and all(c.measured_ms > 0 for c in first.pareto)
        assert first.best.speedup.median == max(c.speedup.median for c in first.pareto)
        best = next(r for r in rows if r["number"] == first.best.number)
        assert best["rounds"] >= ROUNDS and best["measured_iqr_ms"] >= 0
        assert best["speedup"] == pytest.approx(first.best.speedup.median)


def test_best_pipeline_applies_as_written_to_the_original(mild, tiny):
    """best.pipeline is a whole pipeline: Model.transform takes the file as read (its newline too,
    as the README does it) and nasir-opt -p as the shell passes it, and both give the search's
    best network (the candidate's nest-level pipeline on the nest-level original)."""
    assert mild.best is not None, "the search kept nothing; the round trip below would be vacuous"
    text = (mild.out / "best.pipeline").read_text()
    assert text.endswith("\n")
    expected = load_source(str(tiny), "cifar10", 2)[0].transform(mild.best.pipeline).text()
    assert nasir.load(tiny).transform(text).text() == expected
    opt = subprocess.run([str(BIN / "nasir-opt"), str(tiny), "-p", text.strip()], capture_output=True, text=True)
    assert opt.returncode == 0, opt.stderr
    assert opt.stdout.strip() == expected.strip()


def test_a_layer_pass_on_an_nn_level_model_says_to_convert_first(tiny):
    with pytest.raises(nasir.NasirError, match="run convert-nn-to-nest first"):
        nasir.load(tiny).transform('group{factor=2 layers="layer1_conv1_Conv"}')


def test_train_accepts_a_pipeline_with_or_without_the_conversion():
    assert from_nn('fold{dim=kh layers="c"}') == from_nn('convert-nn-to-nest,fold{dim=kh layers="c"}') \
        == 'convert-nn-to-nest,fold{dim=kh layers="c"}'
    assert from_nn("") == "convert-nn-to-nest"


def test_best_onnx_reloads(mild):
    """nasir re-imports the network a search writes (issue 38): best.onnx loads, and its torch
    backend computes what ONNX Runtime computes on the file."""
    assert mild.best is not None
    path = mild.out / "best.onnx"
    best = nasir.load(str(path))
    x = np.random.default_rng(0).standard_normal(best.input_shapes[0]).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(nasir.compile(best, target="torch")(x), expected, rtol=1e-4, atol=1e-4)


def test_kernel_times_go_to_the_users_cache(first, user_cache):
    """By default the per-nest timings live in the user's cache (shared by their searches), keyed
    by the compiler too, not in the output folder."""
    rows = sqlite3.connect(user_cache / "kernels.db").execute("select count(*) from kernels").fetchone()[0]
    assert rows >= 5 and not (first.out / "kernels.db").exists()  # the tiny model has 5 convs
    times = KernelTimes(user_cache / "kernels.db", None, 1)
    assert f"compiler={compiler_digest()}" in times.options and len(compiler_digest()) == 16


def test_nest_times_are_remembered_by_what_the_kernel_is(tiny, tmp_path):
    """A nest's time is looked up again only for another kernel: two layers of one shape share it,
    another batch or a transformed layer does not, and the remembered time is the database's."""
    model = nasir.load(tiny).transform("convert-nn-to-nest")
    convs = conv_nests(model)
    keys = [nest_key(op, None) for op in convs]
    assert len(set(keys)) < len(keys)  # the tiny model repeats a conv shape
    assert nest_key(convs[0], None) != nest_key(convs[0], 4)
    grouped = model.transform(f'group{{factor=2 layers="{convs[1].layer_name}"}}')
    assert nest_key(conv_nests(grouped)[1], None) != keys[1]
    times = KernelTimes(tmp_path / "kernels.db", None, 1)
    for op in convs:
        assert times.nest_ms(model, op) == KernelTimes(tmp_path / "kernels.db", None, 1).nest_ms(model, op)
    rows = sqlite3.connect(tmp_path / "kernels.db").execute("select count(*) from kernels").fetchone()[0]
    assert rows == len({standalone(model, op).text() for op in convs}) == len(set(keys)) == len(times.seen)




def test_accepted_candidates_keep_fisher_potential(tiny, mild):
    """Recomputed here from the pipelines, on the search's minibatch (synthetic, seed 0, batch 16)."""
    result = mild
    _, fisher_model = load_source(str(tiny), "cifar10", 16)
    inputs, labels = minibatch(None, 16, 0, (3, 16, 16), 10)
    original = fisher_potential(fisher_model, inputs, labels, seed=0).total
    accepted = result.accepted
    assert accepted, "the search accepted nothing; the check below would be vacuous"
    for c in accepted:
        value = fisher_potential(fisher_model.transform(c.pipeline), inputs, labels, seed=0).total
        assert value >= original
        assert value / original == pytest.approx(c.outcome.score, rel=1e-6)
    assert any(c.outcome.stage == "capacity" for c in result.candidates)
    for c in result.candidates:
        if c.outcome.stage == "capacity":
            value = fisher_potential(fisher_model.transform(c.pipeline), inputs, labels, seed=0).total
            assert value < original


def test_the_default_check_is_synflow_above_a_mac_floor(tiny, tmp_path):
    """The default rule for a model file, whose weights the candidates inherit (docs/fisher.md):
    MACs at least 0.45 of the original's, then synflow at least 1.6e-5 of its; recomputed here from
    each pipeline (synflow by `nasir.search.proxies`, tested by hand there) on the search's
    minibatch."""
    choices = ("identity", "group2", "group4", "bottleneck-co4", "depthwise")
    result = nasir.search(tiny, budget=10, out=tmp_path / "default", seed=0, progress=False, choices=choices,
                          check_top=None)
    _, model = load_source(str(tiny), "cifar10", 16)
    x, _ = minibatch(None, 16, 0, (3, 16, 16), 10)
    original_synflow, original_macs = synflow(model, x), summarize(model).total_macs
    seen = set()
    for c in result.candidates:
        o = c.outcome
        if o.stage in ("legality", "properties"):
            continue
        candidate = model.transform(c.pipeline)
        macs = summarize(candidate).total_macs / original_macs
        if macs < 0.45:
            assert o.status == "rejected" and o.stage == "capacity" and o.score is None and "MACs" in o.reason, c
            seen.add("below the MAC floor")
            continue
        ratio = synflow(candidate, x) / original_synflow
        assert o.score == pytest.approx(ratio, rel=1e-6), c
        assert o.status == ("accepted" if ratio >= 1.6e-5 else "rejected"), c
        seen.add(o.status)
    assert {"below the MAC floor", "accepted"} <= seen, "both sides of the MAC floor must occur to mean anything"


def test_fisher_is_spent_only_below_the_bar_of_the_fastest_accepted(tiny, tmp_path):
    """One worker, so each candidate was evaluated knowing every earlier outcome: a candidate
    estimated below the bar (the original's profiled time, or the TOP-th fastest estimate accepted
    before it, worked out here from the results by hand) always had its Fisher Potential measured,
    and a skipped one was never below it. (Above the bar, a candidate whose kernels were not timed
    yet has Fisher measured first: the estimate would cost more.)"""
    top = 2  # and a slack that accepts most candidates, so that their kernels get timed
    choices = ("identity", "group2", "group4", "bottleneck-co2", "shift-oh")
    result = nasir.search(tiny, budget=16, out=tmp_path / "bar", seed=1, progress=False, choices=choices,
                          check_top=top, slack=0.35, capacity="fisher")
    accepted_before: list[float] = []
    kinds = set()
    for c in result.candidates:
        o = c.outcome
        if o.status == "rejected" and o.stage in ("legality", "properties"):
            continue
        fastest = sorted(accepted_before)[:top]
        bar = min([result.original_ms] + ([fastest[-1]] if len(fastest) == top else []))
        if o.status == "skipped":
            assert o.estimate_ms >= bar and o.score is None and f"{bar:.3f} ms" in o.reason, c
            kinds.add("skipped")
        else:
            assert o.score is not None, c
            if o.estimate_ms is not None and o.estimate_ms < bar:
                kinds.add("measured below the bar")
        if o.status == "accepted":
            accepted_before.append(o.estimate_ms)
    assert kinds == {"measured below the bar", "skipped"}, "both sides of the bar must occur to mean anything"
    assert all(c.outcome.estimate_ms is not None for c in result.accepted)


def test_the_strategies_learn_from_fisher_rejections_as_infeasible_trials():
    study = optuna.create_study(directions=list(strategies.DIRECTIONS))
    outcomes = [Outcome("accepted", score=1.2, mac_ratio=0.5, estimate_ms=4.0),
                Outcome("rejected", "capacity", score=0.7, mac_ratio=0.25),
                Outcome("rejected", "capacity", score=0.9, mac_ratio=0.5, estimate_ms=6.0),
                Outcome("skipped", "estimate", mac_ratio=0.9, estimate_ms=9.0),
                Outcome("rejected", "properties"), Outcome("failed")]
    for outcome in outcomes:
        tell(study, study.ask(), outcome, bar=0.95, original_ms=10.0)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 + ["PRUNED"] * 2 + ["FAIL"]
    assert [t.values for t in trials[:3]] == [[4.0, 1.2], [2.5, 0.7], [6.0, 0.9]]
    assert [t.constraints["capacity"] for t in trials[:3]] == pytest.approx([-0.25, 0.25, 0.05])


def test_evolution_and_tpe_begin_with_the_whole_network_variants(tiny, tmp_path):
    choices = ("identity", "group2", "group4", "shift-oh")
    space = SearchSpace.of(nasir.load(tiny).transform("convert-nn-to-nest"), choices, init="inherit")  # a file's
    # by hand: each choice on every conv that takes it, in the order of TEMPLATES
    expected = []
    for choice in ("group2", "group4", "shift-oh"):
        expected.append(space.pipeline({lc.layer: choice for lc in space.layers if choice in lc.choices}))
    assert len(set(expected)) == 3 and all(expected)
    for strategy in ("evolution", "tpe"):
        result = nasir.search(tiny, budget=4, out=tmp_path / strategy, strategy=strategy, progress=False,
                              choices=choices)
        assert [c.pipeline for c in result.candidates[:3]] == expected
        assert result.candidates[3].pipeline not in expected
    randomly = nasir.search(tiny, budget=3, out=tmp_path / "random", progress=False, choices=choices)
    assert [c.pipeline for c in randomly.candidates] != expected


def test_fisher_bar_by_hand():
    bar = CheckBar(10.0, 2)
    assert bar.value == 10.0
    for status, ms, expected in (("accepted", 12.0, 10.0), ("accepted", 7.0, 10.0), ("rejected", 1.0, 10.0),
                                 ("skipped", 2.0, 10.0), ("accepted", 5.0, 7.0), ("accepted", 6.0, 6.0)):
        bar.add(Candidate(0, "p", Outcome(status, estimate_ms=ms)))
        assert bar.value == expected, (status, ms)
    assert CheckBar(10.0, None, [Candidate(0, "p", Outcome("accepted", estimate_ms=1.0))]).value is None


def test_best_so_far_is_the_fastest_estimate_accepted_by_then():
    from nasir.search.benchmark import best_so_far
    from nasir.search.results import SearchResult

    rows = [("accepted", 8.0, 5.0), ("rejected", 2.0, 6.0), ("accepted", 4.0, 30.0), ("skipped", 1.0, 31.0),
            ("accepted", 5.0, 40.0)]
    result = SearchResult(10.0, [Candidate(k, f"p{k}", Outcome(status, estimate_ms=ms, finished_s=at, score=1.0))
                                 for k, (status, ms, at) in enumerate(rows)])
    assert best_so_far(result, 1.0) is None
    assert best_so_far(result, 10.0)["pipeline"] == "p0"
    assert best_so_far(result, 60.0) == {"pipeline": "p2", "estimate_speedup": 2.5, "score": 1.0,
                                         "mac_ratio": None}


def test_same_seed_same_candidates(first, tiny, tmp_path):
    again = nasir.search(tiny, budget=4, out=tmp_path / "again", seed=0, progress=False)
    assert [c.pipeline for c in again.candidates] == [c.pipeline for c in first.candidates[:4]]
    other = nasir.search(tiny, budget=4, out=tmp_path / "other", seed=1, progress=False)
    assert [c.pipeline for c in other.candidates] != [c.pipeline for c in again.candidates]


# --- durability --------------------------------------------------------------------------------

def counted(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        try:
            return con.execute("select count(*) from trials where state in ('COMPLETE', 'PRUNED')").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def test_sigkill_then_resume_finishes_the_budget_once(tiny, tmp_path):
    out, budget = tmp_path / "run", 10
    command = [str(BIN / "nasir"), "search", str(tiny), "--budget", str(budget), "--out", str(out)]
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while counted(out / "study.db") < 3 and time.time() < deadline and run.poll() is None:
        time.sleep(0.2)
    assert run.poll() is None, "the search ended before it could be killed"
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    assert 3 <= counted(out / "study.db") < budget
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = lines(out)
    assert len(rows) == budget == len({r["pipeline"] for r in rows})


def test_ctrl_c_stops_a_search_and_its_workers_with_one_line(tiny, tmp_path):
    """SIGINT to the search's process group (a terminal's Ctrl-C reaches the workers too): status
    130, one line and no traceback from the search or its workers; the same command resumes."""
    out, budget = tmp_path / "run", 8
    command = [str(BIN / "nasir"), "search", str(tiny), "--budget", str(budget), "--workers", "2", "--out", str(out)]
    # SIGINT as a terminal leaves it: a suite started in the background (`make test &`) ignores it,
    # and a child inherits that, so Ctrl-C would not reach it at all
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while counted(out / "study.db") < 2 and time.time() < deadline and run.poll() is None:
        time.sleep(0.2)
    assert run.poll() is None, "the search ended before it could be interrupted"
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130
    assert err.strip().splitlines()[-1] == "nasir: interrupted; run the same command again to resume"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stdout and len(lines(out)) == budget


def test_crash_hang_and_error_are_recorded_and_the_search_goes_on(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    options = SearchOptions(seed=3, choices=("identity", "depthwise", "seq2", "group4", "group2"))
    search = Search(str(tiny), "cifar10", tmp_path / "crash", options, progress=False,
                    evaluator="search_fixtures:CrashingEvaluator")
    result = search.run(budget=8, time_limit=None, workers=2, timeout=15)
    assert len(result.candidates) == 8
    reasons = {c.pipeline: c.outcome.reason for c in result.candidates if c.outcome.status == "failed"}
    crashed = [r for p, r in reasons.items() if "depthwise" in p]
    hung = [r for p, r in reasons.items() if "index-split" in p and "depthwise" not in p]
    raised = [r for p, r in reasons.items() if "factor=4" in p and "depthwise" not in p and "index-split" not in p]
    assert crashed and all("SIGSEGV" in r for r in crashed)
    assert hung and all("timed out" in r for r in hung)
    assert raised and all("a deliberate failure" in r for r in raised)
    assert all(c.outcome.status != "failed" for c in result.candidates if c.pipeline not in reasons)


def test_a_finished_search_run_again_says_it_resumed_and_reprints_its_front(mild, tiny, tmp_path):
    """The same command on the same folder: the stored study is resumed (said, with what it holds),
    nothing is evaluated or measured again, and the table shows measured medians and IQRs (ms at
    the original's median over the member's speedup)."""
    out = tmp_path / "again"
    shutil.copytree(mild.out, out)
    command = [str(BIN / "nasir"), "search", str(tiny), "--budget", str(BUDGET), "--out", str(out),
               "--choices", ",".join(MILD), "--check-top", "0", "--capacity", "fisher"]
    written = {p.name: os.stat(p).st_mtime_ns for p in out.iterdir() if p.suffix in (".onnx", ".npz", ".pipeline")}
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr
    assert {p.name: os.stat(p).st_mtime_ns for p in out.iterdir() if p.suffix in (".onnx", ".npz", ".pipeline")} \
        == written, "a rerun that only reprints writes neither best.onnx nor the workers' models again"
    said = " ".join((done.stdout + done.stderr).split())
    measured = len(mild.pareto)
    assert f"resuming the search in sqlite:///{out / 'study.db'} ({BUDGET} candidates evaluated, {measured} front" \
        in said
    assert f"resumed from sqlite:///{out / 'study.db'}" in said
    assert f"best: trial {mild.best.number}, {mild.best.speedup.median:.2f}x faster" in said
    om, speedup = mild.original_measured.median, mild.best.speedup  # the table's ms: at the original's median
    assert f"{om / speedup.median:.2f} [{om / speedup.q1 - om / speedup.q3:.2f}]" in said
    assert "accuracy not measured: the capacity check estimates it at initialisation" in said
    assert lines(out) == lines(mild.out)


def test_progress_in_a_log_is_not_cut_at_80_columns(capsys):
    with SearchProgress(20, 5.0, []) as progress:  # stderr is captured: not a terminal
        for k in range(3):
            progress.add(Candidate(k, "p", Outcome("rejected", "properties")))
        progress.add(Candidate(3, "p", Outcome("accepted", estimate_ms=1.0)))
        progress.add(Candidate(4, "p", Outcome("skipped", "estimate", estimate_ms=6.0)))
    assert ("rejected: properties 3 | too slow to score 1 | failed 0 | best speedup (est.) 5.00x"
            in capsys.readouterr().err)


def test_version_and_the_defaults_in_help():
    version = subprocess.run([str(BIN / "nasir"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"nasir {importlib.metadata.version('nasir')}" == f"nasir {nasir.__version__}"
    commands = parser()._subparsers._group_actions[0].choices
    for command, option in (("search", "--strategy"), ("search", "--workers"), ("search", "--seed"),
                            ("train", "--out"), ("train", "--seed")):
        action = next(a for a in commands[command]._actions if option in a.option_strings)
        assert f"(default {action.default})" in " ".join(action.help.split()), (command, option)


# --- Ray ---------------------------------------------------------------------------------------

@pytest.fixture
def ray_head(tmp_path):
    port = 6400 + os.getpid() % 1000
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([str(BIN / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                    "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats"],
                   check=True, capture_output=True, env=env)
    yield f"127.0.0.1:{port}"
    subprocess.run([str(BIN / "ray"), "stop", "--force"], capture_output=True, env=env)


def test_ray_gives_the_local_results(first, tiny, ray_head, tmp_path):
    remote = nasir.search(tiny, budget=BUDGET, out=tmp_path / "ray", seed=0, workers=2, ray=ray_head, progress=False,
                          capacity="fisher")
    assert [(c.pipeline, c.outcome.status, c.outcome.stage) for c in remote.candidates] == \
        [(c.pipeline, c.outcome.status, c.outcome.stage) for c in first.candidates]
    assert np.allclose([c.outcome.score or 0 for c in remote.candidates],
                       [c.outcome.score or 0 for c in first.candidates], rtol=1e-9)


# --- the CLI's refusals ------------------------------------------------------------------------

def refuse(args: list[str], *, what: str) -> None:
    result = subprocess.run([str(BIN / "nasir"), "search", *args], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    lines_ = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines_) == 1 and lines_[0].startswith("nasir: error:") and what in lines_[0], result.stderr


@pytest.mark.parametrize("args, what", [
    (["--strategy", "annealing"], "unknown strategy 'annealing'"),
    (["--budget", "0"], "budget must be at least 1"),
])
def test_cli_refuses_bad_options(tiny, tmp_path, args, what):
    refuse([str(tiny), "--out", str(tmp_path / "o"), *args], what=what)
    assert not (tmp_path / "o").exists()


def test_cli_refuses_a_model_with_nothing_to_transform(tmp_path):
    refuse([str(dense_only_onnx(tmp_path / "dense.onnx")), "--out", str(tmp_path / "o")], what="no convolution")
    assert not (tmp_path / "o").exists()


def test_cli_refuses_an_output_folder_that_is_a_file(tiny, tmp_path):
    (tmp_path / "o").write_text("x")
    refuse([str(tiny), "--out", str(tmp_path / "o")], what="is a file")
    assert (tmp_path / "o").read_text() == "x"


def test_cli_refuses_the_storage_of_another_model(first, tmp_path):
    wide = tiny_resnet_onnx(tmp_path / "wide.onnx", width=24)
    before = {p.name: p.stat().st_mtime_ns for p in first.out.iterdir()}
    refuse([str(wide), "--out", str(first.out), "--budget", str(BUDGET)], what="another model")
    assert {p.name: p.stat().st_mtime_ns for p in first.out.iterdir()} == before


def test_a_file_is_searched_with_inherited_weights_and_a_zoo_model_with_fresh_ones(first, tiny):
    """A model file's weights are the user's (trained): its candidates inherit them, and their
    pipelines say so; a zoo model's are untrained: fresh weights, the passes' default."""
    assert default_init(str(tiny)) == "inherit" and default_init("resnet18") == "kaiming"
    changed = [c.pipeline for c in first.candidates if c.pipeline]
    assert changed and all("init=inherit" in step for p in changed for step in pipeline_steps(p)
                           if step.split("{")[0] in ("group", "depthwise", "bottleneck", "fold", "unfold", "shift",
                                                     "unshare"))
    with pytest.raises(NasirError, match="unknown init 'random'"):
        nasir.search(tiny, budget=1, init="random", progress=False)


def test_with_init_writes_init_into_the_steps_that_take_it():
    spec = ('convert-nn-to-nest,index-split{dim=co parts=2 layers="a,b"},group{factor=2 layers="c"},'
            'fold{dim=kh init=kaiming},depthwise')
    assert with_init(spec, "inherit") == (
        'convert-nn-to-nest,index-split{dim=co parts=2 layers="a,b" init=inherit},'
        'group{factor=2 layers="c" init=inherit},fold{dim=kh init=kaiming},depthwise{init=inherit}')
    with pytest.raises(PassError, match="bad pass pipeline"):
        with_init("group{factor=2", "inherit")


def test_the_models_the_workers_load_are_written_once_and_share_their_weights(tmp_path):
    """original.npz and original_check.npz hold the same arrays: one file, hard-linked; a resumed
    search does not write them again; each model loads back with the weights it had."""
    from nasir.model import load_text
    from nasir.search.driver import save_models
    from nasir.search.sources import load_source

    one, many = load_source(str(tiny_resnet_onnx(tmp_path / "tiny.onnx")), "cifar10", 4)
    out = tmp_path / "run"
    out.mkdir()
    save_models(out, one, many, resumed=False)
    npz, fisher_npz = out / "original.npz", out / "original_check.npz"
    assert os.stat(npz).st_ino == os.stat(fisher_npz).st_ino
    for path, model in ((out / "original.mlir", one), (out / "original_check.mlir", many)):
        back = load_text(path)
        assert back.input_shapes == model.input_shapes
        assert all(np.array_equal(back.weights[k], model.weights[k]) for k in model.weights)
    written = [os.stat(p).st_mtime_ns for p in sorted(out.iterdir())]
    save_models(out, one, many, resumed=True)
    assert [os.stat(p).st_mtime_ns for p in sorted(out.iterdir())] == written, "nothing written again"


def test_the_front_tables_ms_rank_as_the_speedups_do():
    """A member timed while the machine was loaded has a higher raw ms than a slower member timed
    in a quiet spell; the table's ms (the original's median over every round over the member's
    speedup) ranks them as their speedups do."""
    from nasir.search.results import SearchResult, front_table

    fast = Candidate(1, "a", Outcome("accepted", estimate_ms=1.0, mac_ratio=0.5, param_ratio=0.5, score=1.0))
    slow = Candidate(2, "b", Outcome("accepted", estimate_ms=2.0, mac_ratio=0.9, param_ratio=0.9, score=1.1))
    fast.add_samples({"candidate": [12.0, 12.5, 13.0], "original": [24.0, 25.0, 26.0]})  # loaded: 2x
    slow.add_samples({"candidate": [8.0, 8.5, 9.0], "original": [10.0, 10.2, 10.4]})     # quiet: 1.2x
    result = SearchResult(10.0, [fast, slow], pareto=[fast, slow])
    table = front_table(result)
    column = next(c for c in table.columns if c.header == "measured ms")
    shown = [float(cell.split()[0]) for cell in column._cells]
    original = float(np.median([24.0, 25.0, 26.0, 10.0, 10.2, 10.4]))
    assert shown == [round(original / 2.0, 2), round(original / (10.2 / 8.5), 2)] and shown[0] < shown[1]


def test_a_search_stored_before_an_option_existed_resumes_at_its_default():
    """A study stamped by an older nasir lacks options added since (synth_bottom_up): it resumes
    when they are at their defaults, and is refused when one is not, or when a stored one differs."""
    from dataclasses import replace as with_options

    from nasir.search.driver import check_fingerprint

    options = SearchOptions()
    older = {k: v for k, v in json.loads(options.stamp()).items() if k != "synth_bottom_up"}
    stored = {"model": "m", "options": json.dumps(older, sort_keys=True)}

    def fingerprint(o):
        return {"model": "m", "options": o.stamp()}

    check_fingerprint("db", stored, fingerprint(options))
    for changed in (with_options(options, synth=2, synth_bottom_up=True), with_options(options, seed=1)):
        with pytest.raises(NasirError, match="holds a search with other options"):
            check_fingerprint("db", stored, fingerprint(changed))
