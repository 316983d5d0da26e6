"""Live progress of a search (rich): done/total, accepted, rejected per filter, skipped, failed, best
speedup so far (original time / best latency estimate of an accepted candidate), ETA; then the
front's members measured whole, one by one."""

from __future__ import annotations

from typing import Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


from nasir.console import progress_console
from nasir.search.results import Candidate


class SearchProgress:
    """A rich progress bar fed candidate by candidate; silent when `enabled` is False."""

    def __init__(self, total: int | None, original_ms: float,
                 done: list[Candidate], enabled: bool = True, console: Console | None = None):
        self.original_ms = original_ms
        self.counts: dict[str, int] = {}
        self.best_ms: float | None = None
        self.console = console or progress_console()
        self.progress = Progress(TextColumn("{task.fields[stage]}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=self.console, disable=not enabled)
        self.task = self.progress.add_task("", total=total, stage="search")
        for c in done:
            self.add(c)

    def add(self, candidate: Candidate) -> None:
        o = candidate.outcome
        key = o.stage if o.status == "rejected" else o.status
        self.counts[key] = self.counts.get(key, 0) + 1
        if o.status == "accepted" and (self.best_ms is None or o.estimate_ms < self.best_ms):
            self.best_ms = o.estimate_ms
        self.progress.update(self.task, advance=1, description=self.describe())

    def describe(self) -> str:
        c = self.counts
        rejected = ", ".join(f"{k} {v}" for k, v in c.items() if k not in ("accepted", "skipped", "failed"))
        best = f"{self.original_ms / self.best_ms:.2f}x" if self.best_ms else "-"
        return (f"accepted {c.get('accepted', 0)} | rejected: {rejected or '0'} | too slow to score "
                f"{c.get('skipped', 0)} | failed {c.get('failed', 0)} | best speedup (est.) {best}")

    def measuring(self, members: int, pass_number: int = 1) -> None:
        """The front's `members` are now being compiled whole and timed (pass `pass_number`)."""
        self.front = self.progress.add_task("", total=members, stage=f"front measured whole (pass {pass_number})")

    def measured(self) -> None:
        self.progress.update(self.front, advance=1)

    def note(self, text: str) -> None:
        self.console.print(text)

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()
