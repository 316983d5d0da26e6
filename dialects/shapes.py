"""Tensor types and shape arithmetic of the graph level: static float32 tensors, ONNX broadcasting
and window extents.

    shape_of(tensor([1, 16, 32, 32])) == (1, 16, 32, 32)
    broadcast_shapes((1, 16, 1, 1), (1, 16, 8, 8)) == (1, 16, 8, 8)
    pool_extent(32, kernel=3, stride=2, pad_begin=1, pad_end=1) == 16
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DenseArrayBase, TensorType, f32, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.utils.exceptions import VerifyException

Shape = tuple[int, ...]


def tensor(shape: Sequence[int]) -> TensorType:
    """The float32 tensor type of `shape`."""
    return TensorType(f32, list(shape))


def shape_of(value: SSAValue | Attribute) -> Shape:
    """Static shape of a tensor value or type."""
    ty = value.type if isinstance(value, SSAValue) else value
    if not isinstance(ty, TensorType):
        raise VerifyException(f"expected a tensor, got {ty}")
    return tuple(ty.get_shape())


def ints(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def broadcast_shapes(*shapes: Shape) -> Shape:
    """Numpy/ONNX multidirectional broadcasting."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise VerifyException(f"shapes {list(shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def pool_extent(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                dilation: int = 1, ceil_mode: bool = False) -> int:
    """Output extent of a window op along one axis (ONNX Conv/Pool semantics)."""
    span = dilation * (kernel - 1) + 1
    room = size + pad_begin + pad_end - span
    if room < 0:
        raise VerifyException(f"window {span} larger than padded input {size + pad_begin + pad_end}")
    if not ceil_mode:
        return room // stride + 1
    out = -(-room // stride) + 1
    # The last window must start inside the input or the begin padding (PyTorch/ONNX rule).
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out
