"""The training loop and its recipe (NAS-PTE, BlockSwap and the CIFAR ResNets before them):

- SGD, momentum 0.9, weight decay 5e-4, learning rate 0.1 decayed to 0 by a cosine over the epochs
  (set at the start of each epoch), batch 128, cross-entropy;
- natural images (CIFAR) augmented: a random crop of the image padded by an eighth of its side
  (4 pixels at 32 x 32) and a horizontal flip with probability 1/2;
- batch norm: batch statistics while training (its running statistics updated), the running
  statistics for testing (`eval()`), as in the compiled model, where they are constants;
- seeded: the order of the examples and the augmentation of epoch e are drawn from (seed, e), so a
  run resumed from its checkpoint after epoch e computes what the uninterrupted run computes.

The network runs at the training batch (`Model.at_batch`); the last incomplete batch of an epoch
is dropped when training, and padded (then ignored) when testing, where eval mode makes examples
independent. The trained weights are batch-independent: `TrainResult.apply_to(model)` puts them
into the model at any batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from nasir.data import Dataset, load_dataset
from nasir.errors import NasirError, TrainingDiverged
from nasir.fisher import torch_threads
from nasir.model import Model
from nasir.training import checkpoint
from nasir.training.distill import Distillation, block_outputs, distillation_loss
from nasir.training.report import TrainProgress, plot_curves, write_metrics


@dataclass(frozen=True)
class Recipe:
    """How to train (defaults: the papers' CIFAR recipe; `augment` None: as the data suits)."""

    epochs: int = 200
    batch: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    augment: bool | None = None
    seed: int = 0

    def check(self) -> None:
        if self.epochs < 1:
            raise NasirError(f"epochs must be at least 1, got {self.epochs}")
        if self.batch < 2:
            raise NasirError(f"the training batch must be at least 2 (batch norm needs statistics), got {self.batch}")
        if not self.lr > 0:
            raise NasirError(f"the learning rate must be positive, got {self.lr}")

    def lr_at(self, epoch: int) -> float:
        """Cosine decay from `lr` at epoch 0 towards 0 after the last epoch."""
        return 0.5 * self.lr * (1 + math.cos(math.pi * epoch / self.epochs))


@dataclass
class TrainResult:
    """A finished (or resumed and finished) run: per-epoch `history` (report.COLUMNS), the final
    test `accuracy` (%), the torch module trained (`program`, at the training batch), the run's
    folder and its wall time in this process; `resumed`: what it went on from, or None."""

    program: torch.nn.Module
    history: list[dict] = field(default_factory=list)
    out: Path | None = None
    seconds: float = 0.0
    resumed: str | None = None

    @property
    def accuracy(self) -> float:
        return self.history[-1]["test_accuracy"]

    def apply_to(self, model: Model) -> Model:
        """A copy of `model` (the trained network at any batch) with the trained weights."""
        return model.from_torch(self.program)


def train(model: Model, data: str | Path | Dataset, *, epochs: int = 200, batch: int = 128, lr: float = 0.1,
          momentum: float = 0.9, weight_decay: float = 5e-4, augment: bool | None = None, seed: int = 0,
          out: str | Path | None = None, resume: bool = True, progress: bool = True, threads: int | None = None,
          title: str = "train", on_epoch: Callable[[dict], None] | None = None,
          teacher: Model | Distillation | None = None, recalibrate: int = 0) -> TrainResult:
    """Train `model` on `data` (a source of `nasir.data.load_dataset`, or a `Dataset`) with the
    recipe (`Recipe`; see the module docstring) and return the `TrainResult`.

    `out`: the run's folder (checkpoint.pt, metrics.csv, curves.png, written after every epoch);
    with `resume` a checkpoint there is continued from. `threads`: torch's thread count for the
    run. `on_epoch(row)` is called after each epoch is saved. `teacher`: a trained network `model`
    learns from besides the labels (its outputs and attention maps at the block outputs both
    share; `nasir.training.distill`), or a `Distillation` with other constants. `recalibrate`: before
    each test, the batch norms' running statistics are set to the average over that many training
    batches (the first ones, not augmented; `TorchProgram.recalibrate`): fine-tuning's few steps
    leave them behind a transformed network's weights, and testing with them would judge the
    lag, not the network."""
    recipe = Recipe(epochs, batch, lr, momentum, weight_decay, augment, seed)
    recipe.check()
    shape = model.input_shapes[0]
    dataset = data.fitted(shape[1:]) if isinstance(data, Dataset) else load_dataset(data, shape[1:], seed)
    classes = model.output_shapes[0][-1]
    if dataset.num_classes > classes:
        raise NasirError(f"{dataset.name} has {dataset.num_classes} classes but the model has {classes} outputs")
    batch = min(batch, len(dataset.train[0]))
    net = model.at_batch(batch)
    spec = Distillation(teacher) if isinstance(teacher, Model) else teacher
    if spec is not None and (spec.teacher.input_shapes[0][1:] != shape[1:]
                             or spec.teacher.output_shapes[0][-1] != classes):
        raise NasirError(f"the teacher takes {spec.teacher.input_shapes[0][1:]} and gives {spec.teacher.output_shapes[0][-1]} "
                         f"outputs; the network trained takes {shape[1:]} and gives {classes}")
    folder = Path(out) if out is not None else None
    fingerprint = {"model": hashlib.sha256(net.text().encode()).hexdigest(), "data": dataset.name,
                   "train_examples": len(dataset.train[0]), "recipe": json.dumps(asdict(recipe), sort_keys=True)}
    if spec is not None:
        fingerprint["teacher"] = spec.fingerprint()
    if recalibrate:
        fingerprint["recalibrate"] = recalibrate
    start = time.perf_counter()
    with torch_threads(threads):
        torch.manual_seed(seed)
        program = net.to_torch().train()
        teacher_program = None
        if spec is not None:
            teacher_program = spec.teacher.at_batch(batch).to_torch().eval()
            program.taps = teacher_program.taps = set(block_outputs(net, spec.teacher)) if spec.beta else set()
        optimizer = torch.optim.SGD(program.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
        history: list[dict] = []
        resumed = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            state = checkpoint.load(folder, fingerprint) if resume else None
            if state is not None:
                program.load_state_dict(state["program"])
                optimizer.load_state_dict(state["optimizer"])
                history = state["history"]
                resumed = f"{folder / checkpoint.NAME} after epoch {len(history)} of {epochs}"
        steps = len(dataset.train[0]) // batch
        augmenting = dataset.augment if augment is None else augment
        with TrainProgress(title, epochs, steps, len(history), progress) as bar:
            if resumed:
                bar.note(f"resuming training from {resumed}")
            for epoch in range(len(history), epochs):
                began = time.perf_counter()
                for group in optimizer.param_groups:
                    group["lr"] = recipe.lr_at(epoch)
                loss, accuracy = _train_epoch(program, optimizer, dataset, batch, augmenting,
                                              np.random.default_rng([seed, epoch]), bar, teacher_program, spec)
                if recalibrate:
                    x = dataset.train[0]
                    program.recalibrate(torch.from_numpy(np.ascontiguousarray(x[k:k + batch]))
                                        for k in range(0, min(recalibrate, len(x) // batch) * batch, batch))
                test_loss, test_accuracy = evaluate(program, *dataset.test, batch)
                row = {"epoch": epoch + 1, "lr": recipe.lr_at(epoch), "train_loss": loss, "train_accuracy": accuracy,
                       "test_loss": test_loss, "test_accuracy": test_accuracy,
                       "seconds": time.perf_counter() - began}
                history.append(row)
                if folder is not None:
                    with checkpoint.interrupts_deferred():
                        checkpoint.save(folder, {"program": program.state_dict(), "optimizer": optimizer.state_dict(),
                                                 "history": history, "fingerprint": fingerprint})
                        write_metrics(folder, history)
                        plot_curves(folder, history, title)
                bar.epoch(row)
                if on_epoch is not None:
                    on_epoch(row)
    program.eval()
    return TrainResult(program, history, folder, time.perf_counter() - start, resumed)


def _train_epoch(program, optimizer, dataset: Dataset, batch: int, augmenting: bool, rng: np.random.Generator,
                 bar: TrainProgress, teacher=None, spec: Distillation | None = None) -> tuple[float, float]:
    """One pass over the training examples in a seeded order; (mean loss, accuracy %). With a
    `teacher` program, the loss is `spec`'s distillation loss."""
    x, y = dataset.train
    order = rng.permutation(len(x))
    program.train()
    total, correct, seen = 0.0, 0, 0
    for k in range(len(x) // batch):
        pick = order[k * batch:(k + 1) * batch]
        images = augmented(x[pick], rng) if augmenting else x[pick]
        labels = torch.from_numpy(y[pick])
        inputs = torch.from_numpy(np.ascontiguousarray(images))
        logits = program(inputs)
        if teacher is None:
            loss = F.cross_entropy(logits, labels)
        else:
            with torch.no_grad():
                teacher_logits = teacher(inputs)
            loss = distillation_loss(logits, program.tapped, teacher_logits, teacher.tapped, labels, spec)
        if not torch.isfinite(loss):
            raise TrainingDiverged(f"training diverged: the loss is {float(loss.detach())} at step {k + 1} of the epoch "
                                   f"(lr {optimizer.param_groups[0]['lr']:.3g}); try a lower lr")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += float(loss.detach()) * len(pick)
        correct += int((logits.detach().argmax(1) == labels).sum())
        seen += len(pick)
        bar.step()
    return total / seen, 100.0 * correct / seen


def augmented(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each image randomly cropped from itself zero-padded by an eighth of its side, and flipped
    horizontally with probability 1/2."""
    n, _, h, w = images.shape
    pad = max(1, h // 8)
    padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dy, dx = rng.integers(0, 2 * pad + 1, size=(2, n))
    flips = rng.random(n) < 0.5
    out = np.empty_like(images)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop[:, :, ::-1] if flips[i] else crop
    return out


def evaluate(program, x: np.ndarray, y: np.ndarray, batch: int) -> tuple[float, float]:
    """(mean cross-entropy, top-1 accuracy %) of `program` in eval mode on `x`, `y`, `batch` at a time
    (the last batch padded with zeros, whose outputs are ignored)."""
    was_training = program.training
    program.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for k in range(0, len(x), batch):
            part = x[k:k + batch]
            n = len(part)
            if n < batch:
                part = np.concatenate([part, np.zeros((batch - n, *part.shape[1:]), part.dtype)])
            logits = program(torch.from_numpy(np.ascontiguousarray(part)))[:n]
            labels = torch.from_numpy(y[k:k + n])
            total += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += int((logits.argmax(1) == labels).sum())
    program.train(was_training)
    return total / len(x), 100.0 * correct / len(x)
