"""Checking a compiled model against ONNX Runtime, the numerical oracle of `nasir check` and the demo.

    inputs = seeded_inputs(model)
    ours = executable(*inputs)
    theirs = onnxruntime_outputs("resnet18.onnx", inputs)
    result = compare(ours, theirs)      # Comparison(max_abs_diff=3.1e-06, ok=True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nasir.errors import BackendUnavailableError, FrontendError

RTOL = 1e-4
ATOL = 1e-4


def seeded_inputs(model, seed: int = 0) -> list[np.ndarray]:
    """One standard-normal float32 array per input of `model` (a `nasir.Model`)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in model.input_shapes]


def require_onnxruntime(what: str) -> None:
    """Raise a one-line `BackendUnavailableError` when ONNX Runtime, the oracle `what` compares
    with, cannot be imported (called before any slow work)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise BackendUnavailableError(f"{what} compares with ONNX Runtime, which is not installed here: "
                                      "pip install onnxruntime") from None


def onnxruntime_outputs(path: str | Path, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run the ONNX file at `path` on `inputs` (in the graph's input order) with ONNX Runtime on CPU."""
    require_onnxruntime("this check")
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own exception types for files it cannot load
        raise FrontendError(f"{path}: ONNX Runtime cannot load it: {e}") from None
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(inputs):
        raise FrontendError(f"{path}: the graph takes {len(names)} inputs, got {len(inputs)}")
    return session.run(None, dict(zip(names, inputs)))


@dataclass(frozen=True)
class Comparison:
    max_abs_diff: float
    ok: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "FAIL"


def compare(got: np.ndarray | Sequence[np.ndarray], want: Sequence[np.ndarray],
            rtol: float = RTOL, atol: float = ATOL) -> Comparison:
    """Elementwise |got - want| <= atol + rtol * |want| over all outputs (shapes must agree)."""
    got = [got] if isinstance(got, np.ndarray) else list(got)
    if len(got) != len(want) or any(np.shape(g) != np.shape(w) for g, w in zip(got, want)):
        return Comparison(float("inf"), False)
    diff = max(float(np.max(np.abs(g - w), initial=0.0)) for g, w in zip(got, want))
    ok = all(np.allclose(g, w, rtol=rtol, atol=atol) for g, w in zip(got, want))
    return Comparison(diff, ok)
