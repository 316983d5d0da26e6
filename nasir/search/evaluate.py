"""Evaluating one candidate, cheapest check first:

1. legality: the pipeline runs (a pass refuses with its reason);
2. properties: the alphaNAS mixing and depth of the original are kept (free; `properties=False`
   turns it off);
3. cost: MACs and parameters against the original, and the latency estimate (`LatencyModel`);
4. capacity (`capacity`, a rule of `nasir.search.capacity.RULES`; default "synflow"): a MAC
   floor, then a score at initialisation on the search's seeded minibatch relative to the
   original's (synflow; "fisher": Fisher Potential, the seeds' rule) at least the rule's floor
   (lowered by `slack`); the score is spent only where it can change the search's answer: a
   candidate whose estimate is not below `enter_below` (the driver's bar: the original's time, or
   the estimate of the slowest of the fastest accepted candidates so far) is `skipped`. While the
   candidate's kernels are not all timed yet, the estimate is the dearer check (a compile per new
   nest) and comes after the score, for accepted candidates only. With `capacity="none"` (the
   accuracy-verified search: fine-tuning judges accuracy) nothing is rejected for capacity: every
   legal candidate that keeps the properties is estimated and accepted, and the front is over
   latency and the MAC ratio, MACs standing in for capacity (`Outcome.capacity`).

    evaluator = Evaluator(setup)                       # loads the models, measures the original once
    evaluator('group{factor=2 layers="layer1_layer1[.]0_conv1_Conv"}', enter_below=5.1)
    -> Outcome(status='accepted', stage=None, ..., score=0.97, mac_ratio=0.93, estimate_ms=...)

An outcome is `accepted`, `rejected` (with the stage and the reason), `skipped` (legal and within
the properties, but too slow to matter: its capacity was not measured) or, decided by the search
driver, `failed` (the evaluation crashed, hung or raised something unexpected). The front's members
are then compiled whole and timed against the original, interleaved, by the same workers
(`Evaluator.measure`, outcome `measured`, with the samples of both).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from nasir.data import minibatch
from nasir.errors import NasirError
from nasir.measure.kernels import KernelTimes, timing_lock
from nasir.measure.timing import Spread, interleaved
from nasir.model import Model, load_text
from nasir.reference import seeded_inputs
from nasir.runtime.llvm_executable import compile_llvm
from nasir.search.capacity import DEFAULT_RULE, rule_named
from nasir.search.latency import LatencyModel
from nasir.summary import summarize
from nasir.transforms.analysis.properties import analyse, properties_at_least
from nasir.transforms.rebatch import NotBatched

DEFAULT_EVALUATOR = "nasir.search.evaluate:Evaluator"
ROUNDS = 7
"""Rounds of one measurement of a front member (each times it and the original once)."""


@dataclass
class Outcome:
    """What the evaluation of one candidate found (figures relative to the original)."""

    status: str
    stage: str | None = None
    reason: str = ""
    score: float | None = None
    """The capacity check's score relative to the original's (`nasir.search.capacity`)."""
    mac_ratio: float | None = None
    param_ratio: float | None = None
    estimate_ms: float | None = None
    seconds: float | None = None
    measured_ms: float | None = None
    samples: dict[str, list[float]] | None = None
    """A measurement's ms per round, interleaved: {"candidate": [...], "original": [...]}."""
    finished_s: float | None = None
    """When the search had it: seconds from the start of the run that evaluated it."""

    @property
    def capacity(self) -> float | None:
        """The capacity the front is built on: the check's score, or where none was measured
        (`capacity="none"`) the MAC ratio."""
        return self.score if self.score is not None else self.mac_ratio

    def to_json(self) -> dict:
        """The outcome's figures (a measurement's samples go with the candidate: `Candidate`)."""
        return {k: v for k, v in asdict(self).items() if k != "samples"}


@dataclass(frozen=True)
class Setup:
    """Everything a worker needs to build its evaluator, as plain data (it crosses processes).

    `model` / `check_model`: the original at nest level at batch 1 and at the check's batch, saved
    as .mlir + .npz in the output folder."""

    model: str
    check_model: str
    kernels: str
    cpu: str | None = None
    threads: int = 1
    data: str | None = None
    seed: int = 0
    slack: float = 0.0
    properties: bool = True
    profile: dict[str, float] | None = None
    original_score: float | None = None
    evaluator: str = DEFAULT_EVALUATOR
    """The class the workers evaluate with, as `module:Class` (an `Evaluator` subclass)."""
    capacity: str = DEFAULT_RULE
    """A rule of `nasir.search.capacity.RULES` (the module docstring, step 4)."""

    def make_evaluator(self) -> Evaluator:
        module, name = self.evaluator.split(":")
        return getattr(importlib.import_module(module), name)(self)


class Evaluator:
    """Evaluates pipelines against one original model (see the module docstring)."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.model = load_text(setup.model)
        self.check_model = load_text(setup.check_model)
        shape = self.check_model.input_shapes[0]
        classes = self.check_model.output_shapes[0][-1]
        self.batch = minibatch(setup.data, shape[0], setup.seed, tuple(shape[1:]), classes)
        self.check = rule_named(setup.capacity).bind(self.check_model, *self.batch, setup.seed, setup.slack,
                                                     setup.original_score)
        self.original_properties = analyse(self.check_model.module)
        summary = summarize(self.check_model)
        self.original_macs, self.original_params = summary.total_macs, summary.total_params
        kernels = KernelTimes(Path(setup.kernels), setup.cpu, setup.threads)
        self.latency = LatencyModel(self.model, kernels, setup.profile)
        self.compiled: dict[str, object] = {}

    def __call__(self, pipeline: str, enter_below: float | None = None) -> Outcome:
        """Every check on the candidate at the check's batch (the properties and the MAC and
        parameter ratios do not depend on the batch); its nests are timed at batch 1, which gives
        the kernels of the batch-1 candidate without transforming the model a second time.
        The score is skipped when the estimate is not below `enter_below` ms (None: never) and the
        estimate is cheap: every conv nest of the candidate was timed already. Otherwise the score
        comes first (synflow about 0.1 s for ResNet-18 at 16 x 16, Fisher 0.5-0.8 s for ResNet-34 at batch 16) and only an
        accepted candidate is estimated (compiling and timing its new nests: seconds each on a
        cold cache)."""
        try:
            candidate = self.check_model.transform(pipeline)
        except NasirError as e:
            return Outcome("rejected", "legality", str(e))
        if self.setup.properties:
            ok, reason = properties_at_least(candidate.module, self.original_properties)
            if not ok:
                return Outcome("rejected", "properties", reason)
        summary = summarize(candidate)
        costs = {"mac_ratio": summary.total_macs / self.original_macs,
                 "param_ratio": summary.total_params / self.original_params}
        rule = self.check.rule
        if costs["mac_ratio"] < rule.mac_floor or rule.score is None:
            verdict = self.check(candidate, costs["mac_ratio"])  # the MAC floor alone: free
            if verdict.reason:
                return Outcome("rejected", "capacity", verdict.reason, **costs)
            return Outcome("accepted", None, "", None, estimate_ms=self.estimate(candidate, pipeline), **costs)
        if enter_below is not None and self.latency.known(candidate):
            costs["estimate_ms"] = self.estimate(candidate, pipeline)
            if costs["estimate_ms"] >= enter_below:
                return Outcome("skipped", "estimate", f"estimated {costs['estimate_ms']:.3f} ms, not below "
                               f"{enter_below:.3f} ms: it cannot enter the front's fast end", **costs)
        verdict = self.check(candidate, costs["mac_ratio"])
        if verdict.reason:
            return Outcome("rejected", "capacity", verdict.reason, verdict.score, **costs)
        if "estimate_ms" not in costs:
            costs["estimate_ms"] = self.estimate(candidate, pipeline)
        return Outcome("accepted", None, "", verdict.score, **costs)

    def estimate(self, candidate: Model, pipeline: str) -> float:
        """The latency estimate of `candidate` (at the check's batch; through the batch-1 model
        transformed by `pipeline` where its nests cannot be taken to batch 1)."""
        try:
            return self.latency.estimate(candidate)
        except NotBatched:
            return self.latency.estimate(self.model.transform(pipeline))

    def measure(self, pipeline: str) -> Outcome:
        """The candidate at batch 1 compiled whole (once per evaluator) and timed against the
        original in `ROUNDS` interleaved rounds under the timing lock (`nasir.measure.timing.interleaved`)."""
        for name, model in (("original", self.model), (pipeline, None)):
            if name not in self.compiled:
                self.compiled[name] = compile_llvm((model or self.model.transform(pipeline)).module,
                                                   threads=self.setup.threads, cpu=self.setup.cpu)
        candidate, original = self.compiled[pipeline], self.compiled["original"]
        inputs = seeded_inputs(self.model)
        with timing_lock(self.latency.kernels.lock):
            samples = interleaved({"candidate": lambda: candidate(*inputs), "original": lambda: original(*inputs)},
                                  ROUNDS)
        return Outcome("measured", measured_ms=Spread.of(samples["candidate"]).median, samples=samples)
