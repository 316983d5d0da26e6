"""ONNX node -> nn ops: one converter per supported op type, used by `onnx_import.Importer`.

A converter is `fn(importer, node, attrs, inputs) -> outputs`: `inputs` are the node's input values
(SSA values, numpy arrays for constants, None for omitted optional inputs); it emits nn ops through
`importer.emit` and returns one value per ONNX output it defines. ONNX details that nn does not
model are rewritten here, e.g. 1-D convolutions and pools run as 2-D ones over a height of 1:

    Conv(x: 2x4x10, W: 5x4x3)  ->  nn.reshape x to 2x4x1x10, nn.weight W as 5x4x1x3,
                                   nn.conv2d (name "conv"), nn.reshape to 2x5x8
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, f32, i64
from xdsl.ir import SSAValue

from nasir.dialects import nn
from nasir.dialects.shapes import broadcast_shapes, shape_of
from nasir.errors import FrontendError, UnsupportedOpError
from nasir.frontend.folding import (
    axes_arg,
    flatten_shape,
    legacy_broadcast,
    normalize_axis,
    reshape_target,
    slice_bounds,
    squeeze_shape,
    unsqueeze_shape,
)

F32_MAX = float(np.finfo(np.float32).max)


def _unsupported(node, what: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{node.op_type} node '{node.name or node.op_type}': {what} is not supported")


def _reshape(imp, node, value: SSAValue, shape, suffix: str) -> SSAValue:
    if shape_of(value) == tuple(shape):
        return value
    return imp.emit(nn.ReshapeOp.new(value, shape), node, suffix)


def _operand(imp, node, i: int, shape=None) -> SSAValue:
    """Input i as an SSA value; a constant is reshaped to `shape` before it becomes a weight."""
    const = imp.const(node.input[i])
    if const is not None and shape is not None and const.shape != tuple(shape):
        return imp.weight(const.reshape(shape), node.input[i])
    value = imp.value(node.input[i])
    return value if shape is None else _reshape(imp, node, value, shape, f"in{i}")


# --- window ops (Conv, MaxPool, AveragePool) ----------------------------------------------------

def _window(node, attrs, spatial: tuple[int, ...], kernel: tuple[int, ...]):
    """(strides, dilations, [t, l, b, r] pads) of a 1-D or 2-D window op, as 2-D lists."""
    n = len(spatial)
    strides = [int(s) for s in attrs.get("strides", [1] * n)]
    dilations = [int(d) for d in attrs.get("dilations", [1] * n)]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else total - small)
            ends.append(total - begins[-1])
    elif auto_pad in ("NOTSET", "VALID"):
        pads = [int(p) for p in attrs.get("pads", [0] * 2 * n)] if auto_pad == "NOTSET" else [0] * 2 * n
        begins, ends = pads[:n], pads[n:]
    else:
        raise _unsupported(node, f"auto_pad '{auto_pad}'")
    for what, values, least in (("kernel_shape", list(kernel), 1), ("strides", strides, 1),
                                ("dilations", dilations, 1), ("pads", begins + ends, 0)):
        if len(values) != (2 * n if what == "pads" else n) or any(v < least for v in values):
            raise FrontendError(f"{what} {values} of a {n}-D window: need {2 * n if what == 'pads' else n} "
                                f"values >= {least}")
    for size, k, d, b, e in zip(spatial, kernel, dilations, begins, ends):
        if d * (k - 1) + 1 > size + b + e:
            raise FrontendError(f"window of {k} (dilation {d}) wider than its input of {size} padded by {b} + {e}")
    if n == 1:
        return [1] + strides, [1] + dilations, [0, begins[0], 0, ends[0]]
    return strides, dilations, begins + ends


def _spatial_rank(node, x: SSAValue) -> int:
    rank = len(shape_of(x)) - 2
    if rank not in (1, 2):
        raise _unsupported(node, f"a {rank}-D window (input {list(shape_of(x))}; nasir has 1-D and 2-D)")
    return rank


def _as_2d(imp, node, x: SSAValue, rank: int) -> SSAValue:
    n, c, *spatial = shape_of(x)
    return x if rank == 2 else _reshape(imp, node, x, (n, c, 1, *spatial), "to2d")


def _from_2d(imp, node, y: SSAValue, rank: int) -> SSAValue:
    n, c, _, w = shape_of(y)
    return y if rank == 2 else _reshape(imp, node, y, (n, c, w), "to1d")


def conv(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    rank = _spatial_rank(node, x)
    wshape = tuple(np.shape(inputs[1])) if isinstance(inputs[1], np.ndarray) else shape_of(inputs[1])
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", wshape[2:]))
    if kernel != tuple(wshape[2:]):
        raise FrontendError(f"Conv node '{node.name or node.op_type}': kernel_shape {list(kernel)} contradicts "
                            f"its weight's shape {list(wshape)}")
    strides, dilations, pads = _window(node, attrs, shape_of(x)[2:], kernel)
    w = _operand(imp, node, 1, wshape[:2] + (1,) + wshape[2:] if rank == 1 else None)
    b = imp.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    groups, channels = int(attrs.get("group", 1)), shape_of(x)[1]
    if groups < 1 or channels % groups or wshape[0] % groups or wshape[1] * groups != channels:
        raise FrontendError(f"weight {list(wshape)} in {groups} group(s) does not fit an input of {channels} "
                            f"channels")
    op = nn.Conv2DOp.new(_as_2d(imp, node, x, rank), w, b, strides=strides, pads=pads,
                         dilations=dilations, groups=groups)
    return [_from_2d(imp, node, imp.emit(op, node), rank)]


def conv_transpose(imp, node, attrs, inputs):
    """ConvTranspose as the convolution it is the gradient of: the input zero-dilated by the
    strides (a reshape to [N, C, H, 1, W, 1], zero padding of the size-1 axes to the strides, a
    reshape back), padded by (k - 1) * dilation - pads (a crop where that is negative), and
    convolved at stride 1 with the weight flipped and its in/out channels swapped per group:

        ConvTranspose(x: 1x3x7x6, W: 3x4x3x3, strides [3, 2], pads 1, output_padding 1)
          ->  reshape 1x3x7x1x6x1, nn.pad to 1x3x7x3x6x2, reshape 1x3x21x12,
              nn.conv2d (W flipped as 4x3x3x3, pads [1, 1, 0, 0]) -> 1x4x21x12
    """
    x = imp.value(node.input[0])
    rank = _spatial_rank(node, x)
    w = imp.require_const(node, node.input[1], "the weight")
    if "output_shape" in attrs or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise _unsupported(node, "ConvTranspose with output_shape or auto_pad SAME_*")
    lift = (lambda v, one: [one] + [int(a) for a in v]) if rank == 1 else (lambda v, one: [int(a) for a in v])
    n = rank
    strides = lift(attrs.get("strides", [1] * n), 1)
    dilations = lift(attrs.get("dilations", [1] * n), 1)
    extra = lift(attrs.get("output_padding", [0] * n), 0)
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * n)] if attrs.get("auto_pad", "NOTSET") == "NOTSET" else [0] * 2 * n
    begins, ends = lift(pads[:n], 0), lift(pads[n:], 0)
    groups = int(attrs.get("group", 1))
    w = w.reshape(w.shape[:2] + (1,) + w.shape[2:]) if rank == 1 else w
    c, m, kh, kw = w.shape
    if groups < 1 or c % groups or c != shape_of(x)[1]:
        raise FrontendError(f"weight {list(w.shape)} in {groups} group(s) does not fit an input of "
                            f"{shape_of(x)[1]} channels")
    flipped = (w.reshape(groups, c // groups, m, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
               .reshape(groups * m, c // groups, kh, kw))
    y = _as_2d(imp, node, x, rank)
    bn, bc, h, wd = shape_of(y)
    if strides != [1, 1]:
        y = _reshape(imp, node, y, (bn, bc, h, 1, wd, 1), "dilate")
        y = imp.emit(nn.PadOp.new(y, [0] * 9 + [strides[0] - 1, 0, strides[1] - 1]), node, "zeros")
        y = _reshape(imp, node, y, (bn, bc, h * strides[0], wd * strides[1]), "dilated")
    size = shape_of(y)[2:]
    before = [(k - 1) * d - p for k, d, p in zip((kh, kw), dilations, begins)]
    after = [(k - 1) * d - p + o - (s - 1) for k, d, p, o, s in zip((kh, kw), dilations, ends, extra, strides)]
    if min(before + after) < 0:
        lo = [max(0, -b) for b in before]
        hi = [z - max(0, -a) for z, a in zip(size, after)]
        y = imp.emit(nn.SliceOp.new(y, [0, 0, *lo], [bn, bc, *hi]), node, "crop")
    b = imp.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    op = nn.Conv2DOp.new(y, imp.weight(np.ascontiguousarray(flipped), node.input[1]), b,
                         pads=[max(0, v) for v in before + after], dilations=dilations, groups=groups)
    return [_from_2d(imp, node, imp.emit(op, node), rank)]


def _pool(imp, node, attrs, build: Callable):
    x = imp.value(node.input[0])
    rank = _spatial_rank(node, x)
    kernel = [int(k) for k in attrs["kernel_shape"]]
    strides, dilations, pads = _window(node, attrs, shape_of(x)[2:], tuple(kernel))
    kernel = [1] + kernel if rank == 1 else kernel
    y = imp.emit(build(_as_2d(imp, node, x, rank), kernel, strides, pads, dilations), node)
    return [_from_2d(imp, node, y, rank)]


def max_pool(imp, node, attrs, inputs):
    ceil = bool(attrs.get("ceil_mode", 0))
    return _pool(imp, node, attrs, lambda x, k, s, p, d: nn.MaxPoolOp.new(
        x, k, strides=s, pads=p, dilations=d, ceil_mode=ceil))


def average_pool(imp, node, attrs, inputs):
    if any(int(d) != 1 for d in attrs.get("dilations", [])):
        raise _unsupported(node, "AveragePool with dilations")
    ceil, include = bool(attrs.get("ceil_mode", 0)), bool(attrs.get("count_include_pad", 0))
    return _pool(imp, node, attrs, lambda x, k, s, p, d: nn.AvgPoolOp.new(
        x, k, strides=s, pads=p, ceil_mode=ceil, count_include_pad=include))


# --- dense -------------------------------------------------------------------------------------

def gemm(imp, node, attrs, inputs):
    c = imp.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    op = nn.GemmOp.new(imp.value(node.input[0]), imp.value(node.input[1]), c,
                       alpha=float(attrs.get("alpha", 1.0)), beta=float(attrs.get("beta", 1.0)),
                       trans_a=bool(attrs.get("transA", 0)), trans_b=bool(attrs.get("transB", 0)))
    return [imp.emit(op, node)]


def matmul(imp, node, attrs, inputs):
    return [imp.emit(nn.MatMulOp.new(imp.value(node.input[0]), imp.value(node.input[1])), node)]


# --- element-wise ------------------------------------------------------------------------------

def _unary(cls, **defaults):
    def convert(imp, node, attrs, inputs):
        props = {k: FloatAttr(float(attrs.get(k, v)), f32) for k, v in defaults.items()}
        return [imp.emit(cls.new(imp.value(node.input[0]), **props), node)]
    return convert


def clip(imp, node, attrs, inputs):
    if imp.opset < 11:
        lo, hi = attrs.get("min", -F32_MAX), attrs.get("max", F32_MAX)
    else:
        bound = [None, None]
        for i in (1, 2):
            if len(node.input) > i and node.input[i]:
                bound[i - 1] = float(imp.require_const(node, node.input[i], "the clip bound"))
        lo = -F32_MAX if bound[0] is None else bound[0]
        hi = F32_MAX if bound[1] is None else bound[1]
    op = nn.ClipOp.new(imp.value(node.input[0]), min=FloatAttr(float(lo), f32), max=FloatAttr(float(hi), f32))
    return [imp.emit(op, node)]


def _binary(cls):
    def convert(imp, node, attrs, inputs):
        a = imp.value(node.input[0])
        shape = None
        if imp.opset < 7 and attrs.get("broadcast") and "axis" in attrs:
            b_shape = tuple(np.shape(inputs[1])) if isinstance(inputs[1], np.ndarray) else shape_of(inputs[1])
            shape = legacy_broadcast(np.empty(b_shape), len(shape_of(a)), int(attrs["axis"])).shape
        return [imp.emit(cls.new(a, _operand(imp, node, 1, shape)), node)]
    return convert


def _variadic(cls):
    """Sum, Min, Max of any number of inputs: a chain of the binary op."""
    def convert(imp, node, attrs, inputs):
        acc = imp.value(node.input[0])
        for name in node.input[1:]:
            acc = imp.emit(cls.new(acc, imp.value(name)), node)
        return [acc]
    return convert


def prelu(imp, node, attrs, inputs):
    """Before opset 7 a slope of [C] is per channel (axis 1); from 7 on it broadcasts numpy-style."""
    x = imp.value(node.input[0])
    slope = tuple(np.shape(inputs[1])) if isinstance(inputs[1], np.ndarray) else shape_of(inputs[1])
    rank = len(shape_of(x))
    per_channel = imp.opset < 7 and len(slope) == 1 and rank > 2
    shape = slope + (1,) * (rank - 2) if per_channel else None
    return [imp.emit(nn.PReluOp.new(x, _operand(imp, node, 1, shape)), node)]


def batch_norm(imp, node, attrs, inputs):
    if int(attrs.get("training_mode", 0)):
        raise _unsupported(node, "training_mode=1")
    for role, name in zip(("scale", "bias", "mean", "var"), node.input[1:5]):
        array = imp.const(name)
        if array is not None and array.dtype != np.float32:
            raise FrontendError(f"BatchNormalization node '{node.name or node.op_type}': its {role} '{name}' is "
                                f"{array.dtype} beside float32 data (nasir computes in float32 only): "
                                f"store the parameters as float32")
    x, scale, bias, mean, var = (imp.value(n) for n in node.input[:5])
    op = nn.BatchNormOp.new(x, scale, bias, mean, var, epsilon=float(attrs.get("epsilon", 1e-5)))
    return [imp.emit(op, node)]


def instance_norm(imp, node, attrs, inputs):
    """InstanceNormalization from reductions and element-wise ops, per sample and channel:
    d = x - reduce_mean(x); y = d / sqrt(reduce_mean(d * d) + epsilon) * scale + bias."""
    x = imp.value(node.input[0])
    shape = shape_of(x)
    axes, per_channel = list(range(2, len(shape))), (shape[1],) + (1,) * (len(shape) - 2)
    if not axes:
        raise FrontendError(f"InstanceNormalization of a rank-{len(shape)} input (needs N, C and spatial axes)")
    emit = lambda op, suffix: imp.emit(op, node, suffix)  # noqa: E731
    d = emit(nn.SubOp.new(x, emit(nn.ReduceMeanOp.new(x, axes), "mean")), "centred")
    var = emit(nn.ReduceMeanOp.new(emit(nn.MulOp.new(d, d), "square"), axes), "var")
    eps = imp.weight(np.full((1,), float(attrs.get("epsilon", 1e-5)), np.float32), f"{node.input[0]}.epsilon")
    std = emit(nn.SqrtOp.new(emit(nn.AddOp.new(var, eps), "var_eps")), "std")
    y = emit(nn.MulOp.new(emit(nn.DivOp.new(d, std), "normed"), _operand(imp, node, 1, per_channel)), "scaled")
    return [imp.emit(nn.AddOp.new(y, _operand(imp, node, 2, per_channel)), node)]


def _softmax(cls):
    """Softmax / LogSoftmax; before opset 13 over all dims from `axis` on, as one flattened row."""
    def convert(imp, node, attrs, inputs):
        x = imp.value(node.input[0])
        shape = shape_of(x)
        axis = normalize_axis(int(attrs.get("axis", 1 if imp.opset < 13 else -1)), len(shape))
        if imp.opset >= 13 or axis == len(shape) - 1:
            return [imp.emit(cls.new(x, axis=IntegerAttr(axis, i64)), node)]
        flat = _reshape(imp, node, x, flatten_shape(shape, axis), "coerce2d")
        y = imp.emit(cls.new(flat, axis=IntegerAttr(1, i64)), node)
        return [_reshape(imp, node, y, shape, "restore")]
    return convert


def lrn(imp, node, attrs, inputs):
    op = nn.LRNOp.new(imp.value(node.input[0]), size=IntegerAttr(int(attrs["size"]), i64),
                      alpha=FloatAttr(float(attrs.get("alpha", 1e-4)), f32),
                      beta=FloatAttr(float(attrs.get("beta", 0.75)), f32),
                      bias=FloatAttr(float(attrs.get("bias", 1.0)), f32))
    return [imp.emit(op, node)]


def forward(imp, node, attrs, inputs):
    """Identity and inference-mode Dropout. A Dropout's mask output (Caffe2-era exporters, opset
    6-9, name it) is fine when nothing reads it; a mask that is read is not supported."""
    if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1] in imp.read_names:
        raise _unsupported(node, "a Dropout mask output that is read")
    return [inputs[0]]


def _reduce(cls, axes_input_since: int):
    """ReduceMean / ReduceSum over any axes (all when none are given, unless noop_with_empty_axes):
    nn.reduce_mean / nn.reduce_sum, reshaped for keepdims=0. A ReduceMean over axes 2 and 3 of an
    NCHW tensor, as exporters write a global average pool (nasir's own `Model.to_onnx` too), is
    nn.global_avg_pool. `axes` is an attribute before `axes_input_since`, a constant input from it on."""
    def convert(imp, node, attrs, inputs):
        x = imp.value(node.input[0])
        shape = shape_of(x)
        axes = axes_arg(attrs, [imp.const(n) for n in node.input], 1, imp.opset, axes_input_since)
        if imp.opset >= axes_input_since and len(node.input) > 1 and node.input[1] and axes is None:
            imp.require_const(node, node.input[1], "axes")
        if not axes and int(attrs.get("noop_with_empty_axes", 0)):
            return [x]
        axes = sorted({normalize_axis(int(a), len(shape)) for a in axes}) if axes else list(range(len(shape)))
        if cls is nn.ReduceMeanOp and len(shape) == 4 and axes == [2, 3]:
            y = imp.emit(nn.GlobalAvgPoolOp.new(x), node)
        else:
            y = imp.emit(cls.new(x, axes), node)
        if int(attrs.get("keepdims", 1)):
            return [y]
        if len(axes) == len(shape):
            raise _unsupported(node, "a reduction to a rank-0 tensor (keepdims=0 over every axis)")
        return [_reshape(imp, node, y, tuple(d for a, d in enumerate(shape) if a not in axes), "squeeze")]
    return convert


def cast(imp, node, attrs, inputs):
    from onnx import TensorProto

    if int(attrs["to"]) not in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
        raise _unsupported(node, f"Cast of a runtime tensor to {TensorProto.DataType.Name(int(attrs['to']))}")
    return [inputs[0]]


# --- data movement -----------------------------------------------------------------------------

def flatten(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    return [_reshape(imp, node, x, flatten_shape(shape_of(x), int(attrs.get("axis", 1))), "")]


def reshape(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    target = attrs["shape"] if imp.opset < 5 else imp.require_const(node, node.input[1], "the target shape")
    shape = reshape_target(shape_of(x), np.asarray(target).reshape(-1), bool(attrs.get("allowzero", 0)))
    return [_reshape(imp, node, x, shape, "")]


def squeeze(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    axes = axes_arg(attrs, [imp.const(n) for n in node.input], 1, imp.opset, 13)
    if imp.opset >= 13 and len(node.input) > 1 and node.input[1] and axes is None:
        imp.require_const(node, node.input[1], "axes")
    return [_reshape(imp, node, x, squeeze_shape(shape_of(x), axes), "")]


def unsqueeze(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    if imp.opset >= 13:
        imp.require_const(node, node.input[1], "axes")
    axes = axes_arg(attrs, [imp.const(n) for n in node.input], 1, imp.opset, 13)
    return [_reshape(imp, node, x, unsqueeze_shape(shape_of(x), axes), "")]


def transpose(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    perm = attrs.get("perm", list(reversed(range(len(shape_of(x))))))
    return [imp.emit(nn.TransposeOp.new(x, [int(p) for p in perm]), node)]


def concat(imp, node, attrs, inputs):
    values = [imp.value(n) for n in node.input if n]
    axis = normalize_axis(int(attrs["axis"]), len(shape_of(values[0])))
    return [imp.emit(nn.ConcatOp.new(values, axis), node)]


def pad(imp, node, attrs, inputs):
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise _unsupported(node, f"Pad mode '{mode}' (only 'constant', 'reflect' and 'edge')")
    x = imp.value(node.input[0])
    rank = len(shape_of(x))
    if imp.opset < 11:
        pads = [int(p) for p in attrs.get("pads", attrs.get("paddings", []))]
        value = float(attrs.get("value", 0.0))
    else:
        pads = [int(p) for p in imp.require_const(node, node.input[1], "pads").reshape(-1)]
        has_value = len(node.input) > 2 and node.input[2]
        value = float(imp.require_const(node, node.input[2], "the pad value").reshape(-1)[0]) if has_value else 0.0
        if len(node.input) > 3 and node.input[3]:
            axes = [normalize_axis(int(a), rank) for a in imp.require_const(node, node.input[3], "axes").reshape(-1)]
            full = [0] * 2 * rank
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise FrontendError(f"Pad: {len(pads)} pads for a rank-{rank} input")
    if mode != "constant":
        return [_edge_pad(imp, node, x, pads, mode)]
    return [imp.emit(nn.PadOp.new(x, pads, value), node)]


def slice_(imp, node, attrs, inputs):
    """Slice of a runtime tensor with constant bounds and positive steps: nn.slice."""
    x = imp.value(node.input[0])
    shape = shape_of(x)
    if imp.opset >= 10:
        inputs = [x] + [imp.require_const(node, n, "the slice bounds") if n else None for n in node.input[1:]]
    bounds = [b.indices(d) for b, d in zip(slice_bounds(attrs, inputs, imp.opset, shape), shape)]
    if any(step < 1 for _, _, step in bounds):
        raise _unsupported(node, "a Slice with a negative step")
    if any(start >= stop for start, stop, _ in bounds):
        raise _unsupported(node, "an empty Slice")
    if all((b, e, st) == (0, d, 1) for (b, e, st), d in zip(bounds, shape)):
        return [x]
    starts, ends, steps = zip(*bounds)
    return [imp.emit(nn.SliceOp.new(x, starts, ends, steps), node)]


def _pieces(imp, node, x: SSAValue, axis: int, edges: list[tuple[int, int]], suffix: str) -> list[SSAValue]:
    """Slices [begin, end) of `x` along `axis`."""
    shape = shape_of(x)
    return [imp.emit(nn.SliceOp.new(x, [b if a == axis else 0 for a in range(len(shape))],
                                    [e if a == axis else d for a, d in enumerate(shape)]), node, f"{suffix}{k}")
            for k, (b, e) in enumerate(edges)]


def split(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    shape = shape_of(x)
    axis = normalize_axis(int(attrs.get("axis", 0)), len(shape))
    sizes = attrs.get("split")
    if imp.opset >= 13 and len(node.input) > 1 and node.input[1]:
        sizes = imp.require_const(node, node.input[1], "the split sizes").reshape(-1)
    if sizes is None:
        parts = int(attrs.get("num_outputs", len(node.output)))
        chunk = -(-shape[axis] // parts)
        sizes = [min(chunk, shape[axis] - k * chunk) for k in range(parts)]
    sizes = [int(v) for v in sizes]
    if sum(sizes) != shape[axis] or min(sizes) < 1:
        raise FrontendError(f"Split sizes {sizes} do not partition axis {axis} of {list(shape)}")
    offsets = np.cumsum([0] + sizes)
    return _pieces(imp, node, x, axis, list(zip(offsets[:-1], offsets[1:])), "part")


def expand(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    target = [int(v) for v in imp.require_const(node, node.input[1], "the target shape").reshape(-1)]
    shape = broadcast_shapes(shape_of(x), tuple(target))
    return [x if shape == shape_of(x) else imp.emit(nn.ExpandOp.new(x, shape), node)]


def tile(imp, node, attrs, inputs):
    """Tile: per repeated axis, nn.concat of the copies."""
    y = imp.value(node.input[0])
    repeats = [int(v) for v in imp.require_const(node, node.input[1], "the repeats").reshape(-1)]
    if len(repeats) != len(shape_of(y)) or min(repeats) < 1:
        raise FrontendError(f"Tile repeats {repeats} for a rank-{len(shape_of(y))} input")
    for axis, r in enumerate(repeats):
        if r > 1:
            y = imp.emit(nn.ConcatOp.new([y] * r, axis), node, f"axis{axis}")
    return [y]


def _edge_pad(imp, node, x: SSAValue, pads: list[int], mode: str) -> SSAValue:
    """Reflect or edge padding, axis by axis: nn.concat of width-1 slices of the border (reflect:
    x[p], ..., x[1] before and x[-2], ..., x[-1-p] after; edge: the first and last slice expanded)
    around x."""
    rank = len(shape_of(x))
    for axis in range(rank):
        size, before, after = shape_of(x)[axis], pads[axis], pads[axis + rank]
        if not before and not after:
            continue
        if min(before, after) < 0 or (mode == "reflect" and max(before, after) >= size):
            raise FrontendError(f"Pad: {mode} pads {before}, {after} of an axis of {size}")
        if mode == "reflect":
            head = _pieces(imp, node, x, axis, [(k, k + 1) for k in range(before, 0, -1)], f"a{axis}b")
            tail = _pieces(imp, node, x, axis, [(size - 1 - k, size - k) for k in range(1, after + 1)], f"a{axis}e")
        else:
            head, tail = (_pieces(imp, node, x, axis, [(b, b + 1)], f"a{axis}{tag}") if n else []
                          for b, n, tag in ((0, before, "b"), (size - 1, after, "e")))
            head, tail = ([imp.emit(nn.ExpandOp.new(v, [n if a == axis else d for a, d in enumerate(shape_of(v))]),
                                    node, f"a{axis}x") if n > 1 else v for v in part]
                          for part, n in ((head, before), (tail, after)))
        x = imp.emit(nn.ConcatOp.new(head + [x] + tail, axis), node, f"a{axis}")
    return x


def constant(imp, node, attrs, inputs):
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return [np.asarray(attrs[key], dtype=dtype)]
    raise _unsupported(node, f"Constant with {', '.join(attrs) or 'no value'}")


CONVERTERS: dict[str, Callable] = {
    "Conv": conv,
    "ConvTranspose": conv_transpose,
    "Gemm": gemm,
    "MatMul": matmul,
    "Relu": _unary(nn.ReluOp),
    "Sigmoid": _unary(nn.SigmoidOp),
    "HardSwish": _unary(nn.HardSwishOp),
    "LeakyRelu": _unary(nn.LeakyReluOp, alpha=0.01),
    "HardSigmoid": _unary(nn.HardSigmoidOp, alpha=0.2, beta=0.5),
    "Tanh": _unary(nn.TanhOp),
    "Exp": _unary(nn.ExpOp),
    "Log": _unary(nn.LogOp),
    "Sqrt": _unary(nn.SqrtOp),
    "Abs": _unary(nn.AbsOp),
    "Neg": _unary(nn.NegOp),
    "Sign": _unary(nn.SignOp),
    "Softplus": _unary(nn.SoftplusOp),
    "Elu": _unary(nn.EluOp, alpha=1.0),
    "Selu": _unary(nn.SeluOp, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875),
    "Shrink": _unary(nn.ShrinkOp, lambd=0.5, bias=0.0),
    "Clip": clip,
    "Add": _binary(nn.AddOp),
    "Sub": _binary(nn.SubOp),
    "Mul": _binary(nn.MulOp),
    "Div": _binary(nn.DivOp),
    "Pow": _binary(nn.PowOp),
    "PRelu": prelu,
    "Sum": _variadic(nn.AddOp),
    "Min": _variadic(nn.MinOp),
    "Max": _variadic(nn.MaxOp),
    "BatchNormalization": batch_norm,
    "InstanceNormalization": instance_norm,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalAveragePool": _unary(nn.GlobalAvgPoolOp),
    "ReduceMean": _reduce(nn.ReduceMeanOp, 18),
    "ReduceSum": _reduce(nn.ReduceSumOp, 13),
    "GlobalMaxPool": _unary(nn.GlobalMaxPoolOp),
    "Flatten": flatten,
    "Reshape": reshape,
    "Transpose": transpose,
    "Concat": concat,
    "Softmax": _softmax(nn.SoftmaxOp),
    "LogSoftmax": _softmax(nn.LogSoftmaxOp),
    "LRN": lrn,
    "Dropout": forward,
    "Identity": forward,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Constant": constant,
    "Pad": pad,
    "Slice": slice_,
    "Split": split,
    "Expand": expand,
    "Tile": tile,
    "Cast": cast,
}
"""ONNX op type -> converter; `folding.FOLDERS` adds the shape-arithmetic ops on constants."""
