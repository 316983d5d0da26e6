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
matmul M*N*K (times the batch), a `nest.compute` with the `mac` combiner its domain size. Pools and
element-wise ops count 0 (shown as "-"). Params are the elements of the op's `nn.weight` operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from nasir.dialects import nest, nn


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


def plain_table(header: tuple[str, ...], body: list[tuple[str, ...]], foot: list[tuple[str, ...]], left: int) -> str:
    """Aligned text columns (the first `left` to the left, the rest to the right), a rule above
    and below the body (`Summary` and `nasir.profile.Profile` print themselves with it)."""
    table = [header, *body, *foot]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        cols = [c.ljust(w) for c, w in zip(cells[:left], widths)]
        cols += [c.rjust(w) for c, w in zip(cells[left:], widths[left:])]
        return "  ".join(cols).rstrip()

    rule = "-" * len(line(tuple("-" * w for w in widths)))
    return "\n".join([line(header), rule, *map(line, body), rule, *map(line, foot)])


def rich_table(header: tuple[str, ...], body: list[tuple[str, ...]], foot: list[tuple[str, ...]], left: int):
    """`plain_table`'s layout as a rich Table: the foot rows bold below a rule; long cells wrap."""
    from rich.table import Table

    table = Table()
    for i, head in enumerate(header):
        table.add_column(head, justify="right" if i >= left else "left", overflow="fold")
    for row in body:
        table.add_row(*row)
    table.add_section()
    for row in foot:
        table.add_row(*row, style="bold")
    return table


def _count(n: int) -> str:
    return f"{n:,}" if n else "-"


def summarize(model) -> Summary:
    """The cost table of `model` (a `nasir.Model`)."""
    rows = [_row(op) for op in model.ops()]
    weights = {op.key: math.prod(nn.shape_of(op.result))
               for op in model.func.body.block.ops if isinstance(op, nn.WeightOp)}
    return Summary(rows, sum(r.macs for r in rows), sum(weights.values()))


def _row(op: Operation) -> LayerRow:
    result = op.results[0].type if op.results else None
    shape = nn.shape_of(result) if isinstance(result, TensorType) else ()
    params = {o.owner.key: math.prod(nn.shape_of(o)) for o in op.operands
              if isinstance(o.owner, nn.WeightOp)}
    name = getattr(op, "layer_name", "")
    label = f"{op.name} {op.kind}" if isinstance(op, nest.ComputeOp) else op.name
    return LayerRow(name, label, shape, macs(op), sum(params.values()))


def macs(op: Operation) -> int:
    """Multiply-accumulates of one op (0 for ops that are not contractions)."""
    if isinstance(op, nest.ComputeOp):
        return op.domain.size if op.kind == "mac" else 0
    if isinstance(op, nn.Conv2DOp):
        _, ci_per_group, kh, kw = nn.shape_of(op.operands[1])
        return math.prod(nn.shape_of(op.result)) * ci_per_group * kh * kw
    if isinstance(op, nn.GemmOp):
        a = nn.shape_of(op.operands[0])
        k = a[0] if op.trans_a.value.data else a[1]
        return math.prod(nn.shape_of(op.result)) * k
    if isinstance(op, nn.MatMulOp):
        return math.prod(nn.shape_of(op.result)) * nn.shape_of(op.operands[0])[-1]
    return 0
