"""Does a search reproduce on a loaded machine? (issue 41, deliver 1)

    python experiments/search_reproduce.py --model resnet18 --budget 60 --workers 2 --load 2

Runs the same search (`nasir.search`: same model, seed, strategy and budget) `--runs` times, each
into its own folder with its own new kernel cache (so every run times its kernels itself), while
`--load` processes spin on the cores beside it. Then each run's best network is benchmarked
directly: compiled whole and timed against the original in `--rounds` interleaved rounds
(`nasir.search.benchmark.measured_speedups`), once on the quiet machine and once beside the same
`--load` busy processes as the searches (a speedup itself changes with load: the busy processes
share the cores' caches and memory bandwidth, which the smaller network depends on more). Printed:
each run's best (trial, a digest of its pipeline), the speedup the run reported (median [IQR] of
its rounds), the direct ones and the ratios, and whether every run named the same best network.
Everything also goes to OUT/reproduce.json; `--measure-only` (with the run's other options)
benchmarks the runs recorded there again without searching.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import nasir
from nasir.search.benchmark import measured_speedups


def spin() -> None:
    os.nice(0)
    while True:
        pass


def spinners(count: int) -> list[multiprocessing.Process]:
    load = [multiprocessing.Process(target=spin, daemon=True) for _ in range(count)]
    for proc in load:
        proc.start()
    return load


def stop(load: list[multiprocessing.Process]) -> None:
    for proc in load:
        proc.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--budget", type=int, default=60)
    p.add_argument("--strategy", default="random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--load", type=int, default=2, help="busy processes beside each search (default 2)")
    p.add_argument("--rounds", type=int, default=21, help="interleaved rounds of each direct benchmark")
    p.add_argument("--out", type=Path, default=Path("bench-reproduce"))
    p.add_argument("--measure-only", action="store_true",
                   help="benchmark the runs recorded in OUT/reproduce.json again, without searching")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "reproduce.json"
    if args.measure_only:
        runs = json.loads(saved.read_text())["runs"]
    else:
        runs = []
        for k in range(args.runs):
            load = spinners(args.load)
            began = time.perf_counter()
            try:
                result = nasir.search(args.model, args.dataset, budget=args.budget, strategy=args.strategy,
                                      seed=args.seed, workers=args.workers, out=args.out / f"run{k}",
                                      kernel_cache=args.out / f"run{k}" / "kernels.db", progress=False)
                load_average = os.getloadavg()[0]
            finally:
                stop(load)
            b = result.best
            runs.append({"run": k, "seconds": time.perf_counter() - began, "load_average": load_average,
                         "busy": result.busy, "best": b.number if b else None, "pipeline": b.pipeline if b else None,
                         "reported": b.speedup.median if b else None, "reported_iqr": b.speedup.iqr if b else None,
                         "ties": b.ties if b else []})
            print(f"run {k}: {runs[-1]['seconds']:.0f} s, load average {load_average:.1f}, "
                  f"best trial {runs[-1]['best']}", flush=True)
    pipelines = {r["pipeline"] for r in runs if r["pipeline"]}
    direct = measured_speedups(args.model, args.dataset, pipelines, args.rounds)
    load = spinners(args.load)  # the same network timed beside the same load as the searches
    try:
        loaded = measured_speedups(args.model, args.dataset, pipelines, args.rounds)
    finally:
        stop(load)
    print(f"{args.model} ({args.dataset}), budget {args.budget}, {args.strategy} seed {args.seed}, "
          f"{args.workers} workers beside {args.load} busy processes; direct: {args.rounds} interleaved rounds, "
          f"quiet and beside {args.load} busy processes")
    for r in runs:
        if not r["pipeline"]:
            print(f"run {r['run']}: no best network")
            continue
        d, dl = direct[r["pipeline"]], loaded[r["pipeline"]]
        r.update(direct=d.median, direct_iqr=d.iqr, reported_over_direct=r["reported"] / d.median,
                 direct_loaded=dl.median, direct_loaded_iqr=dl.iqr,
                 reported_over_direct_loaded=r["reported"] / dl.median,
                 digest=hashlib.sha256(r["pipeline"].encode()).hexdigest()[:10])
        print(f"run {r['run']}: best trial {r['best']} ({r['digest']}) reported {r['reported']:.2f}x "
              f"[{r['reported_iqr']:.2f}]; direct, loaded {dl.median:.2f}x [{dl.iqr:.2f}] (reported / direct "
              f"{r['reported_over_direct_loaded']:.3f}), quiet {d.median:.2f}x [{d.iqr:.2f}] "
              f"({r['reported_over_direct']:.3f}); ties {r['ties'] or '-'}; busy: {r['busy'] or 'no'}")
    same = len({r["pipeline"] for r in runs}) == 1
    for key, beside in (("reported_over_direct_loaded", "loaded"), ("reported_over_direct", "quiet")):
        print(f"worst reported / direct ({beside}): "
              f"{max((abs(r[key] - 1) for r in runs if r.get('direct')), default=float('nan')):.1%} off")
    print(f"same best network in every run: {'yes' if same else 'no'}")
    (args.out / "reproduce.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                          "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
