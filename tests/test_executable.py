"""Executable's shared runner: input checks and the timing loop behind benchmark() and profile()."""

from __future__ import annotations

import numpy as np
import pytest

from nasir.errors import RuntimeInputError
from nasir.runtime.executable import Executable


class Counting(Executable):
    """An executable whose run only counts its calls (and does a little work, so times are > 0)."""

    def __init__(self):
        super().__init__(["x"], [(1, 3)], ["y"])
        self.calls = 0

    def _run(self, arrays):
        self.calls += 1
        total = sum(range(2000))
        return [arrays[0] * 0 + total]


@pytest.mark.parametrize("repeat, warmup, runs", [(5, 2, 7), (1, 0, 1), (0, 1, 2)])
def test_benchmark_runs_warmup_then_repeat(repeat, warmup, runs):
    exe = Counting()
    stats = exe.benchmark(np.zeros((1, 3), np.float32), repeat=repeat, warmup=warmup)
    assert exe.calls == runs  # repeat=0 still times one run instead of raising
    assert stats["repeat"] == runs - warmup
    assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]


def test_timed_runs_calls_before_each_untimed_before_every_timed_run():
    exe, order = Counting(), []
    for _ in exe.timed_runs([np.zeros((1, 3), np.float32)], repeat=3, warmup=1,
                            before_each=lambda: order.append(exe.calls)):
        order.append("timed")
    # one warm-up run, then before_each sees the count of runs so far before each timed one
    assert order == [1, "timed", 2, "timed", 3, "timed"]


def test_benchmark_checks_inputs():
    with pytest.raises(RuntimeInputError, match="has shape \\[2, 3\\]"):
        Counting().benchmark(np.zeros((2, 3), np.float32))
