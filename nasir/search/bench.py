"""`python -m nasir.search.bench` (`make bench ARGS=--search`): the search's targets, measured.

For each strategy and seed it runs a search (`nasir.search`, output in OUT/<strategy>-<seed>) and
reports candidates per second of searching (measuring the front whole afterwards is timed apart;
the runs share one kernel cache, so the later runs find most kernels timed), the best Fisher-legal network (measured whole on the llvm backend),
its speedup over the untransformed model and its time over ONNX Runtime's on the ORIGINAL model
(the two timed interleaved in one run), and, per strategy, the median over seeds of the best
latency estimate among accepted candidates (evolution vs random at equal budget). A script, not
a test; every number goes to OUT/search-bench.json.

    python -m nasir.search.bench --model resnet34 --dataset cifar10 --budget 1000 --workers 2
    python -m nasir.search.bench --budget 200 --strategies random evolution --seeds 0 1 2
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
from nasir.benchmarks import median_ms, ort_session
from nasir.runtime.llvm_executable import compile_llvm


def one_search(model: str, dataset: str, strategy: str, seed: int, args, out: Path) -> dict:
    start = time.perf_counter()
    result = nasir.search(model, dataset, budget=args.budget, time_limit=args.time_limit, strategy=strategy,
                          seed=seed, workers=args.workers, out=out / f"{strategy}-{seed}", progress=not args.quiet,
                          kernel_cache=out / "kernels.db")
    elapsed = time.perf_counter() - start
    accepted = result.accepted
    row = {"strategy": strategy, "seed": seed, "candidates": len(result.candidates), "seconds": elapsed,
           "search_seconds": result.seconds["search"], "front_seconds": result.seconds["front"],
           "cand_per_s": len(result.candidates) / result.seconds["search"], "accepted": len(accepted),
           "front": len(result.pareto), "counts": result.counts(),
           "original_ms": result.original_ms,
           "best_estimate_ms": min((c.outcome.estimate_ms for c in accepted), default=None)}
    if result.best is not None:
        b = result.best
        row.update(best_pipeline=b.pipeline, best_ms=b.measured_ms, best_estimate=b.outcome.estimate_ms,
                   fisher_ratio=b.outcome.fisher_ratio, mac_ratio=b.outcome.mac_ratio,
                   param_ratio=b.outcome.param_ratio, speedup=b.speedup.median, speedup_iqr=b.speedup.iqr,
                   ties=b.ties)
    return row


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
    for col in ("strategy", "seed", "cand", "search s", "cand/s", "accepted", "front", "front s", "total s",
                "best est. ms", "best ms", "speedup", "Fisher", "MACs", "params"):
        t.add_column(col, justify="right")
    for r in rows:
        def f(key: str, spec: str, r: dict = r) -> str:
            return format(r[key], spec) if r.get(key) is not None else "-"

        t.add_row(r["strategy"], str(r["seed"]), str(r["candidates"]), f("search_seconds", ".0f"),
                  f("cand_per_s", ".2f"), str(r["accepted"]), str(r["front"]), f("front_seconds", ".0f"),
                  f("seconds", ".0f"), f("best_estimate_ms", ".2f"), f("best_ms", ".2f"), f("speedup", ".2f"),
                  f("fisher_ratio", ".3f"), f("mac_ratio", ".2f"), f("param_ratio", ".2f"))
    return t


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m nasir.search.bench", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet34")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--time-limit", type=float)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--strategies", nargs="+", default=["random"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--repeat", type=int, default=10, help="timed rounds against ONNX Runtime")
    p.add_argument("--out", type=Path, default=Path("bench-search"))
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    console = Console(highlight=False, width=max(Console().width, 160))
    rows = [one_search(args.model, args.dataset, s, seed, args, args.out) for s in args.strategies for seed in args.seeds]
    console.print(table(rows))
    report: dict = {"model": args.model, "dataset": args.dataset, "budget": args.budget, "runs": rows}
    legal = [r for r in rows if r.get("best_pipeline")]
    if legal:
        best = max(legal, key=lambda r: r["speedup"])
        report["best_vs_ort"] = against_ort(args.model, args.dataset, best["best_pipeline"], args.repeat)
        v = report["best_vs_ort"]
        console.print(f"best ({best['strategy']} seed {best['seed']}): {v['speedup']:.2f}x faster than the "
                      f"untransformed model on nasir-llvm; {v['best_over_ort']:.2f} of ONNX Runtime's time on the "
                      f"original ({v['nasir best']:.2f} ms vs {v['ort original']:.2f} ms); Fisher "
                      f"{best['fisher_ratio']:.3f}, MACs {best['mac_ratio']:.2f}, params {best['param_ratio']:.2f}")
        console.print(f"pipeline: {best['best_pipeline']}")
    for strategy in args.strategies:
        values = [r["best_estimate_ms"] for r in rows if r["strategy"] == strategy and r["best_estimate_ms"]]
        if values:
            report.setdefault("median_best_estimate_ms", {})[strategy] = statistics.median(values)
            console.print(f"{strategy}: median over seeds of the best Fisher-legal estimate {statistics.median(values):.2f} ms")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search-bench.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
