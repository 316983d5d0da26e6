"""Cost of one Fisher Potential evaluation, before and after, and the rank stability of smaller batches.

    python experiments/fisher_speed.py                  # seconds per evaluation, ResNet-34 cifar10 batch 16
    python experiments/fisher_speed.py --rank           # + the rank-stability table over batches and seeds

Speed: the original network and `CANDIDATES` (one per kind of architecture transform), transformed
by this tree and saved, are timed by three worker processes, run one after the other in each of
`--rounds` rounds: "before" is the tree at `--before` (default: the commit this work started from,
extracted with `git archive`): `fisher_potential` with torch's thread count, and a candidate's
check is `check_capacity`, which measures the original again; "after-threads" is this tree with
torch's thread count; "after" is this tree with one thread, a check being a call of a `FisherCheck`
(the original measured once per search). Figures are medians of wall-clock and CPU seconds;
after/before is the wall-clock ratio from the same run. The machine may be shared: the load
average is printed with them.

Rank stability (`--rank`): `--candidates` random candidates (per conv: kept, or one of `CHOICES`,
drawn with a seeded generator) are measured at every setting of `--batches` (a batch, or batch@side
for smaller images) on `--seeds` synthetic minibatches. Each row compares a setting's Fisher ratios
(candidate / original, same minibatch) with the consensus of the other seeds (geometric mean ratio
at the largest batch: no minibatch is shared, as the batches of one seed share their first
examples): Spearman, Kendall, accept/reject decisions (ratio >= 1) agreeing, and wrong decisions on
candidates whose consensus is at least `CLEAR` from 1; then Spearman and decisions against batch 16
on every other seed (batch 16's own row is the noise floor of the reference). `--rank-from` prints
the table of a saved rank_ratios.json.

Measured (AMD EPYC Zen 4, 2 cores; ResNet-34 cifar10 batch 16), wall / CPU seconds. Quiet machine
(load 1.5): the original's evaluation 0.52 / 1.02 before, 0.80 / 0.80 after; a candidate's check
0.57-0.95 / 1.1-1.9 before, 0.17-1.03 / 0.17-1.03 after (CPU 0.15-0.55x; two workers run two checks
at once). Shared with other jobs (load 3-5): the original 3.75 -> 0.79, a check 3.3-15.5 -> 0.18-0.93
(0.05-0.20x): torch's two threads spin against the other work. One core's cost of an evaluation is
conv FLOPs (0.77 -> 0.79 s CPU at one thread for the original; a plain torch ResNet-34 takes 0.70).
Rank study, 50 candidates x 5 seeds, CPU s per candidate / Spearman / Kendall / decisions agreeing /
clear decisions wrong: batch 32 1.34 / 0.95 / 0.84 / 0.89 / 0 of 126; 16 0.70 / 0.93 / 0.80 / 0.84 / 0;
8 0.38 / 0.87 / 0.72 / 0.85 / 8; 4 0.21 / 0.80 / 0.64 / 0.80 / 8; 16@16 0.21 / 0.82 / 0.65 / 0.77 / 12.
Batch 16 stays: below it clear decisions flip.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import nasir
import nasir.fisher  # by attribute: the "before" worker runs this file against a tree without FisherCheck
from nasir import zoo
from nasir.data import minibatch
from nasir.dialects import nest
from nasir.errors import NasirError

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = r"layer.*conv[12]_Conv"
LATE = r"layer[34].*conv[12]_Conv"
CANDIDATES = {
    "group2": f'group{{factor=2 layers="{BLOCKS}"}}',
    "group4-late": f'group{{factor=4 layers="{LATE}"}}',
    "depthwise": f'depthwise{{layers="{BLOCKS}"}}',
    "bottleneck-co2": 'bottleneck{dim=co factor=2 layers="layer.*conv1_Conv"}',
    "bottleneck-ci4-late": f'bottleneck{{dim=ci factor=4 layers="{LATE}"}}',
    "seq1-late": f'index-split{{dim=co parts=4 layers="{LATE}"}},group{{factor=2 layers="(?:{LATE})[.]part1"}},'
                 f'group{{factor=4 layers="(?:{LATE})[.]part2"}},group{{factor=8 layers="(?:{LATE})[.]part3"}}',
    "seq2": f'index-split{{dim=co at=16 layers="{BLOCKS}"}},group{{factor=2 layers="(?:{BLOCKS})[.]part1"}}',
    "fold-kh": f'fold{{dim=kh layers="{BLOCKS}"}}',
    "shift-oh": f'shift{{dim=oh offset=1 layers="{BLOCKS}"}}',
    "unshare-oh-late": f'unshare{{dim=oh parts=2 layers="{LATE}"}}',
    "spatial-bottleneck-l4": 'bottleneck{dim=oh factor=2 layers="layer4.*conv[12]_Conv"},'
                             'bottleneck{dim=ow factor=2 layers="layer4.*conv[12]_Conv"}',
}
"""Candidates timed by the speed table: one per kind of architecture transform (ResNet-34 names)."""

CHOICES = [
    'group{{factor=2 layers="{L}"}}', 'group{{factor=4 layers="{L}"}}', 'group{{factor=8 layers="{L}"}}',
    'depthwise{{layers="{L}"}}',
    'bottleneck{{dim=ci factor=2 layers="{L}"}}', 'bottleneck{{dim=ci factor=4 layers="{L}"}}',
    'bottleneck{{dim=co factor=2 layers="{L}"}}',
    'bottleneck{{dim=oh factor=2 layers="{L}"}},bottleneck{{dim=ow factor=2 layers="{L}"}}',
    'index-split{{dim=co parts=2 layers="{L}"}},group{{factor=2 layers="(?:{L})[.]part1"}}',
    'index-split{{dim=co parts=2 layers="{L}"}},group{{factor=2 layers="(?:{L})[.]part0"}},'
    'group{{factor=4 layers="(?:{L})[.]part1"}}',
    'index-split{{dim=co parts=2 layers="{L}"}},fold{{dim=kh layers="(?:{L})[.]part0"}},'
    'fold{{dim=kw layers="(?:{L})[.]part1"}}',
    'fold{{dim=kh layers="{L}"}}', 'fold{{dim=kw layers="{L}"}}',
    'shift{{dim=oh offset=1 layers="{L}"}}', 'shift{{dim=ow offset=-1 layers="{L}"}}',
    'unshare{{dim=oh parts=2 layers="{L}"}}',
]
"""Per-conv choices of the random candidates; {L} is the conv's name (or an alternation of names)."""


# --- models and candidates ---------------------------------------------------------------------

def load(name: str, dataset: str, batch: int, folder: Path, size: int | None = None):
    """`name` from the zoo imported at `batch` (and image side `size`, default the dataset's) and
    converted to nests (where transforms act)."""
    path = folder / f"{name}-{dataset}-b{batch}-{size or 'native'}.onnx"
    if not path.exists():
        zoo.export_onnx(name, path, dataset=dataset, batch=batch, **({"image_size": size} if size else {}))
    return nasir.load(path).transform("convert-nn-to-nest")


def conv_names(model) -> list[str]:
    """Names of the model's measured convs, in program order."""
    return [op.layer_name for op in model.module.walk() if isinstance(op, nest.ComputeOp) and nasir.fisher.measured(op)]


def legal_choices(model) -> dict[str, list[str]]:
    """For each conv, the `CHOICES` that apply to it alone."""
    legal = {}
    for name in conv_names(model):
        pattern = name.replace(".", "[.]")
        legal[pattern] = []
        for choice in CHOICES:
            try:
                model.transform(choice.format(L=pattern))
                legal[pattern].append(choice)
            except NasirError:
                pass
    return legal


def sample(legal: dict[str, list[str]], rng: np.random.Generator) -> str:
    """One random candidate: each conv kept with a probability drawn per candidate, else one of its
    legal choices; convs with the same choice share one step (their names as an alternation)."""
    keep = rng.uniform(0.3, 0.95)
    chosen: dict[str, list[str]] = {}
    for pattern, choices in legal.items():
        if choices and rng.uniform() > keep:
            chosen.setdefault(choices[rng.integers(len(choices))], []).append(pattern)
    return ",".join(choice.format(L="|".join(patterns)) for choice, patterns in chosen.items())


def random_candidates(model, count: int, seed: int) -> list[str]:
    """`count` distinct random candidates that transform without error (illegal combinations are redrawn)."""
    legal, rng, found = legal_choices(model), np.random.default_rng(seed), []
    while len(found) < count:
        pipeline = sample(legal, rng)
        if not pipeline or pipeline in found:
            continue
        try:
            model.transform(pipeline)
            found.append(pipeline)
        except NasirError:
            pass
    return found


# --- rank statistics ---------------------------------------------------------------------------

def ranks(values) -> np.ndarray:
    return np.argsort(np.argsort(np.asarray(values)))


def spearman(a, b) -> float:
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def kendall(a, b) -> float:
    """Kendall's tau-a (the ratios have no ties)."""
    pairs = list(itertools.combinations(range(len(a)), 2))
    return float(sum(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) for i, j in pairs) / len(pairs))


def agreement(a, b) -> float:
    """Share of candidates on which the accept rule (ratio >= 1) decides alike."""
    return float(np.mean((np.asarray(a) >= 1) == (np.asarray(b) >= 1)))


# --- the rank-stability study ------------------------------------------------------------------

def setting(text: str) -> tuple[int, int | None]:
    """`"8"` -> batch 8 at the dataset's image size; `"16@16"` -> batch 16 at 16 x 16."""
    batch, _, size = text.partition("@")
    return int(batch), int(size) if size else None


def fisher_ratios(name: str, dataset: str, where: tuple[int, int | None], pipelines: list[str], seeds: list[int],
                  folder: Path) -> tuple[np.ndarray, float]:
    """Fisher ratios candidate / original (seeds x candidates) at batch and image size `where`, and
    the median CPU seconds of one candidate's evaluation (one thread)."""
    model = load(name, dataset, where[0], folder, where[1])
    shape, classes = tuple(model.input_shapes[0][1:]), model.output_shapes[0][-1]
    candidates = [model.transform(p) for p in pipelines]
    out, seconds = np.zeros((len(seeds), len(pipelines))), []
    for i, seed in enumerate(seeds):
        check = nasir.fisher.FisherCheck(model, *minibatch(None, where[0], seed, shape, classes), seed=seed, threads=1)
        for k, candidate in enumerate(candidates):
            start = time.process_time()
            out[i, k] = check(candidate).candidate / check.original
            seconds.append(time.process_time() - start)
    return out, statistics.median(seconds)


CLEAR = 0.1
"""A candidate whose consensus ratio is at least this far from 1 has a clear accept/reject decision."""


def stability(ratios: np.ndarray, reference: np.ndarray, consensus_from: np.ndarray) -> tuple[list[float], int, int]:
    """Against the consensus of the other seeds (geometric mean ratio at the largest batch, so no
    minibatch is shared): mean Spearman, Kendall and decision agreement, and the decisions that
    are wrong on clear candidates (count and out of how many); against the reference batch on
    every other seed: mean Spearman and decision agreement."""
    rows, pairs, wrong, clear = [], [], 0, 0
    for i, ratio in enumerate(ratios):
        others = [j for j in range(len(ratios)) if j != i]
        consensus = np.exp(np.log(consensus_from[others]).mean(axis=0))
        rows.append((spearman(ratio, consensus), kendall(ratio, consensus), agreement(ratio, consensus)))
        pairs += [(spearman(ratio, reference[j]), agreement(ratio, reference[j])) for j in others]
        sure = np.abs(consensus - 1) >= CLEAR
        wrong += int(np.sum((ratio[sure] >= 1) != (consensus[sure] >= 1)))
        clear += int(np.sum(sure))
    return [float(np.mean(c)) for c in zip(*rows)] + [float(np.mean(c)) for c in zip(*pairs)], wrong, clear


def rank_table(name: str, dataset: str, settings: list[str], count: int, seeds: list[int], folder: Path) -> dict:
    """Measure the study; returns (and writes to rank_ratios.json) what `print_rank` prints."""
    pipelines = random_candidates(load(name, dataset, 1, folder), count, seed=0)
    ratios, cost = {}, {}
    for text in settings:
        start = time.perf_counter()
        ratios[text], cost[text] = fisher_ratios(name, dataset, setting(text), pipelines, seeds, folder)
        print(f"{text}: {len(pipelines)} candidates x {len(seeds)} seeds in {time.perf_counter() - start:.0f} s",
              file=sys.stderr, flush=True)
    study = {"model": f"{name} {dataset}", "pipelines": pipelines, "seeds": seeds, "cost": cost,
             "ratios": {k: r.tolist() for k, r in ratios.items()}}
    (folder / "rank_ratios.json").write_text(json.dumps(study))
    return study


def print_rank(study: dict) -> None:
    ratios = {k: np.array(r) for k, r in study["ratios"].items()}
    largest = max((t for t in ratios if setting(t)[1] is None), key=lambda t: setting(t)[0])
    reference, seeds = ratios["16"], study["seeds"]
    print(f"\nrank stability, {study['model']}: {len(study['pipelines'])} random candidates, {len(seeds)} synthetic "
          f"minibatches (seeds {seeds[0]}..{seeds[-1]}); Fisher ratios {reference.min():.3g} .. {reference.max():.3g} "
          f"at batch 16, {100 * float(np.mean(reference >= 1)):.0f}% accepted")
    print(f"vs consensus (geometric mean ratio of the other seeds at batch {largest}): Spearman rho, Kendall tau, "
          f"decisions (ratio >= 1) agreeing, wrong decisions on clear candidates (consensus >= {CLEAR:.0%} from 1); "
          "vs b16: batch 16 on each other seed; s/eval: CPU seconds per candidate, one thread")
    print(f"{'batch[@size]':>12}  {'s/eval':>6}  {'rho':>5}  {'tau':>5}  {'decide':>6}  {'clear wrong':>11}  "
          f"{'rho vs b16':>10}  {'decide vs b16':>13}")
    for text, ratio in ratios.items():
        (rho, tau, decide, rho16, decide16), wrong, clear = stability(ratio, reference, ratios[largest])
        print(f"{text:>12}  {study['cost'][text]:6.3f}  {rho:5.3f}  {tau:5.3f}  {decide:6.3f}  "
              f"{f'{wrong}/{clear}':>11}  {rho16:10.3f}  {decide16:13.3f}")


# --- the speed table ---------------------------------------------------------------------------

BEFORE = "9a64c9a"
"""The commit this work started from: its `fisher_potential` is the path timed as "before"."""


def before_tree(rev: str, folder: Path) -> Path:
    """The tree at `rev` laid out as the `nasir` package (its rooms linked in), for PYTHONPATH."""
    tree = folder / f"tree-{rev}"
    if tree.exists():
        return tree
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for room in ("dialects", "transforms", "lowering", "runtime"):
        (tree / "nasir" / room).symlink_to(tree / room)
    return tree


def measure(path: str, repeat: int, folder: Path) -> dict:
    """Worker: seconds (wall, CPU) of each evaluation and each candidate's check by `path`, `repeat` times.

    "before" (the tree at `BEFORE`) and "after-threads": `fisher_potential` as torch's threads are
    set, and a check is `check_capacity` (which measures the original too); "after": one thread, and
    a check is a call of a `FisherCheck` (the original measured once, when it is built)."""
    models = {key: nasir.load(folder / f"{key}.mlir") for key in ["original", *CANDIDATES]}
    model = models["original"]
    shape = model.input_shapes[0]
    x, y = minibatch(None, shape[0], 0, tuple(shape[1:]), model.output_shapes[0][-1])
    threads = {"threads": 1} if path == "after" else {}
    check = nasir.fisher.FisherCheck(model, x, y, **threads) if path == "after" else (
        lambda m: nasir.fisher.check_capacity(m, model, x, y))
    evaluate = functools.partial(nasir.fisher.fisher_potential, inputs=x, labels=y, **threads)
    jobs = {f"{k} eval": functools.partial(evaluate, m) for k, m in models.items()}
    jobs |= {f"{k} check": functools.partial(check, m) for k, m in models.items() if k != "original"}
    times: dict[str, list[tuple[float, float]]] = {key: [] for key in jobs}
    values = {}
    for _ in range(repeat):
        for key, job in jobs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            out = job()
            times[key].append((time.perf_counter() - wall, time.process_time() - cpu))
            values[key] = out.total if key.endswith("eval") else out.accepted
    return {"times": times, "values": values, "load": os.getloadavg()[0], "module": nasir.fisher.__file__,
            "threads": threads.get("threads", torch.get_num_threads())}


def run_worker(path: str, tree: Path | None, repeat: int, folder: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree)) if tree else dict(os.environ)
    command = [sys.executable, __file__, "--worker", path, "--repeat", str(repeat), "--out", str(folder)]
    return json.loads(subprocess.run(command, env=env, capture_output=True, check=True, text=True).stdout)


def speed_table(args, folder: Path) -> None:
    """Rounds of the three workers one after the other; medians over all rounds' samples."""
    tree = before_tree(args.before, folder)
    original = load(args.model, args.dataset, args.batch, folder)
    original.save(folder / "original.mlir")  # every worker measures these very networks
    for key, pipeline in CANDIDATES.items():
        original.transform(pipeline).save(folder / f"{key}.mlir")
    paths = {"before": tree, "after-threads": None, "after": None}
    samples: dict[str, dict[str, list]] = {p: {} for p in paths}
    runs: dict[str, list[dict]] = {p: [] for p in paths}
    for _ in range(args.rounds):
        for path, where in paths.items():
            run = run_worker(path, where, args.repeat, folder)
            runs[path].append(run)
            for key, ts in run["times"].items():
                samples[path].setdefault(key, []).extend(ts)
    print_speed(args, samples, runs)


def median(samples: list, which: int) -> float:
    return statistics.median(s[which] for s in samples)


def print_speed(args, samples: dict, runs: dict) -> None:
    loads = [run["load"] for rs in runs.values() for run in rs]
    threads = {p: rs[0]["threads"] for p, rs in runs.items()}
    print(f"Fisher Potential, {args.model} {args.dataset} batch {args.batch}: seconds per evaluation "
          f"(median of {args.rounds} rounds x {args.repeat}), wall / CPU; load average "
          f"{min(loads):.1f}..{max(loads):.1f} on {os.cpu_count()} cores")
    print(f"before: {args.before} ({threads['before']} threads); after-threads: this tree, "
          f"{threads['after-threads']} threads; after: this tree, 1 thread")
    print("check: one candidate's capacity check (before: check_capacity, both models; after: FisherCheck)")
    keys = list(samples["after"])
    width = max(len(k) for k in keys)
    print(f"{'':<{width}}  {'before':>13}  {'after-threads':>13}  {'after':>13}  {'after/before':>12}  "
          f"value (before -> after)")
    for key in keys:
        cells = [f"{median(samples[p][key], 0):6.3f}/{median(samples[p][key], 1):6.3f}" for p in samples]
        ratio = median(samples["after"][key], 0) / median(samples["before"][key], 0)
        values = [runs[p][-1]["values"][key] for p in ("before", "after")]
        shown = " -> ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in values)
        print(f"{key:<{width}}  " + "  ".join(f"{c:>13}" for c in cells) + f"  {ratio:12.3f}  {shown}")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet34")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--batch", type=int, default=16, help="batch of the speed table")
    parser.add_argument("--before", default=BEFORE, help="git revision timed as before")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2, help="evaluations of each model per round")
    parser.add_argument("--rank", action="store_true", help="also print the rank-stability table")
    parser.add_argument("--rank-only", action="store_true", help="only the rank-stability table")
    parser.add_argument("--rank-from", metavar="JSON", help="print the rank table of a saved rank_ratios.json")
    parser.add_argument("--batches", default="32,16,8,4,2,16@16,8@16",
                        help="batches of the rank table, BATCH or BATCH@SIDE (a smaller image); 16 is the reference")
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default=None, help="folder for the ONNX files and rank_ratios.json")
    parser.add_argument("--worker", choices=["before", "after-threads", "after"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker, args.repeat, Path(args.out))))
        return
    with tempfile.TemporaryDirectory(prefix="fisher-speed-") as tmp:
        folder = Path(args.out or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if not (args.rank_only or args.rank_from):
            speed_table(args, folder)
        if args.rank_from:
            print_rank(json.loads(Path(args.rank_from).read_text()))
        elif args.rank or args.rank_only:
            print_rank(rank_table(args.model, args.dataset, args.batches.split(","), args.candidates,
                                  list(range(args.seeds)), folder))


if __name__ == "__main__":
    sys.exit(main())
