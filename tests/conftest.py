"""Both vector widths on any x86 machine: the `cpu` fixture and `WIDTHS`.

A test that takes the `cpu` fixture (a module: `pytestmark = pytest.mark.usefixtures("cpu")`) runs
once per vector width, with NASIR_CPU naming that width's CPU for every compile in it:

    avx2     x86-64-v3    8 lanes, 16 vector registers
    avx512   x86-64-v4   16 lanes, 32 vector registers

AVX2 code runs on AVX-512 machines, so there both run. Where this machine lacks a width's vectors
(AVX-512 on an AVX2 CPU), the code is still compiled (LLVM verifies and generates it) and its
optimised IR is checked for vectors of that width, but it cannot run: the call raises
`ForeignCPUError`, which ends such a test there as passed. The run's summary counts these tests.
"""

from __future__ import annotations

import os

import pytest

from nasir.errors import ForeignCPUError
from nasir.lowering.target import CPU_ENV, host_target

WIDTHS = {"avx2": ("x86-64-v3", 8), "avx512": ("x86-64-v4", 16)}
"""Test id -> (LLVM CPU name, float32 lanes)."""

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


@pytest.fixture(params=[cpu for cpu, _ in WIDTHS.values()], ids=list(WIDTHS))
def cpu(request, monkeypatch) -> str:
    """The CPU every compile of the test is for (see the module docstring)."""
    monkeypatch.setenv(CPU_ENV, request.param)
    return request.param


def lanes_of(cpu_name: str) -> int:
    return next(lanes for name, lanes in WIDTHS.values() if name == cpu_name)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    try:
        return (yield)
    except ForeignCPUError as e:
        lanes = e.executable.meta["lanes"]
        assert not e.executable.runs_here, e
        assert f"<{lanes} x float>" in str(e.executable._module), "the optimised IR has no vectors of its width"
        pyfuncitem.user_properties.append((COMPILED_ONLY, lanes))
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
    compiled_only = [r for r in terminalreporter.stats.get("passed", [])
                     if r.when == "call" and any(k == COMPILED_ONLY for k, _ in r.user_properties)]
    if compiled_only:
        terminalreporter.write_line(
            f"{len(compiled_only)} tests compiled code with wider vectors than this CPU's "
            f"({host_target().cpu}, {host_target().lanes} lanes) and checked its IR instead of running it")
