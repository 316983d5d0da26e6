"""What convert-nest-to-loops emits: `Spec`, one loop nest, from a nest.compute or built for an nn op.

    spec = nest_spec(op)                 # a nest.compute's domain, maps, combiner, epilogue, schedule
    specs = nn_specs(op, target)         # nn.concat / pad / reshape / lrn / batch_norm as copy nests
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.ir import Operation
from xdsl.ir.affine import (
    AffineExpr,
    AffineMap,
)

from nasir.dialects import nest, nn
from nasir.dialects.attributes import WINOGRAD
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Schedule
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError
from nasir.lowering.schedule.schedules import schedule_for
from nasir.lowering.target import CPUTarget

Shape = tuple[int, ...]

IDENTITY = {"mac": 0.0, "avg": 0.0, "max": -math.inf}
"""The value a reduction starts from, by combiner (and what a read of padding gives)."""


@dataclass(kw_only=True)
class Spec(NestView):
    """One loop nest to emit: a nest.compute's view and schedule, or an internal nest built for an
    nn op.

    Inputs and the output are kernel arguments by position (`args`: the argument of each input);
    `out_map` may address a part of the output (concat). `pad` is what out-of-bounds reads of a
    `copy` yield. Internal epilogue steps (`lrn`, `batch_norm`) exist only here.
    """

    steps: list[tuple[str, list[int], list[float]]]
    schedule: Schedule
    args: list[int] = field(default_factory=list)
    pad: float = 0.0
    winograd: bool = False  # a conv run as 1-D Winograd (WINOGRAD); its scratch is the last argument


# --- specs from ops -----------------------------------------------------------------------------

def nest_spec(op: nest.ComputeOp) -> Spec:
    view = NestView.of(op)
    return Spec(**vars(view), steps=op.steps, schedule=op.get_schedule(), args=list(range(len(op.inputs))),
                winograd=WINOGRAD.on(op))


def _elementwise(target: CPUTarget, name: str, shape: Shape, reads: list[AffineMap], in_shapes,
                 out_map: AffineMap | None = None, steps=(), pad=0.0, args=None, combiner="copy", red=(),
                 out_shape: Shape | None = None) -> Spec:
    """A nest over `shape`, writing the output (of `out_shape`, default `shape`) through `out_map`,
    with its default schedule for `target`."""
    dims = list(zip([f"i{k}" for k in range(len(shape))], shape)) + list(red)
    spec = Spec(name=name, dims=dims, npar=len(shape), maps=reads, out_map=out_map or AffineMap.identity(len(shape)),
                in_shapes=list(in_shapes), out_shape=out_shape or shape, combiner=combiner, steps=list(steps),
                schedule=Schedule(), args=args or list(range(len(reads))), pad=pad)
    spec.schedule = schedule_for(spec, target)
    return spec


def nn_specs(op: Operation, target: CPUTarget) -> list[Spec]:
    """Internal nests of an nn op the nest level keeps (softmax excepted)."""
    name = op.layer_name or op.name.split(".")[1]
    shapes = [shape_of(v) for v in op.operands]
    out = shape_of(op.results[0])
    rank = len(out)
    d = [AffineExpr.dimension(i) for i in range(rank)]
    if isinstance(op, nn.ConcatOp):
        axis, specs, offset = op.axis.value.data, [], 0
        for k, s in enumerate(shapes):
            omap = AffineMap(rank, 0, tuple(e + offset if a == axis else e for a, e in enumerate(d)))
            specs.append(_elementwise(target, f"{name}.{k}", s, [AffineMap.identity(rank)], [s], omap, args=[k],
                                      out_shape=out))
            offset += s[axis]
        return specs
    if isinstance(op, nn.PadOp):
        pads = list(op.pads.get_values())
        reads = AffineMap(rank, 0, tuple(e - pads[a] for a, e in enumerate(d)))
        return [_elementwise(target, name, out, [reads], shapes, pad=op.value.value.data)]
    if isinstance(op, nn.ReshapeOp):
        strides = [math.prod(out[a + 1:]) for a in range(rank)]
        flat = sum((e * st for e, st in zip(d, strides)), AffineExpr.constant(0))
        src = shapes[0]
        reads = AffineMap(rank, 0, tuple((flat // math.prod(src[a + 1:])) % src[a] for a in range(len(src))))
        return [_elementwise(target, name, out, [reads], shapes)]
    if isinstance(op, nn.BatchNormOp):
        per_c = AffineMap(rank, 0, (d[1],))
        return [_elementwise(target, name, out, [AffineMap.identity(rank)] + [per_c] * 4, shapes,
                             steps=[("batch_norm", [1, 2, 3, 4], [op.epsilon.value.data])])]
    if isinstance(op, nn.LRNOp):
        size = op.size.value.data
        k = AffineExpr.dimension(rank)
        window = AffineMap(rank + 1, 0, (d[0], d[1] + k - (size - 1) // 2, *d[2:]))
        center = AffineMap(rank + 1, 0, tuple(d))
        step = ("lrn", [2], [op.alpha.value.data / size, op.beta.value.data, op.bias.value.data])
        return [_elementwise(target, name, out, [window, window, center], [shapes[0]] * 3,
                             AffineMap(rank + 1, 0, tuple(d)), [step], args=[0, 0, 0], combiner="mac",
                             red=[("k", size)])]
    raise LoweringError(f"convert-nest-to-loops: op '{op.name}' (layer '{name}') is not supported")


# --- kernel emission ---------------------------------------------------------------------------
