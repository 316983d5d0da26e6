"""nasir.search: explore the architecture transforms of a model for faster networks that keep its
capacity (NAS-PTE's search, on Optuna, with SQLite storage and worker processes or Ray).

    import nasir
    result = nasir.search("resnet18", budget=100, strategy="evolution", out="runs/r18")
    result.best.pipeline, result.best.measured_ms, result.pareto, result.candidates

The rooms: `space` (the choices per conv), `evaluate` (legality, properties, Fisher Potential,
costs), `latency` (estimates from cached per-nest timings), `strategies` (Optuna samplers),
`workers` / `distributed` (evaluation in processes or Ray actors), `driver` (the ask/tell loop,
resumable), `results` (front, files), `accuracy` (the front trained), `progress`, `sources`. The package itself is callable:
`nasir.search(...)` is `nasir.search.search(...)`.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path


def search(model: str | Path, dataset: str = "cifar10", *, budget: int | None = 100, time_limit: float | None = None,
           strategy: str = "random", out: str | Path = "nasir-search", storage: str | None = None, seed: int = 0,
           threads: int = 1, workers: int = 1, ray: str | None = None, batch: int = 16, data: str | None = None,
           slack: float = 0.0, properties: bool = True, cpu: str | None = None,
           choices: tuple[str, ...] | None = None, check_top: int | None = 8, timeout: float = 600.0, progress: bool = True,
           kernel_cache: str | Path | None = None, train_top: int = 0, epochs: int = 200, init: str | None = None,
           accuracy_drop: float | None = None, finetune_epochs: int = 9, finetune_top: int = 12,
           capacity: str | None = None, synth: int = 0, synth_bottom_up: bool = False):
    """Search the architecture transforms of `model` (a zoo name or an .onnx file) for faster
    networks that keep its capacity (`nasir.search.driver`); returns a `SearchResult` with
    `.best`, `.pareto` and `.candidates`, and writes them to `out`.

        result = nasir.search("resnet18", budget=100, strategy="evolution", out="runs/r18")
        print(result.best.pipeline, result.best.speedup.median)   # timed against the original

    `init`: how transformed convs get their weights: "inherit" (derived from the model's: the
    default for a model file, whose weights are the user's trained ones) or "kaiming" (fresh: the
    default for a zoo model, whose weights are untrained); candidates' pipelines say it.
    `accuracy_drop` (points): verify accuracy on `data` (a zoo model, untrained, is trained on
    `data` for `epochs` first: the teacher). After the search, `finetune_top` candidates spread
    over the speedups found are fine-tuned from inherited weights by distillation for up to
    `finetune_epochs` epochs under successive halving (`nasir.search.finetune`), pruned and chosen
    on a validation half of `data`'s test examples; `best` becomes the fastest within
    `accuracy_drop` points of the original there, saved with its fine-tuned weights (None when none
    is: `result.verified.closest`). Every network's reported accuracy, the original's included, is
    on the other, held-out half. `capacity`: the check candidates must pass, a rule of
    `nasir.search.capacity.RULES`: "synflow" (synflow at least 1% of the original's and MACs at
    least 0.45 of them: the rule that best told "within one point" from the rest on nasir's ground
    truth, docs/fisher.md; the default for fresh weights), "synflow-inherited" (the same with a
    floor of 1.6e-5, fitted on networks fine-tuned from inherited weights; their default), "fisher"
    (Fisher Potential at least the original's: the seeds' rule) or "none" (the front over latency
    and MACs; the default with `accuracy_drop`, where fine-tuning measures accuracy itself).
    `slack` lowers the rule's floor by that share. `check_top`: the check's score only for
    candidates estimated faster than the original and than the `check_top`-th fastest accepted so
    far (the rest are `skipped`: they cannot change the fast end of the front); None: for every
    candidate, the whole front explored.
    `train_top`: then train the original and the `train_top` fastest measured members of the
    front on `data` for `epochs` with the papers' recipe (`nasir.search.accuracy`), adding their
    accuracy to the table, results.jsonl and pareto.png. `kernel_cache`: the SQLite file of per-nest timings (default: the user's, shared by their
    searches; `nasir.measure.kernels.default_kernel_cache`). `ray`: evaluate as Ray tasks on the cluster at that address ("auto", "127.0.0.1:6379"; needs
    `pip install nasir[distributed]`); `workers`: processes (local) or concurrent tasks (Ray).
    `synth`: operators synthesised for each distinct conv from the coordinate primitives
    (`nasir.search.synthesis.search_choices`) and drawn beside the fixed choices, as `synth:...`;
    with `synth_bottom_up`, grown from the output's coordinates (`nasir.search.bottom_up`).
    """
    from nasir.search.driver import Search, SearchOptions, check_run
    from nasir.search.workers import LocalPool

    def note(line: str) -> None:
        if progress:
            print(line, file=sys.stderr)

    if capacity is None and accuracy_drop is not None:
        capacity = "none"  # else the driver's default for the search's init (`default_rule`)
    options = SearchOptions(strategy, seed, batch, data, slack, properties, threads, cpu,
                            tuple(choices) if choices else None, check_top, init, capacity, synth, synth_bottom_up)
    options.check()
    out = Path(out)
    check_run(out, budget, time_limit, workers)
    pool = LocalPool
    if ray is not None:
        from nasir.search.distributed import ray_pool

        pool = ray_pool(ray)
    if train_top:
        from nasir.search.accuracy import check_training

        check_training(train_top, data)
    if accuracy_drop is not None:
        from nasir.search.finetune import check_verification, trained_original

        check_verification(accuracy_drop, data)
        out.mkdir(parents=True, exist_ok=True)
        model = trained_original(str(model), dataset, data, out, epochs, 128, seed, note=note)
    search = Search(str(model), dataset, out, options, storage, progress, kernel_cache=kernel_cache)
    result = search.run(budget, time_limit, workers, pool, timeout)
    if accuracy_drop is not None:
        from nasir.search.finetune import verify

        result.verified = verify(result, search.original, data, max_drop=accuracy_drop, epochs=finetune_epochs,
                                 top=finetune_top, batch=128, seed=seed,
                                 measure=lambda pipeline: search.setup.make_evaluator().measure(pipeline).samples,
                                 note=note, progress=progress)
    if train_top:
        from nasir.search.accuracy import train_front
        from nasir.search.results import plot_front, write_jsonl

        train_front(result, search.original, data, train_top, epochs, seed=seed, progress=progress)
        write_jsonl(result, out / "results.jsonl")
        plot_front(result, out / "pareto.png")
    return result


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
