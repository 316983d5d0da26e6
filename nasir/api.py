"""The Python entry points behind `nasir.load` and `nasir.compile`."""

from __future__ import annotations

from pathlib import Path

from nasir.errors import FrontendError, NasirError
from nasir.model import Model, load_text
from nasir.runtime.backends import backend


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


def compile(model: Model, target: str = "llvm", threads: int = 1, tune: bool = False, **options):
    """Compile `model` for `target` ("llvm": native CPU code, "torch": PyTorch reference, "tvm":
    TVM's CPU code, "cuda": TVM's GPU code). An option the target does not take is an error, not
    ignored:

        compile(model, cpu="znver3")      llvm code for a CPU LLVM knows by name ("host": this one's;
                                          default: the environment's NASIR_CPU, else the host)
        compile(model, checked=True)      llvm code that checks every load and store and raises
                                          BoundsError instead of leaving a buffer
        compile(model, tune=True)         first time the best schedules of each conv the tuning
                                          database lacks and keep the fastest (`tune`)
        compile(model, tuning="t.db")     schedules from that tuning database ("none": the cost
                                          model's alone; default: the user's, see `tune`)

        compile(model, target="cuda", arch="sm_80")   GPU code for an A100 (default: this machine's
                                          GPU, else sm_90; "sm_80,sm_90": one library for both);
                                          compiles without a GPU, runs on one
        compile(model, target="tvm", profile=True)    TVM's CPU code, one kernel call per layer,
                                          for exe.profile(x)

        compile(model, target="torch", threads=2)
        -> NasirError: target 'torch' takes no option 'threads' (it takes: none)
    """
    if not isinstance(model, Model):
        raise NasirError(f"compile() takes a nasir.Model, got {type(model).__name__}")
    entry = backend(target)
    given = {**options, **({"threads": threads} if threads != 1 else {})}
    takes = entry.options + (("tune",) if entry.tunes else ())
    for option in [*given, *(["tune"] if tune else [])]:
        if option not in takes:
            raise NasirError(f"target '{target}' takes no option '{option}' (it takes: {', '.join(takes) or 'none'})")
    if tune:
        from nasir.tuning.host import tune as tune_model

        tune_model(model, cpu=options.get("cpu"), threads=threads, database=options.get("tuning"), progress=True)
    return entry.compile(model.module, **given)


def tune(model: Model, cpu: str | None = None, threads: int = 1, database: str | Path | None = None,
         trials: int | None = None, progress: bool = False):
    """Time the schedules the cost model ranks highest for each distinct conv of `model` that the
    tuning database lacks for `cpu` (at most `trials` a conv, best first; default all of them) and
    store the fastest, which every later compile for that CPU then uses (see nasir/tuning/host.py).
    `database`: a file (default: the user's cache, `$NASIR_CACHE_DIR/tuning.db` or
    `~/.cache/nasir/tuning.db`). Returns a `TuningReport`."""
    from nasir.tuning.host import tune as tune_model

    return tune_model(model, cpu=cpu, threads=threads, database=database, trials=trials, progress=progress)


def transform(model: Model, pipeline: str, capacity_check=None) -> Model:
    """`model.transform(pipeline)`, then with `capacity_check` a check of the result's capacity:
    LegalityError when its Fisher Potential at initialisation is below `model`'s on a minibatch of
    a CIFAR-10 directory, an .npz file, "synthetic" data, or (inputs, labels)."""
    out = model.transform(pipeline)
    if capacity_check is not None:
        from nasir.fisher import require_capacity

        require_capacity(out, model, pipeline, data=None if capacity_check == "synthetic" else capacity_check)
    return out


def synthesize(model: Model, layer: str, flops: float = 0.5, params: float = 1.0, depth: int | None = None,
               time: int = 10, cpu: str | None = None, threads: int = 1, bottom_up: bool = False):
    """Operators for conv `layer` of `model` built from the coordinate primitives (Syno), within
    `flops` x its MACs and `params` x its weights, from up to `depth` steps: rewrites of the conv
    (default 3), or with `bottom_up` steps from the output's coordinates to the input's pruned by
    the shape distance (default 5; nasir/search/bottom_up.py); the first `time` of them timed alone
    beside the layer (`cpu`, `threads`). Returns a `Synthesis` (see nasir/search/synthesis.py):
    `.operators` with their pipelines, formulas, MACs, parameters, times and mixing, and the
    redundancy canonicalisation removed."""
    from nasir.search.bottom_up import synthesizer
    from nasir.search.synthesis import time_operators

    walk, depth = synthesizer(bottom_up, depth)
    found = walk(model, layer, flops=flops, params=params, depth=depth)
    if time:
        time_operators(found, time, cpu=cpu, threads=threads)
    return found


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
