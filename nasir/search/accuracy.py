"""Accuracy of what a search found: the original and the K fastest measured members of the front
trained with one recipe (`nasir.training`), so the front's table, `results.jsonl` and `pareto.png`
show accuracy beside speed (Fisher Potential only judges networks at initialisation).

    train_front(result, original, data="cifar-10-batches-bin/", top=2, epochs=200)

Each run lives in `OUT/train/original` or `OUT/train/trial-N` (checkpoint, metrics.csv,
curves.png), so a search run again resumes unfinished trainings and reuses finished ones.
"""

from __future__ import annotations

from nasir.errors import NasirError
from nasir.model import Model
from nasir.search.results import SearchResult
from nasir.training import train


def check_training(top: int, data: str | None) -> None:
    """Refuse a request to train the front that cannot be met (before the search runs)."""
    if top < 0:
        raise NasirError(f"the number of front members to train must be at least 0, got {top}")
    if data is None or data == "synthetic":
        raise NasirError("training the front needs real data: give --data (a CIFAR folder, an .npz, 'digits' "
                         "or 'mnist5k')")


def train_front(result: SearchResult, original: Model, data: str | None, top: int, epochs: int,
                batch: int = 128, seed: int = 0, progress: bool = True) -> None:
    """Train the original and the `top` fastest measured members of `result`'s front on `data`;
    sets `result.original_accuracy` and each trained member's `accuracy` (top-1 %, test split)."""
    check_training(top, data)
    runs = [("original", "", None)] + [(f"trial-{c.number}", c.pipeline, c) for c in result.measured[:top]]
    for name, pipeline, candidate in runs:
        model = original.transform(pipeline) if pipeline else original
        trained = train(model, data, epochs=epochs, batch=batch, seed=seed, out=result.out / "train" / name,
                        progress=progress, title=name)
        if candidate is None:
            result.original_accuracy = trained.accuracy
        else:
            candidate.accuracy = trained.accuracy
