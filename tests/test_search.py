"""The architecture search (issue 26) on a small residual CNN: space, reproducibility, capacity of
what it accepts, durability (SIGKILL and resume), failing evaluations, Ray, and the CLI's refusals.

One search runs once per module (`first`) and the tests read it; the others start their own.
"""

from __future__ import annotations

import json
import os
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
from nasir.dialects import nest
from nasir.dialects.shapes import shape_of
from nasir.data import minibatch
from nasir.fisher import fisher_potential
from nasir.search import strategies
from nasir.search.driver import Search, SearchOptions, measure_front
from nasir.search.evaluate import Outcome
from nasir.search.results import Candidate, pareto_front, passes
from nasir.kernels import KernelTimes, compiler_digest, nest_key, standalone
from nasir.search.space import SearchSpace, conv_nests, layer_pattern
from nasir.search.workers import MEASURE
from nasir.search.sources import load_source

TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
BUDGET = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_resnet_onnx(tmp_path_factory.mktemp("model") / "tiny.onnx")


@pytest.fixture(scope="module")
def first(tiny, tmp_path_factory):
    return nasir.search(tiny, budget=BUDGET, out=tmp_path_factory.mktemp("first"), seed=0, progress=False)


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
        return Candidate(n, f"p{n}", Outcome(status, fisher_ratio=fisher, estimate_ms=ms))

    pool = [cand(0, 10, 1.0), cand(1, 8, 1.2), cand(2, 9, 1.1), cand(3, 5, 1.05), cand(4, 1, 9, "rejected")]
    assert [c.number for c in pareto_front(pool)] == [3, 1]


def test_front_measured_by_the_workers_and_a_failed_measurement_noted():
    class Pool:  # evaluates nothing: answers measure jobs, one of them failing
        idle, jobs = 2, []

        def submit(self, number, pipeline, kind):
            assert kind == MEASURE
            self.jobs.append(number)

        def results(self, wait):
            done = [(n, Outcome("failed", reason="boom") if n == 2 else Outcome("measured", measured_ms=n / 10))
                    for n in self.jobs]
            self.jobs = []
            return done

    class Study:
        user_attrs = {"measured_ms": {"1": 0.5}}  # measured before an interruption

        def set_user_attr(self, key, value):
            self.user_attrs[key] = value

    class Progress:
        notes: list[str] = []

        def measuring(self, n):
            assert n == 2

        def measured(self):
            pass

        def note(self, text):
            self.notes.append(text)

    front = [Candidate(n, f"p{n}", Outcome("accepted", estimate_ms=n)) for n in (1, 2, 3)]
    progress = Progress()
    measure_front(front, Pool(), Study(), progress)
    assert [c.measured_ms for c in front] == [0.5, None, 0.3]
    assert "candidate 2" in progress.notes[0] and "boom" in progress.notes[0]
    assert Study.user_attrs["measured_ms"] == {"1": 0.5, "3": 0.3}


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
    assert {r["status"] for r in rows} <= {"accepted", "rejected", "failed"}
    assert all(r["stage"] in ("legality", "properties", "fisher") for r in rows if r["status"] == "rejected")
    assert (out / "pareto.png").stat().st_size > 0
    if first.best is not None:
        assert (out / "best.pipeline").read_text().strip() == first.best.pipeline
        assert (out / "best.onnx").stat().st_size > 0
        assert first.best in first.pareto and all(c.measured_ms > 0 for c in first.pareto)


def test_best_onnx_reloads(first):
    """nasir re-imports the network a search writes (issue 38): best.onnx loads, and its torch
    backend computes what ONNX Runtime computes on the file."""
    assert first.best is not None
    path = first.out / "best.onnx"
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


def test_accepted_candidates_keep_fisher_potential(first, tiny):
    """Recomputed here from the pipelines, on the search's minibatch (synthetic, seed 0, batch 16)."""
    _, fisher_model = load_source(str(tiny), "cifar10", 16)
    inputs, labels = minibatch(None, 16, 0, (3, 16, 16), 10)
    original = fisher_potential(fisher_model, inputs, labels, seed=0).total
    accepted = first.accepted
    assert accepted, "the search accepted nothing; the check below would be vacuous"
    for c in accepted:
        value = fisher_potential(fisher_model.transform(c.pipeline), inputs, labels, seed=0).total
        assert value >= original
        assert value / original == pytest.approx(c.outcome.fisher_ratio, rel=1e-6)
    for c in first.candidates:
        if c.outcome.stage == "fisher":
            value = fisher_potential(fisher_model.transform(c.pipeline), inputs, labels, seed=0).total
            assert value < original


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
    remote = nasir.search(tiny, budget=BUDGET, out=tmp_path / "ray", seed=0, workers=2, ray=ray_head, progress=False)
    assert [(c.pipeline, c.outcome.status, c.outcome.stage) for c in remote.candidates] == \
        [(c.pipeline, c.outcome.status, c.outcome.stage) for c in first.candidates]
    assert np.allclose([c.outcome.fisher_ratio or 0 for c in remote.candidates],
                       [c.outcome.fisher_ratio or 0 for c in first.candidates], rtol=1e-9)


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
