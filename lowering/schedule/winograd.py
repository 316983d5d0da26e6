"""1-D Winograd along a conv's rows: fewer multiplies for a wide window (ResNet's stem, 3x3 convs).

A conv whose window slides `s` input columns per output column splits into `s` phases: the taps
`kw = p, p + s, ...` of phase p read only the input columns `s * i + p - pad`, so each phase is a
plain 1-D correlation of its `r_p` taps with every s-th column. Winograd's F(m, r) computes m
outputs of such a correlation from `n = m + r - 1` products instead of `m * r` (Lavin & Gray's
minimal filtering, built here from Vandermonde matrices, see `minimal_filter`):

    y[m t + j] = sum_p sum_e AT_p[j, e] * (G_p g_p)[e] * (BT_p d_p[m t : m t + n_p])[e]

so a row of m outputs over all phases takes `E = sum_p n_p` products per input channel and kernel
row instead of `m * K`. ResNet's 7x7 stride-2 stem: F(4, 4) for the even taps and F(4, 3) for the
odd ones, 13 products per 4 outputs instead of 28 (0.46x). The transforms cost little there:
`BT d` is done once per input row and shared by all output channels, `G g` once at compile time,
`AT` once per output point after its 21-term reduction. A 3x3 stride-1 conv (one phase): F(4, 3),
6 products per 4 outputs instead of 12; its kernel runs them one at a time
(`WinogradPlan.by_point`), and it pays where `G g` (c x c x 18 floats) stays in L2
(`default_schedule.pays`).

This module is the analysis and the arithmetic; `default-schedule` asks `winograd_plan` whether a
conv should run this way and marks it `nasir.winograd = m`, `pack-weights` makes `G g` once
(`WinogradPlan.weights`), `nest-bufferize` gives the kernel the scratch
`WinogradPlan.scratch_bytes` for `BT d` and `nest_to_loops/winograd.py` emits the kernel. The nest itself
still states the convolution: the torch backend and every transform see no difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from nasir.dialects import affine, nest
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Loop

TILE_OUTPUTS = 4
"""m: outputs per Winograd tile. With the window's up to 4 taps per phase that is at most 7
points, where float32 keeps about 6 digits (ResNet's stem: relative error 6e-6)."""

POINTS = [Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2)]
"""The finite interpolation points, in the order they are taken (small values keep the
transforms well conditioned); the last point of every filter is infinity."""

MAX_PRODUCT_SHARE = 0.5
"""A conv has a Winograd plan when its products are at most this share of the direct conv's
(ResNet's stem: 13 / 28 = 0.46, a 3x3 stride-1 conv: 6 / 12; a 3x3 stride-2 conv, 9 / 12, has
none); default-schedule's `pays` says where the plan beats the direct conv. A grouped conv's plan
is its groups' (each transformed input row serves its group's output channels), a depthwise conv
has none (no `ci`)."""


def minimal_filter(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(AT, G, BT) of F(m, r), exact rationals as float64: for filter g (r taps) and input d
    (n = m + r - 1 values), `AT @ ((G @ g) * (BT @ d))` is the correlation
    `y[j] = sum_k g[k] * d[j + k]` for j < m.

    With V (n x n), Vg (n x r) and Vh (n x m) the Vandermonde matrices of the points (rows
    `[1, a, a^2, ...]`, `[0, ..., 0, 1]` for infinity), polynomial multiplication is
    `c = V^-1 ((Vg g) * (Vh h))`; correlation is its transpose in h: AT = Vh^T, G = Vg, BT = V^-T.
    """
    n = m + r - 1
    if n - 1 > len(POINTS):
        raise ValueError(f"F({m}, {r}) needs {n} points; at most {len(POINTS) + 1} are defined")
    points = POINTS[: n - 1]

    def vandermonde(cols: int) -> list[list[Fraction]]:
        rows = [[a ** k for k in range(cols)] for a in points]
        return rows + [[Fraction(0)] * (cols - 1) + [Fraction(1)]]

    v = vandermonde(n)
    inverse = _inverse(v)
    at = np.array([[float(x) for x in col] for col in zip(*vandermonde(m))])
    g = np.array([[float(x) for x in row] for row in vandermonde(r)])
    bt = np.array([[float(inverse[j][i]) for j in range(n)] for i in range(n)])
    return at, g, bt


def _inverse(a: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact inverse by Gauss-Jordan elimination (the Vandermonde matrices here are at most 8x8)."""
    n = len(a)
    rows = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(i for i in range(col, n) if rows[i][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [x / lead for x in rows[col]]
        for i in range(n):
            if i != col and rows[i][col] != 0:
                f = rows[i][col]
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[col])]
    return [row[n:] for row in rows]


@dataclass(frozen=True)
class Phase:
    """The taps `kw = first, first + stride, ...` (`taps` of them) and where their products sit
    among the E of a tile (`offset`, `points` = m + taps - 1)."""

    first: int
    taps: int
    offset: int
    points: int


@dataclass(frozen=True)
class WinogradPlan:
    """How a conv nest `y[n, co, oh, ow] += x[n, ci, sh*oh + dh*kh - ph, s*ow + kw - pw] * w[...]`
    runs as 1-D Winograd along ow (positions of the dims in the domain, strides, pads, extents);
    a grouped conv's (`g` groups, `x[n, g * ci' + ci, ...]`) has its extents of a group."""

    m: int
    width: int
    dims: dict[str, int]
    stride: int
    pad: int
    row_stride: int
    row_dilation: int
    row_pad: int
    phases: tuple[Phase, ...]
    extents: dict[str, int]
    in_rows: int
    in_cols: int

    @property
    def by_point(self) -> bool:
        """Whether the kernel runs one product at a time (a conv of stride 1: one phase, E = m + r - 1
        products): its register tile is then `winograd_tiles` Winograd tiles of one product, each
        weight vector feeding that many FMAs, in a loop over input channels of its own; the
        tile's products wait in registers or on the stack for the output transform. The stem's
        2 phases (E = 13) keep a tile's E products together, each weight vector feeding 2 FMAs
        (one product at a time its stem ran 1.13x the time).

            by point:    V[row][e][ci][tile]  U[e][kh][ci][co]   (a loop over ci reads both in order)
            else:        V[ci][row][tile][e]  U[ci][kh][e][co]
        """
        return len(self.phases) == 1

    @property
    def points(self) -> int:
        """E: the products of one tile per input channel and kernel row."""
        return sum(p.points for p in self.phases)

    @property
    def tiles(self) -> int:
        """Tiles along an output row (the last may run past it: its extra outputs are dropped)."""
        return -(-self.extents["ow"] // self.m)

    @property
    def tile_lanes(self) -> int:
        """Tiles per row of the transformed input, padded to whole vectors."""
        return -(-self.tiles // self.width) * self.width

    @property
    def rows(self) -> int:
        """Rows of the transformed input: every row the output rows reach, padding included."""
        e = self.extents
        return self.row_stride * (e["oh"] - 1) + self.row_dilation * (e["kh"] - 1) + 1

    @property
    def classes(self) -> int:
        """Input columns between consecutive tiles (s * m): the input is read in that many
        residue classes, one vector of tiles each."""
        return self.stride * self.m

    def offsets(self, phase: Phase) -> list[int]:
        """Input column of point i of `phase` relative to `classes * t` (may be negative: padding)."""
        return [self.stride * i + phase.first - self.pad for i in range(phase.points)]

    @property
    def groups(self) -> int:
        """A grouped conv's groups (1 for a dense conv); `extents` are those of a group."""
        return self.extents.get("g", 1)

    @property
    def input_floats(self) -> int:
        """The transformed input V[ci][row][tile][e], ci over all groups' input channels."""
        return self.groups * self.extents["ci"] * self.rows * self.points * self.tile_lanes

    @property
    def weight_floats(self) -> int:
        """The transformed weights U of one group: ci x kh x E x co."""
        e = self.extents
        return e["ci"] * e["kh"] * self.points * e["co"]

    @property
    def scratch_bytes(self) -> int:
        """The kernel's scratch: the transformed input, made at every call (the transformed
        weights are made once, by pack-weights: `weights`)."""
        return 4 * self.input_floats

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """The transformed weights' shape, co over all groups: U[e][kh][ci][co] by point, else
        U[ci][kh][e][co]."""
        e = self.extents
        co = self.groups * e["co"]
        if self.by_point:
            return (self.points, e["kh"], e["ci"], co)
        return (e["ci"], e["kh"], self.points, co)

    def weights(self, w: np.ndarray) -> np.ndarray:
        """U = G g for every output channel, input channel and kernel row of `w` (OIHW, a grouped
        conv's I a group's), in float64, stored as float32 in `weight_shape`'s order:

            U[e][kh][ci][co] = sum_kw G[e, kw] * w[co, ci, kh, kw]      (by point)
        """
        _, g, _ = self.matrices()
        order = "ehio" if self.by_point else "iheo"
        return np.ascontiguousarray(np.einsum(f"ek,oihk->{order}", g, np.asarray(w, np.float64)), np.float32)

    def matrices(self) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """AT (m x E) over all phases, G (E x K) from the window's taps, and BT of each phase."""
        kw = self.extents["kw"]
        at = np.zeros((self.m, self.points))
        g = np.zeros((self.points, kw))
        bts = []
        for ph in self.phases:
            a, gp, bt = minimal_filter(self.m, ph.taps)
            at[:, ph.offset: ph.offset + ph.points] = a
            for k in range(ph.taps):
                g[ph.offset: ph.offset + ph.points, ph.first + self.stride * k] = gp[:, k]
            bts.append(bt)
        return at, g, bts


def winograd_plan(n: NestView, width: int) -> WinogradPlan | None:
    """The plan of a nest (NestShape's fields) if it is a batch-1 conv (dense or grouped) over an
    NCHW input whose row window is wide and strided enough (`MAX_PRODUCT_SHARE`), with
    `width`-lane vectors over whole blocks of a group's output channels; None otherwise."""
    names = [d for d, _ in n.dims]
    if width < 1 or n.combiner != "mac" or len(n.maps) < 2 or \
            names not in (["n", "co", "oh", "ow", "ci", "kh", "kw"], ["n", "g", "co", "oh", "ow", "ci", "kh", "kw"]):
        return None
    extents = dict(n.dims)
    if extents["n"] != 1 or extents["co"] % width or len(n.in_shapes[0]) != 4:
        return None
    forms = [affine.linear_form(e) for e in n.maps[0].results]
    pos = {d: i for i, d in enumerate(names)}
    want = [{pos["n"]: 1}, {pos["ci"]: 1} | ({pos["g"]: extents["ci"]} if "g" in pos else {})]
    if any(f is None for f in forms) or [f[0] for f in forms[:2]] != want or any(f[1] for f in forms[:2]):
        return None
    (rows, row_c), (cols, col_c) = forms[2], forms[3]
    if set(rows) - {pos["oh"], pos["kh"]} or set(cols) - {pos["ow"], pos["kw"]}:
        return None
    stride, dilation = cols.get(pos["ow"], 0), cols.get(pos["kw"], 0)
    if stride < 1 or dilation != 1 or rows.get(pos["oh"], 0) < 1 or rows.get(pos["kh"], 0) < 1:
        return None
    m, kw = TILE_OUTPUTS, extents["kw"]
    if (stride * m) & (stride * m - 1):  # residue classes come from halving the row
        return None
    phases, offset = [], 0
    for p in range(min(stride, kw)):
        taps = len(range(p, kw, stride))
        if m + taps - 1 > len(POINTS) + 1:
            return None
        phases.append(Phase(p, taps, offset, m + taps - 1))
        offset += m + taps - 1
    if offset > MAX_PRODUCT_SHARE * m * kw:
        return None
    return WinogradPlan(m, width, pos, stride, -col_c, rows[pos["oh"]], rows[pos["kh"]], -row_c, tuple(phases),
                       extents, *n.in_extents(0)[2:])


def row_tile_loop(plan: WinogradPlan, sched, domain: nest.DomainAttr) -> str | None:
    """The register-tile loop along ow of a schedule the Winograd kernel can run (lanes over a
    split of co, a tile of whole Winograd tiles along ow, of channel vectors and of output rows,
    all unrolled), else None."""
    if sched.fusions or sched.vector != "co.i" or ("co", plan.width) not in sched.splits:
        return None
    extent = dict(sched.loops(domain))
    tile = sched.tile_loops(domain)
    along = [n for n in tile if Loop(n).dim == "ow"]
    if len(along) != 1 or along[0] not in ("ow", "ow.i") or extent[along[0]] % plan.m \
            or any(Loop(n).dim not in ("ow", "co", "oh") for n in tile) \
            or any(sched.unroll.get(n, 1) < extent[n] for n in tile if Loop(n).dim in ("ow", "oh")):
        return None
    return along[0]
