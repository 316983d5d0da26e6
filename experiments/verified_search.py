"""Evidence for the trained-model flow (issue 50, deliver 4): a trained CNN made faster at the same
accuracy, end to end, on tasks that separate networks.

    python experiments/verified_search.py --task hard-mnist          # ResNet-18 (16 x 16) on hard MNIST
    python experiments/verified_search.py --task shapes              # ... on generated shapes in clutter
    python experiments/verified_search.py --task shapes --report     # print the table from the saved runs

For the task, in `--out`/TASK (resumable: a stopped run goes on from its checkpoints and results):
1. The task as an .npz (`x`, `y`, `x_test`, `y_test`): `hard-mnist` is fisher_vs_accuracy.py's
   (100 mnist5k images a digit, shifts of up to 4 pixels, noise 0.5); `shapes` is generated here
   (`shapes_task`: ten shape classes at random places, sizes and colours among random strokes).
2. The original, ResNet-18 in its CIFAR layout at 16 x 16, trained to convergence with the
   ground-truth recipe (`--original-epochs`, batch 32, lr 0.02, cosine), with `--seeds` training
   seeds: seed 0 is "the user's trained model"; the others give the recipe's spread.
3. The user's command, timed as wall time: `nasir search original.onnx --data task.npz
   --max-accuracy-drop 1.0 --time-limit 300 --workers 2 --strategy evolution` (its Python form): the search, then
   fine-tuning of candidates spread over the speedups by distillation under successive halving,
   chosen on the validation half of the test examples.
4. The network it returns, fine-tuned again with `--seeds` seeds (seed 0 is the search's own run)
   and scored on the held-out half after every epoch, against the same network trained from
   scratch (fresh weights, no teacher) with the original's recipe for the same epochs: the epochs
   each needs to come within one point of the original.
The summary goes to `experiments/data/verified_search.json` and the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from fisher_vs_accuracy import cpu_name, hard_mnist, run_resumable

import nasir
from nasir import zoo
from nasir.data import Dataset, load_dataset
from nasir.lowering.passes import with_init
from nasir.search.finetune import LR, RECALIBRATE, finetune_batch
from nasir.training.loop import evaluate

SUMMARY = Path(__file__).parent / "data" / "verified_search.json"
RECIPE = {"batch": 32, "lr": 0.02}
"""The ground truth's training recipe (ground_truth.py), here run for `--original-epochs`."""


def shapes_task(train: int, test: int, size: int, seed: int) -> Dataset:
    """Ten classes of shape (disc, ring, filled and open square, triangle, plus, cross, bars across
    and down, diamond) of random size, place and colour on a random dark background, among 3 to 5
    random strokes of other colours, with Gaussian noise: a task with spatial structure and
    clutter, not digits."""
    rng = np.random.default_rng([seed, 50])
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)

    def shape(k: int, cy: float, cx: float, r: float) -> np.ndarray:
        dy, dx = yy - cy, xx - cx
        d, box = np.hypot(dy, dx), np.maximum(abs(dy), abs(dx))
        return [d <= r, abs(d - r) < 0.8, box <= r * 0.8, abs(box - r * 0.8) < 0.6,
                (dy >= -r) & (dy <= r * 0.7) & (abs(dx) <= (dy + r) * 0.55),
                ((abs(dx) < 0.7) | (abs(dy) < 0.7)) & (box <= r), ((abs(dx - dy) < 0.8) | (abs(dx + dy) < 0.8)) & (box <= r),
                ((abs(dy - r / 2) < 0.6) | (abs(dy + r / 2) < 0.6)) & (abs(dx) <= r),
                ((abs(dx - r / 2) < 0.6) | (abs(dx + r / 2) < 0.6)) & (abs(dy) <= r), abs(dx) + abs(dy) <= r][k]

    def stroke() -> np.ndarray:
        (y0, x0), angle, length = rng.uniform(0, size, 2), rng.uniform(0, np.pi), rng.uniform(3, size / 2)
        t = (yy - y0) * np.sin(angle) + (xx - x0) * np.cos(angle)
        across = -(yy - y0) * np.cos(angle) + (xx - x0) * np.sin(angle)
        return (abs(across) < 0.6) & (t >= 0) & (t <= length)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.integers(0, 10, n)
        images = np.empty((n, 3, size, size), np.float32)
        for i, k in enumerate(labels):
            image = np.broadcast_to(rng.uniform(0, 0.3, (3, 1, 1)), (3, size, size)).copy()
            r = rng.uniform(size * 0.18, size * 0.32)
            cy, cx = rng.uniform(r, size - r, 2)
            for _ in range(rng.integers(3, 6)):
                image[:, stroke()] = rng.uniform(0.2, 1.0, (3, 1))
            image[:, shape(int(k), cy, cx, r)] = rng.uniform(0.4, 1.0, (3, 1))
            images[i] = image + 0.15 * rng.standard_normal(image.shape)
        return (images - 0.35) / 0.3, labels.astype(np.int64)

    return Dataset(f"shapes-{train}-seed{seed}", make(train), make(test), 10)


def task_of(name: str, seed: int) -> Dataset:
    return hard_mnist(100, 4, 0.5, seed) if name == "hard-mnist" else shapes_task(2000, 1000, 16, seed)


def first_within(curve: list[float], floor: float) -> int | None:
    """The first epoch (1-based) whose accuracy is at least `floor`, or None."""
    return next((e + 1 for e, a in enumerate(curve) if a >= floor), None)


def task_and_original(task_name: str, out: Path, seed: int, seeds: int, epochs: int):
    """Steps 1 and 2 in `out` (resumable): the task written as `task.npz`, and the original trained
    with `seeds` training seeds, seed 0's weights in `original.onnx`. Returns the task's path, its
    held-out half (`report`), the original's held-out accuracy per seed and the original as the
    search reads it (nest level)."""
    out.mkdir(parents=True, exist_ok=True)
    onnx = Path(zoo.export_onnx("resnet18", out / "resnet18_16.onnx", "cifar10", image_size=16))
    model = nasir.load(onnx).transform("convert-nn-to-nest")
    data = task_of(task_name, seed).fitted(tuple(model.input_shapes[0][1:]))
    task = out / "task.npz"
    if not task.exists():
        np.savez(task, x=data.train[0], y=data.train[1], x_test=data.test[0], y_test=data.test[1])
    choose, report = load_dataset(task, model.input_shapes[0][1:]).split_test(0)
    print(f"{task_name}: {len(data.train[1])} training and {len(data.test[1])} test examples "
          f"({len(choose.test[1])} to choose with, {len(report.test[1])} held out); CPU {cpu_name()}", flush=True)
    originals = []
    for s in range(seeds):
        trained = nasir.train(model, report, epochs=epochs, seed=s, augment=False, progress=False,
                              out=out / f"original-seed{s}", **RECIPE)
        originals.append(trained.accuracy)
        if s == 0:
            trained.apply_to(model).to_onnx(out / "original.onnx")
        print(f"original, training seed {s}: {trained.accuracy:.2f}% held out "
              f"({epochs} epochs, {trained.seconds / 60:.1f} min)", flush=True)
    user_model = nasir.load(out / "original.onnx").transform("convert-nn-to-nest")  # as the search reads it
    return task, report, originals, user_model, data.name


def run(args) -> dict:
    out = Path(args.out) / args.task
    cpu = cpu_name()
    task, report, originals, user_model, task_label = task_and_original(args.task, out, args.seed, args.seeds,
                                                                        args.original_epochs)
    original_accuracy = originals[0]

    start = time.perf_counter()
    result = nasir.search(out / "original.onnx", data=str(task), accuracy_drop=args.max_drop, time_limit=args.time_limit,
                          budget=None, workers=args.workers, out=out / "search", seed=0, strategy=args.strategy,
                          finetune_epochs=args.finetune_epochs, finetune_top=args.finetune_top, progress=False)
    wall = time.perf_counter() - start
    verified = result.verified
    print(f"nasir.search(..., accuracy_drop={args.max_drop:g}): {len(result.candidates)} candidates, "
          f"{len(verified.rows)} fine-tuned, {wall / 60:.1f} min wall", flush=True)
    summary = {"task": task_label, "cpu": cpu, "original_seeds": originals, "search_minutes": wall / 60,
               "candidates": len(result.candidates), "finetuned": [
                   {"number": r.candidate.number, "pipeline": r.candidate.pipeline, "epochs": len(r.accuracies),
                    "pruned": r.pruned, "validation": r.accuracy, "held_out": r.test_accuracy,
                    "macs": r.candidate.outcome.mac_ratio,
                    "speedup": r.candidate.speedup.median if r.candidate.speedup else None}
                   for r in verified.rows],
               "original_validation": verified.original_accuracy, "original_held_out": verified.original_test_accuracy}
    best = result.best or (verified.closest.candidate if verified.closest else None)
    if best is None:
        return summary
    summary["best"] = {"number": best.number, "pipeline": best.pipeline, "within": result.best is not None,
                       "speedup": best.speedup.median if best.speedup else None,
                       "speedup_iqr": [best.speedup.q1, best.speedup.q3] if best.speedup else None,
                       "macs": best.outcome.mac_ratio}
    network = user_model.transform(best.pipeline)
    tuned, scratch = [], []
    for seed in range(args.seeds):
        run_ = nasir.train(network, report, epochs=args.finetune_epochs, batch=finetune_batch(len(report.train[1])),
                           lr=LR, seed=seed,
                           teacher=user_model, recalibrate=RECALIBRATE, progress=False,
                           out=out / f"best-finetune-seed{seed}")
        tuned.append([r["test_accuracy"] for r in run_.history])
        fresh = user_model.transform(with_init(best.pipeline, "kaiming"))
        run_ = nasir.train(fresh, report, epochs=args.finetune_epochs, seed=seed, augment=False, progress=False,
                           out=out / f"best-scratch-seed{seed}", **RECIPE)
        scratch.append([r["test_accuracy"] for r in run_.history])
        print(f"best (trial {best.number}), seed {seed}: fine-tuned {tuned[-1][-1]:.2f}%, from scratch "
              f"{scratch[-1][-1]:.2f}% held out after {args.finetune_epochs} epochs", flush=True)
    floor = original_accuracy - args.max_drop
    summary["best"].update(finetuned=tuned, scratch=scratch,
                           finetuned_within_at=[first_within(c, floor) for c in tuned],
                           scratch_within_at=[first_within(c, floor) for c in scratch])
    return summary


def table(s: dict) -> str:
    o = np.asarray(s["original_seeds"])
    lines = [f"task {s['task']}, CPU {s['cpu']}",
             f"original: {o[0]:.2f}% held out (the user's model, seed 0); recipe spread over {len(o)} seeds: "
             f"mean {o.mean():.2f}, min {o.min():.2f}, max {o.max():.2f}",
             f"search with --max-accuracy-drop: {s['candidates']} candidates, {len(s['finetuned'])} fine-tuned, "
             f"{s['search_minutes']:.1f} min wall"]
    b = s.get("best")
    if b is None:
        return "\n".join(lines + ["no fine-tuning run finished"])
    tuned = np.asarray([c[-1] for c in b["finetuned"]])
    scratch = np.asarray([c[-1] for c in b["scratch"]])
    iqr = f" (IQR {b['speedup_iqr'][0]:.2f}-{b['speedup_iqr'][1]:.2f}x)" if b["speedup_iqr"] else ""
    lines += [f"{'best' if b['within'] else 'closest (none within)'}: trial {b['number']}, "
              f"{b['speedup']:.2f}x faster on llvm{iqr}, MACs {b['macs']:.2f} of the original",
              f"  fine-tuned from inherited weights with distillation, per seed: "
              + ", ".join(f"{a:.2f}" for a in tuned) + f" (mean {tuned.mean():.2f}, drop {o[0] - tuned.mean():.2f})",
              f"  same epochs from scratch, per seed: " + ", ".join(f"{a:.2f}" for a in scratch)
              + f" (mean {scratch.mean():.2f})",
              f"  epochs to within 1 point: fine-tuned {b['finetuned_within_at']}, from scratch {b['scratch_within_at']}",
              f"  pipeline: {b['pipeline']}"]
    return "\n".join(lines)


def flow_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the task, the original and the user's search (shared with synth_search.py)."""
    p.add_argument("--task", choices=("hard-mnist", "shapes"), default="hard-mnist")
    p.add_argument("--out", default="vs-out", help="working folder (resumable)")
    p.add_argument("--seed", type=int, default=0, help="the task's seed")
    p.add_argument("--seeds", type=int, default=3, help="training seeds of the original (and of the best)")
    p.add_argument("--original-epochs", type=int, default=15)
    p.add_argument("--max-drop", type=float, default=1.0)
    p.add_argument("--time-limit", type=float, default=300.0, help="seconds of the search before fine-tuning")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--finetune-epochs", type=int, default=9)
    p.add_argument("--finetune-top", type=int, default=12)
    p.add_argument("--report", action="store_true", help="print the saved summary and stop")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    flow_arguments(p)
    p.add_argument("--strategy", default="evolution",
                   help="the search's strategy (evolution: the whole-network anchors first, then mutations)")
    args = p.parse_args()
    saved = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}
    if not args.report:
        saved[args.task] = run(args)
        SUMMARY.write_text(json.dumps(saved, indent=1) + "\n")
    if args.task not in saved:
        raise SystemExit(f"no saved run of {args.task} in {SUMMARY}")
    print(table(saved[args.task]))


if __name__ == "__main__":
    run_resumable(main)
