"""Accuracy verified: candidates fine-tuned from the trained original by distillation, the runs cut
by successive halving, and the fastest network within a tolerance of the original's accuracy.

    verified = finetune(candidates, original, teacher_accuracy, data, max_drop=1.0, epochs=9, out=out / "finetune")
    verified.best            # the fastest fine-tuned network within 1 point, or None
    verified.rows            # every candidate: accuracy after each epoch it ran, pruned or finished

Each candidate is a `Candidate` of the search with a pipeline whose steps inherit the original's
weights (`init=inherit`, the default for a model file: `SearchSpace.init`). It is trained from
those weights against the original (`nasir.training.distill`: its soft outputs and attention maps)
for up to `epochs` epochs, and its test accuracy is reported after each epoch to an Optuna trial.
Optuna's `SuccessiveHalvingPruner` (minimum 1 epoch, reduction factor 3) stops a run that is not in
the top third of the runs that reached the same rung (1, 3, 9, ... epochs, the last excepted)
before it, so most
candidates cost an epoch or three and the promising ones get the whole budget. The candidates run
fastest first (by the search's latency estimate), which makes the early rungs' bar the fast
networks' accuracy.

Only a run that finished all `epochs` counts: `best` is the fastest finished candidate whose
accuracy is at least the original's minus `max_drop`; without one, `best` is None and `closest`
names the finished candidate nearest the tolerance. A pruned or unfinished network is never a
result.

Resumable: the study lives in `out/study.db` and each run's checkpoint in `out/trial-N`; a run
stopped mid-way is continued from its checkpoint (its epochs so far reported again, so the
pruner sees them), and candidates whose trial ended are not trained again.

`finetune` measures accuracy on its data's test split, which both prunes and selects. The
search's `verify` therefore gives it a validation half of the test examples (`Dataset.split_test`)
and reports every network, the original included, on the other half, which no choice has seen:
the figure beside the chosen network is not inflated by the choice.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.table import Table

from nasir.errors import NasirError, TrainingDiverged
from nasir.model import Model
from nasir.search.results import Candidate, SearchResult, passes, plot_front, write_best, write_jsonl
from nasir.search.sources import is_zoo_name
from nasir.training import Distillation, train

STUDY = "finetune"
REDUCTION = 3
LR = 0.01
"""Peak learning rate of fine-tuning (cosine decay): a tenth of training from scratch."""
STEPS = 32
"""Fewest steps an epoch of fine-tuning takes where the data allows (`finetune_batch`)."""
RECALIBRATE = 10
"""Training batches the batch norms' running statistics are averaged over before each test
(`nasir.train(recalibrate=)`): after an epoch or two of fine-tuning they lag behind the weights,
and a rung of successive halving would judge the lag."""


@dataclass
class FineTuned:
    """One candidate's fine-tuning: its accuracy (%) on the data it was chosen with after each epoch
    it ran, whether the pruner stopped it, and (a finished run, in the search) its accuracy on the
    held-out half (`test_accuracy`)."""

    candidate: Candidate
    accuracies: list[float] = field(default_factory=list)
    pruned: bool = False
    test_accuracy: float | None = None
    diverged: bool = False
    """Its loss went to NaN or infinity (it is then `pruned` too)."""

    @property
    def finished(self) -> bool:
        return not self.pruned and bool(self.accuracies)

    @property
    def accuracy(self) -> float | None:
        return self.accuracies[-1] if self.accuracies else None


@dataclass
class Verified:
    """The fine-tuned candidates (fastest first), the original's accuracy on the same data and the
    tolerance; `best`: the fastest finished one within it, else None (`closest` then says how near
    one came). `original_test_accuracy`: the original's on the held-out half (in the search)."""

    rows: list[FineTuned]
    original_accuracy: float
    max_drop: float
    epochs: int
    original_test_accuracy: float | None = None

    @property
    def within(self) -> list[FineTuned]:
        return [r for r in self.rows if r.finished and r.accuracy >= self.original_accuracy - self.max_drop]

    @property
    def best(self) -> FineTuned | None:
        return self.within[0] if self.within else None

    @property
    def closest(self) -> FineTuned | None:
        finished = [r for r in self.rows if r.finished]
        return max(finished, key=lambda r: r.accuracy) if finished else None


def finetune_batch(examples: int, most: int = 128) -> int:
    """The fine-tuning batch for `examples` training examples: `most` where that still gives
    `STEPS` steps an epoch (CIFAR's 50000 examples: 128), else smaller, down to 16 (1000 examples:
    31). A few hundred steps are what fine-tuning has; at batch 128 on 1000 examples ResNet-18
    ended 2.6 points lower than at batch 32 after 9 epochs (hard MNIST)."""
    return max(16, min(most, examples // STEPS))


def spread(candidates: list[Candidate], original_ms: float, k: int) -> list[Candidate]:
    """`k` candidates spread over the estimated speedups found: those with a latency estimate
    below the original's (whatever Fisher Potential said of them), ranked fastest first, taken at
    `k` evenly spaced ranks from the fastest down."""
    faster = sorted((c for c in candidates if c.outcome.estimate_ms and c.outcome.estimate_ms < original_ms),
                    key=lambda c: c.outcome.estimate_ms)
    if len(faster) <= k:
        return faster
    step = len(faster) / k
    return [faster[int(i * step)] for i in range(k)]


def finetune(candidates: list[Candidate], original: Model, original_accuracy: float, data, *, max_drop: float,
             epochs: int, out: Path, batch: int = 128, lr: float = LR, seed: int = 0,
             progress: bool = True) -> Verified:
    """Fine-tune `candidates` (fastest first) from `original`'s weights against `original` (the
    teacher: trained, `original_accuracy` % on the test split of `data`, a source or a `Dataset`)
    under successive halving; see the module docstring."""
    if epochs < 1:
        raise NasirError(f"fine-tuning needs at least 1 epoch, got {epochs}")
    check_tolerance(max_drop)
    out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{out / 'study.db'}", study_name=STUDY, direction="maximize",
                                load_if_exists=True, sampler=optuna.samplers.RandomSampler(seed=seed),
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1,
                                                                              reduction_factor=REDUCTION))
    for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):  # a run stopped mid-way
        study.tell(stale.number, state=TrialState.FAIL)
    ended = {t.user_attrs["number"]: t for t in study.get_trials(deepcopy=False)
             if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}
    teacher = Distillation(original)
    rows = []
    for candidate in candidates:
        done = ended.get(candidate.number)
        if done is None:
            done = _run(study, candidate, original, teacher, data, epochs, out, batch, lr, seed, progress)
        accuracies = [done.intermediate_values[e] for e in sorted(done.intermediate_values)]
        rows.append(FineTuned(candidate, accuracies, done.state == TrialState.PRUNED,
                              diverged="diverged" in done.user_attrs))
    return Verified(rows, original_accuracy, max_drop, epochs)


def _run(study: optuna.Study, candidate: Candidate, original: Model, teacher: Distillation, data, epochs: int,
         out: Path, batch: int, lr: float, seed: int, progress: bool) -> optuna.trial.FrozenTrial:
    """One candidate's trial: its run, epoch by epoch, until it finishes or the pruner stops it."""
    trial = study.ask()
    trial.set_user_attr("number", candidate.number)
    trial.set_user_attr("pipeline", candidate.pipeline)
    folder = out / f"trial-{candidate.number}"

    def report(epoch: int, accuracy: float) -> None:
        trial.report(accuracy, epoch)
        if epoch < epochs and trial.should_prune():  # a run that reached its last epoch has finished
            raise optuna.TrialPruned()

    try:
        for row in _epochs_so_far(folder):  # a run stopped before: the pruner sees its epochs again
            report(int(row["epoch"]), float(row["test_accuracy"]))
        result = train(original.transform(candidate.pipeline), data, epochs=epochs, batch=batch, lr=lr, seed=seed,
                       out=folder, progress=progress, title=f"trial {candidate.number}", teacher=teacher,
                       recalibrate=RECALIBRATE, on_epoch=lambda row: report(row["epoch"], row["test_accuracy"]))
        study.tell(trial, result.accuracy)
    except optuna.TrialPruned:
        study.tell(trial, state=TrialState.PRUNED)
    except TrainingDiverged as e:  # a run whose loss went to NaN: stopped, as the pruner stops one
        trial.set_user_attr("diverged", str(e))
        study.tell(trial, state=TrialState.PRUNED)
    return study.trials[trial.number]


def _epochs_so_far(folder: Path) -> list[dict]:
    metrics = folder / "metrics.csv"
    if not metrics.exists():
        return []
    with metrics.open() as f:
        return list(csv.DictReader(f))


# --- the search's accuracy-verified end --------------------------------------------------------

def check_tolerance(max_drop: float) -> None:
    if max_drop < 0:
        raise NasirError(f"the accuracy drop allowed must be at least 0 points, got {max_drop}")


def check_verification(max_drop: float, data: str | None) -> None:
    """Refuse an accuracy-verified search that cannot be run (before the search starts)."""
    if data is None or data == "synthetic":
        raise NasirError("an accuracy-verified search needs real data to measure accuracy on: give --data (a CIFAR "
                         "folder, an .npz, 'digits' or 'mnist5k')")
    check_tolerance(max_drop)


def trained_original(source: str, dataset: str, data: str, out: Path, epochs: int, batch: int, seed: int,
                     note) -> str:
    """The model the verified search starts from, as a file with trained weights: a model file is
    the user's trained model, as it is; a zoo model (untrained weights) is trained on `data` first
    (`out/original-train`, resumable), and `note` says so."""
    from nasir import zoo

    if not is_zoo_name(source):
        return source
    note(f"{source} is a zoo model with untrained weights: training it on {data} first "
         f"({epochs} epochs; it is the teacher and the accuracy to keep)")
    model = zoo.load(source, dataset)
    result = train(model, data, epochs=epochs, batch=batch, seed=seed, out=out / "original-train",
                   title=f"{source} (original)")
    path = out / "original-trained.onnx"
    result.apply_to(model).to_onnx(path)
    return str(path)


def verify(result: SearchResult, original: Model, data: str, *, max_drop: float, epochs: int, top: int, batch: int,
           seed: int, measure: Callable[[str], dict[str, list[float]]], note=lambda line: None,
           progress: bool = True) -> Verified:
    """The accuracy-verified end of a search of a trained `original`: `top` candidates spread over
    the speedups found are fine-tuned (`finetune`, in `result.out / "finetune"`), pruned and chosen
    on a validation half of `data`'s test examples; `result.best` becomes the fastest within
    `max_drop` points of the original there, saved with its fine-tuned weights as best.onnx and
    best.pipeline, or None. The original and each finished candidate are then scored on the other,
    held-out half: that accuracy goes into the results. `measure(pipeline)`: a candidate's ms
    against the original's in interleaved rounds, as the search times its front's members
    (`Evaluator.measure`), for each finished candidate the front's timing did not hold. `batch`: the most examples a
    fine-tuning step takes (`finetune_batch`)."""
    from nasir.data import load_dataset
    from nasir.training.loop import evaluate

    out = result.out
    choose, report = load_dataset(data, original.input_shapes[0][1:], seed).split_test(seed)
    teacher = original.at_batch(batch).to_torch()
    original_accuracy = evaluate(teacher, *choose.test, batch)[1]
    result.original_accuracy = evaluate(teacher, *report.test, batch)[1]
    note(f"the original: {original_accuracy:.2f}% on the validation half of {data}'s test examples (the accuracy to "
         f"keep), {result.original_accuracy:.2f}% on the held-out half")
    batch = finetune_batch(len(choose.train[0]), batch)
    verified = finetune(spread(result.candidates, result.original_ms, top), original, original_accuracy, choose,
                        max_drop=max_drop, epochs=epochs, out=out / "finetune", batch=batch, seed=seed,
                        progress=progress)
    verified.original_test_accuracy = result.original_accuracy
    for row in verified.rows:
        row.candidate.accuracy = None
        if row.finished:
            network = original.transform(row.candidate.pipeline)
            tuned = train(network, choose, epochs=epochs, batch=batch, lr=LR, seed=seed, recalibrate=RECALIBRATE,
                          teacher=Distillation(original), out=out / "finetune" / f"trial-{row.candidate.number}",
                          progress=False)  # its finished run, read back
            row.test_accuracy = row.candidate.accuracy = evaluate(tuned.program, *report.test,
                                                                  min(batch, len(choose.train[0])))[1]
            if not row.candidate.samples:  # timed against the original, as the search times its front
                row.candidate.add_samples(measure(row.candidate.pipeline))
            if row is verified.best:
                write_best(out, row.candidate.pipeline, tuned.apply_to(network))
    result.best = verified.best.candidate if verified.best else None
    if result.best is None:
        for stale in (out / "best.pipeline", out / "best.onnx"):
            stale.unlink(missing_ok=True)  # the speed-only best of the search: not a verified result
    write_jsonl(result, out / "results.jsonl")
    plot_front(result, out / "pareto.png")
    return verified


def verified_table(verified: Verified) -> Table:
    """The fine-tuned candidates, fastest estimate first: accuracy after each epoch they ran."""
    floor = verified.original_accuracy - verified.max_drop
    held_out = (f", {verified.original_test_accuracy:.2f}% held out" if verified.original_test_accuracy is not None
                else "")
    table = Table(title=f"fine-tuned from the original ({verified.original_accuracy:.2f}%{held_out}; within "
                        f"{verified.max_drop:g} point(s): at least {floor:.2f}%), fastest estimate first")
    for col in ("trial", "est. ms", "speedup", "MACs / orig.", "epochs", "acc %", "held-out %", "verdict", "passes"):
        table.add_column(col, justify="left" if col in ("verdict", "passes") else "right", overflow="fold")
    for row in verified.rows:
        c = row.candidate
        verdict = ("best" if row is verified.best else "within" if row in verified.within
                   else "diverged" if row.diverged else "pruned" if row.pruned else "below")
        speedup = c.speedup
        table.add_row(str(c.number), f"{c.outcome.estimate_ms:.2f}",
                      f"{speedup.median:.2f}x [{speedup.iqr:.2f}]" if speedup else "-",
                      f"{c.outcome.mac_ratio:.2f}" if c.outcome.mac_ratio is not None else "-",
                      f"{len(row.accuracies)}/{verified.epochs}",
                      f"{row.accuracy:.2f}" if row.accuracy is not None else "-",
                      f"{row.test_accuracy:.2f}" if row.test_accuracy is not None else "-", verdict, passes(c.pipeline))
    return table
