"""Affine expressions as the nest dialect reads them: value ranges, used dims, linear forms.

    expr_range(d0 * 2 + d1 - 1, [4, 3]) == (-1, 7)
    linear_form(d2 * 2 + d5 - 1) == ({2: 2, 5: 1}, -1)
    stride_of((d0, d1) -> (d1, d0), (4, 8), 0) == 1      # d0 moves along the last axis
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)
from xdsl.utils.exceptions import VerifyException

from nasir.errors import LoweringError


def expr_range(expr: AffineExpr, extents: Sequence[int]) -> tuple[int, int]:
    """Smallest and largest value of `expr` over the box 0 <= d_i < extents[i] (conservative)."""
    return expr_bounds(expr, [(0, e - 1) for e in extents])


def expr_bounds(expr: AffineExpr, ranges: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Smallest and largest value of `expr` over the box lo_i <= d_i <= hi_i (conservative)."""
    if isinstance(expr, AffineConstantExpr):
        return expr.value, expr.value
    if isinstance(expr, AffineDimExpr):
        return ranges[expr.position]
    if isinstance(expr, AffineBinaryOpExpr):
        llo, lhi = expr_bounds(expr.lhs, ranges)
        rlo, rhi = expr_bounds(expr.rhs, ranges)
        if expr.kind == AffineBinaryOpKind.Add:
            return llo + rlo, lhi + rhi
        if expr.kind == AffineBinaryOpKind.Mul:
            products = [llo * rlo, llo * rhi, lhi * rlo, lhi * rhi]
            return min(products), max(products)
        if expr.kind == AffineBinaryOpKind.FloorDiv and rlo == rhi and rlo > 0:
            return llo // rlo, lhi // rlo
        if expr.kind == AffineBinaryOpKind.CeilDiv and rlo == rhi and rlo > 0:
            return -(-llo // rlo), -(-lhi // rlo)
        if expr.kind == AffineBinaryOpKind.Mod and rlo == rhi and rlo > 0:
            if llo >= 0 and lhi < rlo:
                return llo, lhi
            return 0, rlo - 1
    raise VerifyException(f"unsupported affine expression {expr}")


def used_dims(expr: AffineExpr) -> set[int]:
    """Positions of the domain dims an expression reads."""
    if isinstance(expr, AffineDimExpr):
        return {expr.position}
    if isinstance(expr, AffineBinaryOpExpr):
        return used_dims(expr.lhs) | used_dims(expr.rhs)
    return set()


def map_dims(amap: AffineMap) -> set[int]:
    return set().union(*(used_dims(e) for e in amap.results)) if amap.results else set()


def linear_coefficient(expr: AffineExpr, dim: int) -> int | None:
    """Coefficient of d`dim` in an affine expression, None if it appears under floordiv/mod."""
    if isinstance(expr, AffineDimExpr):
        return int(expr.position == dim)
    if isinstance(expr, AffineConstantExpr):
        return 0
    assert isinstance(expr, AffineBinaryOpExpr)
    lhs, rhs = linear_coefficient(expr.lhs, dim), linear_coefficient(expr.rhs, dim)
    if lhs is None or rhs is None:
        return None
    if expr.kind == AffineBinaryOpKind.Add:
        return lhs + rhs
    if expr.kind == AffineBinaryOpKind.Mul:
        const = expr.rhs if isinstance(expr.rhs, AffineConstantExpr) else expr.lhs
        coef = lhs if isinstance(expr.rhs, AffineConstantExpr) else rhs
        return coef * const.value if isinstance(const, AffineConstantExpr) else None
    return None if lhs or rhs else 0


def monotone_in(expr: AffineExpr, dims: set[int]) -> bool:
    """Whether `expr_bounds(expr, ranges)` moves one way as the ranges of `dims` move up: every
    occurrence of those dims has one sign, and none is under mod or in a product of two terms.

        monotone_in(d0 * 2 + d1 - 1, {0}) and monotone_in((d0 * -3) floordiv 4, {0})
        not monotone_in(d0 mod 4, {0}) and not monotone_in(d0 - d0 floordiv 2, {0})
    """
    return (signs := _occurrence_signs(expr, dims, 1)) is not None and len(signs) <= 1


def _occurrence_signs(expr: AffineExpr, dims: set[int], sign: int) -> set[int] | None:
    """The signs the occurrences of `dims` in `expr` carry (`sign` for a bare one); None where one
    is under mod or a product of two terms."""
    if isinstance(expr, AffineDimExpr):
        return {sign} if expr.position in dims else set()
    if isinstance(expr, AffineConstantExpr):
        return set()
    assert isinstance(expr, AffineBinaryOpExpr)
    lhs, rhs = expr.lhs, expr.rhs
    if expr.kind == AffineBinaryOpKind.Add:
        left, right = _occurrence_signs(lhs, dims, sign), _occurrence_signs(rhs, dims, sign)
        return None if left is None or right is None else left | right
    if expr.kind == AffineBinaryOpKind.Mul and isinstance(lhs, AffineConstantExpr) != isinstance(rhs, AffineConstantExpr):
        const, term = (lhs, rhs) if isinstance(lhs, AffineConstantExpr) else (rhs, lhs)
        return set() if const.value == 0 else _occurrence_signs(term, dims, sign if const.value > 0 else -sign)
    if expr.kind in (AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.CeilDiv) \
            and isinstance(rhs, AffineConstantExpr) and rhs.value > 0:
        return _occurrence_signs(lhs, dims, sign)
    return set() if not (used_dims(expr) & dims) else None


def stride_of(amap, shape, dim: int) -> int | None:
    """Elements moved in a row-major buffer of `shape` per step of d`dim` through `amap`."""
    total = 0
    for a, e in enumerate(amap.results):
        c = linear_coefficient(e, dim)
        if c is None:
            return None
        total += c * math.prod(shape[a + 1:])
    return total


def linear_form(expr: AffineExpr) -> tuple[dict[int, int], int] | None:
    """`d2 * 2 + d5 - 1` -> ({2: 2, 5: 1}, -1); None when the expression is not linear."""
    if isinstance(expr, AffineDimExpr):
        return {expr.position: 1}, 0
    if isinstance(expr, AffineConstantExpr):
        return {}, expr.value
    if isinstance(expr, AffineBinaryOpExpr) and expr.kind in (AffineBinaryOpKind.Add, AffineBinaryOpKind.Mul):
        lhs, rhs = linear_form(expr.lhs), linear_form(expr.rhs)
        if lhs is None or rhs is None:
            return None
        if expr.kind == AffineBinaryOpKind.Add:
            coeffs = dict(lhs[0])
            for d, c in rhs[0].items():
                coeffs[d] = coeffs.get(d, 0) + c
            return coeffs, lhs[1] + rhs[1]
        for (coeffs, _), (other, k) in ((lhs, rhs), (rhs, lhs)):
            if not other:
                return {d: c * k for d, c in coeffs.items()}, (lhs[1] * rhs[1])
    return None


def flat_form(amap: AffineMap, shape: Sequence[int]) -> tuple[dict[int, int], int] | None:
    """The flat row-major offset of `amap`'s results in a tensor of `shape` as a linear form of the
    dims: (dim -> coefficient, constant); None when a result is not linear.

        (d0, d1 * 2 + d2) in 4 x 6  ->  ({0: 6, 1: 2, 2: 1}, 0)"""
    coeffs: dict[int, int] = {}
    offset, stride = 0, 1
    for axis in reversed(range(len(shape))):
        form = linear_form(amap.results[axis])
        if form is None:
            return None
        for d, c in form[0].items():
            coeffs[d] = coeffs.get(d, 0) + c * stride
        offset += form[1] * stride
        stride *= shape[axis]
    return coeffs, offset


def evaluate(expr: AffineExpr, dim: Callable[[int], Any]) -> Any:
    """Value of an affine expression, with dim i given by `dim(i)`: an int, or anything with
    Python's integer arithmetic (a torch index tensor, a TVM expression).

        evaluate(d0 * 2 + d1 - 1, [3, 1].__getitem__) == 6
    """
    if isinstance(expr, AffineDimExpr):
        return dim(expr.position)
    if isinstance(expr, AffineConstantExpr):
        return expr.value
    if isinstance(expr, AffineBinaryOpExpr):
        a, b = evaluate(expr.lhs, dim), evaluate(expr.rhs, dim)
        if expr.kind == AffineBinaryOpKind.Add:
            return a + b
        if expr.kind == AffineBinaryOpKind.Mul:
            return a * b
        if expr.kind == AffineBinaryOpKind.FloorDiv:
            return a // b
        if expr.kind == AffineBinaryOpKind.CeilDiv:
            return -((-a) // b)
        if expr.kind == AffineBinaryOpKind.Mod:
            return a % b
    raise LoweringError(f"unsupported affine expression {expr}")


def one_channel(amap: AffineMap, g: int, co: int, m: int, width: int) -> bool:
    """Whether `amap` reads dims `g` and `co` (others 0) only as `m * g + co` on the first `width`
    lanes of g: the same element at (g, co) as at (0, m * g + co)."""
    def at(gv: int, cv: int) -> tuple[int, ...]:
        point = [0] * amap.num_dims
        point[g], point[co] = gv, cv
        return amap.eval(point, [])
    return all(at(s // m, s % m) == at(0, s) for s in range(width * m))


def interleaves(amap: AffineMap, shape: Sequence[int], g: int, co: int, m: int, width: int) -> bool:
    """Whether the values of lanes over `g` for each `co` < m, interleaved lane by lane, are m
    vectors of `width` consecutive elements of the buffer `amap` indexes (of `shape`)."""
    def offset(s: int) -> int:
        point = [0] * amap.num_dims
        point[g], point[co] = s // m, s % m
        return sum(i * math.prod(shape[a + 1:]) for a, i in enumerate(amap.eval(point, [])))
    return all(offset(s) - offset(s - s % width) == s % width for s in range(width * m))
