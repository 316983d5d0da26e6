"""`make bench ARGS="--target cuda"`: nasir through TVM on a CUDA GPU against PyTorch CUDA eager.

One row per (dataset, variant) of the variant model (ResNet-34 by default; the architecture variants
of `nasir.measure.variants`): MACs, nasir untuned (contractions on nasir's default_gpu schedule, the other
nests on dlight's), nasir tuned (`--tune-trials N`: meta_schedule, records in the user's cache, see
lowering/nest_to_tvm/tuning.py), PyTorch eager with cuDNN (`torch.backends.cudnn.benchmark`; the
original from the zoo's torch module, a variant from `Model.to_torch()`), nasir/PyTorch, and each
one's realisation (speedup over the base / MAC ratio). Times are medians of on-device timings with
the input already on the device: TVM's time_evaluator, CUDA events for PyTorch.

    python -m nasir.measure.benchmark --target cuda --tune-trials 2000            # on a GPU machine

`run` takes any TVM target and torch device, so the same code runs on a CPU ("tvm", "cpu").
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from nasir.errors import BackendUnavailableError
from nasir.measure.variants import ALL_VARIANTS, realisation


def require_gpu() -> None:
    """BackendUnavailableError unless both TVM and PyTorch see a CUDA GPU here."""
    import torch
    import tvm

    if not tvm.cuda(0).exist or not torch.cuda.is_available():
        raise BackendUnavailableError("the GPU benchmark (--target cuda) needs a CUDA GPU and this machine has none "
                                      f"(TVM sees {'one' if tvm.cuda(0).exist else 'none'}, PyTorch "
                                      f"{'one' if torch.cuda.is_available() else 'none'}); run it on a GPU machine")


def torch_ms(module, x: np.ndarray, device: str, repeat: int, warmup: int = 3) -> float:
    """Median milliseconds of one eager forward pass of `module` on `device` (CUDA events there)."""
    import torch

    torch.backends.cudnn.benchmark = True
    module = module.to(device).eval()
    xt = torch.from_numpy(x).to(device)
    times = []
    with torch.no_grad():
        for k in range(warmup + repeat):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                module(xt)
                end.record()
                torch.cuda.synchronize()
                elapsed = start.elapsed_time(end)
            else:
                begin = time.perf_counter()
                module(xt)
                elapsed = (time.perf_counter() - begin) * 1e3
            if k >= warmup:
                times.append(elapsed)
    return float(np.median(times))


def torch_output(module, x: np.ndarray, device: str) -> np.ndarray:
    import torch

    with torch.no_grad():
        return module.to(device).eval()(torch.from_numpy(x).to(device)).cpu().numpy()


def bench(model_name: str, dataset: str, variants: list[str], repeat: int, tune_trials: int = 0,
          target: str = "cuda", device: str = "cuda", tuning_dir: str | None = None) -> list[dict]:
    """Rows of the base and each variant of `model_name` at `dataset` (see the module docstring)."""
    import nasir
    from nasir import zoo

    x = np.random.default_rng(0).standard_normal(zoo.input_shape(model_name, dataset)).astype(np.float32)
    original = zoo.load(model_name, dataset)
    rows = []
    for name in ["base", *(v for v in variants if v != "base")]:
        model = original.transform(ALL_VARIANTS[name]) if ALL_VARIANTS[name] else original
        # the zoo's module has the weights zoo.load imported (same seed)
        module = zoo.build_torch(model_name, dataset) if name == "base" else model.to_torch()
        untuned = nasir.compile(model, target=target, tuning_dir="none")
        row = {"model": model_name, "dataset": dataset, "variant": name, "macs": model.summary().total_macs,
               "nasir_ms": untuned.device_ms(x, repeat=repeat), "torch_ms": torch_ms(module, x, device, repeat),
               "max_abs_err_vs_torch": float(np.abs(untuned(x) - torch_output(module, x, device)).max())}
        if tune_trials:
            tuned = nasir.compile(model, target=target, tune_trials=tune_trials, tuning_dir=tuning_dir)
            row["nasir_tuned_ms"] = tuned.device_ms(x, repeat=repeat)
            np.testing.assert_allclose(tuned(x), untuned(x), rtol=1e-3, atol=1e-3)
        rows.append(row)
    base = rows[0]
    for row in rows:
        row["mac_ratio"] = base["macs"] / row["macs"]
        for key in ("nasir", "nasir_tuned", "torch"):
            if f"{key}_ms" in row:
                row[f"{key}_realisation"] = realisation(base[f"{key}_ms"], row[f"{key}_ms"], base["macs"], row["macs"])
                row[f"{key}_over_torch"] = row[f"{key}_ms"] / row["torch_ms"]
    return rows


def table(rows: list[dict], device_name: str):
    from rich.table import Table

    tuned = any("nasir_tuned_ms" in r for r in rows)
    t = Table(title=f"nasir (TVM) vs PyTorch eager on {device_name}, batch 1 (median ms; realisation = speedup / "
                    "MAC ratio)")
    for col in ["model", "dataset", "variant", "MAC ratio", "nasir ms", *(["tuned ms"] if tuned else []), "torch ms",
                "nasir/torch", *(["tuned/torch"] if tuned else []), "nasir real.", *(["tuned real."] if tuned else []),
                "torch real.", "err"]:
        t.add_column(col, justify="left" if col in ("model", "dataset", "variant") else "right")
    for r in rows:
        t.add_row(r["model"], r["dataset"], r["variant"], f"{r['mac_ratio']:.2f}", f"{r['nasir_ms']:.3f}",
                  *([f"{r['nasir_tuned_ms']:.3f}"] if tuned else []), f"{r['torch_ms']:.3f}",
                  f"{r['nasir_over_torch']:.2f}", *([f"{r['nasir_tuned_over_torch']:.2f}"] if tuned else []),
                  f"{r['nasir_realisation']:.2f}", *([f"{r['nasir_tuned_realisation']:.2f}"] if tuned else []),
                  f"{r['torch_realisation']:.2f}", f"{r['max_abs_err_vs_torch']:.1e}")
    return t


def run(model_name: str, datasets: list[str], variants: list[str], repeat: int, out: Path, tune_trials: int = 0,
        target: str = "cuda", device: str = "cuda", console=None) -> dict:
    """All rows, printed as a table and written to `out`/bench-gpu.json."""
    import json

    from rich.console import Console

    console = console or Console()
    rows = []
    for dataset in datasets:
        console.log(f"{model_name} {dataset}: {len(variants)} variants on {target}")
        rows += bench(model_name, dataset, variants, repeat, tune_trials, target, device)
    device_name = _device_name(device)
    console.print(table(rows, device_name))
    out.mkdir(parents=True, exist_ok=True)
    result = {"config": {"target": target, "device": device_name, "tune_trials": tune_trials, "repeat": repeat},
              "variants": rows}
    (out / "bench-gpu.json").write_text(json.dumps(result, indent=1))
    console.print(f"wrote {out / 'bench-gpu.json'}")
    return result


def _device_name(device: str) -> str:
    import platform

    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "CPU"
