"""Ground truth for nasir's own search space (issue 51, deliver 1): a small NAS-Bench of trained
candidates that accuracy proxies are ranked against.

    python experiments/ground_truth.py                      # plan 100 candidates, train what is missing
    python experiments/ground_truth.py --candidates 150     # extend the plan by 50 and train those too
    python experiments/ground_truth.py --threads 1 &        # in the background beside other work

Model and task are those of `fisher_vs_accuracy.py`: ResNet-18 in its CIFAR layout at 16 x 16, on
the hard MNIST task (100 training images a digit, shifts of up to 4 pixels, noise of 0.5), trained
with its one recipe (8 epochs, batch 32, lr 0.02 with cosine decay, no augmentation).

The plan (`experiments/data/ground_truth_plan.json`) is drawn once and only ever extended:
- the search's whole-network anchors (`SearchSpace.uniform`: group8 on every conv it fits, ...);
- then random candidates stratified over transform families (`FAMILIES`: each candidate draws its
  choices from one family, or from all for "mixed") and over MAC ratios in `BINS` from 0.1 to 1.0:
  from a pool of `--pool` draws per family, the families take turns, each taking a candidate from
  the MAC bin it has the fewest of among those its pool reaches (`extend_plan`).
Each candidate's pipeline, family, MAC and parameter ratios to the original are fixed in the plan.

The rows (`experiments/data/ground_truth.jsonl`), one a training, appended as each finishes:
    {"id": "c017", "family": "group", "pipeline": "...", "macs": 0.41, "params": 0.38,
     "latency": 0.47, "seed": 0, "accuracy": 88.1, "minutes": 1.9, "cpu": "...", ...}
`latency` is the candidate's llvm time over the original's at batch 1 on one thread (median of
interleaved rounds: a ratio that holds on a shared machine). Work order: the original with 5
training seeds (the recipe's noise), every planned candidate with seed 0, then `--repeat` (10)
candidates spread over the MAC ratios with seeds 1 and 2. A run that is stopped (Ctrl-C, the end
of a session) loses at most the epoch in progress: trainings resume from their checkpoints in
`--work`, and finished rows are never trained again. The plan and rows are small and kept in the
repo; the checkpoints are not.

The second accuracy column (`--distilled`, `experiments/data/ground_truth_distilled.jsonl`): what a
user of the trained-model flow gets (`nasir search --max-accuracy-drop`). The original trained with
seed 0 is the teacher; each planned candidate takes its weights (`init=inherit`) and is fine-tuned
with `nasir.search.finetune`'s recipe (distillation from the original, lr 0.01 with cosine decay,
batch norms recalibrated before each test) for `--distil-epochs` (2) epochs, one seed. A row holds
the accuracy before fine-tuning (`inherited`: the inherited weights, batch norms recalibrated as
before each test) and after (`distilled`); resumable like the first.
`--distilled` runs only this column, so it can run beside the first in a second process.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from fisher_vs_accuracy import cpu_name, hard_mnist, network, run_resumable

import nasir
from nasir.errors import NasirError, TrainingDiverged
from nasir.lowering.passes import with_init
from nasir.measure.timing import interleaved
from nasir.search.finetune import LR, RECALIBRATE, finetune_batch
from nasir.search.space import IDENTITY, SearchSpace
from nasir.summary import summarize
from nasir.training.loop import evaluate

DATA = Path(__file__).parent / "data"
PLAN = DATA / "ground_truth_plan.json"
ROWS = DATA / "ground_truth.jsonl"
DISTILLED = DATA / "ground_truth_distilled.jsonl"

FAMILIES = {
    "group": ("group2", "group4", "group8", "group16"),
    "depthwise": ("depthwise",),
    "bottleneck": ("bottleneck-co2", "bottleneck-co4", "bottleneck-ci2", "bottleneck-ci4"),
    "bottleneck-hw": ("bottleneck-hw2", "bottleneck-hw4"),
    "seq": ("seq1", "seq2", "seq3"),
    "window": ("fold-kh", "fold-kw", "fold-pieces", "unfold-oh3", "unfold-ow3"),
    "shift": ("shift-oh", "shift-ow"),
    "unshare": ("unshare-oh2",),
    "mixed": None,
}
"""Transform families a stratified candidate draws its choices from (None: every choice)."""
BINS = np.linspace(0.1, 1.0, 10)
"""MAC-ratio bins: [0.1, 0.2), ..., [0.9, 1.0]."""
ORIGINAL_SEEDS = 5
RECIPE = {"epochs": 8, "batch": 32, "lr": 0.02}


def draw(space: SearchSpace, family: tuple[str, ...] | None, rng) -> str:
    """A random candidate whose changed layers take choices of `family`: each layer that has one
    keeps its conv or takes one drawn uniformly, the share changed drawn per candidate (as
    `SearchSpace.random_pipeline` draws from every choice)."""
    keep = rng.random()
    picks = {}
    for lc in space.layers:
        allowed = [c for c in lc.choices[1:] if family is None or c in family]
        picks[lc.layer] = str(rng.choice(allowed)) if allowed and rng.random() > keep else IDENTITY
    return space.pipeline(picks)


def ratios_of(original: nasir.Model, pipeline: str) -> tuple[float, float] | None:
    """MAC and parameter ratios of `pipeline` applied to `original` (None where it does not apply)."""
    try:
        candidate = original.transform(pipeline)
    except NasirError:
        return None
    base, s = summarize(original), summarize(candidate)
    return s.total_macs / base.total_macs, s.total_params / base.total_params


def extend_plan(plan: list[dict], original: nasir.Model, want: int, pool: int, seed: int) -> list[dict]:
    """`plan` with the anchors (when it is new), then stratified candidates up to `want` (anchors
    included): `pool` random candidates are drawn for each family (the rng of draw i of family f
    seeded by (seed, f, i): an extension draws the same pools), and each family in turn takes one
    more, from the MAC bin where it has the fewest so far among the bins its pool reaches."""
    space = SearchSpace.of(original)
    seen = {row["pipeline"] for row in plan}
    if not plan:
        for picks in space.uniform():
            pipeline = space.pipeline(picks)
            choice = next(v for v in picks.values() if v != IDENTITY)
            macs, params = ratios_of(original, pipeline)
            plan.append({"id": f"c{len(plan):03d}", "family": f"anchor:{choice}", "pipeline": pipeline,
                         "macs": macs, "params": params})
            seen.add(pipeline)
    pools: dict[str, dict[int, list[dict]]] = {}
    for f, (family, choices) in enumerate(FAMILIES.items()):
        pools[family] = {}
        for i in range(pool):
            pipeline = draw(space, choices, np.random.default_rng([seed, 51, f, i]))
            got = ratios_of(original, pipeline) if pipeline and pipeline not in seen else None
            if got is not None and got[0] >= BINS[0]:
                seen.add(pipeline)
                b = int(min(np.digitize(got[0], BINS) - 1, len(BINS) - 2))
                pools[family].setdefault(b, []).append({"family": family, "pipeline": pipeline,
                                                        "macs": got[0], "params": got[1]})
    def count(family: str, b: int) -> int:
        return sum(1 for r in plan if r["family"] == family and min(np.digitize(r["macs"], BINS) - 1, len(BINS) - 2) == b)

    while len(plan) < want and any(any(bins.values()) for bins in pools.values()):
        for family, bins in pools.items():
            left = [b for b in bins if bins[b]]
            if left and len(plan) < want:
                b = min(left, key=lambda b: (count(family, b), b))
                plan.append({"id": f"c{len(plan):03d}", **bins[b].pop(0)})
    return plan


def repeats(plan: list[dict], n: int) -> list[dict]:
    """`n` candidates spread over the MAC ratios (evenly by rank) for the extra training seeds."""
    ordered = sorted(plan, key=lambda r: r["macs"])
    return [ordered[int(i)] for i in np.linspace(0, len(ordered) - 1, n).round()] if ordered else []


def read_rows(path: Path = ROWS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def done_rows() -> dict[tuple[str, int], dict]:
    return {(r["id"], r["seed"]): r for r in read_rows()}


def teacher_of(original: nasir.Model, data, work: Path, threads: int | None) -> tuple[nasir.Model, float]:
    """The original trained with seed 0 by the first column's recipe (resumed from its checkpoint,
    so a finished one is only read) and its test accuracy."""
    trained = nasir.train(original, data, seed=0, augment=False, out=work / "train" / "original-seed0",
                          progress=False, threads=threads, **RECIPE)
    return trained.apply_to(original), trained.accuracy


def inherited_accuracy(model: nasir.Model, data, batch: int) -> float:
    """Test accuracy of `model` at its present weights, its batch norms' running statistics
    recalibrated over the first `RECALIBRATE` training batches (as fine-tuning does before each
    test: a rewrite leaves the inherited statistics describing other weights)."""
    program = model.at_batch(batch).to_torch()
    x = data.train[0]
    program.recalibrate(torch.from_numpy(np.ascontiguousarray(x[k:k + batch]))
                        for k in range(0, min(RECALIBRATE, len(x) // batch) * batch, batch))
    return evaluate(program, *data.test, batch)[1]


def distil(plan: list[dict], original: nasir.Model, data, work: Path, epochs: int, threads: int | None,
           cpu: str) -> None:
    """The second column (module docstring): each planned candidate without a row in `DISTILLED`,
    fine-tuned from the trained original's weights by distillation for `epochs` epochs."""
    teacher, teacher_accuracy = teacher_of(original, data, work, threads)
    done = {r["id"] for r in read_rows(DISTILLED)}
    todo = [c for c in plan if c["id"] not in done]
    batch = finetune_batch(len(data.train[1]))
    recipe = {"epochs": epochs, "batch": batch, "lr": LR, "recalibrate": RECALIBRATE}
    print(f"distilled column: {len(plan) - len(todo)} of {len(plan)} done; teacher {teacher_accuracy:.2f}%; "
          f"CPU {cpu}", flush=True)
    for k, candidate in enumerate(todo):
        model = teacher.transform(with_init(candidate["pipeline"], "inherit"))
        start = time.perf_counter()
        inherited = inherited_accuracy(model, data, batch)
        try:
            tuned = nasir.train(model, data, epochs=epochs, batch=batch, lr=LR, seed=0, augment=False,
                                teacher=teacher, recalibrate=RECALIBRATE, progress=False, threads=threads,
                                out=work / "distil" / candidate["id"])
            accuracy, diverged = tuned.accuracy, False
        except TrainingDiverged:
            accuracy, diverged = 100.0 / data.num_classes, True  # a diverged run is worth a guess
        row = {**candidate, "seed": 0, "inherited": inherited, "distilled": accuracy, "diverged": diverged,
               "teacher_accuracy": teacher_accuracy, "minutes": (time.perf_counter() - start) / 60, "cpu": cpu,
               "recipe": recipe, "task": data.name}
        with DISTILLED.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[{k + 1}/{len(todo)}] {candidate['id']} {candidate['family']:>16}: MACs {row['macs']:.2f} inherited "
              f"{inherited:.2f}% distilled {accuracy:.2f}% ({row['minutes']:.1f} min)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", type=int, default=100, help="planned candidates, anchors included")
    p.add_argument("--pool", type=int, default=40, help="random candidates drawn per family to stratify from")
    p.add_argument("--repeat", type=int, default=10, help="candidates also trained with seeds 1 and 2")
    p.add_argument("--seed", type=int, default=0, help="the task's and the plan's seed")
    p.add_argument("--threads", type=int, default=None, help="torch threads of each training (default: torch's)")
    p.add_argument("--work", default="gt-out", help="training checkpoints (resumed from)")
    p.add_argument("--plan-only", action="store_true", help="extend the plan and stop")
    p.add_argument("--distilled", action="store_true",
                   help="train only the second column: distillation from the trained original (docstring)")
    p.add_argument("--distil-epochs", type=int, default=2, help="epochs of the second column's fine-tuning")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    DATA.mkdir(exist_ok=True)
    cpu = cpu_name()

    class Args:
        model, dataset, image_size = "resnet18", "cifar10", 16
    onnx, original = network(Args, work)
    plan = json.loads(PLAN.read_text()) if PLAN.exists() else []
    before = len(plan)
    began = time.perf_counter()
    plan = extend_plan(plan, original, args.candidates, args.pool, args.seed)
    PLAN.write_text(json.dumps(plan, indent=0) + "\n")
    print(f"plan: {len(plan)} candidates ({len(plan) - before} new, {time.perf_counter() - began:.0f} s) in {PLAN}",
          flush=True)
    if args.plan_only:
        return
    data = hard_mnist(100, 4, 0.5, args.seed).fitted(tuple(original.input_shapes[0][1:]))
    if args.distilled:
        distil(plan, original, data, work, args.distil_epochs, args.threads, cpu)
        return
    done = done_rows()
    work_list = [({"id": "original", "family": "original", "pipeline": "", "macs": 1.0, "params": 1.0}, s)
                 for s in range(ORIGINAL_SEEDS)]
    work_list += [(c, 0) for c in plan] + [(c, s) for s in (1, 2) for c in repeats(plan, args.repeat)]
    todo = [(c, s) for c, s in work_list if (c["id"], s) not in done]
    print(f"{len(work_list) - len(todo)} of {len(work_list)} trainings done; CPU {cpu}", flush=True)
    x = np.random.default_rng(0).standard_normal(original.at_batch(1).input_shapes[0]).astype(np.float32)
    reference = nasir.compile(original.at_batch(1), threads=1)
    latencies = {r["id"]: r["latency"] for r in done.values()}
    for k, (candidate, seed) in enumerate(todo):
        model = original.transform(candidate["pipeline"]) if candidate["pipeline"] else original
        if candidate["id"] not in latencies:
            exe = nasir.compile(model.at_batch(1), threads=1)
            times = interleaved({"c": lambda: exe(x), "o": lambda: reference(x)}, rounds=15)
            latencies[candidate["id"]] = float(np.median(times["c"]) / np.median(times["o"]))
        start = time.perf_counter()
        trained = nasir.train(model, data, seed=seed, augment=False, out=work / "train" / f"{candidate['id']}-seed{seed}",
                              progress=False, threads=args.threads, **RECIPE)
        row = {**candidate, "latency": latencies[candidate["id"]], "seed": seed, "accuracy": trained.accuracy,
               "minutes": (time.perf_counter() - start) / 60, "cpu": cpu, "recipe": RECIPE, "task": data.name}
        with ROWS.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[{k + 1}/{len(todo)}] {candidate['id']} {candidate['family']:>16} seed {seed}: MACs {row['macs']:.2f} "
              f"latency {row['latency']:.2f} accuracy {row['accuracy']:.2f}% ({row['minutes']:.1f} min)", flush=True)


if __name__ == "__main__":
    run_resumable(main)
