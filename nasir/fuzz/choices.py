"""The lowering choices the llvm pipeline makes for each nest, and the transitions between them.

A bug that lives between layers (a layout, a packing or a fused epilogue decided for one nest and
read by the next: issue 38) is found by tests that feed each choice into each other. This module
reads those choices from the scheduled IR, as `nasir.compile(..., target="llvm")` makes it
(LLVM_PIPELINE up to nest-bufferize, for the module's CPU or `cpu`), so that the differential
tests (tests/test_graphs.py), `python -m nasir.fuzz` and `nasir check --bisect` can say what a
graph exercised. Per nest:

- **family**: the schedule default-schedule gave it: `spatial` (lanes along the output row),
  `channel` (lanes over output channels, weights packed OIHW16o), `winograd` (1-D Winograd),
  `channel-pool` (a max pool with lanes over channels), `depthwise-channel`, `depthwise-multiplier`
  (a depthwise conv with a channel multiplier, lanes over its input channels), `fused-rows pool` (a
  channel-pool whose kernel computes its producer's rows: FUSE_ROWS), `channel-transpose` (an
  elementwise nest whose tile of channels its store transposes into a channel-blocked result),
  `channel-subsample` (a strided 1x1 conv's subsample with lanes over channels);
- **layouts** of its main input and its output: `NCHWc` where pack-activations blocked the
  tensor, `padded` where pad-planes gave its planes a padding row, else `plain`;
- **epilogue**: the fused steps (`relu`, `clip`, `sigmoid`, `hard_swish`, `add` of a tensor,
  `bias` for an add of a vector, ...);
- **tail**: the vector loop's extent is not a multiple of its lanes (a masked last vector);
- **in-place**: nest-bufferize let it write its result over an operand's bytes.

A transition is one edge between nests: the producer's family, the tensor's layout and the
consumer's family (`+epilogue` where the consumer reads it in its epilogue: a residual add).

    choices = lowering_choices(nasir.load("vgg_block.onnx").module, cpu="x86-64-v4")
    choices.nests["_2_Conv"]
    # NestChoice(layer='_2_Conv', kind='mac', family='channel', input_layout='plain',
    #            output_layout='plain', epilogue=('bias', 'relu'), tail=False, in_place=False)
    choices.labels()        # {'family:channel', 'epilogue:relu', 'in:plain', ...}
    choices.transitions     # {('channel', 'plain', 'fused-rows pool'), ...}
    transition_name(('channel', 'NCHWc', 'channel-pool'))    # 'channel -[NCHWc]-> channel-pool'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import AffineDimExpr

from nasir.dialects import nest
from nasir.dialects.attributes import FUSE_ROWS, IN_PLACE, TARGET, WINOGRAD
from nasir.dialects.module import WeightStore, attach_weights, weights_of
from nasir.dialects.schedule import Loop
from nasir.dialects.shapes import shape_of
from nasir.lowering.passes import run_pipeline
from nasir.lowering.pipeline import LLVM
from nasir.lowering.schedule.default_schedule import nest_shape
from nasir.lowering.schedule.pack_activations import transposed_block
from nasir.lowering.schedule.schedules import channel_subsample_schedule, depthwise_channel, depthwise_multiplier
from nasir.lowering.target import CPUTarget, set_target, target_of

FAMILIES = ("spatial", "channel", "winograd", "channel-pool", "depthwise-channel", "depthwise-multiplier",
            "fused-rows pool", "channel-transpose", "channel-subsample")
"""Every schedule family default-schedule chooses from."""
LAYOUTS = ("plain", "NCHWc", "padded")


@dataclass(frozen=True)
class NestChoice:
    """What the llvm pipeline chose for one nest (see the module docstring)."""

    layer: str
    kind: str
    family: str
    input_layout: str
    output_layout: str
    epilogue: tuple[str, ...]
    tail: bool
    in_place: bool = False

    def labels(self) -> set[str]:
        """`family:channel`, `in:NCHWc`, `out:plain`, `epilogue:relu`, `tail`, `in-place`."""
        return ({f"family:{self.family}", f"in:{self.input_layout}", f"out:{self.output_layout}"}
                | {f"epilogue:{step}" for step in self.epilogue}
                | ({"tail"} if self.tail else set()) | ({"in-place"} if self.in_place else set()))

    def __str__(self) -> str:
        extras = [*self.epilogue, *(["tail"] if self.tail else []), *(["in-place"] if self.in_place else [])]
        return (f"{self.family} ({self.kind}), {self.input_layout} -> {self.output_layout}"
                + (f", {' '.join(extras)}" if extras else ""))


Transition = tuple[str, str, str]
"""(producer family, layout of the tensor between them, consumer family[+epilogue])."""


def transition_name(t: Transition) -> str:
    """`channel -[NCHWc]-> channel-pool`"""
    return f"{t[0]} -[{t[1]}]-> {t[2]}"


@dataclass
class LoweringChoices:
    """The choices for every nest of a module (by layer name) and the transitions along its edges."""

    nests: dict[str, NestChoice] = field(default_factory=dict)
    transitions: set[Transition] = field(default_factory=set)
    outputs: list[str] = field(default_factory=list)
    """The nests whose results the model returns, in its output order."""

    def labels(self) -> set[str]:
        return set().union(*(c.labels() for c in self.nests.values()))


def family(op: nest.ComputeOp, target: CPUTarget) -> str:
    """The schedule family of a scheduled nest (before pack-activations rewrites its maps) for
    `target`."""
    if WINOGRAD.on(op):
        return "winograd"
    if FUSE_ROWS.on(op):
        return "fused-rows pool"
    if transposed_block(op) is not None:
        return "channel-transpose"
    sched = op.get_schedule()
    if sched.vector is None:
        return "spatial"
    lane = Loop(sched.vector).dim
    names = op.domain.dim_names
    out = op.output_map.results
    on_channels = len(out) == 4 and isinstance(out[1], AffineDimExpr) and names[out[1].position] == lane
    shape = nest_shape(op)
    if op.kind == "mac" and depthwise_channel(shape) == lane:
        return "depthwise-channel"
    if op.kind == "mac" and (depthwise_multiplier(shape) or (None,))[0] == lane:
        return "depthwise-multiplier"
    if op.kind == "copy" and on_channels and channel_subsample_schedule(shape, target) is not None:
        return "channel-subsample"
    if on_channels:
        return "channel" if op.kind == "mac" else "channel-pool"
    return "spatial"


def has_tail(op: nest.ComputeOp, target: CPUTarget) -> bool:
    """Whether the vector loop's dim is not a multiple of its lanes (the split factor, else the
    target's): its last vector is masked."""
    sched = op.get_schedule()
    if sched.vector is None:
        return False
    vector = Loop(sched.vector)
    splits = sched.derive(op.domain).splits
    if vector.is_inner and vector.parent in splits:
        extent, factor = splits[vector.parent]
        return extent % factor != 0
    return op.domain.extent(vector.dim) % target.lanes != 0


def epilogue_names(op: nest.ComputeOp) -> tuple[str, ...]:
    """The epilogue steps by kind; an add of a vector (a conv's bias) is `bias`."""
    return tuple("bias" if kind == "add" and len(shape_of(op.inputs[refs[0]])) == 1 else kind
                 for kind, refs, _ in op.steps)


def _layout(value) -> str:
    return "NCHWc" if len(shape_of(value)) == 5 else "padded" if nest.pad_rows(value) else "plain"


def lowering_choices(module: ModuleOp, cpu: str | CPUTarget | None = None) -> LoweringChoices:
    """The choices LLVM_PIPELINE makes for `module` (nn IR with its weights) compiled for `cpu`
    (default: the module's `nasir.target`, else NASIR_CPU, else the host), as `nasir.compile`
    makes them; `module` is not changed."""
    out = module.clone()
    attach_weights(out, WeightStore(weights_of(module)))
    if cpu is not None or not TARGET.on(out):
        set_target(out, cpu)
    target = target_of(out)
    run_pipeline(out, str(LLVM.until("default-schedule")))
    families = {op.layer_name: family(op, target) for op in out.walk() if isinstance(op, nest.ComputeOp)}
    run_pipeline(out, str(LLVM.after("default-schedule").until("pad-planes")))
    choices = LoweringChoices()
    for op in out.walk():
        if not isinstance(op, nest.ComputeOp):
            continue
        name = op.layer_name
        choices.nests[name] = NestChoice(name, op.kind, families[name], _layout(op.inputs[0]), _layout(op.result),
                                         epilogue_names(op), has_tail(op, target))
        readers = nest.COMBINERS[op.kind]
        for k, value in enumerate(op.inputs):
            producer = value.owner
            if isinstance(producer, nest.ComputeOp):
                consumer = families[name] + ("+epilogue" if k >= readers else "")
                choices.transitions.add((families[producer.layer_name], _layout(value), consumer))
    returned = next(op for op in out.walk() if isinstance(op, func.ReturnOp)).operands
    choices.outputs = [v.owner.layer_name for v in returned if isinstance(v.owner, nest.ComputeOp)]
    run_pipeline(out, str(LLVM.after("pad-planes").until("nest-bufferize")))
    for op in out.walk():
        if isinstance(op, nest.ComputeOp) and IN_PLACE.on(op):
            choice = choices.nests[op.layer_name]
            choices.nests[op.layer_name] = NestChoice(**{**choice.__dict__, "in_place": True})
    return choices
