"""The accuracy-verified end of a search (nasir/search/finetune.py): candidates fine-tuned from a
trained original by distillation under Optuna's successive halving, and the fastest within the
tolerance chosen from finished runs only."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from data_fixtures import quadrant_task, write_cifar
from search_fixtures import tiny_resnet_onnx

import nasir
from nasir.data import load_dataset
from nasir.errors import NasirError, TrainingDiverged
from nasir.search.evaluate import Outcome
from nasir.search.finetune import RECALIBRATE, FineTuned, Verified, finetune, spread, verified_table
from nasir.search.results import Candidate

LAYERS = ["layer1_conv1_Conv", "layer1_conv2_Conv", "layer2_conv1_Conv", "layer2_conv2_Conv"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny residual net trained on the quadrant task: (original, its accuracy, the task). Width
    32: wide enough that a grouped or depthwise conv is clearly faster than its dense original
    when the search estimates it on a busy machine (at width 8 every kernel costs its overhead)."""
    folder = tmp_path_factory.mktemp("finetune")
    model = nasir.load(tiny_resnet_onnx(folder / "tiny.onnx", width=32)).transform("convert-nn-to-nest")
    task = quadrant_task(folder / "task.npz", noise=5.0)  # hard: fine-tuned runs differ, so the pruner prunes
    result = nasir.train(model, task, epochs=4, batch=16, out=folder / "original", progress=False)
    return result.apply_to(model), result.accuracy, task


def candidate(number: int, pipeline: str, estimate_ms: float) -> Candidate:
    return Candidate(number, pipeline, Outcome("accepted", estimate_ms=estimate_ms))


def candidates() -> list[Candidate]:
    """Five networks, fastest first: groups and a bottleneck on more and more layers, inheriting."""
    pipelines = [f'group{{factor=4 layers="{"|".join(LAYERS)}" init=inherit}}',
                 f'depthwise{{layers="{"|".join(LAYERS[:2])}" init=inherit}}',
                 f'group{{factor=2 layers="{"|".join(LAYERS)}" init=inherit}}',
                 f'bottleneck{{dim=co factor=2 layers="{LAYERS[0]}" init=inherit}}',
                 f'group{{factor=2 layers="{LAYERS[2]}" init=inherit}}']
    return [candidate(n, p, 1.0 + n) for n, p in enumerate(pipelines)]


def test_candidates_are_spread_over_the_speedups_found():
    found = [candidate(n, f"p{n}", ms) for n, ms in enumerate([5.0, 1.0, 9.0, 3.0, 2.0, 12.0, 4.0, 7.0])]
    found.append(Candidate(8, "p8", Outcome("rejected", stage="legality")))  # no estimate: never picked
    picked = spread(found, original_ms=10.0, k=3)  # faster than 10 ms: 1, 2, 3, 4, 5, 7, 9
    assert [c.outcome.estimate_ms for c in picked] == [1.0, 3.0, 5.0]
    assert [c.number for c in spread(found, 10.0, 20)] == [1, 4, 3, 6, 0, 7, 2]


def test_fine_tuning_prunes_by_successive_halving_and_keeps_the_fastest_within_the_tolerance(trained, tmp_path):
    original, accuracy, task = trained
    verified = finetune(candidates(), original, accuracy, task, max_drop=5.0, epochs=3, batch=16,
                        out=tmp_path, progress=False)
    rows = verified.rows
    assert [r.candidate.number for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0].finished and len(rows[0].accuracies) == 3, "the first run has no rival at its rungs"
    assert any(r.pruned for r in rows), "successive halving stops some runs"
    for r in rows:
        assert len(r.accuracies) == (1 if r.pruned else 3), "a run stops at a rung (1 epoch) or finishes (3)"
        with (tmp_path / f"trial-{r.candidate.number}" / "metrics.csv").open() as f:
            assert [float(m["test_accuracy"]) for m in csv.DictReader(f)] == r.accuracies
    within = [r for r in rows if not r.pruned and r.accuracies[-1] >= accuracy - 5.0]
    assert verified.best is (within[0] if within else None)
    if verified.best is None:
        assert verified.closest is max((r for r in rows if not r.pruned), key=lambda r: r.accuracies[-1])
    again = finetune(candidates(), original, accuracy, task, max_drop=5.0, epochs=3, batch=16, out=tmp_path,
                     progress=False)
    assert [(r.accuracies, r.pruned) for r in again.rows] == [(r.accuracies, r.pruned) for r in rows], \
        "run again: the study's trials, nothing trained again"


def test_a_run_stopped_mid_way_resumes_from_its_checkpoint(trained, tmp_path):
    original, accuracy, task = trained
    first = candidates()[:1]

    def stop_after_epoch_2(row):
        if row["epoch"] == 2:
            raise Stopped

    with pytest.raises(Stopped):  # as a kill after the second epoch's checkpoint
        nasir.train(original.transform(first[0].pipeline), task, epochs=3, batch=16, lr=0.01, out=tmp_path / "trial-0",
                    progress=False, teacher=original, recalibrate=RECALIBRATE, on_epoch=stop_after_epoch_2)
    verified = finetune(first, original, accuracy, task, max_drop=100.0, epochs=3, batch=16, lr=0.01, out=tmp_path,
                        progress=False)
    whole = finetune(first, original, accuracy, task, max_drop=100.0, epochs=3, batch=16, lr=0.01,
                     out=tmp_path / "uninterrupted", progress=False)
    assert verified.rows[0].accuracies == whole.rows[0].accuracies and verified.best is verified.rows[0]


class Stopped(Exception):
    pass


def test_bad_settings_are_refused(trained, tmp_path):
    original, accuracy, task = trained
    with pytest.raises(NasirError, match="at least 1 epoch"):
        finetune(candidates(), original, accuracy, task, max_drop=1.0, epochs=0, out=tmp_path)
    with pytest.raises(NasirError, match="at least 0 points"):
        finetune(candidates(), original, accuracy, task, max_drop=-1.0, epochs=1, out=tmp_path)


def test_a_search_with_a_tolerance_returns_a_fine_tuned_network_that_scores_as_reported(trained, tmp_path):
    """nasir.search(file, data=..., accuracy_drop=...): candidates fine-tuned from the user's
    trained model, chosen on a validation half of the test examples, best the fastest finished one
    within the tolerance (100 points here, so that one is); best.onnx holds its fine-tuned weights,
    and it and the original score, run again by ONNX Runtime on the held-out half, what was
    reported."""
    import onnxruntime as ort

    original, accuracy, task = trained
    path = tmp_path / "trained.onnx"
    original.to_onnx(path)
    result = nasir.search(path, budget=8, out=tmp_path / "run", data=str(task), accuracy_drop=100.0,
                          finetune_epochs=3, finetune_top=4, check_top=None, progress=False,
                          choices=("identity", "group4", "depthwise"))
    verified = result.verified
    data = np.load(task)
    choose, report = load_dataset(task).split_test(0)
    assert verified.original_accuracy == pytest.approx(ort_accuracy(path, *choose.test))
    assert verified.original_test_accuracy == pytest.approx(ort_accuracy(path, *report.test))
    assert len(choose.test[1]) + len(report.test[1]) == len(data["y_test"])
    assert 1 <= len(verified.rows) <= 4 and all("init=inherit" in r.candidate.pipeline for r in verified.rows)
    for c in result.candidates:  # no capacity check: every legal candidate is estimated and kept
        assert c.outcome.stage in (None, "legality", "properties") and c.outcome.score is None
        assert (c.outcome.status == "accepted") == (c.outcome.estimate_ms is not None)
    assert result.best is (verified.best.candidate if verified.best else None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert rows[0]["status"] == "original" and rows[0]["accuracy"] == pytest.approx(verified.original_test_accuracy)
    best = verified.best
    assert best is not None and best.finished and result.best.speedup is not None, "a tolerance of 100 points"
    assert best is next(r for r in verified.rows if r.finished), "the fastest estimate that finished"
    assert ort_accuracy(tmp_path / "run" / "best.onnx", *choose.test) == pytest.approx(best.accuracy)
    assert ort_accuracy(tmp_path / "run" / "best.onnx", *report.test) == pytest.approx(best.test_accuracy)
    assert next(r for r in rows if r["number"] == result.best.number)["accuracy"] == pytest.approx(best.test_accuracy)


def ort_accuracy(path, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy (%) of the ONNX file at `path` on `x`, `y`, run by ONNX Runtime one image at a time."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path))
    name = session.get_inputs()[0].name
    predicted = np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(len(y))])
    return 100.0 * float(np.mean(predicted.argmax(1) == y))


def test_the_test_examples_split_into_disjoint_validation_and_held_out_halves(tmp_path):
    task = quadrant_task(tmp_path / "task.npz")
    data = load_dataset(task)
    choose, report = data.split_test(seed=0)
    x = data.test[0].reshape(len(data.test[0]), -1)
    rows = {tuple(r): i for i, r in enumerate(x)}
    assert len(rows) == len(x), "the task's test images are distinct"
    picked = [sorted(rows[tuple(r)] for r in half.test[0].reshape(len(half.test[0]), -1)) for half in (choose, report)]
    assert not set(picked[0]) & set(picked[1]) and sorted(picked[0] + picked[1]) == list(range(len(x)))
    assert abs(len(picked[0]) - len(picked[1])) <= 1
    for half, idx in zip((choose, report), picked):
        assert np.array_equal(half.test[1], data.test[1][idx]) and half.train[0] is data.train[0]
    assert "validation half" in choose.name and "test half" in report.name


def test_the_cli_refuses_a_tolerance_without_data(tmp_path):
    done = subprocess.run([sys.executable, "-m", "nasir.cli.main", "search", "resnet18", "--budget", "1",
                           "--max-accuracy-drop", "1", "--out", str(tmp_path / "s")], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "nasir: error: an accuracy-verified search needs real data to measure accuracy on: give --data (a CIFAR "
        "folder, an .npz, 'digits' or 'mnist5k')"]
    assert not (tmp_path / "s").exists()


def test_without_a_capacity_check_the_front_is_over_latency_and_macs():
    from nasir.search.results import pareto_front

    found = [Candidate(n, f"p{n}", Outcome("accepted", estimate_ms=ms, mac_ratio=macs))
             for n, (ms, macs) in enumerate([(1.0, 0.2), (2.0, 0.5), (2.5, 0.4), (3.0, 0.9), (1.5, 0.1)])]
    assert [c.number for c in pareto_front(found)] == [0, 1, 3], "(2.5, 0.4) and (1.5, 0.1) are beaten"


def test_only_a_finished_run_within_the_tolerance_is_a_result():
    c = [candidate(n, f"p{n}", 1.0 + n) for n in range(4)]
    rows = [FineTuned(c[0], [95.0], pruned=True), FineTuned(c[1], [80.0, 85.0, 88.0]),
            FineTuned(c[2], [90.0, 91.0, 92.5]), FineTuned(c[3], [93.0, 93.5, 94.0])]
    verified = Verified(rows, original_accuracy=93.0, max_drop=1.0, epochs=3)
    assert verified.within == [rows[2], rows[3]] and verified.best is rows[2], "pruned at 95% is no result"
    strict = Verified(rows, original_accuracy=96.0, max_drop=1.0, epochs=3)
    assert strict.best is None and strict.closest is rows[3]


def test_the_cli_prints_the_fine_tuned_candidates_and_the_verdict(trained, tmp_path):
    original, accuracy, task = trained
    path = tmp_path / "trained.onnx"
    original.to_onnx(path)
    done = subprocess.run([sys.executable, "-m", "nasir.cli.main", "search", str(path), "--budget", "4",
                           "--data", str(task), "--max-accuracy-drop", "0", "--finetune-epochs", "1",
                           "--finetune-top", "2", "--choices", "identity,depthwise", "--check-top", "0",
                           "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    choose, report = load_dataset(task).split_test(0)
    kept, held_out = (ort_accuracy(path, *half.test) for half in (choose, report))
    assert (f"fine-tuned from the original ({kept:.2f}%, {held_out:.2f}% held out; within 0 point(s): at least "
            f"{kept:.2f}%)") in text
    rows = [json.loads(line) for line in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    tuned = [r for r in rows[1:] if r["accuracy"] is not None]
    assert tuned, "the fine-tuned candidates' accuracy is in the results"
    if "best: trial" in text:
        assert "on the held-out half against the original's" in text and (tmp_path / "s" / "best.onnx").exists()
    else:
        assert f"no candidate came within 0 point(s) of the original's {kept:.2f}% on the validation half; the closest" in text
        assert not (tmp_path / "s" / "best.onnx").exists()


def test_a_cifar10_folder_runs_the_same_command(tmp_path):
    """`nasir search model.onnx --data cifar-10-batches-bin/ --max-accuracy-drop P` on a small
    generated folder in CIFAR-10's binary format: images fitted to the model's 16 x 16, a fine-tuned
    best whose best.onnx scores, run by ONNX Runtime on the held-out half of test_batch.bin, what
    the run reported. Width 32, as `trained`: at width 16 the grouped candidates' estimates were
    within noise of the original's 0.05 ms, and on a busy machine none came out faster, so none was
    fine-tuned."""
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    write_cifar(folder, [96, 64, 48])
    model = tiny_resnet_onnx(tmp_path / "model.onnx", width=32)
    done = subprocess.run([sys.executable, "-m", "nasir.cli.main", "search", str(model), "--budget", "4",
                           "--data", str(folder), "--max-accuracy-drop", "100", "--finetune-epochs", "1",
                           "--finetune-top", "2", "--choices", "identity,group4", "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "best: trial" in " ".join(done.stdout.split())
    rows = [json.loads(line) for line in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    best = (tmp_path / "s" / "best.pipeline").read_text()
    row = next(r for r in rows[1:] if r["pipeline"] and r["pipeline"] in best)
    _, report = load_dataset(folder, (3, 16, 16)).split_test(0)
    assert len(report.test[1]) == 24
    assert ort_accuracy(tmp_path / "s" / "best.onnx", *report.test) == pytest.approx(row["accuracy"])
    assert ort_accuracy(model, *report.test) == pytest.approx(rows[0]["accuracy"])


def test_a_run_whose_loss_goes_to_nan_is_stopped_and_never_a_result(trained, tmp_path):
    original, accuracy, task = trained
    with pytest.raises(TrainingDiverged, match="training diverged: the loss is (nan|inf)"):
        nasir.train(original, task, epochs=1, batch=16, lr=1e12, progress=False)
    verified = finetune(candidates()[:2], original, accuracy, task, max_drop=100.0, epochs=2, batch=16, lr=1e12,
                        out=tmp_path, progress=False)
    assert all(r.diverged and r.pruned for r in verified.rows) and verified.best is None
    assert "diverged" in " ".join(str(c) for c in verified_table(verified).columns[-2]._cells)


def test_the_fine_tuning_batch_gives_enough_steps_an_epoch():
    from nasir.search.finetune import finetune_batch

    assert finetune_batch(50000) == 128 and finetune_batch(1000) == 31 and finetune_batch(100) == 16
    assert finetune_batch(50000, most=64) == 64


def test_a_search_with_nothing_estimated_faster_says_so(capsys, tmp_path):
    """Nothing to fine-tune (no candidate's estimate beat the original's): the verdict says that,
    not that no run came within the tolerance."""
    from types import SimpleNamespace

    from nasir.cli.main import _print_verified

    result = SimpleNamespace(verified=Verified([], original_accuracy=50.0, max_drop=1.0, epochs=1,
                                               original_test_accuracy=48.0), best=None)
    assert _print_verified(result, SimpleNamespace(out=tmp_path)) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "no candidate was estimated faster than the original: nothing to fine-tune" in text
    assert "came within" not in text
