"""nn ops in PyTorch: the reference semantics of the graph level, exactly as ONNX defines them.

`LOWERINGS[type(op)](op, inputs) -> tensor` runs one nn op on torch tensors; `torch_backend`
walks `@main` with it. Where torch's functional API differs from ONNX (asymmetric pads, LRN
windows for even sizes, ceil-mode pools with padding, count_include_pad with asymmetric pads),
the function pads explicitly or computes the ONNX formula, and crops to the op's result type,
which the nn dialect infers with ONNX's rules (at the model's batch: an op acts on each sample, and
a reshape that keeps axis 0 reshapes each, so the functions take any batch size):

    nn.avg_pool {kernel = [3, 3], pads = [0, 0, 1, 1], count_include_pad = 0}
      ->  sums = avg_pool2d(pad(x), divisor_override=1); counts = same over pad(ones); sums / counts
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nasir.dialects import nn
from nasir.dialects.nn import prop_float, prop_int, prop_ints
from nasir.dialects.shapes import shape_of
from nasir.lowering.nest_to_torch.steps import apply_step

Tensor = torch.Tensor


def _pad2d(x: Tensor, pads: list[int], value: float = 0.0) -> Tensor:
    t, l, b, r = pads
    return F.pad(x, (l, r, t, b), value=value) if any(pads) else x


def _crop(y: Tensor, op) -> Tensor:
    """Drop trailing windows torch adds in ceil mode beyond ONNX's output size (the result type)."""
    h, w = shape_of(op.result)[2:]
    return y[..., :h, :w]


def conv2d(op: nn.Conv2DOp, inputs: list[Tensor]) -> Tensor:
    x, w, b = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    t, l, bo, r = prop_ints(op, "pads")
    padding = (t, l) if (t, l) == (bo, r) else 0
    if padding == 0:
        x = _pad2d(x, [t, l, bo, r])
    return F.conv2d(x, w, b, stride=prop_ints(op, "strides"), padding=padding,
                    dilation=prop_ints(op, "dilations"), groups=prop_int(op, "groups"))


def gemm(op: nn.GemmOp, inputs: list[Tensor]) -> Tensor:
    a, b = inputs[0], inputs[1]
    a = a.t() if prop_int(op, "trans_a") else a
    b = b.t() if prop_int(op, "trans_b") else b
    y = prop_float(op, "alpha") * (a @ b)
    return y + prop_float(op, "beta") * inputs[2] if len(inputs) > 2 else y


def max_pool(op: nn.MaxPoolOp, inputs: list[Tensor]) -> Tensor:
    x = _pad2d(inputs[0], prop_ints(op, "pads"), float("-inf"))
    y = F.max_pool2d(x, prop_ints(op, "kernel"), prop_ints(op, "strides"), 0, prop_ints(op, "dilations"),
                     ceil_mode=bool(prop_int(op, "ceil_mode")))
    return _crop(y, op)


def avg_pool(op: nn.AvgPoolOp, inputs: list[Tensor]) -> Tensor:
    x, pads = inputs[0], prop_ints(op, "pads")
    kernel, strides, ceil = prop_ints(op, "kernel"), prop_ints(op, "strides"), bool(prop_int(op, "ceil_mode"))
    if not any(pads) or prop_int(op, "count_include_pad"):
        # Explicit zero padding counts in the divisor; windows past the padded edge (ceil mode) do not.
        y = F.avg_pool2d(_pad2d(x, pads), kernel, strides, 0, ceil_mode=ceil, count_include_pad=True)
    else:
        ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
        sums = F.avg_pool2d(_pad2d(x, pads), kernel, strides, 0, ceil_mode=ceil, divisor_override=1)
        counts = F.avg_pool2d(_pad2d(ones, pads), kernel, strides, 0, ceil_mode=ceil, divisor_override=1)
        y = sums / counts
    return _crop(y, op)


def lrn(op: nn.LRNOp, inputs: list[Tensor]) -> Tensor:
    """ONNX LRN: the window over channels is [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    x, size = inputs[0], prop_int(op, "size")
    sq = (x * x).unsqueeze(1)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = F.pad(sq, (0, 0) * (x.dim() - 2) + (lo, hi))
    window = (size,) + (1,) * (x.dim() - 2)
    pool = F.avg_pool3d if x.dim() == 4 else F.avg_pool2d
    sums = pool(sq, window, stride=1, divisor_override=1).squeeze(1)
    return x / (prop_float(op, "bias") + prop_float(op, "alpha") / size * sums) ** prop_float(op, "beta")


def batch_norm(op: nn.BatchNormOp, inputs: list[Tensor]) -> Tensor:
    x, scale, bias, mean, var = inputs
    return F.batch_norm(x, mean, var, scale, bias, training=False, eps=prop_float(op, "epsilon"))


def pad(op: nn.PadOp, inputs: list[Tensor]) -> Tensor:
    x, pads = inputs[0], prop_ints(op, "pads")
    rank = x.dim()
    spec: list[int] = []
    for axis in reversed(range(rank)):
        spec += [pads[axis], pads[axis + rank]]
    return F.pad(x, spec, value=prop_float(op, "value"))


def slice_(op: nn.SliceOp, inputs: list[Tensor]) -> Tensor:
    bounds = zip(prop_ints(op, "starts"), prop_ints(op, "ends"), prop_ints(op, "steps"))
    return inputs[0][tuple(slice(b, e, s) for b, e, s in bounds)]


def elementwise(op: nn.UnaryOp | nn.BinaryOp, inputs: list[Tensor]) -> Tensor:
    """An element-wise op is its nest epilogue step (`STEP`), run by `steps.apply_step`."""
    params = [prop_float(op, p) for p in getattr(op, "PARAMS", ())]
    return apply_step(op.STEP, inputs[0], inputs[1] if len(inputs) > 1 else None, params)


ELEMENTWISE = [cls for cls in nn.NN.operations if issubclass(cls, (nn.UnaryOp, nn.BinaryOp)) and cls.STEP]
"""The nn ops that are one epilogue step."""


def reshape(op: nn.ReshapeOp, inputs: list[Tensor]) -> Tensor:
    """A reshape that keeps axis 0 and reshapes each sample (a flatten) takes any batch size."""
    shape, before = shape_of(op.result), shape_of(op.operands[0])
    per_sample = shape[:1] == before[:1] and math.prod(shape[1:]) == math.prod(before[1:])
    return inputs[0].reshape([-1, *shape[1:]] if per_sample else shape)


def _spatial(x: Tensor) -> list[int]:
    return list(range(2, x.dim()))


LOWERINGS: dict[type, Callable[..., Tensor]] = {
    nn.Conv2DOp: conv2d,
    nn.GemmOp: gemm,
    nn.MatMulOp: lambda op, xs: torch.matmul(xs[0], xs[1]),
    **{cls: elementwise for cls in ELEMENTWISE},
    nn.SoftmaxOp: lambda op, xs: torch.softmax(xs[0], prop_int(op, "axis")),
    nn.LogSoftmaxOp: lambda op, xs: torch.log_softmax(xs[0], prop_int(op, "axis")),
    nn.LRNOp: lrn,
    nn.BatchNormOp: batch_norm,
    nn.MaxPoolOp: max_pool,
    nn.AvgPoolOp: avg_pool,
    nn.GlobalAvgPoolOp: lambda op, xs: xs[0].mean(dim=_spatial(xs[0]), keepdim=True),
    nn.GlobalMaxPoolOp: lambda op, xs: xs[0].amax(dim=_spatial(xs[0]), keepdim=True),
    nn.ReduceMeanOp: lambda op, xs: xs[0].mean(dim=prop_ints(op, "axes"), keepdim=True),
    nn.ReduceSumOp: lambda op, xs: xs[0].sum(dim=prop_ints(op, "axes"), keepdim=True),
    nn.ReshapeOp: reshape,
    nn.TransposeOp: lambda op, xs: xs[0].permute(prop_ints(op, "perm")),
    nn.ConcatOp: lambda op, xs: torch.cat(xs, prop_int(op, "axis")),
    nn.PadOp: pad,
    nn.SliceOp: slice_,
    nn.ExpandOp: lambda op, xs: xs[0].expand(prop_ints(op, "shape")),
}
"""nn op class -> `fn(op, inputs) -> tensor` (inference semantics; batch-norm in eval mode)."""
