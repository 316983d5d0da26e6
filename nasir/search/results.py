"""What a search found: every candidate with its outcome, the Pareto front, the best network.

The front is over the accepted candidates: lower latency estimate and higher Fisher ratio, neither
worse in both. Its members are compiled whole and measured (`measured_ms`, beside the estimate);
`best` is the fastest measured member. Files written in the output folder (each whole or not at
all: written beside, then renamed):

- `results.jsonl`: one line per candidate (trial number, pipeline, outcome, figures; `accuracy` of
  the trained ones, after a line for the original, when the front was trained: `accuracy.py`);
- `pareto.png`: latency vs Fisher ratio, the front highlighted, the original marked (trained
  networks labelled with their accuracy);
- `best.pipeline`, `best.onnx`: the best network's pipeline and the network itself (batch 1).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from nasir.search.evaluate import Outcome


@dataclass
class Candidate:
    """One evaluated candidate: its trial number, pipeline and outcome; front members also get
    their measured whole-model time, and those trained (`--train-top`) their test accuracy (%)."""

    number: int
    pipeline: str
    outcome: Outcome
    measured_ms: float | None = None
    accuracy: float | None = None

    def to_json(self) -> dict:
        return {"number": self.number, "pipeline": self.pipeline, **self.outcome.to_json(),
                "measured_ms": self.measured_ms, "accuracy": self.accuracy}


@dataclass
class SearchResult:
    """`candidates` in trial order, `pareto` (the front, fastest first) and `best` (or None);
    `seconds`: this run's time evaluating candidates (`search`) and measuring the front (`front`);
    `original_accuracy`: the original's test accuracy (%) when the front was trained."""

    original_ms: float
    candidates: list[Candidate]
    pareto: list[Candidate] = field(default_factory=list)
    best: Candidate | None = None
    out: Path | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    original_accuracy: float | None = None

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
    """Accepted candidates no other accepted one beats in both latency and Fisher ratio, fastest first."""
    pool = [c for c in candidates if c.outcome.status == "accepted"]

    def beaten(c: Candidate) -> bool:
        a = c.outcome
        return any(o.outcome.estimate_ms <= a.estimate_ms and o.outcome.fisher_ratio >= a.fisher_ratio
                   and (o.outcome.estimate_ms < a.estimate_ms or o.outcome.fisher_ratio > a.fisher_ratio)
                   for o in pool)

    return sorted((c for c in pool if not beaten(c)), key=lambda c: c.outcome.estimate_ms)


def passes(pipeline: str) -> str:
    """The passes of a pipeline and how often each runs: `group{...},group{...},fold{...}` -> `group x2, fold`."""
    names = Counter(step.split("{")[0] for step in re.split(r"(?<=\}),", pipeline) if step)
    return ", ".join(f"{name} x{k}" if k > 1 else name for name, k in names.items()) or "(none)"


def front_table(result: SearchResult) -> Table:
    trained = result.original_accuracy is not None
    accuracy = f", {result.original_accuracy:.2f}% accurate" if trained else ""
    table = Table(title=f"Pareto front (original: {result.original_ms:.2f} ms{accuracy}; "
                        "whole pipelines in results.jsonl)")
    columns = ("trial", "est. ms", "ms", "speedup", "MACs", "params", "Fisher", *(("acc %",) if trained else ()),
               "passes")
    for col in columns:
        table.add_column(col, justify="left" if col == "passes" else "right", overflow="fold")
    for c in result.pareto:
        o, ms = c.outcome, c.measured_ms
        acc = (f"{c.accuracy:.2f}" if c.accuracy is not None else "-",) if trained else ()
        table.add_row(str(c.number), f"{o.estimate_ms:.2f}", f"{ms:.2f}" if ms else "-",
                      f"{result.original_ms / ms:.2f}x" if ms else "-", f"{o.mac_ratio:.2f}", f"{o.param_ratio:.2f}",
                      f"{o.fisher_ratio:.3f}", *acc, passes(c.pipeline))
    return table


def write_atomically(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data if isinstance(data, bytes) else data.encode())
    os.replace(tmp, path)


def write_jsonl(result: SearchResult, path: Path) -> None:
    """One line per candidate; first, when the front was trained, the original's (status "original")."""
    original = ([{"number": None, "pipeline": "", "status": "original", "measured_ms": result.original_ms,
                  "accuracy": result.original_accuracy}] if result.original_accuracy is not None else [])
    rows = original + [c.to_json() for c in result.candidates]
    write_atomically(path, "".join(json.dumps(row) + "\n" for row in rows))


def plot_front(result: SearchResult, path: Path) -> None:
    """Latency estimate vs Fisher ratio of the accepted candidates; the front joined; the original."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    acc = result.accepted
    ax.scatter([c.outcome.estimate_ms for c in acc], [c.outcome.fisher_ratio for c in acc], s=12,
               color="#9bb7d4", label=f"accepted ({len(acc)})")
    front = result.pareto
    ax.plot([c.outcome.estimate_ms for c in front], [c.outcome.fisher_ratio for c in front], "o-",
            color="#c0392b", label=f"Pareto front ({len(front)})")
    ax.scatter([result.original_ms], [1.0], marker="*", s=160, color="black", label="original", zorder=3)
    labels = [(result.original_ms, 1.0, result.original_accuracy)] + [
        (c.outcome.estimate_ms, c.outcome.fisher_ratio, c.accuracy) for c in front]
    for x, y, accuracy in labels:  # test accuracy of the trained networks (--train-top)
        if accuracy is not None:
            ax.annotate(f"{accuracy:.1f}%", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("latency estimate (ms)")
    ax.set_ylabel("Fisher Potential / original's")
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

