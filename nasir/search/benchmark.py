"""`python -m nasir.search.benchmark` (`make bench ARGS=--search`): the search's targets, measured.

For each strategy and seed it runs a search (`nasir.search`, output in OUT/<strategy>-<seed>) and
reports candidates per second of searching, each candidate counted once, with how many of them got
a capacity score (measuring the front whole afterwards is timed apart; the runs share
one kernel cache, by default OUT/kernels.db: in a new OUT the first run times its kernels cold, the
later ones find most of them timed), the best network the check accepted (measured whole on the llvm
backend), its speedup over the untransformed model and its time over ONNX Runtime's on the
ORIGINAL model (the two timed interleaved in one run), and, per strategy, the median over seeds of
the best latency estimate among accepted candidates (evolution vs random at equal budget).

Time to quality (issue 41): for each of `--at` seconds into a search, the best-so-far network (the
accepted candidate with the lowest estimate among those finished by then) is compiled whole and
timed against the original, interleaved (`nasir.measure.timing`); the table gives, per strategy, the
median over seeds of that measured speedup (and of the estimate's), so a run with `--time-limit
600` answers what 2 and 10 minutes of searching reach. A script, not a test; every number goes to
OUT/search-bench.json.

    python -m nasir.search.benchmark --model resnet34 --dataset cifar10 --budget 1000 --workers 2
    python -m nasir.search.benchmark --budget 100000 --time-limit 600 --strategies random evolution tpe \
        --seeds 0 1 2 --at 60 120 300 600
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import nasir
from nasir import zoo
from nasir.measure.benchmark import median_ms, ort_session
from nasir.measure.timing import Spread, interleaved, ratios
from nasir.reference import seeded_inputs
from nasir.runtime.llvm_executable import compile_llvm


def one_search(model: str, dataset: str, strategy: str, seed: int, args, out: Path) -> dict:
    start = time.perf_counter()
    result = nasir.search(model, dataset, budget=args.budget, time_limit=args.time_limit, strategy=strategy,
                          seed=seed, workers=args.workers, out=out / f"{strategy}-{seed}", progress=not args.quiet,
                          kernel_cache=kernel_cache(args, out / f"{strategy}-{seed}"), check_top=args.check_top or None)
    elapsed = time.perf_counter() - start
    accepted = result.accepted
    row = {"strategy": strategy, "seed": seed, "candidates": len(result.candidates), "seconds": elapsed,
           "search_seconds": result.seconds["search"], "front_seconds": result.seconds["front"],
           "cand_per_s": len(result.candidates) / result.seconds["search"], "accepted": len(accepted),
           "checked": sum(c.outcome.score is not None for c in result.candidates),
           "front": len(result.pareto), "counts": result.counts(),
           "best_at": {str(t): best_so_far(result, t) for t in args.at},
           "original_ms": result.original_ms,
           "best_estimate_ms": min((c.outcome.estimate_ms for c in accepted), default=None)}
    if result.best is not None:
        b = result.best
        row.update(best_pipeline=b.pipeline, best_ms=b.measured_ms, best_estimate=b.outcome.estimate_ms,
                   score=b.outcome.score, mac_ratio=b.outcome.mac_ratio,
                   param_ratio=b.outcome.param_ratio, speedup=b.speedup.median, speedup_iqr=b.speedup.iqr,
                   ties=b.ties)
    return row


def kernel_cache(args, run: Path) -> Path:
    """The run's kernel timings: `--kernel-cache`, else the run's own new file with
    `--fresh-kernels` (every run cold), else OUT/kernels.db, shared by the runs."""
    if args.kernel_cache:
        return args.kernel_cache
    return run / "kernels.db" if args.fresh_kernels else args.out / "kernels.db"


def best_so_far(result, at_s: float) -> dict | None:
    """The accepted candidate with the lowest estimate among those the search had `at_s` seconds
    into its run (its pipeline and estimated speedup), None if it had none."""
    had = [c for c in result.accepted if c.outcome.finished_s is not None and c.outcome.finished_s <= at_s]
    if not had:
        return None
    best = min(had, key=lambda c: c.outcome.estimate_ms)
    return {"pipeline": best.pipeline, "estimate_speedup": result.original_ms / best.outcome.estimate_ms,
            "score": best.outcome.score, "mac_ratio": best.outcome.mac_ratio}


def measured_speedups(model: str, dataset: str, pipelines: set[str], rounds: int) -> dict[str, Spread]:
    """Each pipeline's network compiled whole and timed against the original in `rounds`
    interleaved rounds: the spread of the rounds' speedups (original ms / candidate ms)."""
    original = zoo.load(model, dataset).transform("convert-nn-to-nest")
    x = seeded_inputs(original)
    base = compile_llvm(original.module)
    out = {}
    for pipeline in sorted(pipelines):
        exe = compile_llvm(original.transform(pipeline).module)
        samples = interleaved({"candidate": lambda: exe(*x), "original": lambda: base(*x)}, rounds)
        out[pipeline] = Spread.of(ratios(samples["original"], samples["candidate"]))
    return out


def time_to_quality(rows: list[dict], at: list[float], speedups: dict[str, Spread], strategies: list[str]) -> Table:
    t = Table(title="time to quality: best-so-far accepted network, median over seeds "
                    "(measured speedup whole, interleaved with the original; estimate in brackets)")
    t.add_column("strategy")
    for s in at:
        t.add_column(f"at {s:g} s", justify="right")
    t.add_column("cand/s", justify="right")
    t.add_column("checked", justify="right")
    for strategy in strategies:
        runs = [r for r in rows if r["strategy"] == strategy]
        cells = []
        for s in at:
            bests = [r["best_at"][str(s)] for r in runs]
            measured = [speedups[b["pipeline"]].median if b else 1.0 for b in bests]
            estimated = [b["estimate_speedup"] if b else 1.0 for b in bests]
            cells.append(f"{statistics.median(measured):.2f}x ({statistics.median(estimated):.2f}x)")
        evaluated = sum(r["checked"] for r in runs)
        total = sum(r["candidates"] for r in runs)
        t.add_row(strategy, *cells, f"{statistics.median(r['cand_per_s'] for r in runs):.2f}",
                  f"{evaluated} of {total}")
    return t


def against_ort(model: str, dataset: str, pipeline: str, repeat: int) -> dict:
    """The best network and the original on nasir-llvm, the original on ONNX Runtime, interleaved."""
    x = np.random.default_rng(0).standard_normal(zoo.input_shape(model, dataset)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="nasir-bench-") as tmp:
        path = zoo.export_onnx(model, Path(tmp) / "model.onnx", dataset)
        original = nasir.load(path)
        best = original.transform("convert-nn-to-nest," + pipeline)
        session = ort_session(path, threads=1)
        feed = {session.get_inputs()[0].name: x}
        exes = {"original": compile_llvm(original.module), "best": compile_llvm(best.module)}
        ms = median_ms({"nasir original": lambda: exes["original"](x), "nasir best": lambda: exes["best"](x),
                        "ort original": lambda: session.run(None, feed)}, repeat)
    return {**ms, "best_over_ort": ms["nasir best"] / ms["ort original"],
            "speedup": ms["nasir original"] / ms["nasir best"]}


def table(rows: list[dict]) -> Table:
    t = Table(title="search runs")
    for col in ("strategy", "seed", "cand", "checked", "search s", "cand/s", "accepted", "front", "front s",
                "total s",
                "best est. ms", "best ms", "speedup", "score", "MACs", "params"):
        t.add_column(col, justify="right")
    for r in rows:
        def f(key: str, spec: str, r: dict = r) -> str:
            return format(r[key], spec) if r.get(key) is not None else "-"

        t.add_row(r["strategy"], str(r["seed"]), str(r["candidates"]), str(r["checked"]),
                  f("search_seconds", ".0f"),
                  f("cand_per_s", ".2f"), str(r["accepted"]), str(r["front"]), f("front_seconds", ".0f"),
                  f("seconds", ".0f"), f("best_estimate_ms", ".2f"), f("best_ms", ".2f"), f("speedup", ".2f"),
                  f("score", ".3f"), f("mac_ratio", ".2f"), f("param_ratio", ".2f"))
    return t


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m nasir.search.benchmark", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet34")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--time-limit", type=float)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--strategies", nargs="+", default=["random"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--repeat", type=int, default=10, help="timed rounds against ONNX Runtime")
    p.add_argument("--at", nargs="+", type=float, default=[120.0],
                   help="seconds into each search at which its best-so-far network is measured (default 120)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds of each time-to-quality measurement")
    p.add_argument("--check-top", type=int, default=8, help="the search's --check-top (0: the score for every candidate)")
    p.add_argument("--kernel-cache", type=Path, help="SQLite file of kernel timings (default OUT/kernels.db, shared by the runs)")
    p.add_argument("--fresh-kernels", action="store_true",
                   help="each run times its kernels afresh (its own kernel cache): every run starts cold")
    p.add_argument("--out", type=Path, default=Path("bench-search"))
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    console = Console(highlight=False, width=max(Console().width, 160))
    rows = [one_search(args.model, args.dataset, s, seed, args, args.out) for s in args.strategies for seed in args.seeds]
    console.print(table(rows))
    report: dict = {"model": args.model, "dataset": args.dataset, "budget": args.budget, "runs": rows}
    pipelines = {b["pipeline"] for r in rows for b in r["best_at"].values() if b}
    speedups = measured_speedups(args.model, args.dataset, pipelines, args.rounds)
    report["time_to_quality"] = {"at": args.at, "measured_speedup": {p: s.median for p, s in speedups.items()}}
    console.print(time_to_quality(rows, args.at, speedups, args.strategies))
    legal = [r for r in rows if r.get("best_pipeline")]
    if legal:
        best = max(legal, key=lambda r: r["speedup"])
        report["best_vs_ort"] = against_ort(args.model, args.dataset, best["best_pipeline"], args.repeat)
        v = report["best_vs_ort"]
        console.print(f"best ({best['strategy']} seed {best['seed']}): {v['speedup']:.2f}x faster than the "
                      f"untransformed model on nasir-llvm; {v['best_over_ort']:.2f} of ONNX Runtime's time on the "
                      f"original ({v['nasir best']:.2f} ms vs {v['ort original']:.2f} ms); score "
                      f"{best['score']:.3f}, MACs {best['mac_ratio']:.2f}, params {best['param_ratio']:.2f}")
        console.print(f"pipeline: {best['best_pipeline']}")
    for strategy in args.strategies:
        values = [r["best_estimate_ms"] for r in rows if r["strategy"] == strategy and r["best_estimate_ms"]]
        if values:
            report.setdefault("median_best_estimate_ms", {})[strategy] = statistics.median(values)
            console.print(f"{strategy}: median over seeds of the best accepted estimate {statistics.median(values):.2f} ms")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search-bench.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
