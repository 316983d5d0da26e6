"""Per-layer cost table of a model: what `Model.summary()` returns and `nasir summary` prints.

It reads the IR only (no weights needed), at either level: nn ops before `convert-nn-to-nest`,
`nest.compute` ops after it.

    >>> print(nasir.zoo.load("resnet18").summary())
    layer                   op             output shape         MACs      params
    ----------------------------------------------------------------------------
    conv1_Conv              nn.conv2d      1x64x32x32      1,769,472       1,728
    bn1_BatchNormalization  nn.batch_norm  1x64x32x32              -         256
    relu_Relu               nn.relu        1x64x32x32              -           -
    ...
    total                   68 ops                       555,422,720  11,183,562

MACs count multiply-accumulates of contractions: convolution N*Co*OH*OW*(Ci/G)*KH*KW, gemm and
matmul M*N*K (times the batch), a `nest.compute` with the `mac` combiner those it does once compiled
(`presum.computed_macs`: its domain size, or for a window whose weight `expand` shared over its
taps, the input's sums and the contraction left). Pools and element-wise ops count 0 (shown as
"-"). Params are the elements of the op's `nn.weight` operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from nasir.dialects import nest, nn
from nasir.dialects.nest import macs
from nasir.dialects.shapes import shape_of
from nasir.runtime.tables import plain_table, rich_table
from nasir.transforms.presum import computed_macs


@dataclass(frozen=True)
class LayerRow:
    """One op of the model: its layer name, op name, output shape, MACs and parameter count."""

    name: str
    op: str
    shape: tuple[int, ...]
    macs: int
    params: int


@dataclass(frozen=True)
class Summary:
    """Rows in program order plus totals; `str()` is a plain aligned table, `rich` renders `__rich__`."""

    rows: list[LayerRow]
    total_macs: int
    total_params: int

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    HEADER = ("layer", "op", "output shape", "MACs", "params")

    def _cells(self) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
        body = [(r.name, r.op, "x".join(map(str, r.shape)), _count(r.macs), _count(r.params)) for r in self.rows]
        total = ("total", f"{len(self.rows)} ops", "", _count(self.total_macs), _count(self.total_params))
        return body, total

    def __str__(self) -> str:
        body, total = self._cells()
        return plain_table(self.HEADER, body, [total], left=3)

    def __rich__(self):
        body, total = self._cells()
        return rich_table(self.HEADER, body, [total], left=3)


def _count(n: int) -> str:
    return f"{n:,}" if n else "-"


def summarize(model) -> Summary:
    """The cost table of `model` (a `nasir.Model`)."""
    rows = [_row(op) for op in model.ops()]
    weights = {op.key: math.prod(shape_of(op.result))
               for op in model.func.body.block.ops if isinstance(op, nn.WeightOp)}
    return Summary(rows, sum(r.macs for r in rows), sum(weights.values()))


def _row(op: Operation) -> LayerRow:
    result = op.results[0].type if op.results else None
    shape = shape_of(result) if isinstance(result, TensorType) else ()
    params = {o.owner.key: math.prod(shape_of(o)) for o in op.operands
              if isinstance(o.owner, nn.WeightOp)}
    name = getattr(op, "layer_name", "")
    label = f"{op.name} {op.kind}" if isinstance(op, nest.ComputeOp) else op.name
    count = computed_macs(op) if isinstance(op, nest.ComputeOp) else macs(op)
    return LayerRow(name, label, shape, count, sum(params.values()))
