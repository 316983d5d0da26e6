"""The backends' pass pipelines, built from named stages, in the one spelling `nasir-opt -p` and
`Model.transform` share.

    GRAPH     fold-batch-norm, convert-nn-to-nest, lower-batch-norm, fuse-epilogue, fold-scale, presum
              nn IR -> nests with fused epilogues (an epilogue's scale folded into the weight, and
              sums a weight does not read done first);
              the tvm backend takes it from here (TVM_PIPELINE)
    SCHEDULE  subsample-strided-1x1, default-schedule, pack-activations, pad-planes, pack-weights,
              nest-bufferize
              the CPU's schedules and layouts, then buffers
    CODEGEN   convert-nest-to-loops, convert-loops-to-llvm
              loops, then the llvm dialect (`loops_to_llvm.llvm_ir` makes LLVM IR)

A pipeline is cut and given options by stage name, never by editing its string:

    str(LLVM.until("default-schedule"))    # "fold-batch-norm,...,subsample-strided-1x1,default-schedule"
    LLVM.after("pad-planes")               # pack-weights, nest-bufferize, convert-nest-to-loops, ...
    str(llvm_pipeline(profile=True).since("convert-loops-to-llvm"))
                                           # "convert-loops-to-llvm{profile=true}"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nasir.errors import NasirError


@dataclass(frozen=True)
class Pipeline:
    """Pass specs in order, each a pass name with its options (`default-schedule{tuning="none"}`)."""

    passes: tuple[str, ...]

    def __str__(self) -> str:
        return ",".join(self.passes)

    def __add__(self, other: Pipeline) -> Pipeline:
        return Pipeline(self.passes + other.passes)

    @property
    def names(self) -> list[str]:
        """The passes' names, without their options."""
        return [spec.split("{", 1)[0] for spec in self.passes]

    def index(self, name: str) -> int:
        """Position of the pass `name` (NasirError if the pipeline has none)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise NasirError(f"pipeline {self} has no pass '{name}'") from None

    def until(self, name: str) -> Pipeline:
        """The passes up to and with `name`."""
        return Pipeline(self.passes[: self.index(name) + 1])

    def before(self, name: str) -> Pipeline:
        """The passes before `name`."""
        return Pipeline(self.passes[: self.index(name)])

    def since(self, name: str) -> Pipeline:
        """The passes from `name` on, `name` with them."""
        return Pipeline(self.passes[self.index(name):])

    def after(self, name: str) -> Pipeline:
        """The passes after `name`."""
        return Pipeline(self.passes[self.index(name) + 1:])

    def without(self, name: str) -> Pipeline:
        """This pipeline without the pass `name`."""
        i = self.index(name)
        return Pipeline(self.passes[:i] + self.passes[i + 1:])

    def with_options(self, name: str, **options: bool | str) -> Pipeline:
        """The pass `name` given `options` (booleans as true/false, strings quoted); no options: as it is."""
        if not options:
            return self
        spelled = " ".join(f"{key}={_spelled(value)}" for key, value in options.items())
        i = self.index(name)
        return Pipeline(self.passes[:i] + (f"{name}{{{spelled}}}",) + self.passes[i + 1:])


def _spelled(value: bool | str) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else f'"{value}"'


GRAPH = Pipeline(("fold-batch-norm", "convert-nn-to-nest", "lower-batch-norm", "fuse-epilogue", "fold-scale", "presum"))
SCHEDULE = Pipeline(("subsample-strided-1x1", "default-schedule", "pack-activations", "pad-planes", "pack-weights", "nest-bufferize"))
CODEGEN = Pipeline(("convert-nest-to-loops", "convert-loops-to-llvm"))
LLVM = GRAPH + SCHEDULE + CODEGEN
"""nn IR -> llvm dialect (then `nasir.lowering.loops_to_llvm.llvm_ir` makes LLVM IR, `nasir.runtime.jit` code)."""

LLVM_PIPELINE = str(LLVM)
"""`LLVM` as `nasir-opt -p` spells it."""
TVM_PIPELINE = str(GRAPH)
"""What the tvm backend runs before it converts the nests (`nest_to_tvm.program`)."""


def llvm_pipeline(profile: bool = False, checked: bool = False, tuning: str | Path | None = None) -> Pipeline:
    """`LLVM` with the options `nasir.compile` takes for the llvm target: `profile` and `checked` for
    convert-loops-to-llvm, the tuning database (a file, or "none") for default-schedule."""
    flags = {name: True for name, on in (("profile", profile), ("checked", checked)) if on}
    pipeline = LLVM.with_options("convert-loops-to-llvm", **flags)
    return pipeline if tuning is None else pipeline.with_options("default-schedule", tuning=str(tuning))
