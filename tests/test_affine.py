"""Affine helpers against brute force: `monotone_in` promises that `expr_bounds` moves one way as a
dim's range moves up (what check_runs' bisection relies on)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.ir.affine import AffineExpr

from nasir.dialects.affine import expr_bounds, monotone_in

D0, D1 = AffineExpr.dimension(0), AffineExpr.dimension(1)


def exprs():
    leaves = st.sampled_from([D0, D1]) | st.integers(-5, 5).map(AffineExpr.constant)
    return st.recursive(leaves, lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
        st.tuples(inner, st.integers(-4, 4)).map(lambda t: t[0] * t[1]),
        st.tuples(inner, st.integers(1, 5)).map(lambda t: t[0] // t[1]),
        st.tuples(inner, st.integers(1, 5)).map(lambda t: t[0].ceil_div(t[1])),
        st.tuples(inner, st.integers(1, 5)).map(lambda t: t[0] % t[1])), max_leaves=8)


def one_way(values: list[int]) -> bool:
    steps = [b - a for a, b in zip(values, values[1:])]
    return all(s >= 0 for s in steps) or all(s <= 0 for s in steps)


@settings(max_examples=300, deadline=None)
@given(exprs(), st.integers(0, 3), st.integers(0, 4))
def test_monotone_bounds_move_one_way(expr, d1_lo, d1_width):
    if not monotone_in(expr, {0}):
        return
    bounds = [expr_bounds(expr, [(v, v + 2), (d1_lo, d1_lo + d1_width)]) for v in range(-6, 12)]
    assert one_way([lo for lo, _ in bounds]) and one_way([hi for _, hi in bounds]), (str(expr), bounds)


def test_monotone_examples():
    assert monotone_in(D0 * 2 + D1 - 1, {0}) and monotone_in((D0 * -3) // 4, {0})
    assert monotone_in(D1 % 4, {0})  # d0 does not occur
    assert not monotone_in(D0 % 4, {0}) and not monotone_in(D0 - D0 // 2, {0})
