"""One `nest.compute` op as TVM tensor expressions (TE); `te.create_prim_func` makes its PrimFunc.

The TVM counterpart of `nest_to_torch.nest_ops` (the reference semantics), in the same four steps:

1. the domain's parallel dims are the compute's axes, its reduction dims `te.reduce_axis`es; every
   input is read through its access map, the map evaluated on those variables (`affine.evaluate`, shared
   with the torch backend); an axis whose index can leave the input (`expr_range`) is a guarded
   read, `if_then_else(in bounds, x[...], identity)`: 0 for mac/copy, -inf for max, and for avg
   the position is left out of a second reduction that counts the window;
2. the combiner reduces: `te.sum(a * b)` for mac, `te.max`, sum / count for avg, none for copy;
3. the epilogue steps run on the reduced value, their inputs read at the parallel dims;
4. the result is laid out by out_map: identity maps write the grid as it is; any other bijection
   whose flat offsets form a mixed radix of the parallel dims (`g * CO + co`, a permutation, a
   dim split into adjacent parts) gets each output element from the grid point it inverts to.

A 3x3 conv with padding 1, bias and ReLU (maps as in the `nest` dialect's docstring) becomes

    conv = te.compute((1, 16, 32, 32), lambda n, co, oh, ow: te.sum(
        if_then_else(0 <= oh + kh - 1 < 32 and 0 <= ow + kw - 1 < 32,
                     x[n, ci, oh + kh - 1, ow + kw - 1], 0) * w[co, ci, kh, kw], axis=[ci, kh, kw]))
    out = te.compute((1, 16, 32, 32), lambda n, co, oh, ow: max(conv[n, co, oh, ow] + b[co], 0))
"""

from __future__ import annotations

import math

from tvm import te, tirx
from xdsl.ir.affine import AffineExpr

from nasir.dialects import affine, nest
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError

F32 = "float32"


def _unsupported(op: nest.ComputeOp, why: str) -> LoweringError:
    return LoweringError(f"tvm backend: nest '{op.layer_name}' cannot be converted: {why}")


def _index(op: nest.ComputeOp, expr, dims: list) -> tirx.PrimExpr:
    try:
        value = affine.evaluate(expr, dims.__getitem__)
    except LoweringError:
        raise _unsupported(op, f"its access '{expr}' is not an affine expression TVM takes") from None
    return tirx.const(value, "int32") if isinstance(value, int) else value


class Reader:
    """Reads of input `k` of `op` through its access map at the domain point `dims` (TE variables)."""

    def __init__(self, op: nest.ComputeOp, tensors: list[te.Tensor]):
        self.op = op
        self.tensors = tensors
        self.extents = [e for _, e in op.domain.dims]

    def _leaving(self, k: int) -> list[tuple[int, AffineExpr]]:
        """(axis, index expression) of the axes on which reads of input `k` can leave it."""
        shape = shape_of(self.op.inputs[k])
        ranges = [affine.expr_range(e, self.extents) for e in self.op.access_maps[k].results]
        return [(axis, e) for axis, (e, (lo, hi)) in enumerate(zip(self.op.access_maps[k].results, ranges))
                if lo < 0 or hi >= shape[axis]]

    def in_bounds(self, k: int) -> bool:
        """Whether every read of input `k` is inside it (no guard, no identity)."""
        return not self._leaving(k)

    def bounds(self, k: int, dims: list) -> tirx.PrimExpr | None:
        """The condition that the read of input `k` at `dims` is in bounds; None where always."""
        shape = shape_of(self.op.inputs[k])
        conds = []
        for axis, expr in self._leaving(k):
            idx = _index(self.op, expr, dims)
            conds += [idx >= 0, idx < shape[axis]]
        return tirx.all(*conds) if conds else None

    def read(self, k: int, dims: list) -> tirx.PrimExpr:
        """The unguarded read of input `k` at `dims`."""
        return self.tensors[k][tuple(_index(self.op, e, dims) for e in self.op.access_maps[k].results)]

    def guarded(self, k: int, dims: list, identity: float) -> tirx.PrimExpr:
        """The read of input `k` at `dims`, `identity` where it falls outside the input."""
        cond = self.bounds(k, dims)
        value = self.read(k, dims)
        return value if cond is None else tirx.if_then_else(cond, value, tirx.const(identity, F32))


def combiner_stage(op: nest.ComputeOp) -> str:
    """The name of the TE stage whose loops are the domain's (avg's sum; its count has its own).
    Stages are named by what they compute, not by layer (the PrimFunc's name says the layer), so
    the traces of one nest's schedule apply to another's (`tuning.nest_class`)."""
    return f"nest.{'sum' if op.kind == 'avg' and op.domain.reduction else op.kind}"


def _core(op: nest.ComputeOp, reader: Reader) -> te.Tensor:
    """The combiner's value at every point of the parallel grid (before the epilogue)."""
    parallel, reduction = op.domain.parallel, op.domain.reduction
    shape = [e for _, e in parallel]
    name = "nest"
    axes = [te.reduce_axis((0, e), name=n) for n, e in reduction]

    def at(par):
        return list(par) + axes

    if op.kind == "copy":
        return te.compute(shape, lambda *p: reader.guarded(0, at(p), 0.0), name=f"{name}.copy")
    if op.kind == "mac":
        def mac(*p):
            product = reader.guarded(0, at(p), 0.0) * reader.guarded(1, at(p), 0.0)
            return te.sum(product, axis=axes) if axes else product
        return te.compute(shape, mac, name=f"{name}.mac")
    if op.kind == "max":
        if not axes:
            return te.compute(shape, lambda *p: reader.guarded(0, at(p), -math.inf), name=f"{name}.max")
        return te.compute(shape, lambda *p: te.max(reader.guarded(0, at(p), -math.inf), axis=axes),
                          name=f"{name}.max")
    if op.kind == "avg":
        if not axes:
            return te.compute(shape, lambda *p: reader.guarded(0, at(p), 0.0), name=f"{name}.avg")
        total = te.compute(shape, lambda *p: te.sum(reader.guarded(0, at(p), 0.0), axis=axes), name=f"{name}.sum")
        if reader.in_bounds(0):
            size = tirx.const(float(math.prod(e for _, e in reduction)), F32)
            return te.compute(shape, lambda *p: total[p] / size, name=f"{name}.avg")
        count_axes = [te.reduce_axis((0, e), name=n) for n, e in reduction]

        def count(*p):
            cond = reader.bounds(0, list(p) + count_axes)
            one = tirx.const(1.0, F32)
            return te.sum(one if cond is None else tirx.Select(cond, one, tirx.const(0.0, F32)), axis=count_axes)
        counts = te.compute(shape, count, name=f"{name}.count")
        return te.compute(shape, lambda *p: total[p] / counts[p], name=f"{name}.avg")
    raise _unsupported(op, f"combiner '{op.kind}' has no TVM form")


def _step(op: nest.ComputeOp, reader: Reader, kind: str, refs: list[int], params: list[float], x, par):
    """One epilogue step on value `x` at parallel point `par`."""
    f32 = lambda v: tirx.const(v, F32)  # noqa: E731
    if refs:
        other = reader.read(refs[0], list(par))
        if kind == "prelu":
            return tirx.Select(x < f32(0.0), x * other, x)
        return {"add": lambda: x + other, "sub": lambda: x - other, "mul": lambda: x * other,
                "div": lambda: x / other, "pow": lambda: tirx.power(x, other),
                "min": lambda: tirx.min(x, other), "max": lambda: tirx.max(x, other)}[kind]()
    simple = {"tanh": tirx.tanh, "exp": tirx.exp, "log": tirx.log, "sqrt": tirx.sqrt, "abs": tirx.abs}
    if kind in simple:
        return simple[kind](x)
    if kind == "neg":
        return f32(0.0) - x
    if kind == "sign":
        return tirx.Select(x > f32(0.0), f32(1.0), tirx.Select(x < f32(0.0), f32(-1.0), x))
    if kind == "softplus":
        return tirx.max(x, f32(0.0)) + tirx.log(f32(1.0) + tirx.exp(f32(0.0) - tirx.abs(x)))
    if kind in ("elu", "selu"):
        y = tirx.Select(x > f32(0.0), x, f32(params[0]) * (tirx.exp(x) - f32(1.0)))
        return y * f32(params[1]) if kind == "selu" else y
    if kind == "shrink":
        return tirx.Select(x < f32(-params[0]), x + f32(params[1]),
                           tirx.Select(x > f32(params[0]), x - f32(params[1]), f32(0.0)))
    if kind == "relu":
        return tirx.max(x, f32(0.0))
    if kind == "sigmoid":
        return tirx.sigmoid(x)
    if kind == "hard_swish":
        return x * tirx.min(tirx.max(x + f32(3.0), f32(0.0)), f32(6.0)) / f32(6.0)
    if kind == "leaky_relu":
        return tirx.Select(x < f32(0.0), x * f32(params[0]), x)
    if kind == "clip":
        return tirx.min(tirx.max(x, f32(params[0])), f32(params[1]))
    if kind == "hard_sigmoid":
        return tirx.min(tirx.max(x * f32(params[0]) + f32(params[1]), f32(0.0)), f32(1.0))
    if kind == "scale":
        return x * f32(params[0])
    raise _unsupported(op, f"epilogue step '{kind}' has no TVM form")


def _grid_point(op: nest.ComputeOp) -> list[tuple[int, int]] | None:
    """Per parallel dim, (stride, extent) in the output's flat row-major offset, when out_map is a
    mixed radix of the parallel dims (then dim d = flat // stride % extent); else None."""
    npar = op.domain.num_parallel.data
    extents = [e for _, e in op.domain.parallel]
    flat = affine.flat_form(op.output_map, shape_of(op.result))
    if flat is None:
        return None
    coeffs, offset = flat
    radix = sorted((coeffs.get(d, 0), extents[d]) for d in range(npar) if extents[d] > 1)
    expected = 1
    for c, e in radix:
        if c != expected:
            return None
        expected *= e
    if offset != 0:
        return None
    return [(coeffs.get(d, 0), extents[d]) if extents[d] > 1 else (0, 1) for d in range(npar)]


def _is_identity(op: nest.ComputeOp) -> bool:
    npar = op.domain.num_parallel.data
    results = op.output_map.results
    return (len(results) == npar and tuple(shape_of(op.result)) == tuple(e for _, e in op.domain.parallel)
            and all(affine.linear_form(e) == ({d: 1}, 0) for d, e in enumerate(results)))


def compute(op: nest.ComputeOp, tensors: list[te.Tensor]) -> te.Tensor:
    """The TE tensor of `op` on `tensors` (one per input, in operand order), shaped like its result."""
    reader = Reader(op, tensors)
    core = _core(op, reader)
    steps = op.steps
    identity = _is_identity(op)
    if identity and not steps:
        return core

    def finish(par):
        x = core[tuple(par)]
        for kind, refs, params in steps:
            x = _step(op, reader, kind, refs, params, x, par)
        return x

    if identity:
        return te.compute(core.shape, lambda *p: finish(p), name="nest.epilogue")
    radix = _grid_point(op)
    if radix is None:
        raise _unsupported(op, f"its out_map {op.output_map} is not a mixed-radix layout of the parallel dims")
    out_shape = shape_of(op.result)

    def relayout(*o):
        flat = tirx.const(0, "int32")
        for axis, size in enumerate(out_shape):
            flat = flat * size + o[axis]
        return finish([tirx.floormod(tirx.floordiv(flat, s), e) if e > 1 else tirx.const(0, "int32")
                       for s, e in radix])

    return te.compute(out_shape, relayout, name="nest.layout")
