"""The nn ops convert-nn-to-nest leaves (concat, reshape, softmax, log-softmax, lrn, pad with a value) in Relax.

`LOWERINGS[type(op)](bb, op, args) -> relax.Var` emits one op into the Relax function being built,
with ONNX's semantics as in `nest_to_torch.nn_ops`: Relax ops where Relax has them, a TE compute
(`bb.emit_te`) where it does not or where its definition differs from ONNX's (LRN's window):

    nn.concat {axis = 1}            ->  R.concat((a, b), axis=1)
    nn.lrn {size = 4}               ->  call_tir(lrn, ...): window [c - 1, c + 2], as ONNX places it
"""

from __future__ import annotations

from collections.abc import Callable

from tvm import relax, te, tirx, topi

from nasir.dialects import nn
from nasir.dialects.nn import prop_float, prop_int, prop_ints
from nasir.dialects.shapes import shape_of


def _lrn(x: te.Tensor, size: int, alpha: float, beta: float, bias: float) -> te.Tensor:
    """ONNX LRN over axis 1: the window is [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    lo, channels = (size - 1) // 2, int(x.shape[1])
    j = te.reduce_axis((0, size), name="j")

    def square_sum(n, c, *rest):
        k = c - lo + j
        inside = tirx.all(k >= 0, k < channels)
        v = tirx.if_then_else(inside, x[(n, k, *rest)], tirx.const(0.0, "float32"))
        return te.sum(v * v, axis=[j])

    sums = te.compute(x.shape, square_sum, name="lrn.sum")
    return te.compute(x.shape, lambda *i: x[i] / tirx.power(
        tirx.const(bias, "float32") + tirx.const(alpha / size, "float32") * sums[i], tirx.const(beta, "float32")),
        name="lrn")


def _pad(x: te.Tensor, pads: list[int], value: float) -> te.Tensor:
    rank = len(x.shape)
    return topi.nn.pad(x, pads[:rank], pads[rank:], pad_value=value)


def lrn(bb: relax.BlockBuilder, op: nn.LRNOp, args: list) -> relax.Var:
    return bb.emit_te(_lrn, args[0], prop_int(op, "size"), prop_float(op, "alpha"), prop_float(op, "beta"),
                      prop_float(op, "bias"), primfunc_name_hint="lrn")


def pad(bb: relax.BlockBuilder, op: nn.PadOp, args: list) -> relax.Var:
    return bb.emit_te(_pad, args[0], prop_ints(op, "pads"), prop_float(op, "value"), primfunc_name_hint="pad")


LOWERINGS: dict[type, Callable[..., relax.Var]] = {
    nn.ConcatOp: lambda bb, op, xs: bb.emit(relax.op.concat(xs, prop_int(op, "axis"))),
    nn.ReshapeOp: lambda bb, op, xs: bb.emit(relax.op.reshape(xs[0], shape_of(op.result))),
    nn.SoftmaxOp: lambda bb, op, xs: bb.emit(relax.op.nn.softmax(xs[0], prop_int(op, "axis"))),
    nn.LogSoftmaxOp: lambda bb, op, xs: bb.emit(relax.op.nn.log_softmax(xs[0], prop_int(op, "axis"))),
    nn.LRNOp: lrn,
    nn.PadOp: pad,
}
"""nn op class -> `fn(block_builder, op, args) -> relax.Var` (inference semantics)."""
