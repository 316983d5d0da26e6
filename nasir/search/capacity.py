"""The search's capacity check: which candidates it keeps, by a score relative to the original's
and a MAC floor. The defaults follow the ground truth of issue 51 (docs/fisher.md, "The search's
check"): over 100 candidates of ResNet-18 on hard MNIST, among those timed faster than the
original, synflow above a floor with MACs at least 0.45 of the original's told "within one point
of the original" from the rest better than Fisher Potential, both for networks trained from
scratch (fresh weights: "synflow", floor 0.01) and for networks fine-tuned from the trained
original's weights (inherited: "synflow-inherited", floor 1.6e-5; synflow of trained weights spans
orders of magnitude more, so the floor only drops networks whose synflow has collapsed).

    rule = RULES["synflow"]                 # CapacityRule(score="synflow", floor=0.01, mac_floor=0.45)
    check = rule.bind(original, x, y)       # scores the original once
    check(candidate, mac_ratio=0.6)         # -> Verdict(score=0.93, reason=None): kept
    check(candidate, mac_ratio=0.3)         # -> Verdict(score=None, reason="MACs 0.30 of the original's (needs >= 0.45)")

A rule's score is a ratio to the original's, or a difference where the score is a logarithm
already (`LOG_SCALE`: jacob_cov, zico). "fisher" is the seeds' rule (NAS-PTE, BlockSwap): Fisher
Potential at least the original's; "none" keeps every candidate (the accuracy-verified search,
where fine-tuning judges accuracy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nasir.errors import NasirError

if TYPE_CHECKING:
    from nasir.model import Model

LOG_SCALE = ("jacob_cov", "zico")
"""Scores that are logarithms already: relative to the original as a difference, not a ratio."""


def relative(name: str, score, base: float):
    """`score` relative to the original's `base`: a difference for `LOG_SCALE`, else a ratio."""
    return score - base if name in LOG_SCALE else score / base


def score_of(name: str, model: Model, x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """The score `name` ("fisher" or one of `nasir.search.proxies.PROXIES`) of `model` at its present
    weights on (x, y). (Imported here: the CLI reads `RULES` without loading torch.)"""
    if name == "fisher":
        from nasir.fisher import fisher_potential
        return fisher_potential(model, x, y, seed=seed, threads=1).total
    from nasir.search.proxies import PROXIES
    return PROXIES[name](model, x, y)


@dataclass(frozen=True)
class Verdict:
    """A candidate's check: its relative score (None where the MAC floor rejected it first or the
    rule has no score) and why it was rejected (None: kept)."""

    score: float | None
    reason: str | None


@dataclass(frozen=True)
class CapacityRule:
    """Keep a candidate whose MAC ratio is at least `mac_floor` and whose `score` relative to the
    original's is at least `floor` (lowered by the search's slack: floor * (1 - slack), or
    floor - slack for `LOG_SCALE` scores). `score` None: the MAC floor alone."""

    name: str
    score: str | None
    floor: float = 1.0
    mac_floor: float = 0.0

    def bind(self, original: Model, x: np.ndarray, y: np.ndarray, seed: int = 0, slack: float = 0.0,
             original_score: float | None = None) -> Check:
        """The rule against `original` on one minibatch (its score measured here unless given)."""
        if self.score is not None and original_score is None:
            original_score = score_of(self.score, original, x, y, seed)
        return Check(self, x, y, seed, slack, original_score)


@dataclass(frozen=True)
class Check:
    """A `CapacityRule` bound to the original's score and the minibatch (`CapacityRule.bind`)."""

    rule: CapacityRule
    x: np.ndarray
    y: np.ndarray
    seed: int
    slack: float
    original_score: float | None

    @property
    def floor(self) -> float:
        rule = self.rule
        return rule.floor - self.slack if rule.score in LOG_SCALE else rule.floor * (1 - self.slack)

    def __call__(self, candidate: Model, mac_ratio: float) -> Verdict:
        rule = self.rule
        if mac_ratio < rule.mac_floor:
            return Verdict(None, f"MACs {mac_ratio:.2f} of the original's (needs >= {rule.mac_floor:.2f})")
        if rule.score is None:
            return Verdict(None, None)
        score = float(relative(rule.score, score_of(rule.score, candidate, self.x, self.y, self.seed),
                               self.original_score))
        if not math.isfinite(score):
            return Verdict(score, f"{rule.score} is {score} relative to the original's")
        if score < self.floor:
            return Verdict(score, f"{rule.score} {score:.3f} relative to the original's (needs >= {self.floor:.3f})")
        return Verdict(score, None)


RULES = {
    "synflow": CapacityRule("synflow", "synflow", floor=0.01, mac_floor=0.45),
    "synflow-inherited": CapacityRule("synflow-inherited", "synflow", floor=1.6e-5, mac_floor=0.45),
    "fisher": CapacityRule("fisher", "fisher", floor=1.0),
    "none": CapacityRule("none", None, mac_floor=0.0),
}
"""The checks a search can use, by name (docs/fisher.md)."""
DEFAULT_RULE = "synflow"


def default_rule(init: str) -> str:
    """The check a search uses by default for candidates whose transformed convs are made by
    `init`: "synflow" for fresh weights, "synflow-inherited" for weights derived from the model's."""
    return "synflow-inherited" if init == "inherit" else DEFAULT_RULE


def rule_named(name: str) -> CapacityRule:
    if name not in RULES:
        raise NasirError(f"unknown capacity check '{name}' (choose from {', '.join(RULES)})")
    return RULES[name]
