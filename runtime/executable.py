"""`Executable`: a compiled model that runs on numpy (or torch) inputs, whatever the backend.

Backends subclass it and implement `_run(arrays) -> list[np.ndarray]`; input checking, conversion and
benchmarking live here once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from nasir.errors import RuntimeInputError


F32_MAX = float(np.finfo(np.float32).max)


def _as_float32(name: str, x: np.ndarray) -> np.ndarray:
    """`x` as float32. A float64 input computes in float32 (agreeing with a float64 reference to
    float32's precision, about 1e-7 relative); finite values past float32's range would become
    infinities, a wrong answer, so they are refused."""
    if x.dtype.itemsize > 4 and x.dtype.kind == "f":
        finite = x[np.isfinite(x)]
        if finite.size and float(np.abs(finite).max()) > F32_MAX:
            raise RuntimeInputError(f"input '{name}' ({x.dtype}) holds {float(np.abs(finite).max()):.3g}, beyond "
                                    f"float32's range (nasir computes in float32)")
    return contiguous_f32(x)


def contiguous_f32(x) -> np.ndarray:
    """`x` as a C-contiguous float32 array of its own shape (`np.ascontiguousarray` makes a
    scalar an array of shape (1,), which a TVM function declared with a rank-0 argument refuses)."""
    return np.require(x, np.float32, "C")


class Executable:
    """Call with one array per model input; returns one numpy array, or a list for several outputs."""

    target = "abstract"
    any_batch = False
    """Does the backend take a batch (axis 0 of every input) of any size, not only the compiled one?"""

    def __init__(self, input_names: Sequence[str], input_shapes: Sequence[tuple[int, ...]],
                 output_names: Sequence[str]):
        self.input_names = list(input_names)
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.output_names = list(output_names)

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def check_inputs(self, inputs: Sequence[object]) -> list[np.ndarray]:
        """Convert inputs to C-contiguous float32 numpy arrays of the compiled shapes (any batch size
    where the backend takes one), or raise."""
        if len(inputs) != len(self.input_shapes):
            raise RuntimeInputError(
                f"expected {len(self.input_shapes)} input(s) ({', '.join(self.input_names)}), got {len(inputs)}")
        arrays = []
        for name, shape, x in zip(self.input_names, self.input_shapes, inputs):
            if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor
                x = x.detach().cpu().numpy()
            if not isinstance(x, np.ndarray):
                raise RuntimeInputError(f"input '{name}' must be a numpy array or torch tensor, got {type(x).__name__}")
            if x.dtype.kind not in "fiu":
                raise RuntimeInputError(f"input '{name}' has dtype {x.dtype}; expected float32")
            if tuple(x.shape) != shape and not (self.any_batch and x.shape[1:] == shape[1:] and x.ndim > 0):
                raise RuntimeInputError(f"input '{name}' has shape {list(x.shape)}; the model was compiled for {list(shape)}"
                                        + (" (any batch size)" if self.any_batch else ""))
            arrays.append(_as_float32(name, x))
        return arrays

    def __call__(self, *inputs):
        outputs = self._run(self.check_inputs(inputs))
        return outputs[0] if len(outputs) == 1 else outputs

    def timed_runs(self, inputs: Sequence[object], repeat: int, warmup: int,
                   before_each: Callable[[], None] = lambda: None) -> Iterator[float]:
        """Wall time in milliseconds of each of `repeat` (at least one) runs on `inputs`, after
        `warmup` untimed ones; `before_each` runs, untimed, before each timed run."""
        arrays = self.check_inputs(inputs)
        for _ in range(warmup):
            self._run(arrays)
        for _ in range(max(1, repeat)):
            before_each()
            start = time.perf_counter()
            self._run(arrays)
            yield (time.perf_counter() - start) * 1e3

    def benchmark(self, *inputs, repeat: int = 20, warmup: int = 2) -> dict[str, float]:
        """Median, min and max wall time of one call, in milliseconds."""
        times = list(self.timed_runs(inputs, repeat, warmup))
        return {"median_ms": float(np.median(times)), "min_ms": float(np.min(times)),
                "max_ms": float(np.max(times)), "repeat": len(times)}
