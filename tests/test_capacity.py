"""The search's capacity rules (nasir/search/capacity.py) on the tiny net of test_proxies, against
the proxies' own scores (each tested by hand there) and Fisher Potential (tested in test_fisher)."""

from __future__ import annotations

import pytest
from test_proxies import data, tiny

from nasir.errors import NasirError
from nasir.fisher import fisher_potential
from nasir.search.capacity import DEFAULT_RULE, RULES, CapacityRule, default_rule, relative, rule_named
from nasir.search.proxies import jacob_cov, synflow


def test_a_rule_keeps_a_candidate_by_its_score_relative_to_the_original():
    (original, _), (candidate, _) = tiny(0), tiny(2)
    x, y = data()
    ratio = synflow(candidate, x) / synflow(original, x)
    assert ratio != pytest.approx(1.0, rel=1e-2), "the two nets must score apart for the floors to mean anything"
    below = CapacityRule("t", "synflow", floor=ratio * 1.01).bind(original, x, y)
    above = CapacityRule("t", "synflow", floor=ratio * 0.99).bind(original, x, y)
    verdict = below(candidate, mac_ratio=1.0)
    assert verdict.score == pytest.approx(ratio, rel=1e-6) and "synflow" in verdict.reason
    assert above(candidate, mac_ratio=1.0).reason is None
    # slack lowers a ratio's floor by its share: 1.01 r * (1 - 0.02) < r
    assert CapacityRule("t", "synflow", floor=ratio * 1.01).bind(original, x, y, slack=0.02)(candidate, 1.0).reason is None


def test_the_mac_floor_comes_first_and_costs_no_score():
    (original, _), (candidate, _) = tiny(0), tiny(2)
    x, y = data()
    check = CapacityRule("t", "synflow", floor=0.0, mac_floor=0.45).bind(original, x, y)
    verdict = check(candidate, mac_ratio=0.3)
    assert verdict.score is None and verdict.reason == "MACs 0.30 of the original's (needs >= 0.45)"
    assert check(candidate, mac_ratio=0.45).reason is None


def test_log_scale_scores_are_differences_and_fisher_a_ratio():
    (original, _), (candidate, _) = tiny(0), tiny(2)
    x, y = data()
    diff = jacob_cov(candidate, x) - jacob_cov(original, x)
    check = CapacityRule("t", "jacob_cov", floor=diff + 0.5).bind(original, x, y, slack=0.4)
    assert check.floor == pytest.approx(diff + 0.1)  # a difference's floor drops by the slack itself
    verdict = check(candidate, 1.0)
    assert verdict.score == pytest.approx(diff, abs=1e-6) and verdict.reason is not None
    assert relative("zico", 5.0, 2.0) == 3.0 and relative("synflow", 5.0, 2.0) == 2.5
    original, candidate = original.at_batch(len(x)), candidate.at_batch(len(x))  # Fisher runs at the batch
    fisher = RULES["fisher"].bind(original, x, y)(candidate, 1.0)
    want = fisher_potential(candidate, x, y).total / fisher_potential(original, x, y).total
    assert fisher.score == pytest.approx(want, rel=1e-6)
    assert (fisher.reason is None) == (want >= 1.0)


def test_the_rules_by_name():
    assert DEFAULT_RULE == "synflow" == default_rule("kaiming") and default_rule("inherit") == "synflow-inherited"
    assert RULES["synflow"] == CapacityRule("synflow", "synflow", floor=0.01, mac_floor=0.45)
    assert RULES["synflow-inherited"] == CapacityRule("synflow-inherited", "synflow", floor=1.6e-5, mac_floor=0.45)
    (original, _), (candidate, _) = tiny(0), tiny(2)
    x, y = data()
    assert RULES["none"].bind(original, x, y)(candidate, mac_ratio=0.01).reason is None
    with pytest.raises(NasirError, match="unknown capacity check 'snap'.*synflow, synflow-inherited, fisher, none"):
        rule_named("snap")
