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
from nasir.dialects.shapes import shape_of
from nasir.errors import FrontendError, UnsupportedOpError
from nasir.frontend.folding import (
    axes_arg,
    flatten_shape,
    legacy_broadcast,
    normalize_axis,
    reshape_target,
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


def sum_(imp, node, attrs, inputs):
    acc = imp.value(node.input[0])
    for name in node.input[1:]:
        acc = imp.emit(nn.AddOp.new(acc, imp.value(name)), node)
    return [acc]


def batch_norm(imp, node, attrs, inputs):
    if int(attrs.get("training_mode", 0)):
        raise _unsupported(node, "training_mode=1")
    for role, name in zip(("scale", "bias", "mean", "var"), node.input[1:5]):
        array = imp.const(name)
        if array is not None and array.dtype != np.float32:
            raise FrontendError(f"BatchNormalization node '{node.name or node.op_type}': its {role} '{name}' is "
                                f"{array.dtype} beside float32 data (ONNX Runtime refuses mixed types too): "
                                f"store the parameters as float32")
    x, scale, bias, mean, var = (imp.value(n) for n in node.input[:5])
    op = nn.BatchNormOp.new(x, scale, bias, mean, var, epsilon=float(attrs.get("epsilon", 1e-5)))
    return [imp.emit(op, node)]


def softmax(imp, node, attrs, inputs):
    x = imp.value(node.input[0])
    shape = shape_of(x)
    axis = normalize_axis(int(attrs.get("axis", 1 if imp.opset < 13 else -1)), len(shape))
    if imp.opset >= 13 or axis == len(shape) - 1:
        return [imp.emit(nn.SoftmaxOp.new(x, axis=IntegerAttr(axis, i64)), node)]
    # Opset < 13: softmax over all dims from `axis` on, as one flattened row.
    flat = _reshape(imp, node, x, flatten_shape(shape, axis), "coerce2d")
    y = imp.emit(nn.SoftmaxOp.new(flat, axis=IntegerAttr(1, i64)), node)
    return [_reshape(imp, node, y, shape, "restore")]


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


def reduce_mean(imp, node, attrs, inputs):
    """ReduceMean over the spatial axes of an NCHW tensor, as exporters write a global average
    pool (nasir's own `Model.to_onnx` too): nn.global_avg_pool, reshaped to [N, C] for keepdims=0.
    `axes` is an attribute before opset 18, a constant input from it on; other axes are not
    supported."""
    x = imp.value(node.input[0])
    shape = shape_of(x)
    axes = axes_arg(attrs, [imp.const(n) for n in node.input], 1, imp.opset, 18)
    if imp.opset >= 18 and len(node.input) > 1 and node.input[1] and axes is None:
        imp.require_const(node, node.input[1], "axes")
    if len(shape) != 4 or axes is None or sorted(normalize_axis(a, 4) for a in axes) != [2, 3]:
        raise _unsupported(node, f"ReduceMean over axes {axes if axes is not None else 'all'} of a "
                                 f"rank-{len(shape)} tensor (only over axes 2 and 3 of NCHW)")
    y = imp.emit(nn.GlobalAvgPoolOp.new(x), node)
    return [y if int(attrs.get("keepdims", 1)) else _reshape(imp, node, y, shape[:2], "squeeze")]


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
    if mode != "constant":
        raise _unsupported(node, f"Pad mode '{mode}' (only 'constant')")
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
    return [imp.emit(nn.PadOp.new(x, pads, value), node)]


def constant(imp, node, attrs, inputs):
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return [np.asarray(attrs[key], dtype=dtype)]
    raise _unsupported(node, f"Constant with {', '.join(attrs) or 'no value'}")


CONVERTERS: dict[str, Callable] = {
    "Conv": conv,
    "Gemm": gemm,
    "MatMul": matmul,
    "Relu": _unary(nn.ReluOp),
    "Sigmoid": _unary(nn.SigmoidOp),
    "HardSwish": _unary(nn.HardSwishOp),
    "LeakyRelu": _unary(nn.LeakyReluOp, alpha=0.01),
    "HardSigmoid": _unary(nn.HardSigmoidOp, alpha=0.2, beta=0.5),
    "Clip": clip,
    "Add": _binary(nn.AddOp),
    "Sub": _binary(nn.SubOp),
    "Mul": _binary(nn.MulOp),
    "Div": _binary(nn.DivOp),
    "Sum": sum_,
    "BatchNormalization": batch_norm,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalAveragePool": _unary(nn.GlobalAvgPoolOp),
    "ReduceMean": reduce_mean,
    "GlobalMaxPool": _unary(nn.GlobalMaxPoolOp),
    "Flatten": flatten,
    "Reshape": reshape,
    "Transpose": transpose,
    "Concat": concat,
    "Softmax": softmax,
    "LRN": lrn,
    "Dropout": forward,
    "Identity": forward,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Constant": constant,
    "Pad": pad,
    "Cast": cast,
}
"""ONNX op type -> converter; `folding.FOLDERS` adds the shape-arithmetic ops on constants."""
