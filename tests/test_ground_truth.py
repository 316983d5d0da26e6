"""benchmarks/ground_truth.py's plan (issue 51): the anchors, then candidates stratified over
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

_bench = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_bench))  # ground_truth imports fisher_vs_accuracy beside it, as a script does
_spec = importlib.util.spec_from_file_location("ground_truth", _bench / "ground_truth.py")
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


_rank_spec = importlib.util.spec_from_file_location("rank_proxies", _bench / "rank_proxies.py")
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
