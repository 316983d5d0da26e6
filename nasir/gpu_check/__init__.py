"""`nasir gpu-check OUT`: a self-contained folder that checks nasir's CUDA code on a GPU machine.

Built here (TVM's compiler and nvcc, no GPU); run there with `python3 OUT/run.py` on a machine with
only Python 3.12, numpy, PyTorch and a CUDA driver (see runner.py, copied as run.py):

    OUT/run.py                      the runner (nasir/gpu_check/runner.py)
    OUT/models.py                   the zoo's plain PyTorch networks (nasir/zoo/models.py)
    OUT/runtime/tvm, runtime/tvm_ffi
                                    TVM's runtime: the tvm package without its compiler library,
                                    sources and headers; apache-tvm-ffi for Python 3.12
    OUT/cases/NAME/model.so         a case's library for the GPU (host code + fatbin; no weights)
    OUT/cases/NAME/meta.json        its inputs, outputs and weights' shapes; the case
    OUT/cases/NAME/expected.npy     its output on the check's input and weights, by TVM's CPU code

    nasir.gpu_check.write("gpu-check", arch="sm_90")          # every zoo model + ResNet-34's variants
    nasir.gpu_check.write("gpu-check", cases=[("resnet34", "imagenet", "base")], batches=(1, 16))

A tuning export (`nasir tune --target cuda --export OUT/tune`) inside the folder uses its runtime.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from nasir.errors import BackendUnavailableError
from nasir.gpu_check.runner import check_input, check_weights

RUNTIME_PYTHON = "3.12"
"""The GPU machine's Python: TVM's FFI package is fetched for it."""
FFI_PACKAGE = "apache-tvm-ffi"
TVM_LEFT_OUT = ("libtvm_compiler.so", "3rdparty", "src", "include", "web", "__pycache__")
"""What TVM's runtime does not need of the tvm package (the compiler library alone is 250 MB)."""
VARIANT_MODEL = "resnet34"


def default_cases() -> list[tuple[str, str, str]]:
    """(model, dataset, variant): every zoo model at every dataset, then ResNet-34's variants."""
    from nasir import zoo
    from nasir.measure.variants import VARIANTS

    cases = [(name, dataset, "base") for name in zoo.names() for dataset in zoo.datasets(name)]
    return cases + [(VARIANT_MODEL, dataset, variant) for dataset in zoo.datasets(VARIANT_MODEL)
                    for variant in VARIANTS if variant not in ("base", "nest")]


def case_name(model: str, dataset: str, variant: str, batch: int = 1) -> str:
    return f"{model}-{dataset}-{variant}" + (f"-b{batch}" if batch != 1 else "")


def write_case(folder: Path, model_name: str, dataset: str, variant: str, arch: str, batch: int = 1,
               tuning_dir: str = "none") -> dict:
    """One case: the GPU library (at `batch`; with the records of `tuning_dir`, default none), its
    meta.json and the expected output (TVM's CPU code)."""
    import numpy as np

    import nasir
    from nasir import zoo
    from nasir.runtime.tvm_executable import TVMExecutable
    from nasir.measure.variants import ALL_VARIANTS

    model = zoo.load(model_name, dataset)
    if variant != "base":
        model = model.transform(ALL_VARIANTS[variant])
    model = model.at_batch(batch)
    gpu = nasir.compile(model, target="cuda", arch=arch, tuning_dir=tuning_dir)
    cpu = nasir.compile(model, target="tvm", tuning_dir="none")
    if cpu.meta["weights"] != gpu.meta["weights"]:
        raise AssertionError(f"{model_name} {variant}: the CPU and GPU libraries take other weights")
    weights = check_weights(gpu.meta)
    expected = TVMExecutable(cpu.library, cpu.meta, weights)(check_input(gpu.meta))
    meta = {**gpu.meta, "check": {"model": model_name, "dataset": dataset, "variant": variant, "batch": batch,
                                  "torch_builder": zoo.torch_builder(model_name)}}
    gpu.save(folder, weights=False)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    np.save(folder / "expected.npy", expected)
    return meta


def _ffi_wheel(cache: Path) -> Path:
    """apache-tvm-ffi's wheel for RUNTIME_PYTHON, the version installed here, fetched once."""
    from importlib.metadata import version

    wanted = version(FFI_PACKAGE)
    found = sorted(cache.glob(f"apache_tvm_ffi-{wanted}-cp{RUNTIME_PYTHON.replace('.', '')}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", RUNTIME_PYTHON, "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
               "--platform", "manylinux_2_17_x86_64", "-d", str(cache), f"{FFI_PACKAGE}=={wanted}"]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(cache.glob("apache_tvm_ffi-*.whl"))
    if done.returncode != 0 or not found:
        raise BackendUnavailableError(f"the GPU check needs {FFI_PACKAGE} {wanted} for Python {RUNTIME_PYTHON}, "
                                      f"which pip could not fetch: {done.stderr.strip()[-500:]}")
    return found[0]


WHEEL_CACHE = Path.home() / ".cache" / "nasir" / "wheels"
"""Where the FFI wheel for the GPU machine's Python is kept once fetched."""


def write_runtime(out: Path, cache: Path = WHEEL_CACHE) -> None:
    """TVM's runtime pieces for the GPU machine under `out`/runtime."""
    import tvm

    runtime = out / "runtime"
    shutil.rmtree(runtime, ignore_errors=True)
    shutil.copytree(Path(tvm.__file__).parent, runtime / "tvm", ignore=shutil.ignore_patterns(*TVM_LEFT_OUT))
    with zipfile.ZipFile(_ffi_wheel(cache)) as wheel:
        for member in wheel.namelist():
            if member.startswith("tvm_ffi/"):
                wheel.extract(member, runtime)
    for library in (runtime / "tvm_ffi").rglob("*.so"):
        library.chmod(0o755)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write(out: str | Path, arch: str = "sm_90", cases: list[tuple[str, str, str]] | None = None,
          cache: Path | None = None, progress: Callable[[str], None] = print, batches: tuple[int, ...] = (1,),
          tuning_dir: str = "none") -> Path:
    """Write the check folder `out` for GPUs of `arch` (see the module docstring); `cases`:
    (model, dataset, variant) triples, default `default_cases()`, each at every batch of `batches`
    (a case at batch B > 1 is named NAME-bB), built with the tuning records of `tuning_dir` (default
    none: nasir's and dlight's default schedules)."""
    out = Path(out)
    (out / "cases").mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    shutil.copy(here / "runner.py", out / "run.py")
    shutil.copy(here.parent / "zoo" / "models.py", out / "models.py")
    write_runtime(out, cache or WHEEL_CACHE)
    for batch in batches:
        for model, dataset, variant in cases or default_cases():
            name = case_name(model, dataset, variant, batch)
            progress(f"{name}: building for {arch}")
            folder = out / "cases" / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            write_case(folder, model, dataset, variant, arch, batch, tuning_dir)
    progress(f"wrote {out} ({folder_bytes(out) / 2**20:.1f} MiB); on the GPU machine: python3 {out}/run.py")
    return out
