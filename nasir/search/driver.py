"""The search loop: ask a strategy for candidates, evaluate them in workers, tell the study.

    result = nasir.search("resnet18", budget=100, out="runs/r18")      # also: nasir search resnet18

The study lives in SQLite (`storage`, default `<out>/study.db`): the strategy asks and is told in
an in-memory copy, and each finished trial goes to the file whole, in one transaction (asking and
telling through SQLite would be about 50 commits per candidate, 80 ms of the driver's time, with
the workers waiting). Run the same command again after an interruption (even SIGKILL) and it
goes on: trials that were in flight were never written and come back as interrupted (they do not
count), finished ones are never evaluated again, and it stops at `budget` distinct finished
candidates (or at `time_limit` seconds of this run). Evolution and tpe begin with the
whole-network variants (`ANCHORED`). The capacity check's score (synflow, or Fisher Potential),
the dearest check, is spent only where it can change the answer (`CheckBar`): a candidate estimated slower than the original or than the
`check_top`-th fastest accepted one is `skipped` (it counts towards the budget). The workers then
compile the front's members whole and time them against the original, interleaved, in passes until their ranking
holds (`measure_front`; kept in the study too, so a resumed search does not measure them again);
a reference kernel timed before and after says whether the machine was busy meanwhile. A storage
that holds a search of another model, or with other options, is refused.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from nasir.errors import NasirError
from nasir.measure.kernels import TIMING_LOCK, default_kernel_cache, timing_lock
from nasir.model import Model
from nasir.search import strategies
from nasir.search.capacity import default_rule, rule_named
from nasir.search.evaluate import DEFAULT_EVALUATOR, Evaluator, Outcome, Setup
from nasir.search.progress import SearchProgress
from nasir.search.results import (
    Candidate,
    SearchResult,
    mark_ties,
    outcome_of,
    pareto_front,
    plot_front,
    ranked,
    write_best,
    write_jsonl,
    written_best,
)
from nasir.measure.timing import busy, reference_rate
from nasir.search.sources import is_zoo_name, load_source
from nasir.search.space import TEMPLATES, SearchSpace
from nasir.search.workers import MEASURE, LocalPool
from nasir.transforms.arch import INITS

STUDY = "nasir-search"
PASSES = 3
"""Most measurements of the front (the first, then again until two passes rank it alike)."""
COUNTED = ("accepted", "rejected", "skipped", "failed")
"""Outcomes that count towards the budget (not: interrupted, duplicate)."""
ANCHORED = ("evolution", "tpe")
"""Strategies whose first trials are the space's whole-network variants (`SearchSpace.uniform`):
anchors in a space where almost every random mixture falls short of the original's capacity (on
ResNet-34 cifar10 group 2-8, Seq 1-3 and fold applied to every conv keep it; bottlenecks, shifts
and depthwise lower it, and a random candidate almost always holds one of them). `random` stays
NAS-PTE's uniform draw."""


@dataclass(frozen=True)
class SearchOptions:
    """The options that define what a search evaluates (a resumed search must repeat them)."""

    strategy: str = "random"
    seed: int = 0
    batch: int = 16
    data: str | None = None
    slack: float = 0.0
    properties: bool = True
    threads: int = 1
    cpu: str | None = None
    choices: tuple[str, ...] | None = None
    check_top: int | None = 8
    """The capacity check's score only for candidates estimated faster than the original and than
    the `check_top`-th fastest accepted so far (the others are `skipped`); None: for every candidate."""
    init: str | None = None
    """How transformed convs get their weights (`SearchSpace.init`); None: "inherit" for a model
    file (the user's trained weights), "kaiming" for a zoo model (untrained)."""
    capacity: str | None = None
    """The capacity check, a rule of `nasir.search.capacity.RULES`: "synflow", "synflow-inherited",
    "fisher" (the seeds' rule), or "none" (every legal candidate accepted and estimated; the
    accuracy-verified search's default); None: `default_rule` of the search's init."""
    synth: int = 0
    """Operators synthesised for each distinct conv from the coordinate primitives and drawn beside
    the fixed choices (`nasir.search.synthesis.search_choices`); 0: none."""
    synth_bottom_up: bool = False
    """Synthesise them bottom-up, from the output's coordinates (`nasir.search.bottom_up`,
    `SEARCH_DEPTH` steps), rather than by rewriting the conv (depth 2)."""

    def stamp(self) -> str:
        """The options as a stored search records them (JSON; `same_options` compares two)."""
        return json.dumps(self.__dict__, sort_keys=True, default=list)

    def check(self) -> None:
        if self.strategy not in strategies.SAMPLERS:
            raise NasirError(f"unknown strategy '{self.strategy}' (choose from {', '.join(strategies.SAMPLERS)})")
        if self.batch < 2:
            raise NasirError(f"the capacity check's batch must be at least 2, got {self.batch}")
        if not 0 <= self.slack < 1:
            raise NasirError(f"slack must lie in [0, 1), got {self.slack}")
        if self.threads < 1:
            raise NasirError(f"threads must be at least 1, got {self.threads}")
        if self.check_top is not None and self.check_top < 1:
            raise NasirError(f"check top must be at least 1 (or None: every candidate), got {self.check_top}")
        if self.init not in (None, *INITS):
            raise NasirError(f"unknown init '{self.init}' (choose from {', '.join(INITS)})")
        if self.capacity is not None:
            rule_named(self.capacity)
        if self.synth < 0:
            raise NasirError(f"synth must be a number of operators per conv (0: none), got {self.synth}")
        if self.synth_bottom_up and not self.synth:
            raise NasirError("synth_bottom_up says how to synthesise the operators synth asks for: give synth too")


def default_init(source: str) -> str:
    """How a search of `source` makes transformed convs' weights by default: derived from a model
    file's (the user's trained weights), fresh for a zoo model (whose weights are untrained)."""
    return "kaiming" if is_zoo_name(source) else "inherit"


def check_run(out: Path, budget: int | None, time_limit: float | None, workers: int) -> None:
    if budget is None and time_limit is None:
        raise NasirError("give a budget (number of candidates) or a time limit")
    if budget is not None and budget < 1:
        raise NasirError(f"budget must be at least 1 candidate, got {budget}")
    if time_limit is not None and time_limit <= 0:
        raise NasirError(f"time limit must be positive, got {time_limit}")
    if workers < 1:
        raise NasirError(f"workers must be at least 1, got {workers}")
    if out.exists() and not out.is_dir():
        raise NasirError(f"output folder {out} is a file")


def existing_study(storage: str) -> optuna.Study | None:
    """The search stored in `storage`, None when there is none (nothing is created)."""
    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=STUDY, storage=storage)
    except KeyError:
        return None


def same_options(stored: str | None, current: str) -> bool:
    """Whether a stored search's options (JSON) are `current`'s; an option added to nasir since it
    ran counts as the same when it is at its default (the search it resumes did without it)."""
    if stored is None:
        return False
    old, new = json.loads(stored), json.loads(current)
    defaults = {f.name: json.loads(json.dumps(f.default, default=list)) for f in fields(SearchOptions)}
    return old == {k: v for k, v in new.items() if k in old or k not in defaults or v != defaults[k]}


def check_fingerprint(storage: str, stored: dict, fingerprint: dict) -> None:
    """Refuse a storage that holds a search of another model or with other options."""
    if stored.get("model") != fingerprint["model"]:
        raise NasirError(f"storage {storage} holds a search of another model ({stored.get('source')}); "
                         "give another --out or --storage")
    if not same_options(stored.get("options"), fingerprint["options"]):
        raise NasirError(f"storage {storage} holds a search with other options ({stored.get('options')}); "
                         "rerun with them, or give another --out or --storage")


def open_study(storage: str, fingerprint: dict) -> optuna.Study:
    """The study in `storage`, created or resumed (`existing_study` and `check_fingerprint` have
    vetted one that exists); a new one is stamped with `fingerprint`."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=storage, study_name=STUDY, directions=list(strategies.DIRECTIONS),
                                load_if_exists=True)
    if not study.user_attrs:
        for key, value in fingerprint.items():
            study.set_user_attr(key, value)
    return study


def working_copy(stored: optuna.Study) -> optuna.Study:
    """An in-memory study with `stored`'s trials at their numbers (user attribute `number`: the
    file numbers trials in the order they finished); a number with no trial, asked by a run that
    was killed before it finished, becomes a failed trial marked interrupted (it does not count)."""
    study = optuna.create_study(directions=list(strategies.DIRECTIONS))
    by_number = {t.user_attrs.get("number", t.number): t for t in stored.get_trials(deepcopy=False)
                 if t.state.is_finished()}
    for number in range(max(by_number, default=-1) + 1):
        study.add_trial(by_number.get(number) or optuna.trial.create_trial(
            state=TrialState.FAIL, user_attrs={"number": number, "status": "interrupted"}))
    return study


def finished(study: optuna.Study) -> dict[int, Candidate]:
    """Counted candidates by trial number (the working copy holds finished trials only)."""
    out = {}
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("status") in COUNTED:
            out[t.number] = Candidate(t.number, t.user_attrs["pipeline"], outcome_of(t.user_attrs))
    return out


def tell(study: optuna.Study, trial: optuna.Trial, outcome: Outcome, bar: float = 1.0,
         original_ms: float | None = None) -> None:
    """Tell the in-memory `study` how `trial` ended (`save` writes it to the file). An accepted
    candidate and one the capacity check's score rejected are complete trials, the second
    infeasible: its score fell below `bar` (the rule's floor, lowered by the slack: constraint
    `capacity`, the shortfall, <= 0 when accepted; `nasir.search.strategies`), and its latency is
    the estimate, or, where none was made (the score came first), `original_ms` scaled by its MACs.
    Without a score (capacity "none") the second objective is the MAC ratio and the constraint
    always holds; a candidate below the rule's MAC floor is pruned, as an illegal one."""
    for key, value in {**outcome.to_json(), "number": trial.number}.items():
        trial.set_user_attr(key, value)
    if outcome.status == "accepted" or (outcome.status == "rejected" and outcome.stage == "capacity"
                                        and outcome.score is not None and math.isfinite(outcome.score)):
        latency = outcome.estimate_ms
        if latency is None:
            latency = original_ms * outcome.mac_ratio
        trial.set_constraint("capacity", bar - outcome.score if outcome.score is not None else 0.0)
        study.tell(trial, [latency, outcome.capacity])
    else:
        study.tell(trial, state=TrialState.PRUNED if outcome.status in ("rejected", "skipped") else TrialState.FAIL)


def resumed_from(storage: str, stored: optuna.Study, candidates: int) -> str | None:
    """What a run goes on from: `storage`, its candidates and measured front members (None when new)."""
    if not candidates:
        return None
    measured = len(stored.user_attrs.get("measured", {}))
    return (f"{storage} ({candidates} candidates evaluated, {measured} front member"
            f"{'' if measured == 1 else 's'} measured)")


def save(stored: optuna.Study, study: optuna.Study, numbers: list[int]) -> None:
    """Write the trials `numbers` of the in-memory `study`, finished, to `stored` (one transaction
    each; about 30 ms for Optuna to store a candidate's 36 choices), and empty `numbers`."""
    trials = study.get_trials(deepcopy=False)
    for number in numbers:
        stored.add_trial(trials[number])
    numbers.clear()


def save_models(out: Path, original: Model, check_model: Model, resumed: bool) -> None:
    """original.mlir/.npz and original_check.mlir/.npz in `out`, as the workers load them: written
    once (a resumed search checked they hold the same model: its fingerprint), and the check
    model's weights, the same arrays, a hard link to the original's (a copy where links fail)."""
    paths = [out / "original.mlir", out / "original.npz", out / "original_check.mlir", out / "original_check.npz"]
    if resumed and all(p.exists() for p in paths):
        return
    original.save(paths[0])
    mine, theirs = original.weights, check_model.weights
    if set(mine) != set(theirs) or not all(np.array_equal(mine[k], theirs[k]) for k in mine):
        check_model.save(paths[2])
        return
    paths[2].write_text(check_model.text() + "\n")
    paths[3].unlink(missing_ok=True)
    try:
        os.link(paths[1], paths[3])
    except OSError:
        shutil.copyfile(paths[1], paths[3])


class Search:
    """One run of a search (see the module docstring); `run()` returns the SearchResult."""

    def __init__(self, source: str | Path, dataset: str, out: Path, options: SearchOptions,
                 storage: str | None = None, progress: bool = True, evaluator: str = DEFAULT_EVALUATOR,
                 kernel_cache: str | Path | None = None):
        self.out, self.options, self.show_progress, self.evaluator = out, options, progress, evaluator
        self.kernel_cache = Path(kernel_cache) if kernel_cache else default_kernel_cache()
        self.storage = storage or f"sqlite:///{out / 'study.db'}"
        self.source, self.dataset = str(source), dataset

    def prepare(self) -> tuple[Evaluator, SearchSpace, optuna.Study]:
        """Load the model, check the storage, build the space; only then write into the output
        folder, so bad input leaves nothing behind."""
        o = self.options
        original, check_model = load_source(self.source, self.dataset, o.batch)
        fingerprint = {"model": hashlib.sha256(original.text().encode()).hexdigest(), "source": self.source,
                       "options": o.stamp()}
        stored = existing_study(self.storage)
        if stored is not None:
            check_fingerprint(self.storage, stored.user_attrs, fingerprint)
        init = o.init or default_init(self.source)
        if stored is not None and "space" in stored.user_attrs:
            space = SearchSpace.from_json(stored.user_attrs["space"], init, stored.user_attrs.get("synthesized"))
        else:
            space = SearchSpace.of(original, o.choices or tuple(TEMPLATES), init, self.synthesized(original))
        self.out.mkdir(parents=True, exist_ok=True)
        save_models(self.out, original, check_model, resumed=stored is not None)
        study = open_study(self.storage, fingerprint)
        study.set_user_attr("space", space.to_json())
        study.set_user_attr("synthesized", dict(space.synthesized))
        setup = Setup(str(self.out / "original.mlir"), str(self.out / "original_check.mlir"),
                      str(self.kernel_cache), o.cpu, o.threads, o.data, o.seed, o.slack,
                      o.properties, study.user_attrs.get("profile"), study.user_attrs.get("original_score"),
                      self.evaluator, o.capacity or default_rule(init))
        evaluator = Evaluator(setup)
        self.original = evaluator.model
        study.set_user_attr("profile", evaluator.latency.profile)
        study.set_user_attr("original_score", evaluator.check.original_score)
        self.setup = replace(setup, profile=evaluator.latency.profile, original_score=evaluator.check.original_score)
        return evaluator, space, study

    def synthesized(self, original: Model) -> dict[str, str]:
        """The synthesised operators the space draws (`SearchOptions.synth` per distinct conv)."""
        if not self.options.synth:
            return {}
        from nasir.search.bottom_up import search_walk
        from nasir.search.synthesis import search_choices

        bottom_up = self.options.synth_bottom_up
        if self.show_progress:
            how = " bottom-up" if bottom_up else ""
            print(f"synthesising{how} {self.options.synth} operator(s) for each distinct conv", file=sys.stderr)
        return search_choices(original, per_layer=self.options.synth, **search_walk(bottom_up))

    def run(self, budget: int | None, time_limit: float | None, workers: int = 1, pool_factory=None,
            timeout: float = 600.0) -> SearchResult:
        evaluator, space, stored = self.prepare()
        study = working_copy(stored)
        done = finished(study)
        seen = {c.pipeline for c in done.values()}
        pool = (pool_factory or LocalPool)(self.setup, workers, timeout)
        progress = SearchProgress(budget, evaluator.latency.original_ms, list(done.values()), enabled=self.show_progress)
        resumed = resumed_from(self.storage, stored, len(done))
        if resumed:
            progress.note(f"resuming the search in {resumed}")
        limit = budget if budget is not None else math.inf
        asked: dict[int, optuna.Trial] = {}
        unsaved: list[int] = []
        joint = strategies.joint_space({lc.layer: lc.choices for lc in space.layers})
        bar = CheckBar(evaluator.latency.original_ms, self.options.check_top, done.values())
        if self.options.strategy in ANCHORED and not done:
            for picks in space.uniform():
                study.enqueue_trial(picks, skip_if_exists=True)
        start, duplicates = time.perf_counter(), 0
        try:
            with progress:
                while True:
                    out_of_time = time_limit is not None and time.perf_counter() - start > time_limit
                    while (pool.idle and not out_of_time and len(done) + len(asked) < limit
                           and duplicates < 1000):
                        number = len(study.get_trials(deepcopy=False))
                        study.sampler = strategies.sampler(self.options.strategy, self.options.seed, number, joint)
                        trial = study.ask()
                        pipeline = space.pipeline({lc.layer: trial.suggest_categorical(lc.layer, list(lc.choices))
                                                   for lc in space.layers if len(lc.choices) > 1})
                        trial.set_user_attr("pipeline", pipeline)
                        if pipeline in seen:
                            duplicates += 1
                            tell(study, trial, Outcome("duplicate"))
                            unsaved.append(trial.number)
                            continue
                        duplicates = 0
                        seen.add(pipeline)
                        asked[trial.number] = trial
                        pool.submit(trial.number, pipeline, enter_below=bar.value)
                    save(stored, study, unsaved)  # once the workers have their next candidates
                    if not asked:
                        break
                    for number, outcome in pool.results(wait=0.5):
                        trial = asked.pop(number)
                        outcome.finished_s = time.perf_counter() - start
                        tell(study, trial, outcome, evaluator.check.floor, evaluator.latency.original_ms)
                        unsaved.append(number)
                        done[number] = Candidate(number, trial.user_attrs["pipeline"], outcome)
                        progress.add(done[number])
                        bar.add(done[number])
                if duplicates >= 1000:
                    progress.note("the strategy keeps drawing candidates already evaluated: the space is exhausted")
                result = SearchResult(evaluator.latency.original_ms, [done[k] for k in sorted(done)], out=self.out,
                                      resumed=resumed)
                result.pareto = pareto_front(result.candidates)
                result.seconds["search"] = time.perf_counter() - start
                with timing_lock(TIMING_LOCK):
                    before = reference_rate()
                measure_front(self.measured_members(result.pareto), pool, stored, progress)
                with timing_lock(TIMING_LOCK):
                    result.busy = busy(before, reference_rate())
                if result.busy:
                    progress.note(f"the machine was busy while the front was measured: {result.busy}; "
                                  "speedups (each timed against the original in the same rounds) hold better "
                                  "than times in ms")
                result.seconds["front"] = time.perf_counter() - start - result.seconds["search"]
        finally:
            pool.close()
        return self.finish(evaluator, result)

    def measured_members(self, front: list[Candidate]) -> list[Candidate]:
        """The members of `front` (fastest estimate first) compiled whole and timed: all of a
        front that a capacity score thinned; without one, where the front over latency and MACs
        holds hundreds, the `check_top` (or 8) fastest (an accuracy-verified search times the
        candidates it fine-tunes itself)."""
        return front if rule_named(self.setup.capacity).score is not None else front[:self.options.check_top or 8]

    def finish(self, evaluator: Evaluator, result: SearchResult) -> SearchResult:
        """Pick the fastest measured member of the front, write the output files."""
        measured = result.measured
        if measured:
            result.best = measured[0]
            if not written_best(self.out, result.best.pipeline):  # a rerun that only reprints writes no 45 MB
                write_best(self.out, result.best.pipeline, evaluator.model.transform(result.best.pipeline))
        write_jsonl(result, self.out / "results.jsonl")
        plot_front(result, self.out / "pareto.png")
        return result


class CheckBar:
    """The estimate a candidate must beat to have its capacity score measured (`value`, ms; None:
    every candidate): the original's time, then, once `top` candidates are accepted, the estimate
    of the `top`-th fastest of them. A slower candidate cannot enter the front among the `top`
    fastest, so measuring its capacity cannot change which network the search reports."""

    def __init__(self, original_ms: float, top: int | None, done: Iterable[Candidate] = ()):
        self.original_ms, self.top = original_ms, top
        self.fastest: list[float] = []
        for c in done:
            self.add(c)

    def add(self, candidate: Candidate) -> None:
        if candidate.outcome.status == "accepted" and self.top is not None:
            bisect.insort(self.fastest, candidate.outcome.estimate_ms)
            del self.fastest[self.top:]

    @property
    def value(self) -> float | None:
        if self.top is None:
            return None
        return min(self.original_ms, self.fastest[-1]) if len(self.fastest) == self.top else self.original_ms


def measure_front(front: list[Candidate], pool, study: optuna.Study, progress: SearchProgress,
                  passes: int = PASSES) -> None:
    """Each member of `front` compiled whole and timed against the original by the pool's workers
    (`Evaluator.measure`), then all of them again, their rounds pooled, until two passes in a row
    rank them alike (`ranked`) or `passes` passes are done; members whose speedups cannot be told
    apart are marked as ties (`mark_ties`). The samples are kept in the study (`measured`), with
    the front they settled (`settled`), so a resumed search measures only what it lacks. A member
    whose measurement fails stays unmeasured, with a note saying why."""
    stored = dict(study.user_attrs.get("measured", {}))
    for c in front:
        if str(c.number) in stored:
            c.add_samples(stored[str(c.number)])
    numbers = sorted(c.number for c in front)
    order = None
    for k in range(0 if study.user_attrs.get("settled") == numbers else passes):
        queue = [c for c in front if k > 0 or not c.samples]
        progress.measuring(len(queue), k + 1)
        for c, samples in measure_members(queue, pool, progress):
            c.add_samples(samples)
            stored[str(c.number)] = c.samples
            study.set_user_attr("measured", stored)
        now = [c.number for c in ranked(front)]
        if now == order:
            break
        order = now
    study.set_user_attr("settled", numbers)
    mark_ties(front)


def measure_members(members: list[Candidate], pool,
                    progress: SearchProgress) -> Iterator[tuple[Candidate, dict[str, list[float]]]]:
    """(member, samples) for each of `members` measured by the pool, as they finish."""
    queue, by_number, pending = list(members), {c.number: c for c in members}, 0
    while queue or pending:
        while queue and pool.idle:
            c = queue.pop(0)
            pool.submit(c.number, c.pipeline, MEASURE)
            pending += 1
        for number, outcome in pool.results(wait=0.5):
            pending -= 1
            if outcome.status == "measured":
                yield by_number[number], outcome.samples
            else:
                progress.note(f"candidate {number} of the front could not be measured: {outcome.reason}")
            progress.measured()
