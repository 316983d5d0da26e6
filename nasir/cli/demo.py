"""`python -m nasir.cli.demo` (`make demo`): the whole path for one zoo model, checked against ONNX Runtime.

    zoo model -> ONNX (temp dir) -> nasir.load -> layer table -> compile (llvm backend by default)
              -> run on a seeded input -> compare with ONNX Runtime -> PASS/FAIL (exit 1 on FAIL)
              -> single-thread latency of nasir and ONNX Runtime, measured in the same run

    python -m nasir.cli.demo --model resnet34 --dataset imagenet
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console

import nasir
from nasir import zoo
from nasir.console import fail, show, step
from nasir.errors import NasirError
from nasir.reference import compare, onnxruntime_outputs, seeded_inputs
from nasir.runtime.backends import TARGETS


def demo(name: str, dataset: str, target: str, console: Console) -> bool:
    """Run the demo for one model; True when nasir and ONNX Runtime agree."""
    from nasir.measure.benchmark import median_ms, ort_session

    with tempfile.TemporaryDirectory(prefix="nasir-demo-") as tmp:
        path = Path(tmp) / f"{name}_{dataset}.onnx"
        with step(console, f"exporting {name} ({dataset}) to ONNX"):
            zoo.export_onnx(name, path, dataset)
        with step(console, f"importing {path.name} into nasir IR"):
            model = nasir.load(path)
        show(console, model.summary())
        inputs = seeded_inputs(model)
        with step(console, f"compiling for the {target} backend"):
            exe = nasir.compile(model, target=target)
        with step(console, f"running nasir ({target}) and ONNX Runtime on a seeded input"):
            result = compare(exe(*inputs), onnxruntime_outputs(path, inputs))
        with step(console, "timing one thread, batch 1 (medians of 10 interleaved runs)"):
            session = ort_session(path, threads=1)
            feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
            times = median_ms({"nasir": lambda: exe(*inputs), "ort": lambda: session.run(None, feed)}, repeat=10)
            ours, theirs = times["nasir"], times["ort"]
    console.print(f"latency: nasir-{target} {ours:.2f} ms, ONNX Runtime {theirs:.2f} ms "
                  f"(nasir/ORT = {ours / theirs:.2f})")
    style = "green" if result.ok else "red"
    console.print(f"{name} ({dataset}): max abs diff vs ONNX Runtime {result.max_abs_diff:.3e}  "
                  f"[bold {style}]{result.verdict}[/bold {style}]")
    return result.ok


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m nasir.cli.demo", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18", choices=zoo.names())
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--target", default="llvm", choices=TARGETS)
    args = p.parse_args(argv)
    console = Console(highlight=False)
    try:
        ok = demo(args.model, args.dataset, args.target, console)
    except NasirError as e:
        fail("nasir demo", e)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
