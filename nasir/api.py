"""The Python entry points behind `nasir.load` and `nasir.compile`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from nasir.errors import FrontendError, NasirError
from nasir.model import Model, load_text
from nasir.runtime.llvm_executable import compile_llvm

TARGETS = ("llvm", "torch")


def backend_compiler(target: str) -> Callable:
    """The compile function of `target`'s backend; its keyword parameters are the options
    `compile` takes for that target (the torch backend is imported only when asked for)."""
    if target == "torch":
        from nasir.runtime.torch_executable import compile_torch

        return compile_torch
    return compile_llvm


def target_options(target: str) -> tuple[str, ...]:
    """The keyword options `compile(model, target=...)` takes (`threads` counts where it is not 1)."""
    return tuple(list(inspect.signature(backend_compiler(target)).parameters)[1:])


def load(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | list[tuple[int, ...]] | None = None) -> Model:
    """Import a model: an ONNX file, or nasir IR text (`.mlir`, weights from a `.npz` beside it).

    `input_shapes` fixes dynamic input dimensions, by input name or in input order.
    """
    path = Path(path)
    if not path.exists():
        raise FrontendError(f"{path}: no such file")
    if path.suffix == ".mlir":
        return load_text(path)
    from nasir.frontend.onnx_import import import_onnx

    return import_onnx(path, input_shapes)


def compile(model: Model, target: str = "llvm", threads: int = 1, **options):
    """Compile `model` for `target` ("llvm": native CPU code, "torch": PyTorch reference). An option
    the target does not take is an error, not ignored:

        compile(model, cpu="znver3")      llvm code for a CPU LLVM knows by name ("host": this one's;
                                          default: the environment's NASIR_CPU, else the host)
        compile(model, checked=True)      llvm code that checks every load and store and raises
                                          BoundsError instead of leaving a buffer

        compile(model, target="torch", threads=2)
        -> NasirError: target 'torch' takes no option 'threads' (it takes: none)
    """
    if not isinstance(model, Model):
        raise NasirError(f"compile() takes a nasir.Model, got {type(model).__name__}")
    if target not in TARGETS:
        raise NasirError(f"unknown target '{target}' (choose from {', '.join(TARGETS)})")
    given = {**options, **({"threads": threads} if threads != 1 else {})}
    takes = target_options(target)
    for option in given:
        if option not in takes:
            raise NasirError(f"target '{target}' takes no option '{option}' (it takes: {', '.join(takes) or 'none'})")
    return backend_compiler(target)(model.module, **given)


def fisher_potential(model: Model, inputs, labels, seed: int = 0):
    """Fisher Potential of `model` on one minibatch (per layer and total); see nasir/fisher.py."""
    from nasir.fisher import fisher_potential as compute

    return compute(model, inputs, labels, seed)


def check_capacity(candidate: Model, original: Model, inputs, labels, seed: int = 0):
    """Accept `candidate` unless its Fisher Potential is below `original`'s on the same minibatch."""
    from nasir.fisher import check_capacity as check

    return check(candidate, original, inputs, labels, seed)



def train(model: Model, data, **options):
    """Train `model` on `data` with the papers' recipe on the torch backend; returns a TrainResult
    (`nasir.training.train` has the options: epochs, batch, lr, out, resume, ...)."""
    from nasir.training import train as run

    return run(model, data, **options)
