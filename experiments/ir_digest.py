"""Digests of the lowered IR of the zoo models: the check that a refactoring changed no output.

    python experiments/ir_digest.py > before.txt     # on the old tree
    python experiments/ir_digest.py > after.txt      # on the new one
    diff before.txt after.txt                       # nothing: identical IR

For each zoo model and dataset, at AVX2 (x86-64-v3) and AVX-512 (x86-64-v4), it prints the SHA-256
of `nasir-opt` output after `convert-nest-to-loops` and of `-t llvm` (the LLVM IR of the whole
pipeline). It goes through the command line only, so it runs unchanged across a reorganised tree;
for an older tree, put a copy of it laid out as the `nasir` package first on PYTHONPATH. Output is
compared unverified (`--disable-verify`): an older tree's IR need not verify.
Options: `--models resnet18,mobilenet_v2`, `--datasets cifar10`, `--cpus x86-64-v4`.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nasir import zoo
from nasir.lowering.pipeline import LLVM, LLVM_PIPELINE

UP_TO_LOOPS = str(LLVM.before("convert-loops-to-llvm"))


def digest(onnx: Path, cpu: str, pipeline: str, llvm: bool) -> str:
    command = [str(Path(sys.executable).with_name("nasir-opt")), str(onnx), "-p", pipeline, "--cpu", cpu, "--disable-verify"] + (["-t", "llvm"] if llvm else [])
    out = subprocess.run(command, capture_output=True, check=True).stdout
    return hashlib.sha256(out).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.names()))
    parser.add_argument("--datasets", default="cifar10,imagenet")
    parser.add_argument("--cpus", default="x86-64-v3,x86-64-v4")
    args = parser.parse_args()
    jobs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            for dataset in args.datasets.split(","):
                if dataset not in zoo.datasets(name):
                    continue
                onnx = Path(zoo.export_onnx(name, Path(tmp, f"{name}-{dataset}.onnx"), dataset))
                for cpu in args.cpus.split(","):
                    jobs.append((f"{name} {dataset} {cpu} loops", (onnx, cpu, UP_TO_LOOPS, False)))
                    jobs.append((f"{name} {dataset} {cpu} llvm", (onnx, cpu, LLVM_PIPELINE, True)))
        with ThreadPoolExecutor(2) as pool:
            for (label, _), result in zip(jobs, pool.map(lambda job: digest(*job[1]), jobs)):
                print(label, result, flush=True)


if __name__ == "__main__":
    sys.exit(main())
