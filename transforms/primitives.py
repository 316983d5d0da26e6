"""Syno's coordinate primitives as rewrites of a conv nest's dims: the pieces operators are built of.

A conv nest already is a coordinate expression (Syno, BACKGROUND.md section 3): a domain of named
dims, the data access (input 0), the weight access (input 1) and the output access, each a linear
form of the dims. Syno's views rewrite how the data is read; its contractions say which dims the
weight reads and which are summed. Here each is an architecture transform on that expression
(`nasir.transforms.arch.ArchPass`: `layers`, `init`, `seed`), lowered by the existing nest lowering
to torch, llvm and TVM like any nest:

| Syno       | pass                              | the rewrite                                          |
|------------|-----------------------------------|------------------------------------------------------|
| SPLIT      | `split-dim{dim=D factor=B}`       | D -> D_o * B + D_i everywhere (meaning kept)          |
| MERGE      | `merge-dims{outer=A inner=B}`     | A * extent(B) + B -> one dim (meaning kept)           |
| SHIFT      | `shift{dim=oh offset=1}`          | Canvas's shift (window.py)                            |
| UNFOLD     | `unfold{dim=oh size=K}`           | Canvas's unfold (window.py)                           |
| STRIDE     | `dilate{dim=kh factor=S}`         | a window's taps S apart: kh -> kh * S, kept centred   |
| EXPAND     | `expand{dim=D}`                   | the weight stops reading D: one weight for all of D   |
| SHARE      | `share{dim=D}`                    | the weight reads D too: its own weight per value of D |
| REDUCE     | `tie{dim=R to=P}`                 | reduction dim R is read as parallel dim P: no sum     |

REDUCE makes a coordinate a summed one; its inverse in a rewrite that starts from a conv is `tie`,
which stops summing R and reads it at P instead (Syno builds a grouped conv that way: the input
channel's group coordinate comes from the output's, not from a reduction). A grouped conv is three
primitives, the same nest `group{factor=2}` makes (its dims named apart):

    domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 8, kh = 3, kw = 3]>
      x (n, ci, oh + kh - 1, ow + kw - 1)   w (co, ci, kh, kw)   out (n, co, oh, ow)
    -- split-dim{dim=co factor=4},split-dim{dim=ci factor=4},tie{dim=ci_o to=co_o} -->
    domain = #nest.domain<[n = 1, co_o = 2, co_i = 4, oh = 8, ow = 8], [ci_i = 4, kh = 3, kw = 3]>
      x (n, co_o * 4 + ci_i, ...)   w (co_o * 4 + co_i, ci_i, kh, kw)   out (n, co_o * 4 + co_i, oh, ow)

Weights follow the weight access: its shape is what its forms reach (`NestSpec.input_shape`), each
axis's form divided by the gcd of its coefficients (a weight is free: no entry goes unread), an
axis that no dim indexes any more keeps size 1 (PyTorch's depthwise layout, [Co, 1, kh, kw]).
`init=inherit` carries the trained values through the change of access (`carry`): `tie` keeps
the entries at R = P (a block diagonal), `expand` their mean over D, `share` a copy per value of D
(the function is unchanged), `dilate` the taps as they are. SPLIT and MERGE keep meaning and
weights. A rewritten nest loses its schedule (default-schedule gives it one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nasir.dialects import nest
from nasir.errors import LegalityError, PassError
from nasir.transforms.arch import ArchPass, Edit
from nasir.transforms.nest_spec import Form, NestSpec
from nasir.transforms.window import conv_with

DATA, WEIGHT = 0, 1


def _linear(spec: NestSpec, what: str) -> None:
    for forms in spec.forms + [spec.out]:
        for f in forms:
            if f.raw is not None:
                raise LegalityError(f"{what}: layer '{spec.name}': access {f} is not linear")


def carry(value: np.ndarray, old: list[Form], new: list[Form], extents: dict[str, int],
          shape: list[int]) -> np.ndarray:
    """A weight read through forms `new` (of `shape`) that holds what `value` held under forms
    `old`: for every point of the dims either reads, new[new(point)] gets old[old(point)], the mean
    where several points meet one entry; entries no point reaches are zero.

        old w (co, ci), new w (co, 0), co = ci = 0..3:   the diagonal of w, as a column
    """
    dims = [d for d in extents if any(f.uses(d) for f in old + new)]
    grid = np.meshgrid(*[np.arange(extents[d]) for d in dims], indexing="ij", sparse=True)
    points = tuple(extents[d] for d in dims)

    def at(forms: list[Form]) -> tuple[np.ndarray, ...]:
        return tuple(np.broadcast_to(sum((c * grid[dims.index(d)] for d, c in f.terms.items()),
                                         np.zeros((), np.int64)) + f.const, points) for f in forms)

    total = np.zeros(shape, np.float64)
    count = np.zeros(shape, np.int64)
    where = at(new)
    np.add.at(total, where, value[at(old)])
    np.add.at(count, where, 1)
    return (total / np.maximum(count, 1)).astype(np.float32)


def _reweight(edit: Edit, op: nest.ComputeOp, spec: NestSpec, old: list[Form],
              extents: dict[str, int]) -> None:
    """Input 1 of `spec` becomes a weight of the shape its (new) forms reach, fresh or `carry`d
    from the trained value read through `old` (forms over the dims of `extents`)."""
    for f in spec.forms[WEIGHT]:  # a weight is free: `ci_o * 4` after a tie reads as `ci_o`, no gaps
        step = math.gcd(*f.terms.values()) if f.terms else 1
        f.terms, f.const = {d: c // step for d, c in f.terms.items()}, 0
    shape = spec.input_shape(WEIGHT)
    new = _copy(spec.forms[WEIGHT])
    spec.inputs[WEIGHT] = edit.reshaped(spec.inputs[WEIGHT], shape,
                                        lambda w: carry(w, old, new, extents, shape), op, spec.name)


def _copy(forms: list[Form]) -> list[Form]:
    return [f.copy() for f in forms]


def _replace(edit: Edit, op: nest.ComputeOp, spec: NestSpec) -> None:
    spec.schedule = None
    edit.replace(op, spec.build())


@dataclass(frozen=True)
class OnDim(ArchPass):
    """A primitive on one dim `dim` of a conv."""

    dim: str = "co"

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, (self.dim,))


@dataclass(frozen=True)
class ScalingDim(OnDim):
    """A primitive on one dim `dim` of a conv by a `factor` of at least 2."""

    factor: int = 2

    def check_options(self) -> None:
        if self.factor < 2:
            raise PassError(f"{self.name}: factor must be an integer of at least 2, got {self.factor}")


# --- views ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SplitDimPass(ScalingDim):
    """`split-dim{dim=D factor=B layers=REGEX}` (SPLIT): dim D of extent E becomes D_o (E / B) and
    D_i (B), read as D_o * B + D_i by every access. The function and the weights stay.

        [n = 1, co = 8, ...]  w (co, ci, kh, kw)  -- split-dim{dim=co factor=4} -->
        [n = 1, co_o = 2, co_i = 4, ...]  w (co_o * 4 + co_i, ci, kh, kw)
    """

    name = "split-dim"

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        _linear(spec, self.name)
        extent = spec.extent(self.dim)
        if extent % self.factor or extent == self.factor:
            raise LegalityError(f"split-dim: layer '{spec.name}': dimension {self.dim} = {extent} is not a "
                                f"multiple of factor {self.factor} larger than it")
        outer, inner = spec.unique(f"{self.dim}_o"), spec.unique(f"{self.dim}_i")
        spec.add_dim(outer, extent // self.factor, before=self.dim)
        spec.add_dim(inner, self.factor, before=self.dim)
        for f in spec.all_forms():
            f.substitute(self.dim, {outer: self.factor, inner: 1})
        spec.drop_dim(self.dim)
        _replace(edit, op, spec)


@dataclass(frozen=True)
class MergeDimsPass(ArchPass):
    """`merge-dims{outer=A inner=B into=NAME layers=REGEX}` (MERGE): two dims of one kind that every
    access reads as A * extent(B) + B become one dim NAME (default: D for D_o and D_i, else A + B).
    The inverse of split-dim; the function and the weights stay.

        [co_o = 2, co_i = 4]  out (n, co_o * 4 + co_i, ...)  -- merge-dims{outer=co_o inner=co_i} -->
        [co = 8]  out (n, co, ...)
    """

    name = "merge-dims"

    outer: str = "co_o"
    inner: str = "co_i"
    into: str = ""

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, (self.outer, self.inner))

    def merged_name(self, spec: NestSpec) -> str:
        if self.into:
            return self.into
        a, b = self.outer, self.inner
        if a.endswith("_o") and b.endswith("_i") and a[:-2] == b[:-2]:
            return spec.unique(a[:-2])
        return spec.unique(a + b)

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        _linear(spec, self.name)
        a, b = self.outer, self.inner
        if spec.is_parallel(a) != spec.is_parallel(b):
            raise LegalityError(f"merge-dims: layer '{spec.name}': {a} and {b} are not both parallel or both "
                                f"reduction dims")
        eb = spec.extent(b)
        for f in spec.all_forms():
            if f.coeff(a) != f.coeff(b) * eb:
                raise LegalityError(f"merge-dims: layer '{spec.name}': access {f} does not read {a} and {b} as "
                                    f"{a} * {eb} + {b}")
        name = self.merged_name(spec)
        if spec.has(name) and name not in (a, b):
            raise PassError(f"merge-dims: layer '{spec.name}' already has a dimension {name}")
        merged = spec.extent(a) * eb
        tmp = spec.unique("merged")
        spec.add_dim(tmp, merged, before=a)
        for f in spec.all_forms():
            c = f.coeff(b)
            f.set(a, 0)
            f.set(b, 0)
            f.set(tmp, c)
        spec.drop_dim(a)
        spec.drop_dim(b)
        for dim in spec.dims:
            if dim[0] == tmp:
                dim[0] = name
        for f in spec.all_forms():
            f.substitute(tmp, {name: 1})
        _replace(edit, op, spec)


@dataclass(frozen=True)
class DilatePass(ScalingDim):
    """`dilate{dim=kh factor=S layers=REGEX init=kaiming|inherit seed=0}` (STRIDE on a window dim):
    the window's taps are read S apart, its centre where it was; `inherit` keeps the taps' values.

        x (n, ci, oh + kh - 1, ...)  -- dilate{dim=kh factor=2} -->  x (n, ci, oh + kh * 2 - 2, ...)
    """

    name = "dilate"

    dim: str = "kh"

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        _linear(spec, self.name)
        if spec.is_parallel(self.dim):
            raise LegalityError(f"dilate: layer '{spec.name}': {self.dim} is a parallel dim (dilate spreads the "
                                f"taps of a window, a reduction dim); its output would change shape")
        reads = [f for f in spec.forms[DATA] if f.uses(self.dim)]
        if len(reads) != 1:
            raise LegalityError(f"dilate: layer '{spec.name}': the input is read along {self.dim} on "
                                f"{len(reads)} axes, not one")
        f, k = reads[0], spec.extent(self.dim)
        c = f.coeff(self.dim)
        f.set(self.dim, c * self.factor)
        f.const -= c * (self.factor - 1) * ((k - 1) // 2)
        spec.inputs[WEIGHT] = edit.reshaped(spec.inputs[WEIGHT], spec.input_shape(WEIGHT), lambda w: w, op, spec.name)
        _replace(edit, op, spec)


# --- contractions --------------------------------------------------------------------------------

def _weight_reads(spec: NestSpec, dim: str) -> bool:
    return any(f.uses(dim) for f in spec.forms[WEIGHT])


@dataclass(frozen=True)
class ExpandPass(OnDim):
    """`expand{dim=D layers=REGEX init=kaiming|inherit seed=0}` (EXPAND): the weight stops reading D,
    so every value of D uses one weight; `inherit` gives it the mean over D.

        w (co, ci, kh, kw)  -- expand{dim=kh} -->  w (co, ci, 0, kw): tensor<Co x Ci x 1 x Kw>
    """

    name = "expand"

    dim: str = "kh"

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        _linear(spec, self.name)
        if not _weight_reads(spec, self.dim):
            raise LegalityError(f"expand: layer '{spec.name}': the weight does not read {self.dim}")
        old = _copy(spec.forms[WEIGHT])
        for f in spec.forms[WEIGHT]:
            f.set(self.dim, 0)
        _reweight(edit, op, spec, old, dict(spec.dims))
        _replace(edit, op, spec)


@dataclass(frozen=True)
class SharePass(OnDim):
    """`share{dim=D layers=REGEX init=kaiming|inherit seed=0}` (SHARE): the weight reads D too, on a
    new last axis: each value of D has its own weights (D = oh: a locally connected layer, by
    rows); `inherit` copies the trained weight to each, so the function stays.

        w (co, ci, kh, kw)  -- share{dim=oh} -->  w (co, ci, kh, kw, oh): tensor<Co x Ci x Kh x Kw x Oh>
    """

    name = "share"

    dim: str = "oh"

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        _linear(spec, self.name)
        if _weight_reads(spec, self.dim):
            raise LegalityError(f"share: layer '{spec.name}': the weight already reads {self.dim}")
        old = _copy(spec.forms[WEIGHT])
        spec.forms[WEIGHT].append(Form.dim(self.dim))
        _reweight(edit, op, spec, old, dict(spec.dims))
        _replace(edit, op, spec)


@dataclass(frozen=True)
class TiePass(ArchPass):
    """`tie{dim=R to=P layers=REGEX init=kaiming|inherit seed=0}` (REDUCE, undone): reduction dim R
    is no longer summed; every access reads parallel dim P (of the same extent) in its place. MACs
    and weights divide by extent(R). A weight that reads P already drops R (a size-1 axis if R was
    all it read); `inherit` keeps the trained entries at R = P.

        [co_o = 2, co_i = 4], [ci_o = 2, ci_i = 4]  x (n, ci_o * 4 + ci_i, ...)  w (co_o * 4 + co_i, ci_o * 4 + ci_i)
        -- tie{dim=ci_o to=co_o} -->
        [co_o = 2, co_i = 4], [ci_i = 4]  x (n, co_o * 4 + ci_i, ...)  w (co_o * 4 + co_i, ci_i)
    """

    name = "tie"

    dim: str = "ci"
    to: str = "co"

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, (self.dim, self.to))

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        _linear(spec, self.name)
        r, p = self.dim, self.to
        if spec.is_parallel(r) or not spec.is_parallel(p):
            raise LegalityError(f"tie: layer '{spec.name}': {r} must be a reduction dim and {p} a parallel one")
        if spec.extent(r) != spec.extent(p):
            raise LegalityError(f"tie: layer '{spec.name}': {r} = {spec.extent(r)} and {p} = {spec.extent(p)} "
                                f"differ in extent")
        extents = dict(spec.dims)
        old = _copy(spec.forms[WEIGHT])
        for f in old:
            f.substitute(r, {p: 1})
        weight_has_p = _weight_reads(spec, p)
        for k, forms in enumerate(spec.forms):
            for f in forms:
                if k == WEIGHT and weight_has_p:
                    f.set(r, 0)
                else:
                    f.substitute(r, {p: 1})
        spec.drop_dim(r)
        _reweight(edit, op, spec, old, extents)
        _replace(edit, op, spec)
