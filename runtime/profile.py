"""Where the time of a compiled model goes: per kernel call, next to its share of the MACs.

`compile(model, profile=True)` builds @main with a time-stamp counter read around every kernel call
(`convert-loops-to-llvm{profile=true}`); `exe.profile(x)` runs it and returns a `Profile`, and
`nasir profile MODEL` prints it:

    >>> exe = nasir.compile(nasir.zoo.load("resnet18"), profile=True)
    >>> print(exe.profile(x))
    layer                       shares kernel   MMACs     ms  time %  MACs %  GFLOP/s
    --------------------------------------------------------------------------------
    conv1_Conv                                   1.77  0.044     0.4     0.3     79.8
    layer1_layer1.0_conv1_Conv                  37.75  0.623     5.0     6.8    121.1
    layer1_layer1.0_conv2_Conv                  37.75  0.692     5.5     6.8    109.1
    ...
    --------------------------------------------------------------------------------
    outside kernels                                   0.001     0.0
    total (1 thread)            22 calls       555.42 12.563   100.0   100.0     88.4

A call's ms is its median ticks over the runs as a share of the sum of every call's median and the
median of @main's ticks outside the calls, times the median latency of the same runs; calls of one
shared kernel are rows of their own. (As shares of @main's median, the calls' medians fell 1-4%
short of it on a noisy machine: a run slowed anywhere raises @main's median, not each call's;
"outside kernels" showed 1 ms of ResNeXt-29's 28 where nothing runs.) `profile.by_class()`
(`nasir profile --by class`) sums the calls of each layer class ("conv 3x3", "grouped conv 1x1 s2",
"gemm": `ComputeOp.layer_class`): each class's share of the FMA peak, as the AVX2 work reports it.
"time % / MACs %" above 1 marks the layers that run below the model's average rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nasir.dialects.attributes import UNCLASSIFIED
from nasir.runtime.tables import plain_table, rich_table


@dataclass(frozen=True)
class ProfileRow:
    """One kernel call of @main: the layer it computes, its kernel, MACs and time."""

    layer: str
    kernel: str
    macs: int
    ms: float
    share: float
    """Fraction of @main's time."""
    layer_class: str = UNCLASSIFIED
    """What kind of layer the call computes: "conv 3x3", "grouped conv 1x1 s2", "gemm", ...
    (`ComputeOp.layer_class`)."""


@dataclass(frozen=True)
class Profile:
    """Rows in call order; `outside_ms` is @main's time outside kernel calls (concat copies)."""

    rows: list[ProfileRow]
    total_ms: float
    outside_ms: float
    threads: int
    peak_gflops: float | None = None
    """The machine's FMA peak for the code's vector width, all its threads together
    (`nasir.measure.peak`); where given, the table has a "% peak" column."""

    @classmethod
    def from_ticks(cls, calls: list[dict], runs: list[list[float]], total_ms: float, threads: int) -> "Profile":
        """`runs`: a list per run of one count per call, then @main's own (the last). Each call's
        median and the median of @main's count outside the calls, as shares of their sum, share
        `total_ms`:

            from_ticks([{"layer": "a", ...}], [[90, 100], [99, 100], [80, 81]], total_ms=2.0, threads=1)
                ->  the call's median 90, outside's (10, 1, 1) 1: "a" 2.0 * 90 / 91 ms, outside 2.0 / 91
            (as shares of @main's median, 100: "a" 1.8 ms, outside 0.2)
        """
        ticks = np.asarray(runs, dtype=float)
        medians = np.median(ticks[:, :-1], axis=0)
        outside = float(np.median(np.maximum(ticks[:, -1] - ticks[:, :-1].sum(axis=1), 0)))
        whole = float(medians.sum()) + outside or 1.0  # counts in ms (TVM's) may sum to under 1
        rows = [ProfileRow(c["layer"], c["kernel"], c["macs"], total_ms * t / whole, t / whole, c.get("class", UNCLASSIFIED))
                for c, t in zip(calls, medians.tolist())]
        return cls(rows, total_ms, total_ms * outside / whole, threads)

    @property
    def total_macs(self) -> int:
        return sum(r.macs for r in self.rows)

    def by_class(self) -> list[ProfileRow]:
        """One row per layer class (`ProfileRow.layer_class`), in the order the classes are first
        called: its calls' MACs, ms and shares summed, named with its number of calls
        (`nasir profile --by class`; a class's GFLOP/s is its MACs over its time):

            conv 3x3 (29 calls)    3352.70  59.175  ...  113.3  96
            conv 1x1 s2 (3 calls)    19.27   0.364  ...  105.9  90
        """
        groups: dict[str, list[ProfileRow]] = {}
        for r in self.rows:
            groups.setdefault(r.layer_class, []).append(r)
        return [ProfileRow(f"{name} ({len(rows)} call{'s' if len(rows) > 1 else ''})", name,
                           sum(r.macs for r in rows), sum(r.ms for r in rows), sum(r.share for r in rows), name)
                for name, rows in groups.items()]

    HEADER = ("layer", "shares kernel", "MMACs", "ms", "time %", "MACs %", "GFLOP/s")
    """"shares kernel": the kernel of an earlier layer this call runs (identical nests share one)."""

    @property
    def header(self) -> tuple[str, ...]:
        return self.HEADER + (("% peak",) if self.peak_gflops else ())

    def _cells(self, rows: list[ProfileRow]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        macs = max(self.total_macs, 1)

        def rate(m: int, ms: float) -> tuple[str, ...]:
            gflops = 2 * m / (ms * 1e6) if m and ms > 0 else None
            cells = (f"{gflops:.1f}" if gflops else "-",)
            if self.peak_gflops:
                cells += (f"{100 * gflops / self.peak_gflops:.0f}" if gflops else "-",)
            return cells

        first = {}  # kernel -> the first layer (in call order) that runs it (a class row shares none)
        for r in self.rows:
            first.setdefault(r.kernel, r.layer)
        body = [(r.layer, "" if first.get(r.kernel, r.layer) == r.layer else r.kernel,
                 f"{r.macs / 1e6:.2f}" if r.macs else "-", f"{r.ms:.3f}",
                 f"{100 * r.share:.1f}", f"{100 * r.macs / macs:.1f}" if r.macs else "-", *rate(r.macs, r.ms))
                for r in rows]
        foot = [("outside kernels", "", "", f"{self.outside_ms:.3f}", f"{100 * self.outside_ms / self.total_ms:.1f}",
                 "", *[""] * len(rate(0, 0))),
                (f"total ({self.threads} thread{'s' if self.threads > 1 else ''})", f"{len(self.rows)} calls",
                 f"{self.total_macs / 1e6:.2f}", f"{self.total_ms:.3f}", "100.0", "100.0",
                 *rate(self.total_macs, self.total_ms))]
        return body, foot

    def text(self, rows: list[ProfileRow] | None = None) -> str:
        """Plain text of `rows` (default: all, in call order)."""
        body, foot = self._cells(self.rows if rows is None else rows)
        return plain_table(self.header, body, foot, left=2)

    def __str__(self) -> str:
        return self.text()

    def table(self, rows: list[ProfileRow] | None = None):
        """A rich table of `rows` (default: all, in call order)."""
        body, foot = self._cells(self.rows if rows is None else rows)
        return rich_table(self.header, body, foot, left=2)

    def __rich__(self):
        return self.table()
