"""The nn dialect: the graph level of nasir.

A model is a `func.func @main` over ranked float32 tensors with static shapes; each op is one tensor
operation of a CNN export. Weights are `nn.weight` ops that name an entry of the model's weight store
(see `nasir.model`); their values are never attributes of the ops that use them.

    func.func @main(%input: tensor<1x3x32x32xf32>) -> tensor<1x10xf32> {
      %w = nn.weight {name = "conv1.weight"} : tensor<16x3x3x3xf32>
      %0 = nn.conv2d %input, %w {dilations = array<i64: 1, 1>, groups = 1 : i64,
             pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>}
             : (tensor<1x3x32x32xf32>, tensor<16x3x3x3xf32>) -> tensor<1x16x32x32xf32>
      %1 = nn.relu %0 : (tensor<1x16x32x32xf32>) -> tensor<1x16x32x32xf32>
      ...
    }

Every op knows its output shape (`infer_shape`); builders use it and verifiers check it, so a
result type that disagrees with the operands is rejected when the IR is parsed or rewritten.
Pads are stored as [top, left, bottom, right] (ONNX order is begins then ends: same thing in 2-D).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    DenseResourceAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from nasir.dialects.shapes import Shape, broadcast_shapes, ints, pool_extent, shape_of, tensor


class NNOp(IRDLOperation):
    """Base of nn ops: operands, properties in the attribute dictionary, one tensor result."""

    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "operands attr-dict `:` functional-type(operands, results)"
    traits = traits_def(Pure())
    result = result_def(TensorType)
    layer = opt_prop_def(StringAttr, prop_name="name")

    # Number of leading operands that are data; the rest are optional extras (e.g. bias).
    ARITY: ClassVar[tuple[int, int]] = (1, 1)

    operands_ = var_operand_def(TensorType)

    @classmethod
    def infer_shape(cls, shapes: list[Shape], props: dict[str, Attribute]) -> Shape:
        raise NotImplementedError

    @classmethod
    def make(cls, operands: Sequence[SSAValue], **props: Attribute):
        """Build the op with its inferred result type."""
        props = {k: v for k, v in props.items() if v is not None and k != "name"}
        shape = cls.infer_shape([shape_of(o) for o in operands], props)
        return cls.create(operands=list(operands), properties=props, result_types=[tensor(shape)])

    def props_dict(self) -> dict[str, Attribute]:
        return dict(self.properties)

    @property
    def layer_name(self) -> str:
        return self.layer.data if self.layer is not None else ""

    def named(self, name: str):
        """Set the layer name users address this op by (ONNX node name); returns self."""
        self.properties["name"] = StringAttr(name)
        return self

    def verify_(self) -> None:
        lo, hi = self.ARITY
        if not lo <= len(self.operands) <= hi:
            raise VerifyException(f"{self.name} takes {lo}..{hi} operands, got {len(self.operands)}")
        expected = self.infer_shape([shape_of(o) for o in self.operands], self.props_dict())
        got = shape_of(self.result)
        if tuple(got) != tuple(expected):
            raise VerifyException(f"{self.name}: result shape {list(got)} but operands give {list(expected)}")


_REQUIRED = object()


def _ints(props: Mapping[str, Attribute], key: str, default: Sequence[int] = _REQUIRED) -> tuple[int, ...]:
    """The integer-array property `key` of a property dict (KeyError without it and a default)."""
    attr = props.get(key)
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    if default is _REQUIRED:
        raise KeyError(key)
    return tuple(default)


def _int(props: Mapping[str, Attribute], key: str, default: int = _REQUIRED) -> int:
    """The integer property `key` of a property dict (KeyError without it and a default)."""
    attr = props.get(key)
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if default is _REQUIRED:
        raise KeyError(key)
    return default


def prop_ints(op: Operation, name: str) -> list[int]:
    """An nn op's integer-array property (`pads`, `kernel`, ...) as Python ints."""
    return list(_ints(op.properties, name))


def prop_int(op: Operation, name: str) -> int:
    """An nn op's integer property (`axis`, `size`, ...)."""
    return _int(op.properties, name)


def prop_float(op: Operation, name: str) -> float:
    """An nn op's float property (`alpha`, `value`, ...)."""
    return float(op.properties[name].value.data)


def _bool(props: dict[str, Attribute], key: str, default: bool = False) -> bool:
    attr = props.get(key)
    if isinstance(attr, IntegerAttr):
        return bool(attr.value.data)
    return default


# --- leaves -------------------------------------------------------------------------------------

@irdl_op_definition
class WeightOp(IRDLOperation):
    """A named tensor of the weight store: `%w = nn.weight {name = "fc.bias"} : tensor<10xf32>`.

    When a model is printed with weights, `value` holds a `dense_resource` handle whose blob sits in
    the file's `dialect_resources` section; otherwise the value lives only in the weight store.
    """

    name = "nn.weight"
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($result)"
    traits = traits_def(Pure())
    weight_name = prop_def(StringAttr, prop_name="name")
    value = opt_prop_def(DenseResourceAttr)
    result = result_def(TensorType)

    @classmethod
    def make(cls, weight_name: str, shape: Sequence[int]) -> "WeightOp":
        return cls.create(properties={"name": StringAttr(weight_name)}, result_types=[tensor(shape)])

    @property
    def key(self) -> str:
        return self.weight_name.data


# --- convolution and dense ---------------------------------------------------------------------

@irdl_op_definition
class Conv2DOp(NNOp):
    """2-D convolution, NCHW input, OIHW weight (I = C_in / groups), optional bias[O]."""

    name = "nn.conv2d"
    ARITY: ClassVar[tuple[int, int]] = (2, 3)
    strides = prop_def(DenseArrayBase)
    pads = prop_def(DenseArrayBase)
    dilations = prop_def(DenseArrayBase)
    groups = prop_def(IntegerAttr)

    @classmethod
    def infer_shape(cls, shapes, props):
        (n, c, h, w), (o, i, kh, kw) = shapes[0], shapes[1]
        g = _int(props, "groups", 1)
        sh, sw = _ints(props, "strides", (1, 1))
        pt, pl, pb, pr = _ints(props, "pads", (0, 0, 0, 0))
        dh, dw = _ints(props, "dilations", (1, 1))
        if c != i * g or o % g:
            raise VerifyException(
                f"conv2d: input channels {c}, weight {list(shapes[1])} and groups {g} disagree")
        if len(shapes) == 3 and shapes[2] != (o,):
            raise VerifyException(f"conv2d: bias shape {list(shapes[2])} must be [{o}]")
        return (n, o, pool_extent(h, kh, sh, pt, pb, dh), pool_extent(w, kw, sw, pl, pr, dw))

    @classmethod
    def new(cls, x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1):
        operands = [x, w] + ([b] if b is not None else [])
        return cls.make(operands, strides=ints(strides), pads=ints(pads),
                        dilations=ints(dilations), groups=IntegerAttr(groups, i64))


@irdl_op_definition
class GemmOp(NNOp):
    """Y = alpha * op(A) @ op(B) + beta * C, op = transpose if trans_a / trans_b (ONNX Gemm)."""

    name = "nn.gemm"
    ARITY: ClassVar[tuple[int, int]] = (2, 3)
    alpha = prop_def(FloatAttr)
    beta = prop_def(FloatAttr)
    trans_a = prop_def(IntegerAttr)
    trans_b = prop_def(IntegerAttr)

    @classmethod
    def infer_shape(cls, shapes, props):
        a, b = shapes[0], shapes[1]
        if len(a) != 2 or len(b) != 2:
            raise VerifyException("gemm takes 2-D operands")
        m, k = a[::-1] if _bool(props, "trans_a") else a
        k2, n = b[::-1] if _bool(props, "trans_b") else b
        if k != k2:
            raise VerifyException(f"gemm: inner dimensions {k} and {k2} differ")
        if len(shapes) == 3:
            broadcast_shapes((m, n), shapes[2])
        return (m, n)

    @classmethod
    def new(cls, a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
        operands = [a, b] + ([c] if c is not None else [])
        return cls.make(operands, alpha=FloatAttr(alpha, f32), beta=FloatAttr(beta, f32),
                        trans_a=IntegerAttr(int(trans_a), i64), trans_b=IntegerAttr(int(trans_b), i64))


@irdl_op_definition
class MatMulOp(NNOp):
    """numpy.matmul semantics (batched, broadcasting), ranks >= 2 after the usual 1-D promotion."""

    name = "nn.matmul"
    ARITY: ClassVar[tuple[int, int]] = (2, 2)

    @classmethod
    def infer_shape(cls, shapes, props):
        a, b = shapes
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise VerifyException(f"matmul: inner dimensions {a2[-1]} and {b2[-2]} differ")
        out = broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
        if len(a) == 1:
            out = out[:-2] + out[-1:]
        if len(b) == 1:
            out = out[:-1]
        return out

    @classmethod
    def new(cls, a, b):
        return cls.make([a, b])


# --- element-wise ------------------------------------------------------------------------------

class UnaryOp(NNOp):
    """An op of one tensor. Element-wise ones name the nest epilogue step they are (`STEP`, with the
    float properties `PARAMS` as its parameters): convert-nn-to-nest turns each into a copy nest
    with that one step, and the backends run nn and nest level alike with one definition per step.

        %y = nn.elu %x {alpha = 1.0 : f32}  ->  nest.compute %x {combiner = "copy", epilogue = ["elu 1.0"]}
    """

    STEP: ClassVar[str] = ""
    PARAMS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def infer_shape(cls, shapes, props):
        return shapes[0]

    @classmethod
    def new(cls, x, **props):
        return cls.make([x], **props)


@irdl_op_definition
class ReluOp(UnaryOp):
    """max(x, 0)"""
    name = "nn.relu"
    STEP: ClassVar[str] = "relu"


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """1 / (1 + exp(-x))"""
    name = "nn.sigmoid"
    STEP: ClassVar[str] = "sigmoid"


@irdl_op_definition
class HardSwishOp(UnaryOp):
    """x * clip(x / 6 + 1/2, 0, 1)"""
    name = "nn.hard_swish"
    STEP: ClassVar[str] = "hard_swish"


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x if x >= 0 else alpha * x"""
    name = "nn.leaky_relu"
    STEP: ClassVar[str] = "leaky_relu"
    PARAMS: ClassVar[tuple[str, ...]] = ("alpha",)
    alpha = prop_def(FloatAttr)


@irdl_op_definition
class HardSigmoidOp(UnaryOp):
    """clip(alpha * x + beta, 0, 1)"""
    name = "nn.hard_sigmoid"
    STEP: ClassVar[str] = "hard_sigmoid"
    PARAMS: ClassVar[tuple[str, ...]] = ("alpha", "beta")
    alpha = prop_def(FloatAttr)
    beta = prop_def(FloatAttr)


@irdl_op_definition
class ClipOp(UnaryOp):
    """clip(x, min, max); ONNX's input-form bounds are folded into these properties."""
    name = "nn.clip"
    STEP: ClassVar[str] = "clip"
    PARAMS: ClassVar[tuple[str, ...]] = ("min", "max")
    min = prop_def(FloatAttr)
    max = prop_def(FloatAttr)


@irdl_op_definition
class TanhOp(UnaryOp):
    """tanh(x)"""
    name = "nn.tanh"
    STEP: ClassVar[str] = "tanh"


@irdl_op_definition
class ExpOp(UnaryOp):
    """exp(x)"""
    name = "nn.exp"
    STEP: ClassVar[str] = "exp"


@irdl_op_definition
class LogOp(UnaryOp):
    """log(x) (natural)"""
    name = "nn.log"
    STEP: ClassVar[str] = "log"


@irdl_op_definition
class SqrtOp(UnaryOp):
    """sqrt(x)"""
    name = "nn.sqrt"
    STEP: ClassVar[str] = "sqrt"


@irdl_op_definition
class AbsOp(UnaryOp):
    """|x|"""
    name = "nn.abs"
    STEP: ClassVar[str] = "abs"


@irdl_op_definition
class NegOp(UnaryOp):
    """-x"""
    name = "nn.neg"
    STEP: ClassVar[str] = "neg"


@irdl_op_definition
class SignOp(UnaryOp):
    """1 if x > 0, -1 if x < 0, else x (0, or NaN)"""
    name = "nn.sign"
    STEP: ClassVar[str] = "sign"


@irdl_op_definition
class SoftplusOp(UnaryOp):
    """log(1 + exp(x))"""
    name = "nn.softplus"
    STEP: ClassVar[str] = "softplus"


@irdl_op_definition
class EluOp(UnaryOp):
    """x if x > 0 else alpha * (exp(x) - 1)"""
    name = "nn.elu"
    STEP: ClassVar[str] = "elu"
    PARAMS: ClassVar[tuple[str, ...]] = ("alpha",)
    alpha = prop_def(FloatAttr)


@irdl_op_definition
class SeluOp(UnaryOp):
    """gamma * (x if x > 0 else alpha * (exp(x) - 1))"""
    name = "nn.selu"
    STEP: ClassVar[str] = "selu"
    PARAMS: ClassVar[tuple[str, ...]] = ("alpha", "gamma")
    alpha = prop_def(FloatAttr)
    gamma = prop_def(FloatAttr)


@irdl_op_definition
class ShrinkOp(UnaryOp):
    """x + bias if x < -lambd, x - bias if x > lambd, else 0 (ONNX Shrink)"""
    name = "nn.shrink"
    STEP: ClassVar[str] = "shrink"
    PARAMS: ClassVar[tuple[str, ...]] = ("lambd", "bias")
    lambd = prop_def(FloatAttr)
    bias = prop_def(FloatAttr)


class SoftmaxBase(UnaryOp):
    """Softmax or log-softmax over `axis`: ops the nest level keeps (each backend has a kernel)."""

    axis = prop_def(IntegerAttr)


@irdl_op_definition
class SoftmaxOp(SoftmaxBase):
    """softmax over `axis` (opset >= 13 semantics; older exports are rewritten by the frontend)."""
    name = "nn.softmax"


@irdl_op_definition
class LogSoftmaxOp(SoftmaxBase):
    """log(softmax(x)) over `axis`, computed as x - max - log(sum(exp(x - max)))."""
    name = "nn.log_softmax"


@irdl_op_definition
class LRNOp(UnaryOp):
    """Local response normalisation across channels (ONNX LRN)."""
    name = "nn.lrn"
    size = prop_def(IntegerAttr)
    alpha = prop_def(FloatAttr)
    beta = prop_def(FloatAttr)
    bias = prop_def(FloatAttr)


class BinaryOp(NNOp):
    """An element-wise op of two broadcasting tensors; `STEP` is its nest epilogue step (`add 1`)."""

    ARITY: ClassVar[tuple[int, int]] = (2, 2)
    STEP: ClassVar[str] = ""

    @classmethod
    def infer_shape(cls, shapes, props):
        return broadcast_shapes(*shapes)

    @classmethod
    def new(cls, a, b):
        return cls.make([a, b])


@irdl_op_definition
class AddOp(BinaryOp):
    """a + b with broadcasting"""
    name = "nn.add"
    STEP: ClassVar[str] = "add"


@irdl_op_definition
class SubOp(BinaryOp):
    """a - b with broadcasting"""
    name = "nn.sub"
    STEP: ClassVar[str] = "sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """a * b with broadcasting"""
    name = "nn.mul"
    STEP: ClassVar[str] = "mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """a / b with broadcasting"""
    name = "nn.div"
    STEP: ClassVar[str] = "div"


@irdl_op_definition
class PowOp(BinaryOp):
    """a ** b with broadcasting"""
    name = "nn.pow"
    STEP: ClassVar[str] = "pow"


@irdl_op_definition
class MinOp(BinaryOp):
    """min(a, b) with broadcasting (NaN where either is)"""
    name = "nn.min"
    STEP: ClassVar[str] = "min"


@irdl_op_definition
class MaxOp(BinaryOp):
    """max(a, b) with broadcasting (NaN where either is)"""
    name = "nn.max"
    STEP: ClassVar[str] = "max"


@irdl_op_definition
class PReluOp(BinaryOp):
    """x if x >= 0 else slope * x; the slope broadcasts to x (ONNX's one-way broadcasting)."""
    name = "nn.prelu"
    STEP: ClassVar[str] = "prelu"

    @classmethod
    def infer_shape(cls, shapes, props):
        if broadcast_shapes(*shapes) != shapes[0]:
            raise VerifyException(f"prelu: slope {list(shapes[1])} does not broadcast to x {list(shapes[0])}")
        return shapes[0]


@irdl_op_definition
class BatchNormOp(NNOp):
    """Inference batch-norm over axis 1: (x - mean) / sqrt(var + eps) * scale + bias.

    Operands: x, scale, bias, mean, var. Kept as its own op (not folded) at the graph level so the
    torch backend can run it in training mode for Fisher Potential.
    """

    name = "nn.batch_norm"
    ARITY: ClassVar[tuple[int, int]] = (5, 5)
    epsilon = prop_def(FloatAttr)

    @classmethod
    def infer_shape(cls, shapes, props):
        c = shapes[0][1]
        for s in shapes[1:]:
            if s != (c,):
                raise VerifyException(f"batch_norm: parameter shape {list(s)} must be [{c}]")
        return shapes[0]

    @classmethod
    def new(cls, x, scale, bias, mean, var, epsilon=1e-5):
        return cls.make([x, scale, bias, mean, var], epsilon=FloatAttr(epsilon, f32))


# --- pooling -----------------------------------------------------------------------------------

class PoolOp(NNOp):
    kernel = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)
    pads = prop_def(DenseArrayBase)
    ceil_mode = prop_def(IntegerAttr)


    @classmethod
    def infer_shape(cls, shapes, props):
        n, c, h, w = shapes[0]
        kh, kw = _ints(props, "kernel", (1, 1))
        sh, sw = _ints(props, "strides", (1, 1))
        pt, pl, pb, pr = _ints(props, "pads", (0, 0, 0, 0))
        dh, dw = _ints(props, "dilations", (1, 1))
        ceil = _bool(props, "ceil_mode")
        return (n, c, pool_extent(h, kh, sh, pt, pb, dh, ceil), pool_extent(w, kw, sw, pl, pr, dw, ceil))


@irdl_op_definition
class MaxPoolOp(PoolOp):
    """Max over each window; padding never wins."""

    name = "nn.max_pool"
    dilations = prop_def(DenseArrayBase)

    @classmethod
    def new(cls, x, kernel, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=False):
        return cls.make([x], kernel=ints(kernel), strides=ints(strides), pads=ints(pads),
                        dilations=ints(dilations), ceil_mode=IntegerAttr(int(ceil_mode), i64))


@irdl_op_definition
class AvgPoolOp(PoolOp):
    """Mean over each window; `count_include_pad` decides whether padding counts in the divisor."""

    name = "nn.avg_pool"
    count_include_pad = prop_def(IntegerAttr)

    @classmethod
    def new(cls, x, kernel, strides=(1, 1), pads=(0, 0, 0, 0), ceil_mode=False, count_include_pad=False):
        return cls.make([x], kernel=ints(kernel), strides=ints(strides), pads=ints(pads),
                        ceil_mode=IntegerAttr(int(ceil_mode), i64),
                        count_include_pad=IntegerAttr(int(count_include_pad), i64))


class GlobalPoolOp(UnaryOp):
    @classmethod
    def infer_shape(cls, shapes, props):
        return shapes[0][:2] + (1,) * (len(shapes[0]) - 2)


@irdl_op_definition
class GlobalAvgPoolOp(GlobalPoolOp):
    """Mean over all spatial positions, keeping them as size-1 dims."""
    name = "nn.global_avg_pool"


@irdl_op_definition
class GlobalMaxPoolOp(GlobalPoolOp):
    """Max over all spatial positions, keeping them as size-1 dims."""
    name = "nn.global_max_pool"


# --- data movement -----------------------------------------------------------------------------

@irdl_op_definition
class ReshapeOp(NNOp):
    """Row-major reshape to the result type (Flatten, Squeeze, Unsqueeze and Reshape all become this)."""

    name = "nn.reshape"

    @classmethod
    def new(cls, x, shape: Sequence[int]):
        return cls.create(operands=[x], result_types=[tensor(shape)])

    @classmethod
    def infer_shape(cls, shapes, props):
        raise NotImplementedError("reshape takes its shape from the result type")

    def verify_(self) -> None:
        if math.prod(shape_of(self.operands[0])) != math.prod(shape_of(self.result)):
            raise VerifyException(
                f"reshape: {list(shape_of(self.operands[0]))} and {list(shape_of(self.result))} differ in size")


@irdl_op_definition
class TransposeOp(NNOp):
    """Permute dimensions: out.shape[i] = in.shape[perm[i]]."""

    name = "nn.transpose"
    perm = prop_def(DenseArrayBase)

    @classmethod
    def infer_shape(cls, shapes, props):
        perm = _ints(props, "perm", tuple(reversed(range(len(shapes[0])))))
        if sorted(perm) != list(range(len(shapes[0]))):
            raise VerifyException(f"transpose: {list(perm)} is not a permutation")
        return tuple(shapes[0][p] for p in perm)

    @classmethod
    def new(cls, x, perm):
        return cls.make([x], perm=ints(perm))


@irdl_op_definition
class ConcatOp(NNOp):
    """Concatenate along `axis` (non-negative)."""

    name = "nn.concat"
    ARITY: ClassVar[tuple[int, int]] = (1, 1 << 30)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer_shape(cls, shapes, props):
        axis = _int(props, "axis", 0)
        first = shapes[0]
        for s in shapes[1:]:
            if len(s) != len(first) or any(a != b for d, (a, b) in enumerate(zip(s, first)) if d != axis):
                raise VerifyException(f"concat on axis {axis}: shapes {list(map(list, shapes))} disagree")
        return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]

    @classmethod
    def new(cls, values, axis):
        return cls.make(list(values), axis=IntegerAttr(axis, i64))

    def blocks(self) -> list[int] | None:
        """Element offsets of the inputs in the result when each input is one contiguous block of
        it (every dim before `axis` is 1: channels of an NCHW tensor at batch 1), else None:

            nn.concat(1x64x8x8, 1x32x8x8, 1x32x8x8) {axis = 1}  ->  [0, 4096, 6144]
        """
        out = self.results[0].type.get_shape()
        if any(d != 1 for d in out[: self.axis.value.data % len(out)]):
            return None
        starts, at = [], 0
        for v in self.operands:
            starts.append(at)
            at += math.prod(v.type.get_shape())
        return starts


@irdl_op_definition
class PadOp(NNOp):
    """Constant padding: pads = [begin_0, ..., begin_r-1, end_0, ..., end_r-1] (ONNX order)."""

    name = "nn.pad"
    pads = prop_def(DenseArrayBase)
    value = prop_def(FloatAttr)

    @classmethod
    def infer_shape(cls, shapes, props):
        s = shapes[0]
        p = _ints(props, "pads", (0,) * 2 * len(s))
        out = tuple(d + p[i] + p[i + len(s)] for i, d in enumerate(s))
        if any(d <= 0 for d in out):
            raise VerifyException(f"pad: result shape {list(out)} is empty")
        return out

    @classmethod
    def new(cls, x, pads, value=0.0):
        return cls.make([x], pads=ints(pads), value=FloatAttr(value, f32))


@irdl_op_definition
class SliceOp(NNOp):
    """x[starts[0]:ends[0]:steps[0], ...]: one slice per axis, non-negative in-bounds starts and
    ends, positive steps (the frontend normalises ONNX's). Split and the edges of reflect and edge
    padding are slices too.

        %y = nn.slice %x {starts = array<i64: 0, 2>, ends = array<i64: 4, 6>, steps = array<i64: 1, 2>}
             : (tensor<4x8xf32>) -> tensor<4x2xf32>
    """

    name = "nn.slice"
    starts = prop_def(DenseArrayBase)
    ends = prop_def(DenseArrayBase)
    steps = prop_def(DenseArrayBase)

    @classmethod
    def infer_shape(cls, shapes, props):
        s = shapes[0]
        starts, ends, steps = (_ints(props, k, ()) for k in ("starts", "ends", "steps"))
        if not len(starts) == len(ends) == len(steps) == len(s):
            raise VerifyException(f"slice: starts, ends and steps need {len(s)} values each")
        if any(not 0 <= b < e <= d or st < 1 for b, e, st, d in zip(starts, ends, steps, s)):
            raise VerifyException(f"slice: [{list(starts)}, {list(ends)}) by {list(steps)} of {list(s)} is "
                                  f"empty or out of bounds")
        return tuple(-(-(e - b) // st) for b, e, st in zip(starts, ends, steps))

    @classmethod
    def new(cls, x, starts, ends, steps=None):
        return cls.make([x], starts=ints(starts), ends=ints(ends), steps=ints(steps or [1] * len(starts)))


@irdl_op_definition
class ExpandOp(NNOp):
    """Broadcast x to `shape` (numpy rules; `shape` is the result's, ONNX Expand's target already
    broadcast with x's shape by the frontend)."""

    name = "nn.expand"
    shape = prop_def(DenseArrayBase)

    @classmethod
    def infer_shape(cls, shapes, props):
        target = _ints(props, "shape", ())
        if broadcast_shapes(shapes[0], target) != target:
            raise VerifyException(f"expand: {list(shapes[0])} does not broadcast to {list(target)}")
        return target

    @classmethod
    def new(cls, x, shape):
        return cls.make([x], shape=ints(shape))


class ReduceOp(NNOp):
    """A reduction over `axes` (non-negative, sorted) that keeps them as size-1 dims."""

    axes = prop_def(DenseArrayBase)

    @classmethod
    def infer_shape(cls, shapes, props):
        s, axes = shapes[0], _ints(props, "axes", ())
        if not axes or any(not 0 <= a < len(s) for a in axes) or list(axes) != sorted(set(axes)):
            raise VerifyException(f"{cls.name}: axes {list(axes)} of a rank-{len(s)} tensor")
        return tuple(1 if a in axes else d for a, d in enumerate(s))

    @classmethod
    def new(cls, x, axes):
        return cls.make([x], axes=ints(sorted(axes)))


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Mean over `axes`: `nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>`."""
    name = "nn.reduce_mean"


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum over `axes`, kept as size-1 dims."""
    name = "nn.reduce_sum"


NN = Dialect(
    "nn",
    [
        WeightOp, Conv2DOp, GemmOp, MatMulOp,
        ReluOp, SigmoidOp, HardSwishOp, LeakyReluOp, HardSigmoidOp, ClipOp,
        TanhOp, ExpOp, LogOp, SqrtOp, AbsOp, NegOp, SignOp, SoftplusOp, EluOp, SeluOp, ShrinkOp,
        SoftmaxOp, LogSoftmaxOp, LRNOp,
        AddOp, SubOp, MulOp, DivOp, PowOp, MinOp, MaxOp, PReluOp, BatchNormOp,
        MaxPoolOp, AvgPoolOp, GlobalAvgPoolOp, GlobalMaxPoolOp, ReduceMeanOp, ReduceSumOp,
        ReshapeOp, TransposeOp, ConcatOp, PadOp, SliceOp, ExpandOp,
    ],
    [],
)
