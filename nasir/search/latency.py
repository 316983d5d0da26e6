"""Latency of candidates on the llvm backend, estimated from per-nest timings cached for the search.

The original model is compiled once with profiling, which gives each conv's time inside the model
(`in_model_ms`, its fused epilogue included). A candidate changes some convs; each of its convs is
compiled and timed alone (`nasir.measure.kernels.standalone`), as is the original conv it came from (a part `L.part1` or
`L` itself comes from `L`), and the layer's in-model time is scaled by that ratio:

    estimate = original's time + sum over convs L of in_model_ms(L) * (alone(new nests of L) / alone(L) - 1)

A nest's time alone is cached under its signature (`nasir.measure.kernels`: the printed standalone
module with names erased, with the CPU, the threads and the compiler), so one layer shape with one
transform compiles and is timed once, by whichever worker meets it first, and a second search of
the same or a related model finds most of its kernels timed. The front's members are then
compiled whole and measured (`KernelTimes.measure`), and the estimate is reported beside it.
"""

from __future__ import annotations

from nasir.measure.kernels import TOTAL, KernelTimes
from nasir.model import Model
from nasir.search.space import conv_nests


class LatencyModel:
    """The original's profile and its convs' times alone; estimates for candidates (module doc)."""

    def __init__(self, original: Model, kernels: KernelTimes, profile: dict[str, float] | None = None):
        self.kernels = kernels
        self.profile = profile if profile is not None else kernels.profile(original)
        self.original_ms = self.profile[TOTAL]
        self.batch = original.input_shapes[0][0]
        self.alone = {op.layer_name: kernels.nest_ms(original, op) for op in conv_nests(original)}

    def known(self, candidate: Model) -> bool:
        """Whether every conv nest of `candidate` was timed already by this process (`estimate`
        then costs no compile)."""
        return all(self.kernels.timed(op, self.batch) for op in conv_nests(candidate))

    def estimate(self, candidate: Model) -> float:
        """The estimate for `candidate` at the original's batch, whatever the batch `candidate`
        was built at (its nests are timed at the original's; `NotBatched` if one cannot be)."""
        new: dict[str, float] = {}
        for op in conv_nests(candidate):
            layer = origin(op.layer_name, self.alone)
            new[layer] = new.get(layer, 0.0) + self.kernels.nest_ms(candidate, op, self.batch)
        change = sum(self.profile.get(layer, 0.0) * (new.get(layer, 0.0) / alone - 1)
                     for layer, alone in self.alone.items() if alone > 0)
        return max(self.original_ms + change, 1e-6)


def origin(name: str, layers: dict[str, float]) -> str:
    """The original layer a candidate's nest comes from: itself, or `L` for `L.part1`, `L.expand`."""
    while name not in layers and "." in name:
        name = name.rsplit(".", 1)[0]
    return name
