"""experiments/ground_truth.py's plan (issue 51): the anchors, then candidates stratified over
transform families and MAC bins, reproducible and only ever extended; the extra-seed picks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from search_fixtures import tiny_resnet_onnx

import nasir
from nasir.search.space import SearchSpace
from nasir.summary import summarize

_experiments = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(_experiments))  # ground_truth imports fisher_vs_accuracy beside it, as a script does
_spec = importlib.util.spec_from_file_location("ground_truth", _experiments / "ground_truth.py")
gt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gt)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return nasir.load(tiny_resnet_onnx(tmp_path_factory.mktemp("gt") / "tiny.onnx")).transform("convert-nn-to-nest")


def test_the_plan_starts_with_the_anchors_and_stratifies_the_rest(tiny):
    plan = gt.extend_plan([], tiny, want=30, pool=8, seed=0)
    anchors = [r for r in plan if r["family"].startswith("anchor:")]
    assert plan[:len(anchors)] == anchors and len(anchors) == len(SearchSpace.of(tiny).uniform())
    assert len(plan) == 30 and len({r["pipeline"] for r in plan}) == 30
    assert [r["id"] for r in plan] == [f"c{i:03d}" for i in range(30)]
    drawn = plan[len(anchors):]
    assert len({r["family"] for r in drawn}) >= 6, "families take turns"
    base = summarize(tiny)
    for r in drawn[:5]:  # the ratios are the networks' own
        s = summarize(tiny.transform(r["pipeline"]))
        assert r["macs"] == pytest.approx(s.total_macs / base.total_macs)
        assert r["params"] == pytest.approx(s.total_params / base.total_params)
    assert all(r["macs"] >= gt.BINS[0] for r in drawn)
    for family in {r["family"] for r in drawn}:  # a family's picks spread over the bins its pool reaches
        bins = [int(np.digitize(r["macs"], gt.BINS)) for r in drawn if r["family"] == family]
        assert max(bins.count(b) for b in bins) - min(bins.count(b) for b in set(bins)) <= 1


def test_the_plan_is_reproducible_and_only_extended(tiny):
    first = gt.extend_plan([], tiny, want=28, pool=8, seed=0)  # 22 anchors, 6 drawn
    assert gt.extend_plan([], tiny, want=28, pool=8, seed=0) == first
    longer = gt.extend_plan([dict(r) for r in first], tiny, want=34, pool=8, seed=0)
    assert longer[:28] == first and len(longer) == 34 and len({r["pipeline"] for r in longer}) == 34


def test_repeats_spread_over_the_mac_ratios():
    plan = [{"id": f"c{i}", "macs": m} for i, m in enumerate([0.9, 0.1, 0.5, 0.3, 0.7, 1.0, 0.2])]
    picked = gt.repeats(plan, 3)
    assert [r["macs"] for r in picked] == [0.1, 0.5, 1.0]


_rank_spec = importlib.util.spec_from_file_location("rank_proxies", _experiments / "rank_proxies.py")
rank = importlib.util.module_from_spec(_rank_spec)
_rank_spec.loader.exec_module(rank)


def test_rank_proxies_reads_mean_accuracy_per_candidate_and_scores_by_hand():
    rows = [{"id": "original", "accuracy": 91.0}, *({"id": "c1", "family": "group", "pipeline": "p", "macs": 0.5,
                                                     "params": 0.5, "latency": 0.6, "accuracy": a} for a in (80.0, 84.0)),
            {"id": "c2", "family": "seq", "pipeline": "q", "macs": 0.9, "params": 0.8, "latency": 0.9, "accuracy": 90.0}]
    got = rank.accuracies(rows)
    assert set(got) == {"c1", "c2"} and got["c1"]["accuracy"] == 82.0 and got["c1"]["seeds"] == [80.0, 84.0]
    score, accuracy = np.array([0, 1, 2, 3, 4, 5, 6, 7, -1, 9.0]), np.array([0, 1, 2, 3, 4, 5, 6, 7, 9, 8.0])
    assert rank.top_precision(score, accuracy, 0.2) == 0.5  # the top 2 by score: 9, 7; by accuracy: 8, 9
    assert rank.top_precision(-np.arange(10.0), np.arange(10.0), 0.2) == 0.0
    ranks = rank.in_band(np.array([3.0, 1.0, 2.0, 5.0]), np.array([0.15, 0.15, 0.15, 0.95]))
    assert ranks.tolist() == [1.0, 0.0, 0.5, 0.0]


def test_the_distilled_column_inherits_the_trained_original_and_resumes(tiny, tmp_path, monkeypatch):
    """Against the teacher's own: a pipeline that keeps the function (an index split of inherited
    weights) starts exactly where the trained original is, batch norms recalibrated alike; a row a
    candidate, once."""
    from data_fixtures import quadrant_task

    from nasir.data import load_dataset

    monkeypatch.setattr(gt, "DISTILLED", tmp_path / "distilled.jsonl")
    monkeypatch.setattr(gt, "RECIPE", {"epochs": 2, "batch": 32, "lr": 0.02})
    data = load_dataset(quadrant_task(tmp_path / "q.npz", train=128, test=64), tiny.input_shapes[0][1:])
    layer = next(lc.layer for lc in SearchSpace.of(tiny).layers if "group2" in lc.choices)
    plan = [{"id": "c000", "family": "seq", "pipeline": f'index-split{{dim=co parts=2 layers="{layer}"}}',
             "macs": 1.0, "params": 1.0},
            {"id": "c001", "family": "group", "pipeline": f'group{{factor=2 layers="{layer}"}}', "macs": 0.9,
             "params": 0.9}]
    gt.distil(plan, tiny, data, tmp_path / "work", epochs=1, threads=1, cpu="test")
    rows = gt.read_rows(gt.DISTILLED)
    teacher, accuracy = gt.teacher_of(tiny, data, tmp_path / "work", 1)
    assert [r["id"] for r in rows] == ["c000", "c001"]
    assert rows[0]["teacher_accuracy"] == pytest.approx(accuracy)
    assert rows[0]["inherited"] == pytest.approx(gt.inherited_accuracy(teacher, data, rows[0]["recipe"]["batch"]))
    assert all(0 <= r["distilled"] <= 100 and r["recipe"]["epochs"] == 1 and not r["diverged"] for r in rows)
    gt.distil(plan, tiny, data, tmp_path / "work", epochs=1, threads=1, cpu="test")
    assert len(gt.read_rows(gt.DISTILLED)) == 2, "a candidate with a row is not trained again"


def test_rule_floors_are_fitted_on_one_half_and_judged_on_the_other():
    good = np.array([True, True, False, False, True, False])
    assert rank.precision_recall(np.array([True, False, True, False, True, False]), good) == (2 / 3, 2 / 3)
    assert rank.f1(np.array([True, False, True, False, True, False]), good) == pytest.approx(2 / 3)
    score, macs = np.array([0.9, 0.8, 0.5, 0.1, 0.3, 0.2]), np.array([0.5, 0.9, 0.2, 0.9, 0.1, 0.3])
    assert rank.fit_floor(score, good) == (0.3, 0.0, 6 / 7)  # keeps 0.9 0.8 0.5 0.3: three good of four
    good2 = np.array([True, True, False, False, False, False])
    assert rank.fit_floor(score, good2) == (0.8, 0.0, 1.0)
    score3 = np.array([0.9, 0.8, 0.95, 0.1, 0.3, 0.2])  # 0.95 is bad but has few MACs: a MAC floor drops it
    assert rank.fit_floor(score3, good2, macs) == (0.3, 0.3, 1.0)  # ties: the lowest floors
    held = np.array([False, True] * 3)  # fitted on rows 0, 2, 4: only a MAC floor of 0.5 drops 0.95
    got = rank.rules({"s": score3}, macs, good2, held)
    assert (got["s + MACs"]["floor"], got["s + MACs"]["mac_floor"]) == (0.3, 0.5)
    assert (got["s + MACs"]["precision"], got["s + MACs"]["recall"]) == (1.0, 1.0)  # held: row 1 kept, 3 and 5 not
    # the other way round, fitted on rows 1, 3, 5: alone a floor of 0.8 keeps rows 0 and 2 (0.95 bad); pooled with
    # the first half (0.9 fitted there keeps none of 1, 3, 5): one good of two kept, one of two good found
    assert (got["s"]["pooled_precision"], got["s"]["pooled_recall"]) == (0.5, 0.5)
    assert got["s + MACs"]["pooled_f1"] == 1.0  # floors 0.8 and MACs 0.3 keep row 0 of 0, 2, 4
