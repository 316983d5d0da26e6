"""Both vector widths on any x86 machine: the `cpu` fixture and `WIDTHS`.

A test that takes the `cpu` fixture (a module: `pytestmark = pytest.mark.usefixtures("cpu")`) runs
once per vector width, with NASIR_CPU naming that width's CPU for every compile in it:

    avx2     x86-64-v3    8 lanes, 16 vector registers
    avx512   x86-64-v4   16 lanes, 32 vector registers

AVX2 code runs on AVX-512 machines, so there both run. Where this machine lacks a width's vectors
(AVX-512 on an AVX2 CPU), the code is still compiled (LLVM verifies it and makes machine code) but
cannot run: the call raises `ForeignCPUError`, and the test ends there with what can be checked
without running (`check_foreign_code`): each nest its schedule vectorised carries vectors of the
width the schedule gave its vector loop, in its own kernel's code, and none is wider than the
target's. The run is covered by the same test at this machine's own width. The run's summary
counts these "compiled only" tests per width.

`NASIR_HOST_CPU=x86-64-v3` makes nasir treat an AVX-512 machine as an AVX2 CPU
(`nasir.lowering.target`), so the foreign-width path runs on any x86 machine. `make test` runs
the both-width tests (marked `widths`: those that take `cpu`, and the generators that draw a CPU
from WIDTHS) that way too, their AVX-512 half (`make pytest-avx2`).
"""

from __future__ import annotations

import os

import pytest

from nasir.errors import ForeignCPUError
from nasir.lowering.target import CPU_ENV, host_target, machine_target

WIDTHS = {"avx2": ("x86-64-v3", 8), "avx512": ("x86-64-v4", 16)}
"""Test id -> (LLVM CPU name, float32 lanes)."""
WIDTH_CPUS = [cpu for cpu, _ in WIDTHS.values()]
"""WIDTHS' LLVM CPU names, narrowest first."""

CASES = "differential case"
"""user_properties key of each case a differential test (test_differential.py) ran; its value the op."""
HOSTILE = "hostile file"
"""user_properties key of each mutated ONNX file test_hostile_files.py ran; its value the outcome."""
CHOICE = "lowering choice"
"""user_properties key of each lowering choice a whole-graph case exercised (test_graphs.py)."""
TRANSITION = "lowering transition"
"""user_properties key of each producer/consumer transition a whole-graph case exercised."""
COUNTED = {CASES: "differential cases run against ONNX Runtime", HOSTILE: "hostile ONNX files by outcome"}
TABLES = {CHOICE: "whole-graph cases per lowering choice",
          TRANSITION: "whole-graph cases per transition (producer family, layout, consumer family)"}
"""Counted like COUNTED, printed as a table: one line per value."""
COMPILED_ONLY = "compiled only"
"""user_properties key of a test that compiled code this CPU cannot run (seen by xdist's controller)."""


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory):
    """The tests' user cache (the search's kernel timings): a fresh folder, not the developer's."""
    folder = tmp_path_factory.mktemp("user-cache")
    before = os.environ.get("NASIR_CACHE_DIR")
    os.environ["NASIR_CACHE_DIR"] = str(folder)
    yield folder
    if before is None:
        del os.environ["NASIR_CACHE_DIR"]
    else:
        os.environ["NASIR_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def shared_cache_holds_no_tuning(user_cache):
    """No test leaves schedules in the shared cache's tuning database: default-schedule reads it
    (a tuned signature's schedule, a tuned class's register tile), so one would change what every
    later test on the worker compiles. A test that tunes into the user's database runs with its own
    NASIR_CACHE_DIR (test_benchmarks)."""
    yield
    assert not (user_cache / "tuning.db").exists(), \
        f"a test tuned into the tests' shared cache {user_cache}: give it its own NASIR_CACHE_DIR"


def pytest_collection_modifyitems(config, items):
    """A test that takes the `cpu` fixture (or a `cpu` parameter) is a both-width test: marked
    `widths`. Deselected: a case marked `one_width(name)` at the other width, and in the `narrowed`
    pass a test whose `cpu` is one of WIDTHS' that runs there (`make pytest` ran exactly it: the
    same code, run on this machine)."""
    ran_by_make_pytest = set(WIDTH_CPUS) - set(drawn_cpus())  # none outside the `narrowed` pass
    left_out = []
    for item in items:
        if "cpu" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.widths)
            cpu = item.callspec.params.get("cpu") if getattr(item, "callspec", None) else None
            one = item.get_closest_marker("one_width")
            if cpu in ran_by_make_pytest or (one is not None and cpu != WIDTHS[one.args[0]][0]):
                left_out.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture(params=WIDTH_CPUS, ids=list(WIDTHS))
def cpu(request, monkeypatch) -> str:
    """The CPU every compile of the test is for (see the module docstring)."""
    monkeypatch.setenv(CPU_ENV, request.param)
    return request.param


def lanes_of(cpu_name: str) -> int:
    return next(lanes for name, lanes in WIDTHS.values() if name == cpu_name)


def narrowed() -> bool:
    """`make pytest-avx2`'s pass: NASIR_HOST_CPU names a CPU with narrower vectors than this
    machine's, whose code `make pytest` already compiled and ran here."""
    return host_target().lanes != machine_target().lanes


def drawn_cpus() -> list[str]:
    """The CPUs a generator test draws from: WIDTHS', and in the `narrowed` pass only those whose
    code cannot run there: the draws of the others would repeat `make pytest`'s, which ran them on
    this machine."""
    return [cpu for cpu in WIDTH_CPUS if foreign(cpu)] if narrowed() else WIDTH_CPUS


NARROWED_DRAWS = 6
"""In the `narrowed` pass a generator draws a sixth of its examples: its draws there are compiled,
not run, and `make pytest` compiled and ran cases of the same generator for those CPUs; what the
pass adds, the foreign-code path on drawn cases (`compiled_only`), a few draws exercise."""


def draws(n: int) -> int:
    """Examples for a generator test that draws `n` over all of WIDTHS' CPUs (`NARROWED_DRAWS` in
    the `narrowed` pass)."""
    return max(1, n // NARROWED_DRAWS if narrowed() else n)


def foreign(cpu_name: str) -> bool:
    """Whether code for `cpu_name` (one of WIDTHS) cannot run on this machine (or the CPU
    NASIR_HOST_CPU names)."""
    return lanes_of(cpu_name) > host_target().lanes


def check_foreign_code(executable) -> None:
    """What a test can check of code this machine cannot run (see the module docstring). Code
    loaded from disk keeps no IR: its meta's lanes are all there is to check."""
    assert not executable.runs_here, "ForeignCPUError from code that runs here"
    lanes, code = executable.meta["lanes"], executable.code_vectors
    for nest in executable.meta["vectors"]:
        assert nest["lanes"] <= lanes, f"{nest['layer']}: a vector loop of {nest['lanes']} lanes for a {lanes}-lane CPU"
        if code is not None:
            kernel = nest["kernel"]
            widths = set().union(*(w for f, w in code.items() if f == kernel or f.startswith(f"{kernel}.par")))
            assert nest["lanes"] in widths, (f"{nest['layer']}: its schedule vectorises {nest['lanes']} lanes, "
                                             f"kernel @{kernel} computes with {sorted(widths)}")


def compiled_only(executable, record) -> None:
    """`check_foreign_code`, then the test counted "compiled only" (`record`: its record_property)."""
    check_foreign_code(executable)
    record(COMPILED_ONLY, executable.meta["lanes"])


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    try:
        return (yield)
    except ForeignCPUError as e:
        compiled_only(e.executable, lambda key, value: pyfuncitem.user_properties.append((key, value)))
        return True


def pytest_terminal_summary(terminalreporter):
    counts: dict[str, dict[str, int]] = {}
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        for key, value in report.user_properties if report.when == "call" else []:
            if key in COUNTED or key in TABLES:
                counts.setdefault(key, {})[value] = counts.get(key, {}).get(value, 0) + 1
    for key, by_value in counts.items():
        if key in TABLES:
            terminalreporter.write_line(f"{TABLES[key]}:")
            for value, n in sorted(by_value.items(), key=lambda item: (-item[1], item[0])):
                terminalreporter.write_line(f"  {n:5d}  {value}")
        else:
            terminalreporter.write_line(f"{COUNTED[key]}: " + ", ".join(f"{v} {n}" for v, n in sorted(by_value.items())))
    compiled_only: dict[int, int] = {}
    for report in terminalreporter.stats.get("passed", []):
        for lanes in {v for k, v in report.user_properties if k == COMPILED_ONLY} if report.when == "call" else ():
            compiled_only[lanes] = compiled_only.get(lanes, 0) + 1
    for lanes, n in sorted(compiled_only.items()):
        terminalreporter.write_line(
            f"compiled only: {n} tests compiled {lanes}-lane code, wider than this CPU's ({host_target().cpu}, "
            f"{host_target().lanes} lanes), and checked its kernels' vectors instead of running it")
