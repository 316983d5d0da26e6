"""Search strategies: Optuna samplers over the per-layer choices.

- `random`: NAS-PTE's: every layer's choice drawn uniformly;
- `evolution`: NSGA-II on (latency estimate, the capacity check's score);
- `tpe`: Optuna's (multi-objective) Tree-structured Parzen Estimator.

The study minimises the latency estimate and maximises the capacity check's score (relative to
the original's: `nasir.search.capacity`), under one constraint: the score at least the rule's
floor (constraint `capacity`, which the driver sets on each trial it completes: the score's
distance below the floor, <= 0 when accepted; Optuna's samplers read it from the trial).
Candidates rejected by the score are told with their figures as infeasible trials, so evolution and tpe learn from how
far they fell short (NSGA-II ranks feasible before infeasible, infeasible by shortfall; TPE
weighs feasible trials apart) instead of seeing nothing while almost every early candidate is
rejected.
A sampler is made afresh for each trial, seeded with (search seed, trial number): the samplers keep
their history in the study, so the same seed gives the same candidates, and a resumed search goes
on with the trials that an uninterrupted one would have drawn next. Each is given the search's
joint space (every trial suggests every layer's choice), which Optuna would otherwise infer as the
intersection of all finished trials' spaces, anew for each fresh sampler: a cost that grows with
the trials (80 ms per ask at 200 trials for NSGA-II, while a worker waits for its candidate).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping, Sequence

import optuna

from nasir.errors import NasirError

DIRECTIONS = ("minimize", "maximize")
"""Objectives of a study: latency estimate (ms), Fisher Potential ratio."""

Space = dict[str, optuna.distributions.BaseDistribution]

SAMPLERS: dict[str, tuple[type[optuna.samplers.BaseSampler], dict]] = {
    "random": (optuna.samplers.RandomSampler, {}),
    "evolution": (optuna.samplers.NSGAIISampler, {"population_size": 20}),
    "tpe": (optuna.samplers.TPESampler, {"n_startup_trials": 20, "multivariate": True}),
}
"""Each strategy's Optuna sampler class and its options (the seed apart)."""


@functools.cache
def _in_space(cls: type[optuna.samplers.BaseSampler]) -> type[optuna.samplers.BaseSampler]:
    """`cls` whose joint search space is given (`space=`), not inferred from the trials."""

    class InSpace(cls):
        def __init__(self, space: Space, **options):
            super().__init__(**options)
            self.space = space

        def infer_relative_search_space(self, study, trial) -> Space:
            return self.space

    InSpace.__name__ = InSpace.__qualname__ = f"{cls.__name__}InSpace"
    return InSpace


def joint_space(choices: Mapping[str, Sequence[str]]) -> Space:
    """The strategies' space: each layer's choices (layers with more than one) as a categorical
    distribution, in name order, as Optuna would infer it."""
    return {layer: optuna.distributions.CategoricalDistribution(list(options))
            for layer, options in sorted(choices.items()) if len(options) > 1}


def sampler(strategy: str, seed: int, trial: int, space: Space) -> optuna.samplers.BaseSampler:
    """The sampler that draws trial number `trial` of a search with `seed`, over `space`
    (`joint_space`)."""
    if strategy not in SAMPLERS:
        raise NasirError(f"unknown strategy '{strategy}' (choose from {', '.join(SAMPLERS)})")
    cls, options = SAMPLERS[strategy]
    return _in_space(cls)(space, seed=zlib.crc32(f"{seed}:{trial}".encode()), **options)
