"""experiments/fisher_vs_accuracy.py's parts that decide what its accuracy table says: the hard MNIST
task, the balanced draw of accepted and rejected candidates, and Kendall's tau-b."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau

from nasir.data import load_dataset

_path = Path(__file__).resolve().parents[1] / "experiments" / "fisher_vs_accuracy.py"
_spec = importlib.util.spec_from_file_location("fisher_vs_accuracy", _path)
fva = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fva)


def test_kendall_tau_b_is_scipys_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.integers(0, 4, 12), rng.integers(0, 5, 12)  # many ties in both
        assert fva.kendall_tau_b(a, b) == pytest.approx(kendalltau(a, b).statistic, abs=1e-12)
    assert fva.kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert np.isnan(fva.kendall_tau_b([1, 1, 1], [1, 2, 3]))


def test_hard_mnist_keeps_per_class_images_shifted_with_noise():
    plain = load_dataset("mnist5k", seed=0)
    clean = fva.hard_mnist(per_class=7, shift=3, noise=0.0, seed=0)
    assert clean.train[0].shape == (70, 1, 28, 28) and np.bincount(clean.train[1]).tolist() == [7] * 10
    np.testing.assert_array_equal(clean.test[1], plain.test[1])  # the whole held-out fifth
    background = plain.train[0].min()
    # every hardened image is one of the plain images moved by at most 3 pixels each way, the
    # uncovered border filled with background; training images come from the training part
    for hard, pool in ((clean.train[0][:10], plain.train[0]), (clean.test[0][:10], plain.test[0])):
        for image in hard:
            found = set()
            for dy in range(-3, 4):
                for dx in range(-3, 4):
                    moved = np.roll(pool, (dy, dx), axis=(2, 3))
                    if dy > 0:
                        moved[:, :, :dy] = background
                    if dy < 0:
                        moved[:, :, dy:] = background
                    if dx > 0:
                        moved[:, :, :, :dx] = background
                    if dx < 0:
                        moved[:, :, :, dx:] = background
                    if np.equal(moved, image).all(axis=(1, 2, 3)).any():
                        found.add((dy, dx))
            assert found, "a hardened image is no shift of a plain one"
    # the shifts are really drawn (not all zero), and seeded
    assert not np.array_equal(clean.test[0], plain.test[0])
    np.testing.assert_array_equal(fva.hard_mnist(7, 3, 0.0, 0).train[0], clean.train[0])
    noisy = fva.hard_mnist(per_class=7, shift=3, noise=0.5, seed=0)
    assert np.std(noisy.test[0] - clean.test[0]) == pytest.approx(0.5, rel=0.02)


def test_draw_keeps_both_sides_alternating_and_counts_draws():
    class Space:  # pipelines "p0", "p1", ...; every third accepted, p5 does not apply, p1 drawn twice
        def __init__(self):
            self.order = iter(["p0", "p1", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10"])

        def random_pipeline(self, rng):
            return next(self.order)

    def decide(p):
        n = int(p[1:])
        return None if n == 5 else {"pipeline": p, "accepted": n % 3 == 0}

    rows, draws = fva.draw_candidates(Space(), decide, 2, None, 100)
    assert [r["pipeline"] for r in rows] == ["p0", "p1", "p3", "p2"] and draws == 5
    rows, draws = fva.draw_candidates(Space(), decide, 3, None, 7)  # cut short: 2 accepted, 3 rejected
    assert [r["pipeline"] for r in rows] == ["p0", "p1", "p3", "p2", "p4"] and draws == 7
    rows, draws = fva.draw_candidates(Space(), decide, 3, None, 100)
    assert [r["pipeline"] for r in rows] == ["p0", "p1", "p3", "p2", "p6", "p4"] and draws == 8
