"""Constant folding of ONNX nodes with numpy, for the ONNX frontend.

Exporters wrap shape arithmetic around `Reshape` (`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`)
and sometimes compute weights (`Transpose` of an initializer, `ConstantOfShape` fills). The frontend
(`onnx_import`) calls `fold(node, inputs, opset)` for a node whose inputs are all known arrays; the
result arrays replace the node. `Shape` folds on any input with a static shape: it receives a
`StaticShape` instead of an array.

    Shape(x: 1x64x7x7) -> [1, 64, 7, 7];  Gather(that, 0) -> 1;  Unsqueeze(1, [0]) -> [1]
    Concat([1], [-1]) -> [1, -1];  Reshape(x, [1, -1]) is then a plain nn.reshape to 1x3136
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto, helper, numpy_helper

from nasir.errors import FrontendError


@dataclass(frozen=True)
class StaticShape:
    """Stand-in for a runtime tensor whose shape (but not value) is known; only `Shape` reads it."""

    shape: tuple[int, ...]


def attributes(node: NodeProto) -> dict[str, object]:
    """The node's attributes as Python values (tensors as numpy arrays, strings decoded)."""
    out: dict[str, object] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif a.type == a.TENSOR:
            value = numpy_helper.to_array(value)
        out[a.name] = value
    return out


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise FrontendError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def reshape_target(shape: Sequence[int], target: Sequence[int], allowzero: bool = False) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input dim (unless allowzero), -1 is inferred."""
    out = [int(d) for d in target]
    if not allowzero:
        out = [shape[i] if d == 0 else d for i, d in enumerate(out)]
    if out.count(-1) > 1:
        raise FrontendError(f"Reshape target {list(target)} has more than one -1")
    size = int(np.prod(shape))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or size % known:
            raise FrontendError(f"cannot reshape {list(shape)} to {list(target)}")
        out[out.index(-1)] = size // known
    if int(np.prod(out)) != size:
        raise FrontendError(f"cannot reshape {list(shape)} to {list(target)}")
    return tuple(out)


def squeeze_shape(shape: Sequence[int], axes: Sequence[int] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = {normalize_axis(int(a), len(shape)) for a in axes}
    if any(shape[a] != 1 for a in axes):
        raise FrontendError(f"Squeeze axes {sorted(axes)} of shape {list(shape)} are not all 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unsqueeze_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    axes = sorted(normalize_axis(int(a), rank) for a in axes)
    out, rest = [], iter(shape)
    for i in range(rank):
        out.append(1 if i in axes else next(rest))
    return tuple(out)


def flatten_shape(shape: Sequence[int], axis: int) -> tuple[int, int]:
    axis = axis + len(shape) if axis < 0 else axis
    return int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))


def axes_arg(node_attrs: dict, inputs: list, position: int, opset: int, since: int) -> list[int] | None:
    """`axes` of Squeeze/Unsqueeze/Slice...: an attribute before opset `since`, an input after."""
    if opset < since:
        axes = node_attrs.get("axes")
        return None if axes is None else [int(a) for a in axes]
    if len(inputs) > position and inputs[position] is not None:
        return [int(a) for a in np.asarray(inputs[position]).reshape(-1)]
    return None


def _binary(fn: Callable) -> Callable:
    def run(node, attrs, inputs, opset):
        a, b = inputs
        if opset < 7 and attrs.get("broadcast") and "axis" in attrs:
            b = legacy_broadcast(np.asarray(b), np.ndim(a), int(attrs["axis"]))
        return [fn(np.asarray(a), np.asarray(b))]
    return run


def legacy_broadcast(b, rank: int, axis: int):
    """Opset < 7 `broadcast=1, axis=k`: b's dims line up with a's starting at k (trailing 1s added)."""
    axis = axis + rank if axis < 0 else axis
    trailing = rank - axis - len(b.shape)
    return b.reshape(tuple(b.shape) + (1,) * trailing) if trailing > 0 else b


def _div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return (np.trunc(a / b)).astype(np.result_type(a, b))
    return a / b


def _shape(node, attrs, inputs, opset):
    (x,) = inputs
    shape = x.shape if isinstance(x, StaticShape) else np.shape(x)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return [np.array(shape[start: None if end is None else int(end)], dtype=np.int64)]


def _gather(node, attrs, inputs, opset):
    data, idx = (np.asarray(v) for v in inputs)
    axis = normalize_axis(int(attrs.get("axis", 0)), data.ndim)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take(data, idx, axis=axis)]


def _unsqueeze(node, attrs, inputs, opset):
    x = np.asarray(inputs[0])
    return [x.reshape(unsqueeze_shape(x.shape, axes_arg(attrs, inputs, 1, opset, 13)))]


def _squeeze(node, attrs, inputs, opset):
    x = np.asarray(inputs[0])
    return [x.reshape(squeeze_shape(x.shape, axes_arg(attrs, inputs, 1, opset, 13)))]


def _concat(node, attrs, inputs, opset):
    arrays = [np.asarray(v) for v in inputs]
    return [np.concatenate(arrays, axis=normalize_axis(int(attrs["axis"]), arrays[0].ndim))]


def _cast(node, attrs, inputs, opset):
    return [np.asarray(inputs[0]).astype(helper.tensor_dtype_to_np_dtype(int(attrs["to"])))]


def slice_bounds(attrs, inputs, opset: int, shape: Sequence[int]) -> list[slice]:
    """One Python slice per axis of an ONNX Slice of a tensor of `shape` (`inputs[1:]`: the constant
    starts, ends, axes and steps of opset >= 10; attributes before)."""
    if opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes, steps = attrs.get("axes"), None
    else:
        starts, ends = inputs[1], inputs[2]
        axes = inputs[3] if len(inputs) > 3 else None
        steps = inputs[4] if len(inputs) > 4 else None
    starts = [int(s) for s in np.asarray(starts).reshape(-1)]
    ends = [int(e) for e in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    index = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[normalize_axis(a, len(shape))] = slice(s, e, st)
    return index


def _slice(node, attrs, inputs, opset):
    x = np.asarray(inputs[0])
    return [x[tuple(slice_bounds(attrs, inputs, opset, x.shape))]]


def constant_of_shape(attrs, shape) -> np.ndarray:
    value = attrs.get("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return np.full(tuple(int(d) for d in np.asarray(shape).reshape(-1)), fill[0], dtype=fill.dtype)


def _reshape(node, attrs, inputs, opset):
    x = np.asarray(inputs[0])
    target = attrs["shape"] if opset < 5 else np.asarray(inputs[1]).reshape(-1)
    return [x.reshape(reshape_target(x.shape, target, bool(attrs.get("allowzero", 0))))]


def _transpose(node, attrs, inputs, opset):
    x = np.asarray(inputs[0])
    return [np.transpose(x, attrs.get("perm"))]


def _range(node, attrs, inputs, opset):
    start, limit, delta = (np.asarray(v) for v in inputs)
    return [np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta))]


def _flatten(node, attrs, inputs, opset):
    x = np.asarray(inputs[0])
    return [x.reshape(flatten_shape(x.shape, int(attrs.get("axis", 1))))]


FOLDERS: dict[str, Callable] = {
    "Shape": _shape,
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Cast": _cast,
    "Slice": _slice,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "ConstantOfShape": lambda node, attrs, inputs, opset: [constant_of_shape(attrs, inputs[0])],
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Range": _range,
    "Flatten": _flatten,
    "Identity": lambda node, attrs, inputs, opset: [inputs[0]],
}
"""ONNX op type -> numpy implementation over constant inputs (returns the output arrays)."""


def fold(node: NodeProto, attrs: dict, inputs: list, opset: int) -> list[np.ndarray]:
    return [np.asarray(v) for v in FOLDERS[node.op_type](node, attrs, inputs, opset)]
