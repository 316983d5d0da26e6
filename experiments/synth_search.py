"""Evidence for synthesis in the whole network (issue 55, deliver 4): the trained-model flow with
operators synthesised from the coordinate primitives drawn beside the fixed transforms, against the
same flow without them, in the same wall time.

    python experiments/synth_search.py --task hard-mnist             # resumable in --out/TASK
    python experiments/synth_search.py --task hard-mnist --report    # print the saved table
    python experiments/synth_search.py --task hard-mnist --retime    # step 4 again, on a quiet machine
    python experiments/synth_search.py --task hard-mnist --bottom-up --out runs-bu   # operators grown bottom-up

In `--out`/TASK (the folder verified_search.py uses, so both share the trained original):
1. The task and the original, ResNet-18 at 16 x 16 trained with the ground-truth recipe
   (`verified_search.task_and_original`).
2. A warm kernel cache, shared by both arms: a search without accuracy (`--warm` seconds) over
   the fixed and the synthesised choices together fills it with the convs' per-layer timings, so
   the two searches below spend their time searching rather than timing first kernels (a fresh
   cache gives a few dozen candidates in 300 s); each arm starts from a copy of it.
3. Two searches of the original, as the user runs them (`nasir.search(..., accuracy_drop=1,
   strategy="evolution")`): `fixed` with the fixed transforms alone and `synth` with `--synth`
   synthesised operators per distinct conv beside them. Each has a kernel cache of its own, so
   neither reuses the other's new timings, and the same wall time before fine-tuning: `synth`'s
   `time_limit` is `--time-limit` less the seconds its synthesis takes (timed here, before it).
   Each search ends as the user's does: candidates fine-tuned by distillation under successive
   halving, the fastest within a point of the original on the validation half returned.
4. The two networks returned and the original compiled whole (llvm, 1 thread) and timed
   interleaved in one run (`--rounds`): speedups over the original, median and quartiles.
5. Each network returned fine-tuned again with `--best-seeds` training seeds, scored on the
   held-out half: the accuracy's spread beside the original's recipe spread.
The summary goes to `experiments/data/synth-search-<cpu>.json` and the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import re
import time
from pathlib import Path

import numpy as np
from fisher_vs_accuracy import cpu_name, run_resumable
from verified_search import flow_arguments, task_and_original

import nasir
from nasir.measure.timing import Spread, interleaved, ratios
from nasir.search.finetune import LR, RECALIBRATE, finetune_batch
from nasir.search.bottom_up import search_walk
from nasir.search.synthesis import search_choices
from nasir.lowering.target import host_target

PRIMITIVE = re.compile(r"\b(split-dim|merge-dims|dilate|expand|share|tie|bottom-up)\{")
"""The passes only synthesised operators use (fold, shift and unfold are fixed choices too)."""


def warm_cache(args, out: Path) -> Path:
    """Step 2: the shared kernel cache (made once)."""
    cache, done = out / "kernels-warm.db", out / "kernels-warm.done"
    if not done.exists():
        nasir.search(out / "original.onnx", time_limit=args.warm, budget=None, workers=args.workers,
                     out=out / "search-warm", kernel_cache=cache, seed=1, strategy="evolution", progress=False,
                     synth=args.synth, synth_bottom_up=args.bottom_up)
        done.touch()
    return cache


def search_arm(args, out: Path, task: Path, synth: int, warm: Path) -> dict:
    """One search of the original (step 3), its summary saved in `out`/ARM.json (a finished arm is
    not run again)."""
    arm = "synth" if synth else "fixed"
    saved = out / f"{arm}.json"
    if saved.exists():
        return json.loads(saved.read_text())
    search, timed = out / f"search-{arm}", out / f"{arm}-synthesis-s.txt"
    # the search phase ended (its best written): fine-tuning resumes from its checkpoints, no more
    # candidates (budget 1); an arm stopped while searching starts over, so that each searches as long
    searched = (search / "best.pipeline").exists()
    cache = out / f"kernels-{arm}.db"
    if not searched:
        shutil.rmtree(search, ignore_errors=True)
        shutil.copyfile(warm, cache)
    synth_s = float(timed.read_text()) if searched and timed.exists() else 0.0
    if synth and not searched:
        start = time.perf_counter()
        choices = search_choices(nasir.load(out / "original.onnx").transform("convert-nn-to-nest"), per_layer=synth,
                                 **search_walk(args.bottom_up))
        synth_s = time.perf_counter() - start
        timed.write_text(f"{synth_s}\n")
        print(f"synthesis: {len(choices)} operators in {synth_s:.0f} s: {', '.join(choices)}", flush=True)
    start = time.perf_counter()
    result = nasir.search(out / "original.onnx", data=str(task), accuracy_drop=args.max_drop,
                          time_limit=None if searched else args.time_limit - synth_s, budget=1 if searched else None,
                          workers=args.workers, out=search, kernel_cache=cache, seed=0,
                          strategy="evolution", finetune_epochs=args.finetune_epochs,
                          finetune_top=args.finetune_top, progress=False, synth=synth,
                          synth_bottom_up=bool(synth) and args.bottom_up)
    wall = time.perf_counter() - start + synth_s
    best = result.best
    verified = result.verified
    summary = {"arm": arm, "synth": synth, "minutes": wall / 60, "synthesis_s": synth_s, "resumed": searched,
               "candidates": len(result.candidates),
               "with_primitives": sum(bool(PRIMITIVE.search(c.pipeline)) for c in result.candidates),
               "finetuned": [{"pipeline": r.candidate.pipeline, "pruned": r.pruned, "validation": r.accuracy,
                              "held_out": r.test_accuracy, "macs": r.candidate.outcome.mac_ratio,
                              "primitives": bool(PRIMITIVE.search(r.candidate.pipeline))} for r in verified.rows],
               "best": None if best is None else {
                   "pipeline": best.pipeline, "macs": best.outcome.mac_ratio, "held_out": best.accuracy,
                   "search_speedup": best.speedup.median if best.speedup else None,
                   "primitives": bool(PRIMITIVE.search(best.pipeline))}}
    print(f"{arm}: {summary['candidates']} candidates ({summary['with_primitives']} with synthesised operators), "
          f"{wall / 60:.1f} min; best: " + (f"{summary['best']['search_speedup']:.2f}x, {best.accuracy:.2f}% held out"
                                            if best else "none within"), flush=True)
    saved.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def time_networks(user_model, networks: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """Step 4: each pipeline's network and the original, one interleaved run; speedups' spread."""
    x = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in user_model.input_shapes]
    exes = {"original": nasir.compile(user_model, target="llvm", threads=1)}
    exes |= {arm: nasir.compile(user_model.transform(p), target="llvm", threads=1) for arm, p in networks.items()}
    samples = interleaved({arm: (lambda e=e: e(*x)) for arm, e in exes.items()}, rounds)
    out = {}
    for arm in networks:
        s = Spread.of(ratios(samples["original"], samples[arm]))
        out[arm] = [s.median, s.q1, s.q3]
    return out


def run(args) -> dict:
    out = Path(args.out) / args.task
    task, report, originals, user_model, task_label = task_and_original(args.task, out, args.seed, args.seeds,
                                                                        args.original_epochs)
    warm = warm_cache(args, out)
    arms = {"fixed": search_arm(args, out, task, 0, warm), "synth": search_arm(args, out, task, args.synth, warm)}
    summary = {"task": task_label, "cpu": cpu_name(), "llvm_cpu": host_target().cpu, "original_seeds": originals,
               "time_limit_s": args.time_limit, "warm_s": args.warm, "arms": arms}
    returned = {arm: s["best"]["pipeline"] for arm, s in arms.items() if s["best"]}
    summary["speedup"] = time_networks(user_model, returned, args.rounds)
    for arm, pipeline in returned.items():
        network = user_model.transform(pipeline)
        accuracies = []
        for seed in range(args.best_seeds):
            tuned = nasir.train(network, report, epochs=args.finetune_epochs, batch=finetune_batch(len(report.train[1])),
                                lr=LR, seed=seed, teacher=user_model, recalibrate=RECALIBRATE, progress=False,
                                out=out / f"{arm}-best-finetune-seed{seed}")
            accuracies.append(tuned.accuracy)
        arms[arm]["best"]["seeds"] = accuracies  # beside the search's own fine-tuning (`held_out`)
        print(f"{arm} best, fine-tuned per seed: {', '.join(f'{a:.2f}' for a in accuracies)}", flush=True)
    return summary


def table(s: dict) -> str:
    o = np.asarray(s["original_seeds"])
    lines = [f"task {s['task']}, CPU {s['cpu']} ({s['llvm_cpu']}), {s['time_limit_s']:g} s of search per arm",
             f"original: {o[0]:.2f}% held out (seed 0, the user's); recipe spread over {len(o)} seeds: "
             f"mean {o.mean():.2f}, min {o.min():.2f}, max {o.max():.2f}",
             "| arm | candidates | with synthesised ops | best: speedup (IQR) | MACs | held out: the search's "
             "fine-tuning; again per seed (mean) | synthesised ops in it |", "|---|---|---|---|---|---|---|"]
    for arm, a in s["arms"].items():
        b = a["best"]
        if b is None:
            lines.append(f"| {arm} | {a['candidates']} | {a['with_primitives']} | none within | | | |")
            continue
        sp = s["speedup"][arm]
        seeds = np.asarray(b.get("seeds", []))
        acc = f"{b['held_out']:.2f}" + ("; " + ", ".join(f"{v:.1f}" for v in seeds) + f" ({seeds.mean():.2f})"
                                        if len(seeds) else "")
        lines.append(f"| {arm} | {a['candidates']} | {a['with_primitives']} | {sp[0]:.2f}x ({sp[1]:.2f}-{sp[2]:.2f}) | "
                     f"{b['macs']:.2f} | {acc} | {'yes' if b['primitives'] else 'no'} |")
    if all(a["best"] for a in s["arms"].values()):
        lines.append(f"synth over fixed: {s['speedup']['synth'][0] / s['speedup']['fixed'][0]:.2f}x")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    flow_arguments(p)
    p.add_argument("--best-seeds", type=int, default=3,
                   help="training seeds each arm's best is fine-tuned with again (0: the search's own run alone)")
    p.add_argument("--synth", type=int, default=4, help="synthesised operators per distinct conv in the synth arm")
    p.add_argument("--bottom-up", action="store_true", help="the synth arm's operators grown bottom-up (depth 4)")
    p.add_argument("--warm", type=float, default=600.0, help="seconds of the search that fills the shared kernel cache")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds of the final timing")
    p.add_argument("--retime", action="store_true",
                   help="time the saved run's networks again (step 4 alone, on a quiet machine) and print the table")
    args = p.parse_args()
    path = Path(__file__).parent / "data" / f"synth-search-{host_target().cpu}.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    if args.retime:
        s = saved[args.task]
        user_model = nasir.load(Path(args.out) / args.task / "original.onnx").transform("convert-nn-to-nest")
        s["speedup"] = time_networks(user_model, {arm: a["best"]["pipeline"] for arm, a in s["arms"].items()
                                                  if a["best"]}, args.rounds)
        path.write_text(json.dumps(saved, indent=1) + "\n")
    elif not args.report:
        saved[args.task] = run(args)
        path.write_text(json.dumps(saved, indent=1) + "\n")
    if args.task not in saved:
        raise SystemExit(f"no saved run of {args.task} in {path}")
    print(table(saved[args.task]))


if __name__ == "__main__":
    run_resumable(main)
