"""Search strategies: Optuna samplers over the per-layer choices.

- `random`: NAS-PTE's: every layer's choice drawn uniformly;
- `evolution`: NSGA-II on (latency estimate, Fisher Potential ratio);
- `tpe`: Optuna's (multi-objective) Tree-structured Parzen Estimator.

The study minimises the latency estimate and maximises the Fisher ratio of accepted candidates.
A sampler is made afresh for each trial, seeded with (search seed, trial number): the samplers keep
their history in the study, so the same seed gives the same candidates, and a resumed search goes
on with the trials that an uninterrupted one would have drawn next.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import optuna

from nasir.errors import NasirError

DIRECTIONS = ("minimize", "maximize")
"""Objectives of a study: latency estimate (ms), Fisher Potential ratio."""

SAMPLERS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    "evolution": lambda seed: optuna.samplers.NSGAIISampler(seed=seed, population_size=20),
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=20, multivariate=True),
}


def sampler(strategy: str, seed: int, trial: int) -> optuna.samplers.BaseSampler:
    """The sampler that draws trial number `trial` of a search with `seed`."""
    if strategy not in SAMPLERS:
        raise NasirError(f"unknown strategy '{strategy}' (choose from {', '.join(SAMPLERS)})")
    return SAMPLERS[strategy](zlib.crc32(f"{seed}:{trial}".encode()))
