"""Timings that reproduce on a shared machine: functions timed interleaved, round by round, with
the spread of their samples kept, and a reference kernel that says whether the machine was busy.

Used by the benchmarks (`nasir.measure.benchmark.median_ms`) and by the search, which times each front
member against the original in the same rounds (`nasir.search.evaluate.Evaluator.measure`): a
load that comes and goes during the run slows both alike, so their ratio holds where either time
alone does not.

    samples = interleaved({"candidate": run_candidate, "original": run_original}, rounds=7)
    Spread.of(samples["candidate"])          # Spread(median=2.81, q1=2.79, q3=2.90), in ms
    ratios(samples["original"], samples["candidate"])   # the speedup of each round
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SETTLE_S = 0.03
"""Seconds of idle before each function's calls, at least (`settle`: then until the process's other
threads are idle)."""

SETTLE_MAX_S = 1.0
"""The longest `settle` waits for the process's other threads to stop running."""

SETTLE_POLL_S = 0.02
"""`settle`'s window: the other threads are idle when they gained no CPU time in one. Linux counts
thread CPU time in ticks of 10 ms; a spinning thread gains two a window."""

WARM_MS = 5.0
"""Milliseconds of a function's own untimed calls before each timed one (at least one call): on a
shared Zen 3 host, after 20 ms of idle, ResNet-34 after `depthwise` (0.73 ms a call in a loop) took
1.43, 1.00, 0.87, 0.78 ms in its first four calls; one untimed call left the timed one 1.4x its
steady time, where a 30 ms model is in its steady state after one."""

SAMPLE_MS = 2.0
"""Milliseconds a timed sample lasts at least: back to back calls of one function, their mean
(TVM's `time_evaluator` min_repeat_ms); a model slower than this is one call a sample. On a Zen 4
VM at 2 threads, ResNet-34 cifar10 after `depthwise` (0.21 ms a call in a loop) timed one call
a sample gave medians of 9 rounds from 0.20 to 0.37 ms, its realisation 0.47 to 1.00."""

BUSY_DRIFT = 0.10
"""The reference kernel's median rate changing by more than this fraction between before and
after, or running this fraction below its best run, means other work shared the cores."""


@dataclass(frozen=True)
class Spread:
    """The median and the quartiles of some samples.

        >>> Spread.of([1.0, 2.0, 3.0, 4.0, 100.0])
        Spread(median=3.0, q1=2.0, q3=4.0)
        >>> Spread.of([1.0, 2.0, 3.0]).overlaps(Spread.of([2.0, 3.0, 4.0]))
        True
    """

    median: float
    q1: float
    q3: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        q1, median, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 50, 75])
        return cls(float(median), float(q1), float(q3))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def overlaps(self, other: Spread) -> bool:
        """Whether the interquartile ranges meet: the two cannot be told apart by these samples."""
        return self.q1 <= other.q3 and other.q1 <= self.q3


def other_threads_cpu() -> int | None:
    """CPU time, in clock ticks, that this process's threads other than the calling one have run
    (Linux's /proc/self/task/*/stat); None where the system does not say."""
    me, total = threading.get_native_id(), 0
    try:
        for tid in os.listdir("/proc/self/task"):
            if int(tid) != me:
                with open(f"/proc/self/task/{tid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, ValueError, IndexError):
        return None
    return total


def settle(seconds: float, cpu: Callable[[], int | None] = other_threads_cpu,
           sleep: Callable[[float], object] = time.sleep, clock: Callable[[], float] = time.perf_counter,
           poll_s: float = SETTLE_POLL_S, max_s: float = SETTLE_MAX_S) -> None:
    """Idle `seconds`, then on until no other thread of this process runs for a `poll_s` window
    (at most `max_s` more): another runtime's workers spinning after its run would share the cores
    with the next function timed. After a 2-thread run, ONNX Runtime 1.2x's intra-op worker spun
    about 70 ms on a Zen 3 (its CPU time grew a tick each 10 ms): there nasir's 2-thread code,
    timed 30 ms after ORT's run, took 7.2 ms for ResNet-34 imagenet after `depthwise`, against 3.3
    ms after idle, more than its 5.7 ms on one thread."""
    sleep(seconds)
    before, deadline = cpu(), clock() + max_s
    while before is not None and clock() < deadline:
        sleep(poll_s)
        now = cpu()
        if now == before:
            return
        before = now


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1, settle_s: float = SETTLE_S,
                clock: Callable[[], float] = time.perf_counter,
                sleep: Callable[[float], object] = settle, warm_ms: float = WARM_MS,
                sample_ms: float = SAMPLE_MS) -> dict[str, list[float]]:
    """Each `fn()`'s wall time in ms, a sample a round, the functions taking turns within a round:
    a sample is the mean of back to back calls lasting `sample_ms` at least (one call for a fn
    slower than that).

    Interleaving makes their ratios robust to load that changes during the run (the machine is
    shared): each round sees about the same load for all of them. Each sample follows untimed calls
    of the same fn (`warm_ms` of them, at least one), so that it runs as a deployed model does,
    after its own previous inferences: timed right after another model, a small model found
    its weights and buffers evicted by it (ResNet-34 group16: 6% slower). Each fn starts after
    `settle_s` of idle and the process's other threads idle (`sleep`, by default `settle`): with 2
    threads, ResNet-18 cifar10 took 9.4 ms right after an ONNX Runtime run (whose spinning worker
    held a core) against 5.3 ms after 20 ms of idle.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, rounds)):
        for name, fn in fns.items():
            sleep(settle_s)
            _calls_for(fn, warm_ms, clock)
            elapsed, calls = _calls_for(fn, sample_ms, clock)
            times[name].append(elapsed / calls)
    return times


def _calls_for(fn: Callable[[], object], ms: float, clock: Callable[[], float]) -> tuple[float, int]:
    """Call `fn` back to back, once at least, until `ms` have passed: (the ms they took, the calls)."""
    start, calls = clock(), 0
    while True:
        fn()
        calls += 1
        elapsed = (clock() - start) * 1e3
        if elapsed >= ms:
            return elapsed, calls


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round by round ratios of two functions' interleaved samples (`interleaved`).

        >>> ratios([4.0, 6.0], [2.0, 2.0])
        [2.0, 3.0]
    """
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def reference_rate() -> tuple[float, float]:
    """(median, best) GFLOP/s of a register-only FMA kernel on this thread (`nasir.measure.peak`): the
    machine's state now, which `busy` compares before and after a measurement."""
    from nasir.measure.peak import measure_peak_gflops

    rate = measure_peak_gflops(repeat=30, seconds=0.002)
    return rate["median_gflops"], rate["peak_gflops"]


def busy(before: tuple[float, float], after: tuple[float, float]) -> str | None:
    """Why the machine looks busy from the reference rates `before` and `after` a measurement
    (`reference_rate`), or None when it looked quiet throughout.

        >>> busy((50.0, 51.0), (49.0, 51.0)) is None
        True
        >>> busy((50.0, 51.0), (30.0, 51.0))
        'a reference kernel ran at 50.0 GFLOP/s before and 30.0 after (best run 51.0)'
    """
    (b, b_best), (a, a_best) = before, after
    best = max(b_best, a_best)
    if abs(a - b) > BUSY_DRIFT * max(a, b) or min(a, b) < (1 - BUSY_DRIFT) * best:
        return f"a reference kernel ran at {b:.1f} GFLOP/s before and {a:.1f} after (best run {best:.1f})"
    return None
