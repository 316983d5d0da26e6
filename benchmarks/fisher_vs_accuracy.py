"""Accuracy evidence: does Fisher Potential (and the mixing property, and MACs) rank candidates as
training does, and does the search's fastest legal network train as well as the original?

    python benchmarks/fisher_vs_accuracy.py                    # both parts, digits, ResNet-18 at 16 x 16
    python benchmarks/fisher_vs_accuracy.py --part target      # original vs the search's best only
    python benchmarks/fisher_vs_accuracy.py --part tau --candidates 20 --epochs 4

Data: scikit-learn's 1797 handwritten digits (8 x 8, grey), fitted to the model's input (bilinear
to 16 x 16, repeated over 3 channels), a seeded fifth held out for testing. Model: ResNet-18 in
its CIFAR-10 layout (3 x 3 stem, no max pool), exported for 16 x 16 inputs: the same network at a
quarter of the CIFAR cost, so training runs in minutes on a 2-core CPU (no GPU is used).

Part `target`: `nasir.search` on that model (Fisher minibatch from the digits; properties and
Fisher Potential filter; front measured on the llvm backend), then the original and the fastest
measured member of the front trained with the same recipe (`--target-epochs`), each timed:
accuracy, speedup and training minutes.

Part `tau`: `--candidates` random candidates (each conv kept or given one of its legal choices,
seeded), each measured at initialisation (Fisher ratio on a batch-16 digits minibatch, the
alphaNAS mixing/depth filter as 1 = passes / 0 = fails, MACs relative to the original), then
trained for `--epochs`; Kendall's tau-b of each measure with the final test accuracy.

Rows are printed as they come (the run can take an hour); everything also goes to OUT/fva.json.

Measured (AMD EPYC Zen 4, 2 cores; no GPU), 2026-11-25, on the quiet machine:

    python benchmarks/fisher_vs_accuracy.py --part target --search-time 240 --search-budget 60 --workers 2
    search: 60 candidates in 107 s, front 7, all measured
          original:   2.887 ms   1.00x  accuracy  98.89%  trained in 2.1 min (15 epochs)
     fastest legal:   0.827 ms   3.49x  accuracy  98.05%  trained in 1.3 min (15 epochs)

and, with other jobs sharing the cores (load average 9-11):

    python benchmarks/fisher_vs_accuracy.py --part tau --image-size 8 --epochs 3 --batch 64
    (ResNet-18 at the digits' own 8 x 8, 3 epochs, batch 64 for 22 steps an epoch: the only
    setting that trains many candidates in the time)
    20 candidates: Kendall tau-b with accuracy: Fisher ratio -0.05, MACs -0.26, mixing property
    undefined (all 20 passed it: random candidates rarely drop a mixing level). Accuracies
    93.6-98.6%. A candidate took 3.5-14 min while the machine was loaded, 6-12 s once it was
    quiet (about 2 s an epoch). At 3 epochs the ranking is noisy; this sample shows no sign that
    Fisher Potential (or MACs) predicts trained accuracy among candidates that pass the filter.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

import nasir
from nasir import zoo
from nasir.data import load_dataset, minibatch
from nasir.errors import NasirError
from nasir.fisher import fisher_potential
from nasir.search.space import SearchSpace
from nasir.summary import summarize
from nasir.transforms.properties import properties_at_least


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


def target(args, out: Path, onnx: Path, original: nasir.Model, report: dict) -> None:
    start = time.perf_counter()
    result = nasir.search(onnx, budget=args.search_budget, time_limit=args.search_time, data=args.data,
                          out=out / "search", workers=args.workers, progress=False, seed=args.seed)
    log(report, out, f"search: {len(result.candidates)} candidates in {time.perf_counter() - start:.0f} s, "
                     f"front {len(result.pareto)}, best {result.best.pipeline if result.best else None}")
    if result.best is None:
        return
    rows = []
    for name, pipeline, ms in (("original", "", result.original_ms), ("fastest legal", result.best.pipeline,
                                                                     result.best.measured_ms)):
        model = original.transform(pipeline) if pipeline else original
        began = time.perf_counter()
        trained = nasir.train(model, args.data, epochs=args.target_epochs, batch=args.batch, seed=args.seed,
                              out=out / "target" / name.replace(" ", "-"), progress=False)
        rows.append({"network": name, "ms": ms, "speedup": result.original_ms / ms, "accuracy": trained.accuracy,
                     "train_minutes": (time.perf_counter() - began) / 60, "pipeline": pipeline,
                     "macs": summarize(model).total_macs})
        report["target"] = rows
        log(report, out, f"{name:>14}: {ms:7.3f} ms  {result.original_ms / ms:5.2f}x  accuracy {trained.accuracy:6.2f}%"
                         f"  trained in {rows[-1]['train_minutes']:.1f} min")
    log(report, out, f"accuracy difference {rows[1]['accuracy'] - rows[0]['accuracy']:+.2f} points at "
                     f"{rows[1]['speedup']:.2f}x")


def tau(args, out: Path, original: nasir.Model, report: dict) -> None:
    fisher_model = original.at_batch(16)
    x, y = minibatch(args.data, 16, args.seed, tuple(original.input_shapes[0][1:]), original.output_shapes[0][-1])
    base_fisher = fisher_potential(fisher_model, x, y, args.seed).total
    base_macs = summarize(original).total_macs
    space = SearchSpace.of(original)
    data = load_dataset(args.data, tuple(original.input_shapes[0][1:]), args.seed)
    rng = np.random.default_rng(args.seed)
    rows, seen = [], set()
    while len(rows) < args.candidates:
        pipeline = space.random_pipeline(rng)  # the share of convs changed varies from candidate to candidate
        if pipeline in seen:
            continue
        seen.add(pipeline)
        try:
            candidate = original.transform(pipeline)
            at_fisher = fisher_model.transform(pipeline)
        except NasirError:
            continue
        began = time.perf_counter()
        row = {"pipeline": pipeline,
               "fisher": fisher_potential(at_fisher, x, y, args.seed).total / base_fisher,
               "properties": int(properties_at_least(at_fisher.module, fisher_model.module)[0]),
               "macs": summarize(candidate).total_macs / base_macs}
        row["accuracy"] = nasir.train(candidate, data, epochs=args.epochs, batch=args.batch, seed=args.seed,
                                      out=out / "tau" / f"c{len(rows)}", progress=False).accuracy
        row["minutes"] = (time.perf_counter() - began) / 60
        rows.append(row)
        report["tau_candidates"] = rows
        log(report, out, f"candidate {len(rows):2d}: Fisher {row['fisher']:6.3f}  properties {row['properties']}  "
                         f"MACs {row['macs']:5.2f}  accuracy {row['accuracy']:6.2f}%  ({row['minutes']:.1f} min)")
    acc = [r["accuracy"] for r in rows]
    report["kendall_tau_b"] = {m: kendall_tau_b([r[m] for r in rows], acc) for m in ("fisher", "properties", "macs")}
    log(report, out, "Kendall tau-b with final accuracy (%d candidates, %d epochs): " % (len(rows), args.epochs)
        + ", ".join(f"{m} {t:+.3f}" for m, t in report["kendall_tau_b"].items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("all", "target", "tau"), default="all")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--data", default="digits")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-epochs", type=int, default=15)
    p.add_argument("--search-budget", type=int, default=60)
    p.add_argument("--search-time", type=float, default=300)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--candidates", type=int, default=20)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--out", default="fva-out")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    report = {"args": vars(args), "cpu": cpu}
    log(report, out, f"{args.model} ({args.dataset} layout) at {args.image_size}x{args.image_size} "
                     f"on {args.data}; CPU {cpu}")
    onnx, original = network(args, out)
    if args.part in ("all", "target"):
        target(args, out, onnx, original, report)
    if args.part in ("all", "tau"):
        tau(args, out, original, report)


if __name__ == "__main__":
    main()
