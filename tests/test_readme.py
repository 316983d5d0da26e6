"""The README's shell lines run as written (issue 30): every line of its indented code blocks is run
here, in README order, or is in `EXEMPT` with the reason (each a long run, or one that needs what a
test machine lacks). Lines run in bash with a PATH that holds no venv, so the README's own
activation line is what makes `nasir`, `nasir-opt` and `python` the venv's; `make` lines run in the
clone, the others in a scratch folder (with the clone's .venv linked in, as `. .venv/bin/activate`
names it relative to the clone).

The fenced Python example is not a shell line; its API is tested elsewhere (test_any_batch for
`to_torch`/`to_onnx`, test_search, test_export).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

EXEMPT = {
    "make demo": "a search of minutes (its pieces: test_search)",
    "make test": "the suite this test is part of",
    'nasir-opt model.onnx -p "$(python -c \'from nasir.lowering.pipeline import LLVM_PIPELINE as p; print(p)\')" -t llvm':
        "all of ResNet-18 to LLVM IR, a minute or more (test_tool_streams runs this pipeline and -t llvm on a small model)",
    "make bench": "benchmarks of minutes (test_benchmarks runs them small)",
    'make bench ARGS="--models --variants base fold-kh shift-oh split-co2"': "benchmarks of minutes (test_benchmarks)",
    'make bench ARGS="--tune --variants"': "tunes and times every zoo model, an hour (test_benchmarks: --tune small)",
    'make bench ARGS="--quick --cpu znver3"': "compiles and times the cifar10 zoo and ResNet-34 imagenet, 8-10 minutes "
                                             "(test_benchmarks: --cpu x86-64-v3 on one model)",
    "nasir tune resnet34 --dataset imagenet": "tunes ResNet-34's convs, minutes (test_tuning: nasir tune on a small model)",
    'make bench ARGS="--target cuda --tune-trials 2000"':
        "needs a CUDA GPU (test_tvm_backend runs its code on the CPU and checks the message without a GPU)",
    "nasir tune resnet34 --dataset imagenet --target cuda --arch sm_90 --export tune-out":
        "builds 32 CUDA candidates of each of ResNet-34's nests, many minutes (test_remote_tuning: the same on one conv)",
    "python3 tune-out/time_candidates.py": "needs a CUDA GPU (test_remote_tuning: the timer on TVM's CPU candidates, "
                                           "and up to the missing GPU on CUDA ones)",
    "nasir synth layer2_layer2.0_conv2_Conv --model resnet18 --flops 0.5":
        "synthesises operators for a conv and times ten, about a minute (test_synthesis: nasir synth on a small model)",
    "nasir tune --import tune-out": "needs the times of a GPU run (test_remote_tuning: export, time, import on the CPU)",
    "nasir gpu-check gpu-check --arch sm_90":
        "builds every zoo model for CUDA, many minutes (test_cuda_build: test_gpu_check_folder on one model)",
    'make bench ARGS="--target tvm --quick"': "benchmarks TVM's code of every zoo model, an hour (test_tvm_backend: test_bench_measures_tvm)",
    "nasir check model.onnx --target tvm": "builds ResNet-18 with TVM, minutes (test_tvm_backend: test_cli_runs_on_tvm)",
    "nasir profile resnet18 --target tvm": "builds and profiles ResNet-18 with TVM, minutes (test_tvm_backend: test_cli_profiles_on_tvm)",
    "nasir search resnet18 --data cifar-10-batches-bin/ --train-top 2 --epochs 200":
        "needs the CIFAR-10 binary files and hours (test_training: test_search_trains_the_original_and_the_fastest_of_the_front)",
    "nasir train resnet18 --data cifar-10-batches-bin/ --epochs 200 --out runs/r18-train":
        "needs the CIFAR-10 binary files and hours (test_training: loaders on generated files, a tiny model trained)",
    'nasir train resnet18 --pipeline "$(cat runs/r18/best.pipeline)" --data digits --epochs 15':
        "needs a finished search's runs/r18 and minutes of training (test_training, experiments/fisher_vs_accuracy.py)",
    'nasir train model.onnx --pipeline "$(cat runs/r18/best.pipeline)" --teacher model.onnx --data digits --epochs 15':
        "needs a finished search's runs/r18 and minutes of training (test_distill: nasir train --teacher on a tiny net)",
    "nasir check model.onnx": "compiles ResNet-18, about a minute (test_tools: nasir check on a zoo model)",
    "nasir check model.onnx --cpu x86-64-v3": "compiles ResNet-18, about a minute (test_checked, conftest's cpu fixture)",
    "nasir check model.onnx --checked": "compiles ResNet-18 bounds-checked, minutes (test_checked)",
    "nasir profile resnet34 --dataset imagenet --variant group16 --sort time": "compiles ResNet-34, minutes (test_profile)",
    "nasir search resnet34 --budget 1000 --strategy evolution --workers 2 --out runs/r34": "a search of hours (test_search)",
    "nasir search resnet34 --ray 127.0.0.1:6379 --workers 8": "needs a Ray cluster",
    "nasir search model.onnx --data cifar-10-batches-bin/ --max-accuracy-drop 1.0":
        "needs the CIFAR-10 binary files, a trained model and hours (test_finetune: the same on a tiny trained net)",
    "python -m nasir.cli.demo --model resnet34": "compiles and times ResNet-34, minutes",
    "nasir train resnet18 --image-size 16 --data mnist5k --epochs 4 --out r18-mnist":
        "trains ResNet-18 for minutes (test_training: nasir train on a tiny model, its trained.onnx scored by ONNX Runtime)",
    "nasir search r18-mnist/trained.onnx --data mnist5k --max-accuracy-drop 1 --strategy evolution --time-limit 300 "
    "--workers 2 --out r18-fast": "searches and fine-tunes for half an hour or more (test_finetune: the same flow on a "
                                  "tiny trained net, and on a CIFAR-10 folder)",
    "nasir check model.onnx --bisect": "compiles ResNet-18 and, on a mismatch, each prefix of it (test_bisect: "
                                       "a small model made wrong on purpose, and one that agrees)",
    "NASIR_HOST_CPU=x86-64-v3 make pytest": "the whole suite again, as an AVX2 CPU (make test runs its "
                                            "both-width tests that way: make pytest-avx2)",
    "NASIR_HOST_CPU=znver3 nasir profile resnet18": "compiles and profiles ResNet-18, a minute (test_target: the "
                                                    "host treated as an AVX2 CPU)",
    "make fuzz MINUTES=30": "fuzzes for 30 minutes (test_graphs runs its generator; test_fuzz_cli runs it for 2 cases)",
}
"""README line -> why this test does not run it."""


def shell_lines(text: str) -> list[str]:
    """The commands of the README's indented code blocks (outside ``` fences), comments dropped."""
    lines, fenced, previous = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("    ") and (previous.strip() == "" or previous.startswith("    ")):
            command = re.split(r"(?:^|\s+)#\s", line.strip(), maxsplit=1)[0].strip()
            if command:
                lines.append(command)
        previous = line if not fenced else "```"
    return lines


LINES = shell_lines(README.read_text())
ACTIVATE = next(line for line in LINES if line.endswith("bin/activate"))


def test_the_readme_says_how_to_make_and_activate_the_venv():
    assert LINES[:2] == ["make venv", ". .venv/bin/activate"]


def test_every_readme_line_is_run_or_exempt_with_a_reason():
    assert len(LINES) >= 15
    assert not set(EXEMPT) - set(LINES), "EXEMPT names lines the README no longer has"
    assert all(reason for reason in EXEMPT.values())


def clean_env() -> dict[str, str]:
    """This environment without any venv: PATH of the system only."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    return env


def test_the_readme_lines_run_as_written(tmp_path):
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    ran = []
    for line in LINES:
        if line in EXEMPT or line == ACTIVATE:
            continue
        in_clone = line.startswith("make ")
        script = line if in_clone else f"{ACTIVATE} && {line}"
        proc = subprocess.run(["bash", "-c", script], cwd=ROOT if in_clone else tmp_path, env=clean_env(),
                              capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, f"README line failed: {line}\n{proc.stderr[-2000:]}"
        ran.append(line)
    assert "nasir zoo" in ran and "nasir-opt model.onnx" in ran
    assert (tmp_path / "model.onnx").is_file()


def test_without_the_activation_the_commands_are_not_there(tmp_path):
    """The check above can fail: the same line without the README's activation finds no nasir."""
    proc = subprocess.run(["bash", "-c", "nasir zoo"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
    if proc.returncode == 0:
        pytest.skip("a nasir outside any venv is installed on this machine")
    assert proc.returncode == 127
