"""Whole-graph differential tests (issue 38): random CNN graphs against ONNX Runtime, with coverage.

hypothesis draws graphs with `nasir.fuzz.graphs.random_case` (chains and DAGs of 2-12 layers:
convs of 1-256 channels, kernels 1-7, grouped and depthwise; batch norms; ReLU, Clip, Sigmoid,
HardSwish; max, average and global pools with ceil mode; residual adds; concats; gemm heads;
inputs of 1-64 pixels) and `nasir.fuzz.differential.check_case` compares each, as checked llvm
code for its drawn CPU (both widths, conftest's WIDTHS) and thread count (1 or 2) and on the torch
backend, with ONNX Runtime. Each case records the lowering choices and transitions it exercised
(`nasir.fuzz.choices`); the run's summary prints cases per choice and per transition
(conftest.py), and the test fails when a choice of `REQUIRED_CHOICES` or a transition of
`REQUIRED_TRANSITIONS` was not exercised. The draws are derandomized; the `@example` seeds steer
it to the rarest transitions.

The cases run in one test (one xdist worker) so that the coverage is the run's. In `make
pytest-avx2`'s pass (`conftest.narrowed`) it compiles, not runs, the covering cases of AVX-512 and
one drawn case: `make pytest` ran the others, and the coverage is its. A failure is
shrunk by hypothesis and saved as tests/regressions/<hash>.onnx, which `test_regression` then runs
at both widths on 1 and 2 threads; `python -m nasir.fuzz` runs the same generator for longer.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import onnx
import pytest
from conftest import CASES, CHOICE, TRANSITION, WIDTH_CPUS, compiled_only, draws, drawn_cpus, narrowed
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import nasir
from nasir.fuzz import __main__ as fuzz
from nasir.fuzz.choices import FAMILIES, LAYOUTS, lowering_choices, transition_name
from nasir.fuzz.differential import Outcome, check_case
from nasir.fuzz.graphs import Case, SeededDraw, random_case
from nasir.lowering.target import resolve_target

CPUS = WIDTH_CPUS
pytestmark = pytest.mark.widths  # draws its CPU from both widths (conftest.py)
REGRESSIONS = Path(__file__).parent / "regressions"
EXAMPLES = 6
"""Drawn cases of one run, besides the @example seeds (all of them: about 3 minutes of one core)."""

REQUIRED_CHOICES = ({f"family:{f}" for f in FAMILIES if f != "channel-subsample"}
                    | {f"{io}:{layout}" for io in ("in", "out") for layout in LAYOUTS}
                    | {f"epilogue:{step}" for step in ("bias", "relu", "clip", "sigmoid", "hard_swish", "add")}
                    | {"tail", "in-place"})
REQUIRED_TRANSITIONS = {
    ("spatial", "plain", "spatial"), ("channel", "plain", "spatial"), ("spatial", "plain", "channel"),
    ("spatial", "plain", "channel-pool"), ("channel", "plain", "channel"), ("channel", "NCHWc", "channel-pool"),
    ("spatial", "plain", "spatial+epilogue"), ("winograd", "plain", "spatial"), ("channel", "NCHWc", "depthwise-channel"),
    ("channel-pool", "plain", "channel"), ("channel", "NCHWc", "fused-rows pool"), ("spatial", "plain", "winograd"),
    ("channel", "plain", "winograd"), ("channel", "plain", "spatial+epilogue"), ("winograd", "NCHWc", "channel-pool"),
    ("winograd", "plain", "channel"), ("depthwise-channel", "NCHWc", "channel-pool"), ("fused-rows pool", "plain", "spatial"),
    ("depthwise-channel", "plain", "channel"), ("channel", "NCHWc", "channel+epilogue"),
    ("winograd", "NCHWc", "fused-rows pool"), ("spatial", "padded", "spatial"), ("spatial", "padded", "channel-pool"),
    ("channel", "padded", "spatial"), ("channel-transpose", "NCHWc", "depthwise-channel"),
    ("channel-transpose", "NCHWc", "channel-pool"), ("channel", "plain", "channel-transpose+epilogue"),
    ("channel", "NCHWc", "depthwise-multiplier"), ("depthwise-multiplier", "NCHWc", "channel-pool"),
}
"""Transitions (producer family, layout, consumer family) every run must exercise. No family is
left out but `channel-subsample` (a strided 1x1 conv's subsample with lanes over channels), which
none of 1,500 seeds' 6-layer cases makes (it needs a depthwise stage on both sides of the
downsample): test_llvm_backend's `downsample_stage` runs it."""
MAX_LAYERS = 8
"""Layers of a drawn case at most (a 12-layer graph takes up to a minute to compile checked: the
fuzzer, `python -m nasir.fuzz`, draws those)."""
COVERING_SEEDS = [106, 8, 365, 14, 47, 265, 169, 306, 59, 18, 162, 142, 114, 380, 11, 81, 2, 137, 467, 54, 1198, 2104,
                  508, 249, 254, 67, 112, 1]
"""Seeds of `SeededDraw` whose 6-layer cases together exercise every required choice and transition
(a greedy cover of 1,500 seeds' `lowering_choices`; 11, 81 and 2 added for pad-planes' padded
planes and the plain residual a padded one displaced; 137 and 467, AVX2 cases, for Winograd into
the channel-blocked layout, once AVX2 took Winograd only where two tiles fit its registers; 54, an
AVX2 case, for a channel-lane conv into a spatial one through padded planes, which only a drawn case
had exercised; 1198 and 2104, AVX2 cases, for a batch norm transposing its tile into the blocks a
depthwise conv and a global pool read, with a residual add in its epilogue; 508, an AVX2 case, for
a depthwise conv with a channel multiplier interleaving its tile into the blocks a max pool reads;
249, 254, 67, 112 and 1 once stride-1 convs ran as Winograd only where `pays`, for Winograd
between channel and spatial convs and into channel-blocked pools, and a channel conv into a
depthwise one), run as @examples before the drawn cases. Hypothesis derives its derandomized draws
from the test's source, so an edit of this file changes the drawn cases: the seeds alone must cover
(`test_the_covering_seeds_alone_exercise_every_required_choice_and_transition`)."""


class HypothesisDraw:
    """`nasir.fuzz.graphs.Draw` over hypothesis's `draw`: failures shrink."""

    def __init__(self, draw):
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def pick(self, options):
        return self.draw(st.sampled_from(options))


@st.composite
def cases(draw) -> Case:
    return random_case(HypothesisDraw(draw), drawn_cpus(), MAX_LAYERS)


def covering_cases() -> list[Case]:
    """The 6-layer cases of `COVERING_SEEDS`."""
    return [random_case(SeededDraw(seed), CPUS, 6) for seed in COVERING_SEEDS]


def covering_examples(test):
    """The covering cases as @examples, of the CPUs `drawn_cpus` names (in the `narrowed` pass those
    it cannot run: `make pytest` ran the others, exactly these)."""
    for case in reversed(covering_cases()):
        if case.cpu in drawn_cpus():
            test = example(case=case)(test)
    return test


def assert_covered(choices, transitions, by: str) -> None:
    """Every required lowering choice and transition is among `choices` and `transitions`; else
    the message names what `by` (no case, no covering seed) exercised."""
    missing = REQUIRED_CHOICES - set(choices)
    assert not missing, f"lowering choices {by} exercised: {missing}"
    missing = REQUIRED_TRANSITIONS - set(transitions)
    assert not missing, f"transitions {by} exercised: {sorted(transition_name(t) for t in missing)}"


def saved_regression(case: Case) -> Path:
    """`case`'s graph as tests/regressions/<hash>.onnx (a new regression test)."""
    data = case.model.SerializeToString()
    path = REGRESSIONS / f"{hashlib.sha256(data).hexdigest()[:12]}.onnx"
    REGRESSIONS.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def test_the_covering_seeds_alone_exercise_every_required_choice_and_transition(tmp_path):
    choices, transitions = set(), set()
    for case in covering_cases():
        onnx.save(case.model, tmp_path / "case.onnx")
        made = lowering_choices(nasir.load(tmp_path / "case.onnx").module, case.cpu)
        choices |= made.labels()
        transitions |= made.transitions
    assert_covered(choices, transitions, "no covering seed")


def test_whole_graphs(tmp_path, record_property):
    choices, transitions, failed = Counter(), Counter(), []

    @given(case=cases())
    @covering_examples
    @settings(max_examples=draws(EXAMPLES), deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    def agrees(case: Case):
        outcome = check_case(case, tmp_path / "case.onnx")
        if outcome.status not in ("agree", "compiled"):
            failed.append(case)
            raise AssertionError(f"{case}: {outcome.detail}")
        if outcome.choices is not None:
            choices.update(outcome.choices.labels())
            transitions.update(outcome.choices.transitions)
        if outcome.status == "compiled":  # this CPU lacks the case's vectors: its code checked, not run
            compiled_only(outcome.foreign, record_property)
        else:
            record_property(CASES, "graph")

    try:
        agrees()
    except Exception:
        if failed:  # hypothesis ran the shrunk case last
            print(f"saved the shrunk failing graph as {saved_regression(failed[-1])}")
        raise
    for label, n in choices.items():
        for _ in range(n):
            record_property(CHOICE, label)
    for t, n in transitions.items():
        for _ in range(n):
            record_property(TRANSITION, transition_name(t))
    if not narrowed():  # the coverage is `make pytest`'s, whose cases this pass's are a part of
        assert_covered(choices, transitions, "no case")


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("*.onnx")), ids=lambda p: p.stem)
@pytest.mark.parametrize("cpu", CPUS)
def test_regression(tmp_path, record_property, path, cpu):
    """A graph a failure of `test_whole_graphs` or of the fuzzer was shrunk to (and issue 38's VGG
    block, exported by torch), on 2 threads, checked, and on the torch backend."""
    outcome = check_case(Case.of_file(path, cpu, 2), tmp_path / path.name)
    assert outcome.status in ("agree", "compiled"), outcome.detail
    if outcome.status == "compiled":
        compiled_only(outcome.foreign, record_property)


def test_saved_regressions_are_valid_graphs():
    """Every saved regression is a graph ONNX's checker accepts (the oracle runs it)."""
    for path in REGRESSIONS.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def test_fuzz_cli_runs_the_widths_this_machine_runs(tmp_path, capsys, monkeypatch):
    """On an AVX2 machine (this one taken for one) the fuzzer compiles AVX2 code only, and refuses
    AVX-512 code it could not run with a usage error, not a traceback."""
    monkeypatch.setattr(fuzz, "host_target", lambda: resolve_target("x86-64-v3"))
    assert fuzz.host_cpus() == "x86-64-v3"
    with pytest.raises(SystemExit) as stop:
        fuzz.main(["--cases", "1", "--cpus", "x86-64-v4", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "cannot run on this CPU" in capsys.readouterr().err
    monkeypatch.setattr(fuzz, "host_target", lambda: resolve_target("x86-64-v4"))
    assert fuzz.host_cpus() == "x86-64-v3,x86-64-v4"


def test_fuzz_cli_counts_choices_and_saves_mismatches(tmp_path, capsys, monkeypatch):
    """`python -m nasir.fuzz` on one case prints its figures; a mismatch (made here by a wrong
    outcome, monkeypatched) is saved as ONNX with its one-line reproduction."""
    # AVX2 code, which every x86 machine here runs (the default: the widths this machine runs)
    assert fuzz.main(["--cases", "1", "--seed", "47", "--cpus", "x86-64-v3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 cases" in out and "1 agree" in out and "family:channel" in out and "channel -[NCHWc]-> channel-pool" in out

    monkeypatch.setattr(fuzz, "check_case", lambda case, path: Outcome("mismatch", "max abs diff 1 at output 'y'"))
    assert fuzz.main(["--cases", "1", "--seed", "47", "--cpus", "x86-64-v3", "--out", str(tmp_path)]) == 1
    line = (tmp_path / "mismatches.txt").read_text()
    saved = tmp_path / "mismatch-47.onnx"
    assert line.startswith(f"nasir check {saved} --cpu x86-64-v3") and "--checked" in line
    onnx.checker.check_model(onnx.load(str(saved)))
