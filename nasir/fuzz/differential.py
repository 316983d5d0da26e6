"""One drawn graph against ONNX Runtime: nasir's checked llvm code and its torch backend.

`check_case` compiles a `Case` (nasir.fuzz.graphs) for its CPU and thread count with every load
and store bounds-checked, runs it and the torch backend on the case's input, and compares both
with ONNX Runtime at rtol = atol = 1e-4. It reads the lowering choices the compile made
(`nasir.fuzz.choices`), so a caller counts what the case exercised. A typed refusal
(`FrontendError`, `LoweringError`: an op or a shape nasir does not support) is an outcome of its
own, not a mismatch; a `BoundsError` is a mismatch (generated code read or wrote outside a buffer).
Code for a CPU wider than this machine's (AVX-512 on an AVX2 CPU) is compiled, not run: "compiled",
its executable in `outcome.foreign` (the torch backend is still compared).

    outcome = check_case(case, "case.onnx")
    outcome.status        # "agree", "mismatch", "refused" or "compiled"
    outcome.detail        # "llvm x86-64-v4 2 threads: max abs diff 0.14 at output 'y'"
    outcome.choices       # LoweringChoices (None when refused)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

import nasir
from nasir.errors import BoundsError, ForeignCPUError, FrontendError, LoweringError
from nasir.fuzz.choices import LoweringChoices, lowering_choices
from nasir.fuzz.graphs import Case
from nasir.reference import ATOL, RTOL, onnxruntime_outputs


@dataclass
class Outcome:
    status: str
    detail: str = ""
    choices: LoweringChoices | None = None
    foreign: object = None
    """status "compiled": the executable this machine cannot run (ForeignCPUError's)."""


def differences(got, want: list[np.ndarray], names: list[str]) -> str:
    """'' when every output agrees within RTOL/ATOL, else what differs first."""
    got = got if isinstance(got, list) else [got]
    for g, w, name in zip(got, want, names):
        if np.shape(g) != np.shape(w):
            return f"output '{name}' has shape {list(np.shape(g))}, ONNX Runtime's {list(np.shape(w))}"
        if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
            return f"max abs diff {float(np.max(np.abs(g - w))):.3g} at output '{name}'"
    return ""


def check_case(case: Case, path: str | Path) -> Outcome:
    """Save `case.model` at `path`, then compare llvm (checked) and torch with ONNX Runtime."""
    onnx.save(case.model, str(path))
    want = onnxruntime_outputs(path, [case.input])
    try:
        model = nasir.load(path)
        choices = lowering_choices(model.module, case.cpu)
        llvm = nasir.compile(model, cpu=case.cpu, threads=case.threads, checked=True)
    except (FrontendError, LoweringError) as e:
        return Outcome("refused", f"{type(e).__name__}: {e}")
    names = model.output_names
    foreign = None
    try:
        wrong = differences(llvm(case.input), want, names)
    except BoundsError as e:
        return Outcome("mismatch", f"llvm {case.cpu} {case.threads} threads: {e}", choices)
    except ForeignCPUError as e:
        wrong, foreign = "", e.executable
    if wrong:
        return Outcome("mismatch", f"llvm {case.cpu} {case.threads} threads: {wrong}", choices)
    wrong = differences(nasir.compile(model, target="torch")(case.input), want, names)
    if wrong:
        return Outcome("mismatch", f"torch: {wrong}", choices)
    if foreign is not None:
        return Outcome("compiled", f"llvm {case.cpu}: compiled, not run (this CPU lacks its vectors)", choices, foreign)
    return Outcome("agree", "", choices)


def reproduction(path: str | Path, case: Case) -> str:
    """The one command that checks the saved file as the case did."""
    return f"nasir check {path} --cpu {case.cpu} --threads {case.threads} --checked"
