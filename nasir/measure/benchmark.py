"""`make bench` / `python -m nasir.measure.benchmark`: nasir-llvm (or `--target tvm`: TVM's CPU code) vs ONNX
Runtime vs PyTorch, and realisation.

A script, not a test: it measures, in one process and run,

1. the host's single-thread peak (`nasir.measure.peak`: a register-only FMA kernel through llvmlite);
2. for every selected zoo model, dataset (cifar10 32x32, imagenet 224x224; batch 1) and thread count:
   the median latency of nasir-llvm, ONNX Runtime (intra_op_num_threads = threads) and PyTorch eager
   (torch.set_num_threads(threads)), nasir/ORT, GFLOP/s = 2 * MACs / time (MACs from
   `Model.summary().total_macs`) and nasir's percent of peak (peak times threads). The backends
   take turns in rounds (`interleaved`); nasir/ORT is the median of the rounds' ratios, with their
   quartiles (`round_ratios`): load that comes and goes slows both sides of a round alike;
3. for ResNet-34 architecture variants built with nasir's own transforms (grouped G = 2..16 and
   depthwise on the block convs, bottleneck(2) on the first conv of each block), at each thread
   count, the realisation ratio

       realisation = (t_base / t_variant) / (MACs_base / MACs_variant)

   for nasir and, for comparison, for ONNX Runtime running `Model.to_onnx` exports of the base and
   the variant (1.0: the MAC reduction became the same time reduction), the median of the rounds'
   values, with their quartiles. `--variants` also takes
   the other transforms' variants (`MORE_VARIANTS`: fold, shift, index-split, unshare, bottleneck
   of ci or oh). The base is the model as `nasir.compile` gets it (nn level); the variant "nest"
   (base through `convert-nn-to-nest` only) separates what the transform costs from what lowering
   an already-converted model costs (`nasir_realisation_vs_nest`).

Writes `OUT/bench.json` (every number) and `OUT/bench.png`, and prints rich tables:

    python -m nasir.measure.benchmark --quick                      # cifar10 zoo + ResNet-34 imagenet
    python -m nasir.measure.benchmark --models resnet34 --datasets imagenet --threads 1 2 --repeat 20
    python -m nasir.measure.benchmark --cpu znver3 --ort-isa avx2   # nasir's AVX2 code vs ORT's AVX2 kernels
    python -m nasir.measure.benchmark --tune --variants         # untuned vs tuned (`nasir tune`) vs ORT
    python -m nasir.measure.benchmark --tune --tune-trials 4    # the same, 4 schedules timed a conv
    python -m nasir.measure.benchmark --target cuda --tune-trials 2000   # on a GPU: TVM vs PyTorch CUDA
                                                                  # (nasir/measure/gpu_benchmark.py)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nasir.errors import BackendUnavailableError, NasirError
from nasir.measure import ort_kernels
from nasir.measure.timing import SETTLE_S, Spread, interleaved, ratios
from nasir.measure.variants import ALL_VARIANTS, MORE_VARIANTS, VARIANTS



BACKENDS = ("nasir", "ort")
"""The backends of the variant rows, each with its times (`{backend}_ms`, `{backend}_rounds_ms`)
and realisation."""

AVX2_CPU = "x86-64-v3"
"""The CPU whose code measures the 8-lane peak that ORT's AVX2 kernels (`--ort-isa avx2`) count against."""


def median_ms(fns: dict[str, Callable[[], object]], repeat: int, warmup: int = 1,
              settle_s: float = SETTLE_S) -> dict[str, float]:
    """Median wall time of each `fn()` in milliseconds, over `repeat` rounds that time every fn
    once (`nasir.measure.timing.interleaved`: why interleaved, why after untimed calls and idle)."""
    return {name: float(np.median(ts)) for name, ts in interleaved(fns, repeat, warmup, settle_s).items()}


def round_ratios(numerators: list[float], denominators: list[float]) -> tuple[float, list[float]]:
    """The median and the quartiles [q1, q3] of the round by round ratios of two functions'
    interleaved samples (`nasir.measure.timing.ratios`):

        >>> round_ratios([1.0, 2.0, 9.0], [2.0, 2.0, 3.0])
        (1.0, [0.75, 2.0])
    """
    spread = Spread.of(ratios(numerators, denominators))
    return spread.median, [spread.q1, spread.q3]


def gflops(macs: int, ms: float) -> float:
    return 2 * macs / (ms * 1e-3) / 1e9


def ort_session(path: str | Path, threads: int):
    """An ONNX Runtime CPU session with `threads` intra-op threads (the baseline's settings)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _ort_run(session, x: np.ndarray) -> Callable[[], np.ndarray]:
    feed = {session.get_inputs()[0].name: x}
    return lambda: session.run(None, feed)[0]


def nasir_executable(model, target: str = "llvm", threads: int = 1, tuning: str | None = None,
                     cpu: str | None = None):
    """The nasir column's code: the llvm backend's for `cpu` (None: NASIR_CPU, else the host;
    threads settable later; `tuning`: its tuning database, see `nasir.tune`), or TVM's CPU code
    (`target="tvm"`: one thread, as its unscheduled nests have no parallel loops)."""
    if target == "llvm":
        from nasir.runtime.llvm_executable import compile_llvm

        return compile_llvm(model.module, threads=threads, tuning=tuning, cpu=cpu)
    import nasir

    return nasir.compile(model, target=target)


def bench_model(name: str, dataset: str, threads: list[int], repeat: int, peak: float,
                target: str = "llvm", tune: bool = False, cpu: str | None = None,
                ort_peak: float | None = None, tune_trials: int | None = None) -> list[dict]:
    """One row per thread count: latencies of nasir (`target`, for `cpu`), ORT, PyTorch on `name` at
    `dataset`, batch 1; nasir's % of `peak` (its code's width) and ORT's of `ort_peak` (the
    host's; default `peak`). With `tune` (llvm), nasir is the cost model's code (no tuning database)
    and "nasir tuned" the code after `nasir.tune` (one thread, the user's database, at most
    `tune_trials` schedules a conv; its seconds in `tune_s`)."""
    import torch

    import nasir
    from nasir import zoo

    x = np.random.default_rng(0).standard_normal(zoo.input_shape(name, dataset)).astype(np.float32)
    tx = torch.from_numpy(x)
    net = zoo.build_torch(name, dataset)

    def torch_run():
        with torch.inference_mode():
            net(tx)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = zoo.export_onnx(name, Path(tmp) / f"{name}.onnx", dataset=dataset)
        start = time.perf_counter()
        model = nasir.load(path)
        import_s = time.perf_counter() - start
        macs = model.summary().total_macs
        exe = nasir_executable(model, target, tuning="none" if tune else None, cpu=cpu)
        runs = {"nasir": exe}
        if tune:
            report = nasir.tune(model, cpu=cpu, trials=tune_trials)
            runs["nasir tuned"] = nasir_executable(model, target, cpu=cpu)
        for t in threads:
            for e in runs.values() if target == "llvm" else ():
                e.threads = t
            torch.set_num_threads(t)
            ort_run = _ort_run(ort_session(path, t), x)
            samples = interleaved({**{k: lambda e=e: e(x) for k, e in runs.items()}, "ort": ort_run,
                                   "torch": torch_run}, repeat)
            row = {"model": name, "dataset": dataset, "threads": t, "macs": macs, "nasir_import_s": import_s,
                   "nasir_compile_s": exe.compile_seconds, "workspace_bytes": getattr(exe, "workspace_bytes", 0),
                   **{f"{backend.replace(' ', '_')}_ms": float(np.median(v)) for backend, v in samples.items()},
                   **{f"{backend.replace(' ', '_')}_rounds_ms": v for backend, v in samples.items()},
                   "max_abs_err_vs_ort": max(float(np.abs(e(x) - ort_run()).max()) for e in runs.values())}
            row["nasir_over_ort"], row["nasir_over_ort_iqr"] = round_ratios(samples["nasir"], samples["ort"])
            if tune:
                row.update(tune_s=report.seconds, tuned_gain_alone=report.gain)
                row["nasir_tuned_over_ort"], row["nasir_tuned_over_ort_iqr"] = round_ratios(samples["nasir tuned"],
                                                                                           samples["ort"])
            for backend in ("nasir", "ort", "torch"):
                row[f"{backend}_gflops"] = gflops(macs, row[f"{backend}_ms"])
            row["nasir_pct_peak"] = 100 * row["nasir_gflops"] / (peak * t)
            row["ort_pct_peak"] = 100 * row["ort_gflops"] / ((ort_peak or peak) * t)
            rows.append(row)
    return rows


def bench_variants(model_name: str, dataset: str, variants: list[str], repeat: int, threads: list[int] = (1,),
                   on_compile: Callable[[str], None] = lambda _: None, target: str = "llvm",
                   cpu: str | None = None) -> list[dict]:
    """Raw rows (see `add_realisation`) for the base, then each other variant of `model_name`, for
    each thread count of `threads` in turn (TVM's CPU code: at one thread, see `nasir_executable`).

    Every variant is transformed, compiled (nasir) and exported (ORT) first, calling `on_compile(name)`
    before each; then, at each thread count, all are timed in interleaved rounds, so the ratios
    share the load they saw.
    """
    from nasir import zoo

    x = np.random.default_rng(0).standard_normal(zoo.input_shape(model_name, dataset)).astype(np.float32)
    original = zoo.load(model_name, dataset)
    compiled, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["base", *(v for v in variants if v != "base")]:
            on_compile(name)
            model = original.transform(ALL_VARIANTS[name]) if ALL_VARIANTS[name] else original
            compiled[name] = (model.summary().total_macs, nasir_executable(model, target, cpu=cpu),
                              model.to_onnx(Path(tmp) / f"{name}.onnx"))
        on_compile("timing")
        for t in threads if target == "llvm" else [1]:
            runs, errors = {}, {}
            for name, (_, exe, onnx) in compiled.items():
                if target == "llvm":
                    exe.threads = t
                runs[f"nasir {name}"] = lambda exe=exe: exe(x)
                runs[f"ort {name}"] = ort_run = _ort_run(ort_session(onnx, t), x)
                errors[name] = float(np.abs(exe(x) - ort_run()).max())
            samples = interleaved(runs, repeat)
            rows += [{"model": model_name, "dataset": dataset, "variant": name, "pipeline": ALL_VARIANTS[name],
                      "threads": t, "macs": macs, "nasir_compile_s": exe.compile_seconds,
                      "max_abs_err_vs_ort": errors[name],
                      **{f"{backend}_ms": float(np.median(samples[f"{backend} {name}"])) for backend in BACKENDS},
                      **{f"{backend}_rounds_ms": samples[f"{backend} {name}"] for backend in BACKENDS}}
                     for name, (macs, exe, _) in compiled.items()]
    return rows


def add_realisation(rows: list[dict]) -> list[dict]:
    """Add MAC ratio, speedups and realisation to variant rows of one model and dataset, each row
    against the base row of its thread count: the median of the rounds' values (`round_ratios` of
    their times, over the MAC ratio), with their quartiles."""
    for row in rows:
        base = next(r for r in rows if r["variant"] == "base" and r["threads"] == row["threads"])
        same_path = next((r for r in rows if r["variant"] == "nest" and r["threads"] == row["threads"]), None)
        row["mac_ratio"] = base["macs"] / row["macs"]
        for backend in BACKENDS:
            speedup, iqr = round_ratios(base[f"{backend}_rounds_ms"], row[f"{backend}_rounds_ms"])
            row[f"{backend}_speedup"] = speedup
            row[f"{backend}_realisation"] = speedup / row["mac_ratio"]
            row[f"{backend}_realisation_iqr"] = [q / row["mac_ratio"] for q in iqr]
        if same_path:
            speedup, _ = round_ratios(same_path["nasir_rounds_ms"], row["nasir_rounds_ms"])
            row["nasir_realisation_vs_nest"] = speedup / (same_path["macs"] / row["macs"])
    return rows


def model_table(rows: list[dict], peak: float, ort_peak: float | None = None, ort_isa: str = "host"):
    """`peak`: of nasir's code's width; `ort_peak`: of ORT's kernels' width (where it differs);
    `ort_isa`: "avx2" where ORT ran its AVX2 kernels (`--ort-isa avx2`)."""
    from rich.table import Table

    peaks = f"peak {peak:.0f}" + (f", ORT's {ort_peak:.0f}" if ort_peak and ort_peak != peak else "")
    peaks += "; ORT held to its AVX2 kernels" if ort_isa == "avx2" else ""
    table = Table(title=f"zoo, batch 1 (median ms; nasir/ORT < 1: nasir faster, the median of the rounds' ratios "
                        f"and their quartiles; {peaks} GFLOP/s/thread; GF/s count the model's MACs, a Winograd "
                        "stem's as a direct conv's)")
    tuned = any("tune_s" in r for r in rows)
    cols = ("model", "dataset", "thr", "compile s", "nasir ms", "ORT ms", "torch ms", "nasir/ORT", "q1-q3",
            *(("tune s", "tuned ms", "tuned/ORT") if tuned else ()), "nasir GF/s", "ORT GF/s", "% peak",
            "ORT % peak", "err")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "dataset") else "right")
    for r in rows:
        tuned_cells = (f"{r['tune_s']:.0f}", f"{r['nasir_tuned_ms']:.2f}", f"{r['nasir_tuned_over_ort']:.2f}") \
            if tuned else ()
        table.add_row(r["model"], r["dataset"], str(r["threads"]), f"{r['nasir_compile_s']:.1f}",
                      f"{r['nasir_ms']:.2f}", f"{r['ort_ms']:.2f}", f"{r['torch_ms']:.2f}",
                      f"{r['nasir_over_ort']:.2f}", quartiles(r["nasir_over_ort_iqr"]), *tuned_cells,
                      f"{r['nasir_gflops']:.1f}", f"{r['ort_gflops']:.1f}", f"{r['nasir_pct_peak']:.0f}%",
                      f"{r['ort_pct_peak']:.0f}%", f"{r['max_abs_err_vs_ort']:.1e}")
    return table


def quartiles(iqr: list[float]) -> str:
    """A table cell of a ratio's quartiles: "0.93-0.97"."""
    return f"{iqr[0]:.2f}-{iqr[1]:.2f}"


def variant_table(rows: list[dict]):
    from rich.table import Table

    table = Table(title="architecture variants: realisation = speedup / MAC ratio (1.0: all of it), the median of "
                        "the rounds' and their quartiles")
    cols = ("model", "dataset", "variant", "thr", "GMACs", "MAC ratio", "nasir ms", "ORT ms", "nasir speedup",
            "nasir real.", "q1-q3", "vs nest", "ORT real.")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "dataset", "variant") else "right")
    for r in rows:
        table.add_row(r["model"], r["dataset"], r["variant"], str(r["threads"]), f"{r['macs'] / 1e9:.3f}",
                      f"{r['mac_ratio']:.2f}",
                      f"{r['nasir_ms']:.2f}", f"{r['ort_ms']:.2f}", f"{r['nasir_speedup']:.2f}",
                      f"{r['nasir_realisation']:.2f}", quartiles(r["nasir_realisation_iqr"]),
                      f"{r.get('nasir_realisation_vs_nest', float('nan')):.2f}",
                      f"{r['ort_realisation']:.2f}")
    return table


def plot(result: dict, path: Path) -> Path:
    """GFLOP/s per model (left) and realisation per variant (right) as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 6))
    rows = result["models"]
    labels = [f"{r['model']}\n{r['dataset']} t{r['threads']}" for r in rows]
    pos = np.arange(len(rows))
    for k, backend in enumerate(("nasir", "ort", "torch")):
        left.bar(pos + (k - 1) * 0.27, [r[f"{backend}_gflops"] for r in rows], 0.27, label=backend)
    left.axhline(result["peak"]["peak_gflops"], color="k", ls="--", lw=1, label="peak (1 thread)")
    left.set_xticks(pos, labels, rotation=60, ha="right", fontsize=7)
    left.set_ylabel("GFLOP/s")
    left.set_title("batch-1 throughput")
    left.legend()
    variants = [r for r in result["variants"] if r["variant"] not in ("base", "nest")]
    labels = [f"{r['model']} {r['dataset']}\n{r['variant']} t{r['threads']}" for r in variants]
    pos = np.arange(len(variants))
    right.bar(pos - 0.2, [r["nasir_realisation"] for r in variants], 0.4, label="nasir")
    right.bar(pos + 0.2, [r["ort_realisation"] for r in variants], 0.4, label="ONNX Runtime")
    right.axhline(1.0, color="k", lw=1)
    right.axhline(0.9, color="k", ls=":", lw=1, label="target 0.9")
    right.set_xticks(pos, labels, rotation=60, ha="right", fontsize=7)
    right.set_ylabel("(speedup) / (MAC ratio)")
    right.set_title("realisation of architecture transforms")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(jobs: list[tuple[str, str]], threads: list[int], repeat: int, variant_model: str,
        variant_datasets: list[str], variants: list[str], out: Path, make_plot: bool = True, console=None,
        target: str = "llvm", tune: bool = False, cpu: str | None = None, tune_trials: int | None = None,
        ort_isa: str = "host") -> dict:
    """Measure the (model, dataset) `jobs` and the variants with nasir's `target` (llvm or tvm;
    `tune`: llvm tuned too, at most `tune_trials` schedules a conv, see `bench_model`; `cpu`: llvm's
    code for that CPU, which must run here, its % of peak against the peak of its own width; ORT's %
    of the peak of its kernels' width: the host's, or with `ort_isa` "avx2" (the onnxruntime
    imported is `ort_kernels.avx2_copy`'s) 8 lanes'), write OUT/bench.json (+ bench.png)."""
    import platform

    from rich.console import Console
    from rich.progress import Progress

    from nasir.measure.peak import measure_peak_gflops

    console = console or Console()
    steps = len(jobs) + len(variant_datasets) * (len({"base", *variants}) + 1) if variants else len(jobs)
    result = {"config": {"jobs": jobs, "threads": threads, "repeat": repeat,
                         "variant_model": variant_model, "variant_datasets": variant_datasets,
                         "variants": variants, "machine": platform.processor() or platform.machine(),
                         "target": target, "tune": tune, "tune_trials": tune_trials, "cpu": cpu,
                         "ort_isa": ort_isa},
              "peak": measure_peak_gflops(cpu=cpu), "models": [], "variants": [],
              "ort_peak": measure_peak_gflops(cpu=AVX2_CPU if ort_isa == "avx2" else None)}
    peak, ort_peak = result["peak"]["peak_gflops"], result["ort_peak"]["peak_gflops"]
    ort_name = "ORT's AVX2 kernels" if ort_isa == "avx2" else "this machine, ORT's"
    for name, p in (("nasir's code", result["peak"]), (ort_name, result["ort_peak"])):
        console.print(f"measured peak, {name}: {p['peak_gflops']:.1f} GFLOP/s (1 thread, {p['cpu']}, "
                      f"<{p['vector_width']} x float> FMA)")
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=steps)
        for m, d in jobs:
            progress.update(task, description=f"{m} {d}")
            for row in bench_model(m, d, threads, repeat, peak, target, tune, cpu, ort_peak, tune_trials):
                result["models"].append(row)
                progress.console.log(f"{m} {d} threads={row['threads']}: nasir {row['nasir_ms']:.2f} ms, "
                                     f"ORT {row['ort_ms']:.2f} ms, torch {row['torch_ms']:.2f} ms")
            progress.advance(task)
        for d in variant_datasets if variants else []:
            def on_compile(name: str, d=d) -> None:
                if name != "base":
                    progress.advance(task)
                progress.update(task, description=f"{variant_model} {d}: {name}")

            rows = add_realisation(bench_variants(variant_model, d, variants, repeat, threads, on_compile=on_compile,
                                                  target=target, cpu=cpu))
            result["variants"] += rows
            progress.advance(task)
            for r in rows:
                progress.console.log(f"{variant_model} {d} {r['variant']} threads={r['threads']}: {r['macs']:,} MACs, nasir "
                                     f"{r['nasir_ms']:.2f} ms, ORT {r['ort_ms']:.2f} ms")
    result["elapsed_s"] = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    if make_plot:
        plot(result, out / "bench.png")
    if result["models"]:
        console.print(model_table(result["models"], peak, ort_peak, ort_isa))
    if result["variants"]:
        console.print(variant_table(result["variants"]))
    console.print(f"wrote {out / 'bench.json'}{' and bench.png' if make_plot else ''} "
                  f"({result['elapsed_s']:.0f} s)")
    return result


def main(argv: list[str] | None = None) -> dict:
    from rich.console import Console

    from nasir import zoo

    parser = argparse.ArgumentParser(prog="python -m nasir.measure.benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None, help="zoo model names (default: all)")
    parser.add_argument("--datasets", nargs="+", choices=["cifar10", "imagenet"], default=None,
                        help="default: both (quick: cifar10, plus ResNet-34 imagenet)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per median (default 10; quick 3)")
    parser.add_argument("--variants", nargs="*", choices=[*ALL_VARIANTS, "none"], default=list(VARIANTS),
                        help=f"ResNet variants (default: {' '.join(VARIANTS)}; also: {' '.join(MORE_VARIANTS)}; "
                             "none, or the flag alone: skip the realisation table)")
    parser.add_argument("--variant-model", default="resnet34", choices=["resnet18", "resnet34"])
    parser.add_argument("--variant-datasets", nargs="+", choices=["cifar10", "imagenet"], default=None,
                        help="default: both (quick: imagenet)")
    parser.add_argument("--quick", action="store_true",
                        help="cifar10 zoo + ResNet-34 imagenet, variants on imagenet, 3 repeats")
    parser.add_argument("--target", choices=("llvm", "tvm", "cuda"), default="llvm",
                        help="nasir's backend (default llvm; tvm: TVM's CPU code; cuda: the GPU table, nasir via "
                             "TVM vs PyTorch CUDA on the variant model and variants, see nasir/measure/gpu_benchmark.py)")
    parser.add_argument("--tune-trials", type=int, default=0,
                        help="--target cuda: also tune with TVM's meta_schedule for this many schedules per "
                             "model; with --tune (llvm): time at most this many schedules per distinct conv "
                             "(default all)")
    parser.add_argument("--cpu", default=None,
                        help="llvm: compile nasir's code for this CPU (one whose code runs here: znver3 or "
                             "x86-64-v3 gives AVX2 code on an AVX-512 machine); %% of peak against that width's peak")
    parser.add_argument("--ort-isa", choices=("host", "avx2"), default="host",
                        help="ONNX Runtime's kernels: the host's (default), or avx2: a copy of the installed "
                             "onnxruntime held to its AVX2 kernels, the ORT of an AVX2-only machine, on an AVX-512 "
                             "one (nasir/measure/ort_kernels.py; made once in the user's cache)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--tune", action="store_true",
                        help="also tune each model (nasir.tune, the user's database) and time the tuned code; "
                             "the untuned column is then the cost model's alone")
    args = parser.parse_args(argv)
    if "none" in args.variants:
        if args.variants != ["none"]:
            parser.error("--variants none skips the realisation table: it takes no variants beside it")
        args.variants = []
    if args.tune and args.target != "llvm":
        parser.error(f"--tune tunes the llvm backend's schedules; it does not apply to --target {args.target} "
                     "(--target cuda: --tune-trials)")
    if args.tune_trials and args.target != "cuda" and not args.tune:
        parser.error("--tune-trials tunes: with --tune (llvm) or --target cuda")
    if args.target == "cuda":
        return _gpu_main(parser, args)
    if args.ort_isa == "avx2":
        try:
            ort_kernels.use(ort_kernels.avx2_copy())
        except NasirError as e:
            parser.exit(1, f"error: {e}\n")
    models = args.models if args.models is not None else zoo.names()
    datasets = args.datasets or (["cifar10"] if args.quick else ["cifar10", "imagenet"])
    jobs = [(m, d) for m in models for d in datasets if d in zoo.datasets(m)]
    if args.quick and args.datasets is None and "resnet34" in models:
        jobs.append(("resnet34", "imagenet"))
    return run(jobs, args.threads, args.repeat or (3 if args.quick else 10), args.variant_model,
               args.variant_datasets or (["imagenet"] if args.quick else ["cifar10", "imagenet"]),
               args.variants, args.out, make_plot=not args.no_plot, console=Console(width=max(Console().width, 150)),
               target=args.target, tune=args.tune, cpu=args.cpu, tune_trials=args.tune_trials or None,
               ort_isa=args.ort_isa)


def _gpu_main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    from nasir.measure import gpu_benchmark

    try:
        gpu_benchmark.require_gpu()
    except BackendUnavailableError as e:
        parser.exit(1, f"error: {e}\n")
    return gpu_benchmark.run(args.variant_model, args.variant_datasets or ["cifar10", "imagenet"], args.variants,
                         args.repeat or 20, args.out, args.tune_trials)


if __name__ == "__main__":
    main()
