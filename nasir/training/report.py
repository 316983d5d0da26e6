"""What a training run shows and writes: a live progress bar (epoch, loss, accuracy, ETA), and in
its output folder `metrics.csv` (one row per epoch) and `curves.png` (loss and accuracy per epoch),
both rewritten after every epoch (whole or not at all)."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from nasir.console import progress_console

COLUMNS = ("epoch", "lr", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "seconds")
"""The metrics of one epoch (accuracies in percent; `seconds`: the epoch's wall time)."""


class TrainProgress:
    """A bar over the steps of all epochs, described by the last epoch's metrics."""

    def __init__(self, title: str, epochs: int, steps: int, done_epochs: int, enabled: bool = True):
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[metrics]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=progress_console(),
                                 disable=not enabled)
        self.title, self.epochs = title, epochs
        self.task = self.progress.add_task(self._describe(done_epochs), total=epochs * steps,
                                           completed=done_epochs * steps, metrics="")

    def _describe(self, epoch: int) -> str:
        return f"{self.title} epoch {min(epoch + 1, self.epochs)}/{self.epochs}"

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def step(self) -> None:
        self.progress.advance(self.task)

    def note(self, text: str) -> None:
        """A line above the bar (when the bar is shown)."""
        if not self.progress.disable:
            self.progress.console.print(text)

    def epoch(self, row: dict) -> None:
        metrics = (f"loss {row['train_loss']:.3f}  train {row['train_accuracy']:.1f}%  "
                   f"test {row['test_accuracy']:.1f}%")
        self.progress.update(self.task, description=self._describe(row["epoch"]), metrics=metrics)


def write_metrics(folder: Path, history: list[dict]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(history)
    _replace(folder / "metrics.csv", out.getvalue().encode())


def plot_curves(folder: Path, history: list[dict], title: str = "") -> None:
    """Loss (left, log scale) and accuracy (right) per epoch, training and test."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    fig, (loss, acc) = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in ((loss, "loss", "cross-entropy loss"), (acc, "accuracy", "top-1 accuracy (%)")):
        ax.plot(epochs, [r[f"train_{key}"] for r in history], "o-", ms=3, label="train")
        ax.plot(epochs, [r[f"test_{key}"] for r in history], "o-", ms=3, label="test")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    loss.set_yscale("log")  # the first epochs' test loss can be orders of magnitude above the rest
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=110, format="png")
    plt.close(fig)
    _replace(folder / "curves.png", buffer.getvalue())


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
