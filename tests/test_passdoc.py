"""The checked-in pass reference must match the pass classes (regenerate with nasir.cli.passdoc)."""

from pathlib import Path

from nasir.cli.passdoc import render
from nasir.lowering.passes import available_passes

DOC = Path(__file__).resolve().parents[1] / "docs" / "passes.md"


def test_pass_reference_is_current():
    assert DOC.read_text() == render(), "docs/passes.md is stale: run `python -m nasir.cli.passdoc > docs/passes.md`"


def test_every_pass_is_documented_and_has_a_filecheck_test():
    text = DOC.read_text()
    filecheck = "\n".join(p.read_text() for p in (DOC.parents[1] / "filecheck").rglob("*.mlir"))
    for name in available_passes():
        assert f"### `{name}`" in text
        assert name in filecheck, f"pass '{name}' has no FileCheck test"
