"""`nasir`: the command line over the Python API (load, zoo, compile, run, check against ONNX Runtime).

    nasir zoo                                   # models and the datasets they are defined for
    nasir summary resnet18 --dataset imagenet   # per-layer table of a zoo model or a .onnx/.mlir file
    nasir export resnet18 r18.onnx              # a zoo model as ONNX
    nasir run r18.onnx                          # compile (llvm), run on a seeded input, print a checksum
    nasir check r18.onnx                        # compare with ONNX Runtime: max |diff|, PASS/FAIL
    nasir check r18.onnx --cpu x86-64-v3        # the same with code for another CPU (AVX2 here)
    nasir check r18.onnx --checked              # ... with every load and store bounds-checked
    nasir check r18.onnx --bisect               # on a mismatch: the first node whose output differs
    nasir profile resnet34 --dataset imagenet --variant group16   # time per layer vs its MACs
    nasir search resnet18 --budget 100 --out runs/r18              # faster networks, same capacity
    nasir tune resnet34 --dataset imagenet      # time the best schedules of its convs on this CPU
    nasir synth layer1_layer1.0_conv1_Conv --model resnet18 --flops 0.5   # new operators for one conv
    nasir tune resnet34 --target cuda --export tune-out   # GPU candidates, timed there, then --import tune-out
    nasir train resnet18 --pipeline "$(cat runs/r18/best.pipeline)" --data cifar-10-batches-bin/ --out runs/t
    nasir gpu-check gpu-check --arch sm_90      # a folder that checks nasir's CUDA code on a GPU machine

A model argument is a file path or a zoo name (then `--dataset` picks its variant). User mistakes
print `nasir: error: <message>` and exit 1; a failed check exits 1 too. A reader that closes the
pipe (`| head`) ends it quietly (exit status 141, as for `yes | head`); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
from rich.table import Table

import nasir
from nasir import zoo
from nasir.console import ToolConsole, end_on_closed_pipe, fail, show, step
from nasir.errors import FrontendError, NasirError
from nasir.measure.peak import measure_peak_gflops
from nasir.measure.variants import ALL_VARIANTS
from nasir.reference import compare, onnxruntime_outputs, require_onnxruntime, seeded_inputs
from nasir.runtime.backends import TARGETS
from nasir.search.capacity import RULES
from nasir.tuning.host import timeable_target

out = ToolConsole(highlight=False)
progress = ToolConsole(stderr=True, highlight=False)
EXPORT_TRIALS = 32
"""`nasir tune --export`'s candidates per distinct nest unless --trials says."""


def model_file(source: str, dataset: str, tmpdir: str, image_size: int | None = None) -> Path:
    """The file behind a model argument: `source` itself, or a zoo model exported into `tmpdir`
    (for square inputs of side `image_size` when given)."""
    path = Path(source)
    if path.exists() or path.suffix in (".onnx", ".mlir"):
        return path
    if source not in zoo.names():
        raise FrontendError(f"'{source}' is neither a file nor a zoo model (zoo models: {', '.join(zoo.names())})")
    with step(progress, f"exporting {source} ({dataset}) to ONNX"):
        return Path(zoo.export_onnx(source, Path(tmpdir) / f"{source}_{dataset}.onnx", dataset, image_size=image_size))


def load(path: Path) -> nasir.Model:
    with step(progress, f"importing {path.name}"):
        return nasir.load(path)


# --- subcommands -------------------------------------------------------------------------------

def cmd_zoo(args) -> int:
    table = Table(title="nasir zoo")
    for column in ("model", "datasets", "input shapes"):
        table.add_column(column)
    for name in zoo.names():
        sets = zoo.datasets(name)
        shapes = ", ".join("x".join(map(str, zoo.input_shape(name, d))) for d in sets)
        table.add_row(name, ", ".join(sets), shapes)
    out.print(table)
    return 0


def cmd_summary(args) -> int:
    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        model = load(model_file(args.model, args.dataset, tmp))
    show(out, model.summary())
    return 0


def cmd_export(args) -> int:
    with step(progress, f"exporting {args.name} ({args.dataset})"):
        path = zoo.export_onnx(args.name, args.output, args.dataset)
    out.print(f"wrote {path}")
    return 0


def cmd_gpu_check(args) -> int:
    from nasir import gpu_check

    cases = gpu_check.default_cases()
    if args.cases:
        import re

        cases = [c for c in cases if re.search(args.cases, gpu_check.case_name(*c))]
        if not cases:
            raise NasirError(f"--cases {args.cases!r} matches none of the cases "
                             f"({', '.join(gpu_check.case_name(*c) for c in gpu_check.default_cases())})")
    batches = tuple(int(b) for b in args.batches.split(","))
    gpu_check.write(args.out, args.arch, cases, progress=progress.print, batches=batches, tuning_dir=args.tuning_dir)
    return 0


def read_inputs(model: nasir.Model, files: list[str] | None, seed: int) -> list[np.ndarray]:
    if not files:
        return seeded_inputs(model, seed)
    arrays = []
    for f in files:
        try:
            arrays.append(np.load(f))
        except (OSError, ValueError) as e:
            raise FrontendError(f"{f}: cannot read a .npy array ({e})") from None
    return arrays


def llvm_options(args) -> dict:
    """`--cpu`, `--checked` (llvm) and `--arch` (cuda) as compile options; a target given one it
    does not take says so."""
    return {**({"cpu": args.cpu} if args.cpu else {}), **({"checked": True} if getattr(args, "checked", False) else {}),
            **({"arch": args.arch} if getattr(args, "arch", None) else {})}


def cmd_run(args) -> int:
    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        model = load(model_file(args.model, args.dataset, tmp))
    inputs = read_inputs(model, args.input, args.seed)
    with step(progress, f"compiling for {args.target}"):
        exe = nasir.compile(model, target=args.target, **llvm_options(args))
    with step(progress, "running"):
        outputs = exe(*inputs)
    for name, y in zip(model.output_names, outputs if isinstance(outputs, list) else [outputs]):
        out.print(f"{name}: shape {list(y.shape)}  sum {float(np.sum(y, dtype=np.float64)):.6f}"
                  f"  mean|x| {float(np.mean(np.abs(y), dtype=np.float64)):.6f}")
    return 0


def cmd_check(args) -> int:
    require_onnxruntime("nasir check")
    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        path = model_file(args.model, args.dataset, tmp)
        if path.suffix != ".onnx":
            raise FrontendError(f"{path}: check compares with ONNX Runtime and needs an .onnx file or a zoo name")
        model = load(path)
        inputs = seeded_inputs(model, args.seed)
        with step(progress, f"compiling for {args.target}"):
            exe = nasir.compile(model, target=args.target, **llvm_options(args),
                                **({"threads": args.threads} if args.threads else {}))
        with step(progress, f"running {args.target} and ONNX Runtime"):
            result = compare(exe(*inputs), onnxruntime_outputs(path, inputs))
        style = "green" if result.ok else "red"
        out.print(f"max abs diff {result.max_abs_diff:.3e}  [{style}]{result.verdict}[/{style}]")
        if args.bisect and not result.ok:
            bisect(args, path, inputs)
    return 0 if result.ok else 1


def bisect(args, path: Path, inputs: list[np.ndarray]) -> None:
    """`check --bisect`: name the first node whose output differs (nasir.cli.bisect)."""
    from nasir.cli.bisect import first_difference

    if args.target != "llvm":
        raise NasirError(f"--bisect compares nasir's llvm code node by node (got --target {args.target})")
    options = {**({"checked": True} if args.checked else {}), **({"threads": args.threads} if args.threads else {})}
    with step(progress, "comparing prefix graphs node by node"):
        first = first_difference(path, inputs, args.cpu, options,
                                 on_node=lambda k, n, name: progress.print(f"  node {k + 1}/{n}: {name}"))
    if first is None:
        out.print("every node's output agrees alone: the difference needs the whole graph")
    else:
        out.print(f"first differing {first.describe()}")


def cmd_profile(args) -> int:
    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        model = load(model_file(args.model, args.dataset, tmp))
    pipeline = ALL_VARIANTS[args.variant] if args.variant else args.pipeline
    if pipeline:
        with step(progress, f"transforming: {pipeline}"):
            model = model.transform(pipeline)
    inputs = seeded_inputs(model, args.seed)
    with step(progress, f"compiling for {args.target} with per-call timers"):
        exe = nasir.compile(model, target=args.target, threads=args.threads, profile=True, **llvm_options(args))
    with step(progress, f"running {args.repeat} times"):
        profile = exe.profile(*inputs, repeat=args.repeat)
    if args.target == "llvm":  # the peak of the code's own width: an AVX2 CPU's on an AVX-512 machine
        with step(progress, "measuring the FMA peak"):
            peak = measure_peak_gflops(cpu=args.cpu)
        profile = dataclasses.replace(profile, peak_gflops=peak["peak_gflops"] * args.threads)
        out.print(f"peak: {peak['peak_gflops']:.1f} GFLOP/s a thread ({peak['vector_width']}-lane FMAs, "
                  f"{peak['cpu']}), measured now")
    rows = profile.by_class() if args.by == "class" else profile.rows
    if args.sort == "time":
        rows = sorted(rows, key=lambda r: -r.ms)
    out.print(profile.table(rows[: args.top] if args.top else rows))
    return 0


def cmd_search(args) -> int:
    from nasir.search.results import front_table

    result = nasir.search(args.model, args.dataset, budget=args.budget, time_limit=args.time_limit,
                          strategy=args.strategy, out=args.out, storage=args.storage, seed=args.seed,
                          threads=args.threads, workers=args.workers, ray=args.ray, batch=args.batch, data=args.data,
                          slack=args.slack, properties=not args.no_properties, choices=args.choices,
                          check_top=args.check_top or None, cpu=args.cpu,
                          timeout=args.timeout, kernel_cache=args.kernel_cache, train_top=args.train_top,
                          epochs=args.epochs, init=args.init, capacity=args.capacity,
                          accuracy_drop=args.max_accuracy_drop, finetune_epochs=args.finetune_epochs,
                          finetune_top=args.finetune_top, synth=args.synth,
                          synth_bottom_up=args.synth_bottom_up)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts().items()))
    if result.resumed:
        out.print(f"resumed from {result.resumed}")
    out.print(f"{len(result.candidates)} candidates: {counts}")
    out.print(front_table(result))
    if result.verified is not None:
        return _print_verified(result, args)
    if result.best is not None:
        best, speedup = result.best, result.best.speedup
        ties = f"; ties with trial(s) {', '.join(map(str, best.ties))} within the spread" if best.ties else ""
        out.print(f"best: trial {best.number}, {speedup.median:.2f}x faster than the original (IQR "
                  f"{speedup.q1:.2f}-{speedup.q3:.2f}x over {len(best.samples['candidate'])} rounds timed against "
                  f"it{ties}); pipeline in {args.out}/best.pipeline, network in {args.out}/best.onnx")
    else:
        out.print("no candidate kept the original's capacity")
    if result.original_accuracy is not None:
        trained = [c for c in result.pareto if c.accuracy is not None]
        out.print(f"accuracy after {args.epochs} epochs: original {result.original_accuracy:.2f}%, "
                  + ", ".join(f"trial {c.number} {c.accuracy:.2f}% ({c.speedup.median:.2f}x)"
                              for c in trained) + f"; runs in {args.out}/train/")
    elif result.best is not None:
        out.print("accuracy not measured: the capacity check estimates it at initialisation (within one point "
                  "of the original for about 1 in 5 it keeps: docs/fisher.md); train before trusting a network: "
                  "--train-top K --data D trains the K fastest beside the original")
    if result.busy:
        out.print(f"the machine was busy while the front was measured: {result.busy}")
    out.print(f"results: {args.out}/results.jsonl, plot: {args.out}/pareto.png")
    return 0


def cmd_tune(args) -> int:
    if args.import_dir:
        return _import_tuning(args)
    if args.model is None:
        raise NasirError("nasir tune needs a model (or --import DIR)")
    if args.target != "llvm" and not args.export:
        raise NasirError(f"nasir tune --target {args.target} builds candidates here for the target's machine to "
                         "time: give --export DIR (or compile(model, target=..., tune_trials=N) where the device is)")
    if args.export and args.target == "llvm":
        raise NasirError("--export is for --target tvm or cuda (TVM's schedules); llvm tunes here, on this CPU")
    if not args.export:
        timeable_target(args.cpu)  # before the model's import: a CPU whose code cannot run here is refused
    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        model = load(model_file(args.model, args.dataset, tmp))
    if args.export:
        from nasir.tuning.remote import export_candidates

        export_candidates(model, args.export, args.target, args.arch, args.trials or EXPORT_TRIALS,
                          workers=args.workers, progress=progress.print)
        return 0
    report = nasir.tune(model, cpu=args.cpu, threads=args.threads, database=args.db, trials=args.trials,
                        progress=True)
    out.print(tuning_table(report))
    timed = sum(1 for n in report.nests if n.timed)
    out.print(f"{len(report.nests)} distinct convs ({timed} timed, {len(report.nests) - timed} from the database) "
              f"in {report.seconds:.0f} s; alone, the cost model's schedules take {report.gain:.3f}x the tuned "
              f"ones' time{network_verdict(report)}; database {report.database} ({report.cpu})")
    return 0


def cmd_synth(args) -> int:
    from nasir.search.bottom_up import synthesizer
    from nasir.search.synthesis import time_operators

    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        model = load(model_file(args.model, args.dataset, tmp))
    if args.time:
        timeable_target(args.cpu)
    walk, depth = synthesizer(args.bottom_up, args.depth)
    how = "steps from the output's coordinates" if args.bottom_up else "primitive steps"
    with step(progress, f"synthesising operators for {args.layer} (up to {depth} {how})"):
        found = walk(model, args.layer, flops=args.flops, params=args.params, depth=depth)
    shown = found.operators[: args.top]
    if args.time:
        with step(progress, f"timing the layer and {min(args.time, len(shown))} operators alone"):
            time_operators(found, min(args.time, len(shown)), cpu=args.cpu, threads=args.threads)
    out.print(synthesis_table(found, shown, args.layer))
    out.print(f"{found.generated} {'steps' if args.bottom_up else 'compositions'} applied, {found.distinct} distinct "
              f"operators ({found.redundancy:.1f} each: canonicalisation), "
              f"{sum(found.rejected.values())} wasteful ones dropped, {found.pruned} left unexpanded by the "
              f"{'shape' if args.bottom_up else 'MAC'} distance; {len(found.operators)} within {args.flops:g} x the "
              f"MACs and {args.params:g} x the weights")
    for rank, op in enumerate(shown, 1):
        out.print(f"{rank}. {op.formula}", markup=False)
        if args.ir:
            out.print(op.nest_text, markup=False)
    return 0


def synthesis_table(found, shown, layer: str) -> Table:
    base = found.original
    table = Table(title=f"operators for {layer}: {base.mixing}, "
                        f"{base.macs / 1e6:.2f} M MACs, {base.params / 1e3:.1f} K weights"
                        + (f", {base.ms:.3f} ms alone" if base.ms is not None else ""))
    for column in ("#", "steps", "MACs", "weights", "ms", "speedup", "mixing"):
        table.add_column(column, justify="left" if column in ("steps", "mixing") else "right")
    for rank, op in enumerate(shown, 1):
        timed = op.ms is not None and base.ms is not None
        steps = op.pipeline.replace(" layers=nest", "").replace("bottom-up{steps=", "{")
        table.add_row(str(rank), steps, f"{op.macs / base.macs:.3f}x",
                      f"{op.params / base.params:.3f}x", f"{op.ms:.3f}" if timed else "-",
                      f"{base.ms / op.ms:.2f}x" if timed else "-", op.mixing)
    return table


def _print_verified(result, args) -> int:
    """The accuracy-verified search's verdict: the fine-tuned candidates and the best within the
    tolerance, or the closest one (never an untrained network)."""
    from nasir.search.finetune import verified_table

    verified = result.verified
    out.print(verified_table(verified))
    if result.best is not None:
        best, speedup, row = result.best, result.best.speedup, verified.best
        out.print(f"best: trial {best.number}, {speedup.median:.2f}x faster than the original (IQR {speedup.q1:.2f}-"
                  f"{speedup.q3:.2f}x), after {len(row.accuracies)} epochs of fine-tuning {row.test_accuracy:.2f}% on "
                  f"the held-out half against the original's {verified.original_test_accuracy:.2f}% (chosen on the "
                  f"validation half: {row.accuracy:.2f}% against {verified.original_accuracy:.2f}%); pipeline in "
                  f"{args.out}/best.pipeline, network with its fine-tuned weights in {args.out}/best.onnx")
    elif not verified.rows:
        out.print("no candidate was estimated faster than the original: nothing to fine-tune")
    else:
        closest = verified.closest
        near = (f"; the closest: trial {closest.candidate.number} at {closest.accuracy:.2f}%" if closest else
                "; no fine-tuning run finished")
        out.print(f"no candidate came within {verified.max_drop:g} point(s) of the original's "
                  f"{verified.original_accuracy:.2f}% on the validation half{near}")
    out.print(f"results: {args.out}/results.jsonl, plot: {args.out}/pareto.png, runs: {args.out}/finetune/")
    return 0


def _import_tuning(args) -> int:
    from nasir.tuning.remote import import_times

    imported = import_times(args.import_dir, args.tuning_dir)
    table = Table(title=f"records read from {args.import_dir}")
    families = sorted({kind for kinds in imported.family_best_ms.values() for kind in kinds})
    for column in ("nest", "records", "best ms", *(f"{kind} ms" for kind in families)):
        table.add_column(column, justify="left" if column == "nest" else "right")
    for name, count in imported.records.items():
        kinds = imported.family_best_ms.get(name, {})
        table.add_row(name, str(count), *(f"{ms:.4f}" if ms is not None else "-"
                                          for ms in [imported.best_ms.get(name), *map(kinds.get, families)]))
    out.print(table)
    out.print(f"{sum(imported.records.values())} records of {len(imported.records)} nests in {imported.folder}; "
              "every later compile for this target uses them")
    return 0


def network_verdict(report) -> str:
    """What the checks inside the network found, for `nasir tune`'s last line ("" if nothing was checked)."""
    checked = [n for n in report.nests if n.network]
    if not checked:
        return ""
    slower = sum(1 for n in checked if n.slower_inside)
    verdict = (f"; of the {len(checked)} winners alone that were not the cost model's, {slower} ran their layers "
               "slower inside the network")
    if report.network is None:
        return verdict
    kept = len(checked) - slower
    others = f"the {kept} other{'s' * (kept != 1)}" if slower else "they"
    if all(n.rejected is not None for n in checked):
        return (f"{verdict}; {others} ran the whole network {report.network_gain:.3f}x as fast: "
                "all left to the cost model")
    return f"{verdict}; with {others}, the whole network runs {report.network_gain:.3f}x as fast"


def tuning_table(report) -> Table:
    """One row per distinct conv: its schedules' times alone, the gain alone, inside the network
    (where a schedule other than the cost model's won alone) and the one kept."""
    table = Table(title=f"tuned schedules for {report.cpu}")
    for column, justify in (("layers", "left"), ("timed", "right"), ("cost model ms", "right"),
                            ("tuned ms", "right"), ("gain", "right"), ("in network", "right"), ("chosen", "right")):
        table.add_column(column, justify=justify)
    for n in report.nests:
        layers = n.layers[0] + (f" (+{len(n.layers) - 1})" if len(n.layers) > 1 else "")
        chosen = "database" if n.chosen is None else "cost model" if n.chosen == 0 else f"#{n.chosen + 1}"
        if n.rejected is not None:
            chosen = f"cost model, not #{n.rejected + 1}"
        best = min(n.timed) if n.timed else n.ms
        network = f"{n.network_gain:.3f}x" if n.network else "-"
        table.add_row(layers, str(len(n.timed)), f"{n.default_ms:.4f}", f"{best:.4f}", f"{n.default_ms / best:.3f}x",
                      network, chosen)
    return table


def cmd_train(args) -> int:
    from nasir.search.sources import from_nn

    if args.image_size and args.model not in zoo.names():
        raise FrontendError("--image-size rebuilds a zoo model for other inputs; a file keeps its own")
    with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
        model = load(model_file(args.model, args.dataset, tmp, args.image_size))
    pipeline = from_nn(args.pipeline or "")
    with step(progress, f"transforming: {pipeline}"):
        model = model.transform(pipeline)
    teacher = None
    if args.teacher:
        with tempfile.TemporaryDirectory(prefix="nasir-") as tmp:
            teacher = load(model_file(args.teacher, args.dataset, tmp, args.image_size)).transform(from_nn(""))
    result = nasir.train(model, args.data, epochs=args.epochs, batch=args.batch, lr=args.lr, seed=args.seed,
                         out=args.out, resume=not args.restart, threads=args.threads, title=Path(args.model).stem,
                         teacher=teacher)
    trained = result.apply_to(model)
    saved = trained.save(Path(args.out) / "trained.mlir")
    trained.to_onnx(Path(args.out) / "trained.onnx")  # what nasir search and other tools take
    if result.resumed:
        out.print(f"resumed from {result.resumed}")
    out.print(f"test accuracy {result.accuracy:.2f}% after {len(result.history)} epochs "
              f"({sum(r['seconds'] for r in result.history):.0f} s of training)")
    out.print(f"trained model: {args.out}/trained.onnx and {saved} (+ .npz); metrics: {args.out}/metrics.csv, "
              f"curves: {args.out}/curves.png")
    return 0


# --- entry point ---------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nasir", description="nasir: neural architecture search as program transformation")
    p.add_argument("--version", action="version", version=f"nasir {version('nasir')}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, fn, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        c.set_defaults(run=fn)
        return c

    def model_args(c: argparse.ArgumentParser) -> None:
        c.add_argument("model", help="a .onnx or .mlir file, or a zoo model name")
        c.add_argument("--dataset", default="cifar10", help="dataset variant of a zoo model (default cifar10)")

    def run_args(c: argparse.ArgumentParser) -> None:
        c.add_argument("--target", choices=TARGETS, default="llvm",
                       help="backend (default llvm; tvm: TVM's CPU code; cuda: TVM's GPU code, run on a GPU)")
        c.add_argument("--arch", help="cuda: the GPU architecture, sm_XY (default: this machine's GPU, else sm_90)")
        cpu_arg(c)
        c.add_argument("--checked", action="store_true",
                       help="llvm: check every load and store of the generated code (an access outside a "
                            "buffer is an error naming the kernel)")
        c.add_argument("--seed", type=int, default=0, help="seed of the random input")

    def cpu_arg(c: argparse.ArgumentParser) -> None:
        c.add_argument("--cpu", help="llvm: the CPU to compile for, an LLVM CPU name (znver3, x86-64-v3, "
                                     "skylake-avx512, ...) or 'host' (default: NASIR_CPU, else the host)")

    command("zoo", cmd_zoo, "list the zoo models and their datasets")
    model_args(command("summary", cmd_summary, "per-layer table: output shapes, MACs, parameters"))
    c = command("export", cmd_export, "export a zoo model to ONNX")
    c.add_argument("name", help="zoo model name")
    c.add_argument("output", help="path of the .onnx file to write")
    c.add_argument("--dataset", default="cifar10", help="dataset variant (default cifar10)")
    c = command("run", cmd_run, "compile a model, run it once, print output shapes and checksums")
    model_args(c)
    run_args(c)
    c.add_argument("--input", action="append", metavar="X.npy", help="input array (once per model input)")
    c = command("check", cmd_check, "compare a model's outputs with ONNX Runtime (exit 1 on mismatch)")
    model_args(c)
    run_args(c)
    c.add_argument("--threads", type=int, help="llvm: threads of the code (default 1)")
    c.add_argument("--bisect", action="store_true",
                   help="on a mismatch, compare the prefix graph of each node in order and name the first node "
                        "whose output differs, with its shapes and lowering choices")
    c = command("profile", cmd_profile, "compile with per-call timers, run, print each layer's time next to its MACs")
    model_args(c)
    transform = c.add_mutually_exclusive_group()
    transform.add_argument("--pipeline", help="transform the model first (nasir-opt -p spelling)")
    transform.add_argument("--variant", choices=sorted(ALL_VARIANTS), help="a ResNet variant of `make bench`")
    c.add_argument("--threads", type=int, default=1, help="threads (default 1)")
    c.add_argument("--target", choices=("llvm", "tvm"), default="llvm",
                   help="backend (default llvm; tvm: TVM's CPU code, one kernel per layer)")
    cpu_arg(c)
    c.add_argument("--repeat", type=int, default=20, help="timed runs (default 20)")
    c.add_argument("--sort", choices=("order", "time"), default="order", help="rows in call order or slowest first")
    c.add_argument("--by", choices=("layer", "class"), default="layer",
                   help="a row per kernel call, or per layer class ('conv 3x3', 'depthwise conv 3x3 s2', 'gemm'): "
                        "its calls summed")
    c.add_argument("--top", type=int, default=0, help="print only the first N rows")
    c.add_argument("--seed", type=int, default=0, help="seed of the random input")
    search_args(command("search", cmd_search, "search architecture transforms for faster networks of the same capacity"))
    train_args(command("train", cmd_train, "train a model (or a transformed one) with the papers' recipe"))
    c = command("tune", cmd_tune, "time the best schedules of each distinct conv on this CPU, keep the fastest "
                                  "for every later compile; or, for TVM's targets, export candidates to time "
                                  "on the target's machine and import the times")
    c.add_argument("model", nargs="?", help="a .onnx or .mlir file, or a zoo model name (not with --import)")
    c.add_argument("--dataset", default="cifar10", help="dataset variant of a zoo model (default cifar10)")
    cpu_arg(c)
    c.add_argument("--target", choices=("llvm", "tvm", "cuda"), default="llvm",
                   help="llvm (default): tune here; tvm or cuda: with --export, build candidates for the target")
    c.add_argument("--arch", help="cuda: the GPU architecture, sm_XY (default: this machine's GPU, else sm_90)")
    c.add_argument("--export", metavar="DIR", help="tvm/cuda: write candidate schedules, compiled, and a timer to "
                                                   "DIR (then: python3 DIR/time_candidates.py on the target's machine)")
    c.add_argument("--trials", type=int, metavar="N",
                   help=f"schedules per distinct conv: llvm times at most N, best first (default: all its "
                        f"candidates); --export writes N candidates (default {EXPORT_TRIALS})")
    c.add_argument("--workers", type=int, help="--export: nests built at a time, in processes (default: the CPUs)")
    c.add_argument("--import", dest="import_dir", metavar="DIR",
                   help="read DIR/times.json (the timer's) into the target's tuning records")
    c.add_argument("--tuning-dir", help="--import: the records' folder (default: the user's cache, "
                                        "$NASIR_CACHE_DIR/tvm; compile(..., tuning_dir=D) reads another)")
    c.add_argument("--threads", type=int, default=1, help="threads of the timed code (default 1)")
    c.add_argument("--db", help="tuning database file (default: the user's cache, $NASIR_CACHE_DIR/tuning.db or "
                                "~/.cache/nasir/tuning.db; compile(..., tuning=FILE) reads another)")
    c = command("synth", cmd_synth, "synthesise operators for one conv layer from coordinate primitives (Syno): "
                                    "MACs, weights, time alone and mixing of each")
    c.add_argument("layer", help="the conv's layer name (nasir summary lists them)")
    c.add_argument("--model", required=True, help="a .onnx or .mlir file, or a zoo model name")
    c.add_argument("--dataset", default="cifar10", help="dataset variant of a zoo model (default cifar10)")
    c.add_argument("--flops", type=float, default=0.5, help="the MAC cap, a fraction of the layer's (default 0.5)")
    c.add_argument("--params", type=float, default=1.0, help="the weight cap, a fraction of the layer's (default 1)")
    c.add_argument("--depth", type=int, help="steps at most (default 3 top-down, 4 takes minutes; 5 bottom-up, "
                                             "6 takes about a minute)")
    c.add_argument("--bottom-up", action="store_true",
                   help="grow operators from the output's coordinates to the input's (Syno's direction, pruned by the "
                        "shape distance) instead of rewriting the conv")
    c.add_argument("--top", type=int, default=15, help="operators listed (default 15)")
    c.add_argument("--time", type=int, default=10, help="operators timed alone, llvm (default 10; 0: none)")
    c.add_argument("--threads", type=int, default=1, help="threads of the timed code (default 1)")
    cpu_arg(c)
    c.add_argument("--ir", action="store_true", help="print each listed operator's nest IR too")
    c = command("gpu-check", cmd_gpu_check, "write a folder that runs, checks and times nasir's CUDA code of every "
                                            "zoo model on a GPU machine with only Python, PyTorch and a driver")
    c.add_argument("out", help="the folder to write (then: python3 OUT/run.py on the GPU machine)")
    c.add_argument("--arch", default="sm_90", help="the GPU architecture, sm_XY (default sm_90: H100/H200)")
    c.add_argument("--cases", help="only the cases whose name (model-dataset-variant) matches this regex")
    c.add_argument("--batches", default="1", help="batch sizes, each case built at each (default 1; e.g. 1,16)")
    c.add_argument("--tuning-dir", default="none",
                   help="build with the tuning records in this folder (nasir tune --import's; default none: "
                        "the default schedules)")
    return p


def train_args(c: argparse.ArgumentParser) -> None:
    c.add_argument("model", help="a .onnx or .mlir file, or a zoo model name")
    c.add_argument("--dataset", default="cifar10", help="dataset variant of a zoo model (default cifar10)")
    c.add_argument("--image-size", type=int, help="a zoo model for square inputs of this side (e.g. 16 for digits)")
    c.add_argument("--pipeline", help="train the model transformed by this pipeline (a search's best.pipeline); "
                   "convert-nn-to-nest is put in front when it is not its first pass")
    c.add_argument("--data", required=True,
                   help="a CIFAR-10/100 binary folder, an .npz (x, y[, x_test, y_test]), 'digits' or 'mnist5k'")
    c.add_argument("--epochs", type=int, default=200, help="epochs (default 200)")
    c.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    c.add_argument("--lr", type=float, default=0.1, help="initial learning rate, cosine-decayed (default 0.1)")
    c.add_argument("--seed", type=int, default=0, help="seed of the order and augmentation of the examples (default 0)")
    c.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    c.add_argument("--out", default="nasir-train", help="output folder: checkpoint, metrics, curves, trained model (default nasir-train)")
    c.add_argument("--restart", action="store_true", help="ignore a checkpoint in OUT and start over")
    c.add_argument("--teacher", help="a trained model (.mlir + .npz, or .onnx with its weights) to distil from: "
                   "its soft outputs and the attention maps of the block outputs both networks share")


def search_args(c: argparse.ArgumentParser) -> None:
    c.add_argument("model", help="a .onnx file or a zoo model name")
    c.add_argument("--dataset", default="cifar10", help="dataset variant of a zoo model (default cifar10)")
    c.add_argument("--budget", type=int, default=None, help="candidates to evaluate (default 100 without --time-limit)")
    c.add_argument("--time-limit", type=float, help="seconds of this run after which no candidate is started")
    c.add_argument("--strategy", default="random", help="random (NAS-PTE), evolution (NSGA-II) or tpe (default random)")
    c.add_argument("--threads", type=int, default=1, help="threads of the timed code (default 1)")
    c.add_argument("--workers", type=int, default=1, help="evaluations at once, processes or Ray tasks (default 1)")
    c.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="evaluate on a Ray cluster (default address: auto); needs nasir[distributed]")
    c.add_argument("--out", default="nasir-search", help="output folder (default nasir-search)")
    c.add_argument("--storage", help="Optuna storage URL (default sqlite:///OUT/study.db)")
    c.add_argument("--seed", type=int, default=0, help="seed of the strategy, the minibatch and new weights (default 0)")
    c.add_argument("--batch", type=int, default=16, help="the capacity check's minibatch size (default 16)")
    c.add_argument("--data", help="the capacity check's minibatch and training data: a CIFAR-10/100 folder, an .npz, 'digits' "
                                  "or 'mnist5k' (default synthetic)")
    c.add_argument("--slack", type=float, default=0.0,
                   help="lower the capacity check's floor by this share (default 0)")
    c.add_argument("--init", choices=("inherit", "kaiming"),
                   help="weights of transformed convs: inherit (derived from the model's; default for a file) or "
                        "kaiming (fresh; default for a zoo model, whose weights are untrained)")
    c.add_argument("--check-top", type=int, default=8, metavar="K",
                   help="score capacity only for candidates estimated faster than the original and "
                        "than the K-th fastest accepted so far; 0: for every candidate (default 8)")
    c.add_argument("--capacity", choices=tuple(RULES),
                   help="the capacity check: synflow (synflow >= 1%% and MACs >= 0.45 of the original's; the "
                        "default for fresh weights, docs/fisher.md), synflow-inherited (synflow >= 1.6e-5 and MACs >= "
                        "0.45; the default for inherited weights), fisher (Fisher Potential at least the original's: "
                        "the seeds' rule) or none (every legal candidate kept; the default with --max-accuracy-drop, "
                        "where fine-tuning judges)")
    c.add_argument("--no-properties", action="store_true", help="skip the mixing/depth property filter")
    c.add_argument("--choices", type=lambda text: tuple(text.split(",")), metavar="A,B,...",
                   help="the per-layer choices to search over (default: all of nasir.search.space.TEMPLATES)")
    c.add_argument("--synth", type=int, default=0, metavar="K",
                   help="also draw K operators synthesised for each distinct conv from Syno's primitives "
                        "(nasir synth; each costs seconds before the search; default 0)")
    c.add_argument("--synth-bottom-up", action="store_true",
                   help="synthesise them bottom-up, from the output's coordinates (nasir synth --bottom-up)")
    c.add_argument("--timeout", type=float, default=600.0, help="seconds one evaluation may take (default 600)")
    c.add_argument("--cpu", help="llvm: the CPU to compile for (default: NASIR_CPU, else the host)")
    c.add_argument("--train-top", type=int, default=0, metavar="K",
                   help="then train the original and the K fastest measured members of the front on --data")
    c.add_argument("--epochs", type=int, default=200,
                   help="epochs of --train-top training, and of a zoo model's before --max-accuracy-drop (default 200)")
    c.add_argument("--max-accuracy-drop", type=float, metavar="POINTS",
                   help="verify accuracy on --data: the fastest network within POINTS of the original's accuracy, "
                        "fine-tuned from its weights by distillation (a zoo model is trained first)")
    c.add_argument("--finetune-epochs", type=int, default=9, help="most epochs of a candidate's fine-tuning (default 9)")
    c.add_argument("--finetune-top", type=int, default=12, metavar="K",
                   help="candidates fine-tuned, spread over the speedups found (default 12)")
    c.add_argument("--kernel-cache", help="SQLite file of per-nest timings (default: the user's cache, "
                   "$NASIR_CACHE_DIR/kernels.db or ~/.cache/nasir/kernels.db, shared by their searches)")


RESUMABLE = ("search", "train", "tune")
"""Commands that go on from where an interrupted run stopped."""
INTERRUPTED = 128 + 2
"""The status a shell gives a command that SIGINT ended (Ctrl-C)."""


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if getattr(args, "budget", 0) is None and getattr(args, "time_limit", None) is None:
        args.budget = 100
    try:
        sys.exit(args.run(args))
    except BrokenPipeError:  # `nasir summary resnet18 | head`
        end_on_closed_pipe()
    except NasirError as e:
        fail("nasir", e)
    except KeyboardInterrupt:  # Ctrl-C: what was saved stays (checkpoints, the study, the databases)
        resumable = args.command in RESUMABLE
        print("nasir: interrupted" + ("; run the same command again to resume" if resumable else ""), file=sys.stderr)
        sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
