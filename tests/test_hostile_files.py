"""Hostile files: mutants of a small real classifier (onnx_mutants.py: byte flips, truncation,
negative, zero or huge attributes, dangling inputs, initializers of other dtypes or sizes, zero,
symbolic or huge input dims, unknown ops) each end in a one-line NasirError or in outputs equal to
ONNX Runtime's (or, where ONNX Runtime refuses the file, in outputs at all): never a traceback, a
crash, a hang or a different output. They run in a child process that logs each case before it
starts, so a segfault names its case; the run's summary counts the outcomes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HOSTILE
from onnx_mutants import MUTATIONS, mutants

PER_CLASS = 8
WORKER = Path(__file__).with_name("onnx_mutants.py")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("mutants")
    for name, data in mutants(PER_CLASS):
        (folder / f"{name}.onnx").write_bytes(data)
    try:
        run = subprocess.run([sys.executable, str(WORKER), str(folder)], capture_output=True, text=True, timeout=600)
        died = f"the worker died (rc {run.returncode}): {run.stderr[-2000:]}" if run.returncode else ""
    except subprocess.TimeoutExpired:
        died = "the worker hung for 10 minutes"
    results: dict[str, dict] = {}
    for line in (folder / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        results[row["case"]] = row
    unfinished = [case for case, row in results.items() if row["outcome"] == "start"]
    assert not died and not unfinished, f"{died}; in case {unfinished}"
    return results


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_mutants_end_in_a_clean_error_or_the_right_outputs(outcomes, mutation, record_property):
    rows = {case: row for case, row in outcomes.items() if case.startswith(f"{mutation}-")}
    assert len(rows) == PER_CLASS
    for case, row in rows.items():
        record_property(HOSTILE, row["outcome"])
        assert row["outcome"] in ("error", "match", "ran"), f"{case}: {row['outcome']}: {row['detail']}"
        assert "\n" not in row["detail"], f"{case}: a multi-line message: {row['detail']!r}"


def test_the_cli_says_one_line_and_exits_1(tmp_path):
    cases = dict(mutants(2))
    for name in ("truncated-0", "bad_attribute-1", "dangling_input-0"):
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(cases[name])
        done = subprocess.run([sys.executable, "-m", "nasir.cli.main", "check", str(path)], capture_output=True,
                              text=True, timeout=300)
        errors = [line for line in done.stderr.splitlines() if line.startswith("nasir: error:")]
        assert done.returncode == 1 and len(errors) == 1 and "Traceback" not in done.stderr, (name, done.stderr)
