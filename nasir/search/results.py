"""What a search found: every candidate with its outcome, the Pareto front, the best network.

The front is over the accepted candidates: lower latency estimate and higher capacity (`Outcome.capacity`), neither
worse in both. Its members are compiled whole and timed against the original in interleaved
rounds (`samples`; `measured_ms` their median, beside the estimate), ranked by speedup, and those
whose interquartile ranges meet are ties; `best` is the fastest measured member. Files written in the output folder (each whole or not at
all: written beside, then renamed):

- `results.jsonl`: one line per candidate (trial number, pipeline, outcome, figures; the front's
  `measured_ms`, `measured_iqr_ms`, `speedup`, `speedup_iqr`, `rounds`, `ties`; `accuracy` of
  the trained ones, after a line for the original, when the front was trained: `accuracy.py`);
- `pareto.png`: latency vs capacity, the front's estimates and measured times, the original's
  measured time (trained
  networks labelled with their accuracy);
- `best.pipeline`, `best.onnx`: the best network's pipeline, whole (`convert-nn-to-nest` first: it
  applies to the original as imported), and the network itself (batch 1).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from nasir.measure.timing import Spread, ratios
from nasir.search.evaluate import Outcome
from nasir.search.sources import from_nn

if TYPE_CHECKING:
    from nasir.model import Model
    from nasir.search.finetune import Verified


@dataclass
class Candidate:
    """One evaluated candidate: its trial number, pipeline and outcome; front members also get
    their whole-model times against the original's, round by round (`samples`: ms, {"candidate":
    [...], "original": [...]}; `measured_ms` is the median), the members they cannot be told apart
    from (`ties`), and those trained (`--train-top`) their test accuracy (%)."""

    number: int
    pipeline: str
    outcome: Outcome
    measured_ms: float | None = None
    accuracy: float | None = None
    samples: dict[str, list[float]] | None = None
    ties: list[int] = field(default_factory=list)

    def add_samples(self, samples: dict[str, list[float]]) -> None:
        """One more measurement's rounds, after those already taken."""
        old = self.samples or {"candidate": [], "original": []}
        self.samples = {k: old[k] + list(samples[k]) for k in ("candidate", "original")}
        self.measured_ms = Spread.of(self.samples["candidate"]).median

    @property
    def spread(self) -> Spread | None:
        """The measured ms, median and quartiles."""
        return Spread.of(self.samples["candidate"]) if self.samples else None

    @property
    def speedup(self) -> Spread | None:
        """The original's time over this one's, each round's ratio (timed in the same round)."""
        return Spread.of(ratios(self.samples["original"], self.samples["candidate"])) if self.samples else None

    def to_json(self) -> dict:
        measured = {}
        if self.samples:
            ms, speedup = self.spread, self.speedup
            measured = {"measured_iqr_ms": ms.iqr, "original_measured_ms": Spread.of(self.samples["original"]).median,
                        "speedup": speedup.median, "speedup_iqr": speedup.iqr,
                        "rounds": len(self.samples["candidate"]), "ties": self.ties}
        return {"number": self.number, "pipeline": self.pipeline, **self.outcome.to_json(),
                "measured_ms": self.measured_ms, **measured, "accuracy": self.accuracy}


@dataclass
class SearchResult:
    """`candidates` in trial order, `pareto` (the front, fastest first) and `best` (or None);
    `seconds`: this run's time evaluating candidates (`search`) and measuring the front (`front`);
    `original_accuracy`: the original's test accuracy (%) when the front was trained; `busy`: why
    the machine looked busy while the front was measured (`nasir.measure.timing.busy`), or None;
    `resumed`: the stored search this run went on from, or None."""

    original_ms: float
    candidates: list[Candidate]
    pareto: list[Candidate] = field(default_factory=list)
    best: Candidate | None = None
    out: Path | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    original_accuracy: float | None = None
    busy: str | None = None
    resumed: str | None = None
    verified: Verified | None = None
    """With an accuracy tolerance: the fine-tuned candidates (`nasir.search.finetune.Verified`)."""

    @property
    def measured(self) -> list[Candidate]:
        """The measured members of the front, fastest first (by speedup: each timed against the
        original in the same rounds, which a load that comes and goes does not skew)."""
        return ranked(self.pareto)

    @property
    def original_measured(self) -> Spread | None:
        """The original's ms over all the rounds it was timed in beside the front's members."""
        samples = [ms for c in self.pareto if c.samples for ms in c.samples["original"]]
        return Spread.of(samples) if samples else None

    @property
    def accepted(self) -> list[Candidate]:
        return [c for c in self.candidates if c.outcome.status == "accepted"]

    def counts(self) -> dict[str, int]:
        """accepted, failed, and rejected per stage."""
        out: dict[str, int] = {}
        for c in self.candidates:
            key = c.outcome.status if c.outcome.status != "rejected" else f"rejected: {c.outcome.stage}"
            out[key] = out.get(key, 0) + 1
        return out


def pareto_front(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Accepted candidates no other accepted one beats in both latency and capacity (the check's
    score, or the MAC ratio without one: `Outcome.capacity`), fastest first."""
    pool = [c for c in candidates if c.outcome.status == "accepted"]

    def beaten(c: Candidate) -> bool:
        a = c.outcome
        return any(o.outcome.estimate_ms <= a.estimate_ms and o.outcome.capacity >= a.capacity
                   and (o.outcome.estimate_ms < a.estimate_ms or o.outcome.capacity > a.capacity)
                   for o in pool)

    return sorted((c for c in pool if not beaten(c)), key=lambda c: c.outcome.estimate_ms)


def ranked(members: Iterable[Candidate]) -> list[Candidate]:
    """The measured ones among `members`, fastest first (highest median speedup)."""
    return sorted((c for c in members if c.samples), key=lambda c: -c.speedup.median)


def mark_ties(members: Iterable[Candidate]) -> None:
    """Set each measured member's `ties`: the members whose speedup's interquartile range meets
    its own, directly or through a chain of neighbours in the ranking."""
    order = ranked(members)
    groups: list[list[Candidate]] = []
    for c in order:
        if groups and groups[-1][-1].speedup.overlaps(c.speedup):
            groups[-1].append(c)
        else:
            groups.append([c])
    for group in groups:
        for c in group:
            c.ties = [o.number for o in group if o is not c]


def passes(pipeline: str) -> str:
    """The passes of a pipeline and how often each runs: `group{...},group{...},fold{...}` -> `group x2, fold`."""
    names = Counter(step.split("{")[0] for step in re.split(r"(?<=\}),", pipeline) if step)
    return ", ".join(f"{name} x{k}" if k > 1 else name for name, k in names.items()) or "(none)"


def front_table(result: SearchResult) -> Table:
    """The front, measured members first, fastest first; speedup as median and IQR of the rounds
    (each the original's time over the member's, timed in the same round); ms as the original's
    median over every round divided by that speedup (a member's own ms, taken while the load came
    and went, could rank otherwise: results.jsonl keeps them); MACs and params as fractions of the
    original's."""
    trained = result.original_accuracy is not None
    accuracy = f", {result.original_accuracy:.2f}% accurate" if trained else ""
    om = result.original_measured
    original = (f"{om.median:.2f} ms [{om.iqr:.2f}] timed with the front, {result.original_ms:.2f} ms profiled"
                if om else f"{result.original_ms:.2f} ms profiled")
    table = Table(title=f"Pareto front, fastest measured first (original: {original}{accuracy}; "
                        "median [IQR] of interleaved rounds, ms at the original's median; whole pipelines in "
                        "results.jsonl)")
    columns = ("trial", "est. ms", "measured ms", "speedup", "MACs / orig.", "params / orig.", "score / orig.",
               *(("acc %",) if trained else ()), "ties", "passes")
    for col in columns:
        table.add_column(col, justify="left" if col == "passes" else "right", overflow="fold")
    members = result.measured + [c for c in result.pareto if not c.samples]
    for c in members:
        o, speedup = c.outcome, c.speedup
        acc = (f"{c.accuracy:.2f}" if c.accuracy is not None else "-",) if trained else ()
        ms = (f"{om.median / speedup.median:.2f} [{om.median / speedup.q1 - om.median / speedup.q3:.2f}]"
              if speedup else "-")
        table.add_row(str(c.number), f"{o.estimate_ms:.2f}", ms,
                      f"{speedup.median:.2f}x [{speedup.iqr:.2f}]" if speedup else "-", f"{o.mac_ratio:.2f}",
                      f"{o.param_ratio:.2f}", f"{o.score:.3f}" if o.score is not None else "-", *acc, ", ".join(map(str, c.ties)),
                      passes(c.pipeline))
    return table


def write_atomically(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
    os.replace(tmp, path)


def write_best(out: Path, pipeline: str, network: Model) -> None:
    """best.pipeline (whole: `convert-nn-to-nest` first) and best.onnx (`network`, batch 1) in `out`,
    each whole or not at all."""
    write_atomically(out / "best.pipeline", from_nn(pipeline) + "\n")
    tmp = out / ".best.tmp.onnx"
    network.to_onnx(tmp)
    os.replace(tmp, out / "best.onnx")


def written_best(out: Path, pipeline: str) -> bool:
    """Whether `out` already holds best.pipeline of `pipeline` and its best.onnx."""
    path = out / "best.pipeline"
    return (out / "best.onnx").exists() and path.exists() and path.read_text() == from_nn(pipeline) + "\n"


def write_jsonl(result: SearchResult, path: Path) -> None:
    """One line per candidate; first, when the front was trained, the original's (status "original")."""
    original = ([{"number": None, "pipeline": "", "status": "original", "measured_ms": result.original_ms,
                  "accuracy": result.original_accuracy}] if result.original_accuracy is not None else [])
    rows = original + [c.to_json() for c in result.candidates]
    write_atomically(path, "".join(json.dumps(row) + "\n" for row in rows))


def plot_front(result: SearchResult, path: Path) -> None:
    """Latency vs capacity (the check's score, or the MAC ratio: `Outcome.capacity`): the accepted
    candidates' estimates, the front's estimates joined, its measured members' medians with their
    IQR, the original's measured time, and the accuracy of the trained or fine-tuned networks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    acc = result.accepted
    ax.scatter([c.outcome.estimate_ms for c in acc], [c.outcome.capacity for c in acc], s=12,
               color="#9bb7d4", label=f"accepted ({len(acc)})")
    front = result.pareto
    ax.plot([c.outcome.estimate_ms for c in front], [c.outcome.capacity for c in front], "o-",
            color="#c0392b", label=f"Pareto front, estimated ({len(front)})")
    measured = result.measured
    if measured:
        ms = [c.spread for c in measured]
        ax.errorbar([s.median for s in ms], [c.outcome.capacity for c in measured],
                    xerr=[[s.median - s.q1 for s in ms], [s.q3 - s.median for s in ms]], fmt="D", color="#1e8449",
                    label=f"front measured ({len(measured)}), median and IQR", zorder=4)
    om = result.original_measured
    original_ms = om.median if om else result.original_ms
    ax.scatter([original_ms], [1.0], marker="*", s=160, color="black", zorder=3,
               label="original (measured with the front)" if om else "original (profiled)")
    labels = [(original_ms, 1.0, result.original_accuracy)] + [
        (c.measured_ms or c.outcome.estimate_ms, c.outcome.capacity, c.accuracy) for c in result.candidates
        if c.accuracy is not None and (c.measured_ms or c.outcome.estimate_ms)]
    for x, y, accuracy in labels:  # test accuracy of the trained or fine-tuned networks
        if accuracy is not None:
            ax.annotate(f"{accuracy:.1f}%", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("latency (ms, batch 1)")
    ax.set_ylabel("capacity score / original's" if any(c.outcome.score is not None for c in acc)
                  else "MACs / original's (no capacity check)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def outcome_of(attrs: dict) -> Outcome:
    fields = set(Outcome.__dataclass_fields__)
    return Outcome(**{k: v for k, v in attrs.items() if k in fields})

