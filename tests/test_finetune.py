"""The accuracy-verified end of a search (nasir/search/finetune.py): candidates fine-tuned from a
trained original by distillation under Optuna's successive halving, and the fastest within the
tolerance chosen from finished runs only."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from data_fixtures import quadrant_task
from search_fixtures import tiny_resnet_onnx

import nasir
from nasir.errors import NasirError
from nasir.search.evaluate import Outcome
from nasir.search.finetune import finetune, spread
from nasir.search.results import Candidate

LAYERS = ["layer1_conv1_Conv", "layer1_conv2_Conv", "layer2_conv1_Conv", "layer2_conv2_Conv"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny residual net trained on the quadrant task: (original, its accuracy, the task)."""
    folder = tmp_path_factory.mktemp("finetune")
    model = nasir.load(tiny_resnet_onnx(folder / "tiny.onnx", width=8)).transform("convert-nn-to-nest")
    task = quadrant_task(folder / "task.npz")
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
                    progress=False, teacher=original, on_epoch=stop_after_epoch_2)
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
