"""Pass registry and pipelines: one spelling in `nasir-opt -p`, `Model.transform` and search logs.

Every nasir pass is listed in `PASSES`, in pipeline order within each kind; adding a pass is adding
its class there (and a lit test under filecheck/). The registry sits in lowering/ because it names
the lowering passes as well as the transforms below them.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError

from nasir.dialects.context import make_context
from nasir.errors import NasirError, PassError
from nasir.lowering.bufferize import NestBufferizePass
from nasir.lowering.loops_to_llvm.convert import ConvertLoopsToLLVMPass
from nasir.lowering.nest_to_loops.convert import ConvertNestToLoopsPass
from nasir.lowering.nn_to_nest.batch_norm import LowerBatchNormPass
from nasir.lowering.nn_to_nest.convert import ConvertNnToNestPass
from nasir.lowering.schedule.default_schedule import DefaultSchedulePass
from nasir.lowering.schedule.pack_activations import PackActivationsPass
from nasir.lowering.schedule.pack_weights import PackWeightsPass
from nasir.lowering.schedule.pad_planes import PadPlanesPass
from nasir.lowering.schedule.subsample import SubsampleStrided1x1Pass
from nasir.transforms.bottleneck import BottleneckPass
from nasir.transforms.fold_batch_norm import FoldBatchNormPass
from nasir.transforms.fold_scale import FoldScalePass
from nasir.transforms.fuse_epilogue import FuseEpiloguePass
from nasir.transforms.group import DepthwisePass, GroupPass
from nasir.transforms.coordinates import BottomUpPass
from nasir.transforms.primitives import DilatePass, ExpandPass, MergeDimsPass, SharePass, SplitDimPass, TiePass
from nasir.transforms.presum import PresumPass
from nasir.transforms.print_capacity import PrintCapacityPass
from nasir.transforms.schedule import (
    FusePass,
    InterchangePass,
    PackPass,
    ParallelPass,
    StripMinePass,
    TilePass,
    UnrollPass,
    VectorizePass,
)
from nasir.transforms.split import IndexSplitPass, UnsharePass
from nasir.transforms.window import FoldPass, ShiftPass, UnfoldPass

PASSES: tuple[type[ModulePass], ...] = (
    # graph passes (nn)
    FoldBatchNormPass, FuseEpiloguePass, FoldScalePass, PresumPass,
    # architecture transforms (nest)
    BottleneckPass, GroupPass, DepthwisePass, UnfoldPass, FoldPass, ShiftPass, IndexSplitPass, UnsharePass,
    SplitDimPass, MergeDimsPass, DilatePass, ExpandPass, SharePass, TiePass, BottomUpPass,
    # schedule transforms (nest)
    InterchangePass, StripMinePass, TilePass, UnrollPass, FusePass, VectorizePass, ParallelPass, PackPass,
    # analyses
    PrintCapacityPass,
    # lowering (the llvm pipeline, in order)
    ConvertNnToNestPass, LowerBatchNormPass, SubsampleStrided1x1Pass, DefaultSchedulePass, PackActivationsPass, PadPlanesPass, PackWeightsPass,
    NestBufferizePass, ConvertNestToLoopsPass, ConvertLoopsToLLVMPass,
)


def available_passes() -> dict[str, type[ModulePass]]:
    """Every nasir pass by name."""
    return {cls.name: cls for cls in PASSES}


def parse_pipeline(spec: str) -> PassPipeline:
    """`"fold-batch-norm,group{factor=2 layers=layer1.*}"` -> a PassPipeline; PassError if malformed.
    Whitespace around the pipeline is not part of it (a pipeline file ends in a newline)."""
    spec = spec.strip()
    passes: dict[str, Callable[[], type[ModulePass]]] = {
        name: (lambda cls=cls: cls) for name, cls in available_passes().items()
    }
    try:
        return PassPipeline.parse_spec(passes, spec)
    except NasirError:
        raise
    except (Exception, ArgSpecParseError) as e:  # xDSL: ValueError/Exception; lexer errors are BaseException
        msg = str(e)
        if "Unrecognized passes" in msg:
            msg += f"; available passes: {', '.join(sorted(passes))}"
        if isinstance(e, ArgSpecParseError):
            msg += '\n(quote option values that contain characters such as . or *: layers="layer1.*")'

        raise PassError(f"bad pass pipeline '{spec}': {msg}") from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block. Lowering builds IR: hundreds of
    thousands of ops that stay alive until the module is dropped, so each automatic collection
    walks them all again for nothing (a quarter of ResNet-34's compile time); peak memory grows by
    under 5%. Nested uses are fine: only the outermost one turns the collector back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_pipeline(module: ModuleOp, spec: str, verify: bool = True) -> None:
    """Apply `spec` to `module` in place and verify the result (unless `verify=False`: backends
    skip verifying huge low-level modules that the next tool, e.g. LLVM, checks anyway)."""
    pipeline = parse_pipeline(spec)
    with gc_paused():
        pipeline.apply(make_context(), module)
        if verify:
            module.verify()


def pipeline_steps(spec: str) -> list[str]:
    """`spec` cut into its passes at the commas outside braces and quotes:

        >>> pipeline_steps('group{factor=2 layers="a|b"},fold{dim=kh layers="c"}')
        ['group{factor=2 layers="a|b"}', 'fold{dim=kh layers="c"}']
    """
    steps, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(spec):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "{}":
            depth += 1 if ch == "{" else -1
        elif not quoted and not depth and ch == ",":
            steps.append(spec[start:i].strip())
            start = i + 1
    steps.append(spec[start:].strip())
    return [s for s in steps if s]


def with_init(spec: str, init: str) -> str:
    """`spec` with `init=INIT` given to every pass that takes an `init` option and does not set it
    (the architecture transforms: how a transformed conv's weights are made):

        >>> with_init('convert-nn-to-nest,group{factor=2 layers="c1"},fold{dim=kh init=kaiming}', "inherit")
        'convert-nn-to-nest,group{factor=2 layers="c1" init=inherit},fold{dim=kh init=kaiming}'
    """
    parse_pipeline(spec)  # malformed: the parser's error
    passes = available_passes()
    out = []
    for step in pipeline_steps(spec):
        name, _, options = step.partition("{")
        options = options.removesuffix("}").strip()
        if "init" in {f.name for f in dataclasses.fields(passes[name.strip()])} and "init=" not in options:
            step = f"{name}{{{' '.join(filter(None, (options, f'init={init}')))}}}"
        out.append(step)
    return ",".join(out)
