"""`python -m nasir.benchmarks`: nasir-llvm vs ONNX Runtime vs PyTorch on the zoo, one thread each.

For every zoo model (and dataset) it measures, in the same process and run: compile time (nasir:
ONNX import + lowering + LLVM; ORT: session creation; PyTorch: none, eager) and the median latency
of one inference, then prints a table with the ratios to nasir and writes the rows as JSON.

    python -m nasir.benchmarks --dataset imagenet --models resnet34 --repeat 20 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def _median_ms(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def bench_model(name: str, dataset: str, repeat: int, threads: int = 1) -> dict:
    import onnxruntime as ort
    import torch

    import nasir
    import nasir.zoo as zoo
    from nasir.runtime.llvm_executable import compile_llvm

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = zoo.export_onnx(name, Path(tmp) / f"{name}.onnx", dataset=dataset)
        x = np.random.default_rng(0).standard_normal(zoo.input_shape(name, dataset)).astype(np.float32)

        start = time.perf_counter()
        exe = compile_llvm(nasir.load(path), threads=threads)
        nasir_compile = time.perf_counter() - start

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        start = time.perf_counter()
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        ort_compile = time.perf_counter() - start
        feed = {session.get_inputs()[0].name: x}

        net = zoo.build_torch(name, dataset)
        tx = torch.from_numpy(x)

        def torch_run():
            with torch.inference_mode():
                net(tx)

        expected = session.run(None, feed)[0]
        max_err = float(np.abs(exe(x) - expected).max())
        row = {
            "model": name, "dataset": dataset, "threads": threads,
            "nasir_compile_s": nasir_compile, "ort_compile_s": ort_compile,
            "nasir_ms": _median_ms(lambda: exe(x), repeat),
            "ort_ms": _median_ms(lambda: session.run(None, feed), repeat),
            "torch_ms": _median_ms(torch_run, repeat),
            "workspace_bytes": exe.workspace_bytes, "max_abs_err_vs_ort": max_err,
        }
    row["ort_over_nasir"] = row["ort_ms"] / row["nasir_ms"]
    row["torch_over_nasir"] = row["torch_ms"] / row["nasir_ms"]
    return row


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="nasir-llvm vs ONNX Runtime vs PyTorch (median latency, ratio > 1: nasir faster)")
    for col in ("model", "dataset", "nasir compile s", "ORT compile s", "nasir ms", "ORT ms", "torch ms",
                "ORT/nasir", "torch/nasir"):
        table.add_column(col, justify="left" if col in ("model", "dataset") else "right")
    for r in rows:
        table.add_row(r["model"], r["dataset"], f"{r['nasir_compile_s']:.1f}", f"{r['ort_compile_s']:.2f}",
                      f"{r['nasir_ms']:.2f}", f"{r['ort_ms']:.2f}", f"{r['torch_ms']:.2f}",
                      f"{r['ort_over_nasir']:.2f}", f"{r['torch_over_nasir']:.2f}")
    console = Console()
    Console(width=max(console.width, 130)).print(table)


def main(argv: list[str] | None = None) -> None:
    import nasir.zoo as zoo

    parser = argparse.ArgumentParser(prog="python -m nasir.benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=zoo.names(), help="zoo model names (default: all)")
    parser.add_argument("--dataset", choices=["cifar10", "imagenet", "all"], default="all")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default="benchmarks.json", help="where to write the rows")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        for dataset in zoo.datasets(name):
            if args.dataset in ("all", dataset):
                rows.append(bench_model(name, dataset, args.repeat, args.threads))
                print_table(rows[-1:])
    print_table(rows)
    Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
