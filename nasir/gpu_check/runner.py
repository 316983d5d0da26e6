"""nasir's GPU check, run on the GPU machine: `python3 run.py` in a folder `nasir gpu-check` wrote.

Needs Python 3.12, numpy, PyTorch with CUDA and a CUDA driver; not nasir, xDSL, TVM's compiler,
nvcc or NVRTC: the folder carries TVM's runtime (runtime/), each case's compiled library
(cases/NAME/model.so: host code and a fatbin) and meta.json. Each case runs in a process of its own
(an illegal memory access poisons a CUDA context):

- weights and input are regenerated here by `check_weights` / `check_input` (integer hashing, the
  same numbers on every machine), so no weight file travels; the output is compared with
  expected.npy, computed on the build machine by TVM's CPU code with the same numbers;
- nasir's time is TVM's time_evaluator on the device; PyTorch's is the same network built here
  from plain torch code (models.py, the zoo's, with the case's variant applied to the modules):
  eager with cuDNN, replayed from a CUDA graph, and torch.compile for the cases named by
  --torch-compile;
- --memcheck runs each case once more under compute-sanitizer's memcheck.

    python3 run.py                             # every case: results.json and a table
    python3 run.py --cases resnet34 --memcheck --torch-compile resnet34-imagenet-base

This file imports only the standard library and numpy at the top, so that the build side
(`nasir.gpu_check`) shares `check_weights` and `check_input` with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = 0x9E3779B97F4A7C15


def _uniform(count: int, stream: int) -> np.ndarray:
    """`count` numbers in [-1, 1) from splitmix64 of (stream, index): exact integer arithmetic."""
    with np.errstate(over="ignore"):
        z = (np.arange(count, dtype=np.uint64) + np.uint64(stream) * np.uint64(1 << 40)) * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) / float(1 << 23) - 1.0).astype(np.float32)


def check_weights(meta: dict) -> list[np.ndarray]:
    """The check's weights for a library's meta.json: uniform with variance 1 / fan-in for tensors
    of rank 2 and more (the activations keep their scale), 0.1 / sqrt(3) for vectors (biases)."""
    weights = []
    for index, entry in enumerate(meta["weights"]):
        shape = tuple(entry["shape"])
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
        scale = math.sqrt(3.0 / fan_in) if len(shape) > 1 else 0.1
        weights.append((_uniform(math.prod(shape), index + 1) * np.float32(scale)).reshape(shape))
    return weights


def check_input(meta: dict) -> np.ndarray:
    """The check's input for a library's meta.json (its first input)."""
    shape = tuple(meta["input_shapes"][0])
    return _uniform(math.prod(shape), 0).reshape(shape)


# --- one case, in its own process -------------------------------------------------------------


def _tvm_runtime(device: str = "cuda"):
    """TVM's runtime alone (runtime/ where this folder or the one above has one for this Python,
    else the installed package's), with its CUDA library for `device` "cuda"; and the device
    ("cuda" or "cpu")."""
    import ctypes

    os.environ["TVM_USE_RUNTIME_LIB"] = "1"
    core = f"core.cpython-{sys.version_info[0]}{sys.version_info[1]}-*.so"
    runtime = next((f / "runtime" for f in (HERE, HERE.parent) if list((f / "runtime" / "tvm_ffi").glob(core))), None)
    if runtime is not None:
        sys.path.insert(0, str(runtime))
    if device != "cuda":
        import tvm

        return tvm, tvm.cpu(0)
    for found in sorted(Path(p) for entry in sys.path if entry and Path(entry).is_dir()
                        for p in Path(entry).glob("nvidia/cu*/lib/libcudart.so*")):
        ctypes.CDLL(str(found), mode=ctypes.RTLD_GLOBAL)  # PyTorch's wheel carries CUDA's runtime
        break
    import tvm

    ctypes.CDLL(str(Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"), mode=ctypes.RTLD_GLOBAL)
    return tvm, tvm.cuda(0)


def _torch_module(meta: dict):
    """The case's network in plain PyTorch (models.py), its variant applied, on the GPU."""
    import torch

    sys.path.insert(0, str(HERE))
    import models

    torch.manual_seed(0)
    module = getattr(models, meta["check"]["torch_builder"])(meta["check"]["dataset"])
    variant = meta["check"]["variant"]
    if variant != "base":
        for block in module.modules():
            if isinstance(block, models.BasicBlock):
                _vary(block, variant, torch.nn)
    return module.cuda().eval()


def _vary(block, variant: str, nn) -> None:
    """A ResNet basic block as the variant makes it (see nasir.measure.variants)."""
    def conv(old, groups=1, cin=None, cout=None):
        cin, cout = cin or old.in_channels, cout or old.out_channels
        return nn.Conv2d(cin, cout, 3, stride=old.stride, padding=1, bias=False, groups=groups)

    if variant.startswith("group"):
        g = int(variant.removeprefix("group"))
        block.conv1, block.conv2 = conv(block.conv1, g), conv(block.conv2, g)
    elif variant == "depthwise":
        block.conv1 = conv(block.conv1, math.gcd(block.conv1.in_channels, block.conv1.out_channels))
        block.conv2 = conv(block.conv2, block.conv2.in_channels)
    elif variant == "bottleneck2":
        half = block.conv1.out_channels // 2
        block.conv1, block.bn1 = conv(block.conv1, cout=half), nn.BatchNorm2d(half)
        block.conv2 = conv(block.conv2, cin=half)


def _cuda_ms(fn, repeat: int, warmup: int = 5) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def _torch_times(meta: dict, x: np.ndarray, repeat: int, compile_it: bool) -> dict:
    import torch

    torch.backends.cudnn.benchmark = True
    module = _torch_module(meta)
    xt = torch.from_numpy(x).cuda()
    out = {}
    with torch.no_grad():
        out["torch_ms"] = _cuda_ms(lambda: module(xt), repeat)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                module(xt)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            module(xt)
        out["torch_graph_ms"] = _cuda_ms(graph.replay, repeat)
        if compile_it:
            begin = time.perf_counter()
            compiled = torch.compile(module)
            compiled(xt)
            out["torch_compile_s"] = time.perf_counter() - begin
            out["torch_compile_ms"] = _cuda_ms(lambda: compiled(xt), repeat)
    return out


def run_case(case: Path, repeat: int, once: bool, compile_it: bool) -> dict:
    """Load, run and compare one case; time it unless `once` (memcheck)."""
    meta = json.loads((case / "meta.json").read_text())
    tvm, device = _tvm_runtime()
    from tvm.runtime.vm import VirtualMachine

    library = tvm.runtime.load_module(str(case / "model.so"))
    if not device.exist:
        raise SystemExit(f"{case.name}: loaded; no CUDA GPU here to run it (TVM's runtime sees none)")
    vm = VirtualMachine(library, device)
    args = [tvm.runtime.tensor(a, device) for a in [check_input(meta), *check_weights(meta)]]
    y = vm["main"](*args)
    y = (y if hasattr(y, "numpy") else y[0]).numpy()
    expected = np.load(case / "expected.npy")
    result = {"case": case.name, "max_abs_err": float(np.abs(y - expected).max()),
              "max_abs_expected": float(np.abs(expected).max())}
    result["relative_err"] = result["max_abs_err"] / max(result["max_abs_expected"], 1e-30)
    if not once:
        timer = vm.time_evaluator("main", device, number=10, repeat=repeat)
        result["nasir_ms"] = float(np.median(timer(*args).results)) * 1e3
        result.update(_torch_times(meta, check_input(meta), repeat, compile_it))
    return result


# --- every case, each in a child process -------------------------------------------------------

NEEDED = ("typing_extensions", "torch")
"""Python packages the runner needs besides numpy (TVM's runtime imports typing_extensions)."""


def preflight(driver: str = "libcuda.so.1") -> str | None:
    """Why the cases cannot run on this machine, in one line, or None: the Python version this
    folder's TVM runtime was built for, the packages it needs, and the CUDA driver (`driver`)."""
    import ctypes
    import importlib.util
    import platform

    built = sorted({m.group(1) for p in (HERE / "runtime" / "tvm_ffi").glob("core.cpython-3*-*.so")
                    if (m := re.match(r"core\.cpython-3(\d+)-", p.name))}, key=int)
    if built and str(sys.version_info[1]) not in built:
        wanted = " or ".join(f"3.{b}" for b in built)
        return (f"this folder's TVM runtime is built for Python {wanted}, this is Python {platform.python_version()}: "
                f"run it with python{wanted.split(' or ')[0]}")
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        return f"missing Python packages: {', '.join(missing)} (pip install {' '.join(missing)}; torch built with CUDA)"
    try:
        ctypes.CDLL(driver)
    except OSError:
        return f"no CUDA driver here ({driver} cannot be loaded): run.py needs an NVIDIA GPU and its driver"
    return None


def _child(case: Path, options: list[str], timeout: float, memcheck: bool) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--case", str(case), *options]
    if memcheck:
        command = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "5", "--error-exitcode", "86",
                   *command, "--once"]
    begin = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case.name, "error": f"timed out after {timeout:.0f} s"}
    result = {"case": case.name, "seconds": round(time.perf_counter() - begin, 1)}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines and lines[-1].startswith("{"):
        result.update(json.loads(lines[-1]))
    else:
        errors = [line for line in (done.stdout + done.stderr).splitlines()
                  if re.search(r"error|Error|Invalid|invalid|at 0x|by thread|Address", line)]
        result["error"] = (f"exit {done.returncode}: " + " | ".join(errors[:12]))[:3000]
    return result


def _table(rows: list[dict]) -> str:
    columns = ["case", "nasir_ms", "torch_ms", "torch_graph_ms", "torch_compile_ms", "nasir/torch",
               "relative_err", "memcheck"]
    lines = [" | ".join(columns), " | ".join("---" for _ in columns)]
    for row in rows:
        if "nasir_ms" in row and "torch_ms" in row:
            row["nasir/torch"] = row["nasir_ms"] / row["torch_ms"]
        cells = []
        for c in columns:
            value = row.get(c, "")
            cells.append(f"{value:.4g}" if isinstance(value, float) else str(value))
        if "error" in row:
            cells[1] = "ERROR"
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="", help="run the cases whose name matches this regex (default: all)")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per measurement (default: 30)")
    parser.add_argument("--memcheck", action="store_true", help="also run each case under compute-sanitizer")
    parser.add_argument("--memcheck-failed", action="store_true", help="run compute-sanitizer on failed cases only")
    parser.add_argument("--torch-compile", default="", help="also time torch.compile on cases matching this regex")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per case process (default: 300)")
    parser.add_argument("--out", default=str(HERE), help="folder for results.json (default: this one)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compile-torch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(Path(args.case), args.repeat, args.once, args.compile_torch)), flush=True)
        return
    reason = preflight()
    if reason is not None:
        print(f"run.py: {reason}", file=sys.stderr)
        sys.exit(2)
    cases = sorted(p for p in (HERE / "cases").iterdir()
                   if (p / "meta.json").exists() and re.search(args.cases, p.name))
    rows = []
    for case in cases:
        compile_it = bool(args.torch_compile) and re.search(args.torch_compile, case.name) is not None
        row = _child(case, ["--repeat", str(args.repeat), *(["--compile-torch"] if compile_it else [])],
                     args.timeout, memcheck=False)
        if args.memcheck or (args.memcheck_failed and "error" in row):
            checked = _child(case, [], args.timeout, memcheck=True)
            row["memcheck"] = "clean" if "error" not in checked else checked["error"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    import platform

    try:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        device = "no nvidia-smi"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"device": device, "python": platform.python_version(),
                                                  "cases": rows}, indent=1))
    print(f"\n{device}\n{_table(rows)}")
    failed = [r["case"] for r in rows if "error" in r or r.get("relative_err", 0) > 1e-3]
    print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed or not rows else 0)


if __name__ == "__main__":
    main()
