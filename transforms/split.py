"""index-split and unshare: split a parallel dim's range into parts, each its own nest.

Architecture-level plumbing on nest IR (see `nasir.transforms.arch`). `index-split{dim=D at=N}` or
`{dim=D parts=P}` replaces nest `L` by nests `L.part0`, `L.part1`, ... computing the ranges
[0, N), [N, E) (or P equal ranges) of D, and an `nn.concat` (`L.concat`) of their results along the
output axis D indexes, so the result is unchanged. Later passes address one part by name
(`group{factor=2 layers=conv.part1}`): that is how Seq 2 and Seq 3 are written.

- Each part reads its inputs at `D + start` (so an oh split reads the right rows); weights indexed
  by D (a conv's rows and bias for a co split) are sliced per part, other weights are shared (the
  parts of an oh split use the same nn.weight value).
- D must be a parallel dim that the output map uses as a plain index on one axis (for a grouped
  conv, co is per group: split before grouping).

`unshare{dim=oh parts=P}` is the index-split whose parts each get their own copy of the shared
weights (Seq 3's variant: every band of rows has its own filters); `init=kaiming` re-initialises
the copies, `init=inherit` copies the trained values.

    %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, co = 8, ...], ...>}
    -- index-split{dim=co at=2} -->
    %a = nest.compute %x, %w0 {name = "conv.part0", domain = #nest.domain<[n = 1, co = 2, ...], ...>}
    %b = nest.compute %x, %w1 {name = "conv.part1", domain = #nest.domain<[n = 1, co = 6, ...], ...>}
    %y = nn.concat %a, %b {axis = 1 : i64, name = "conv.concat"}

Its passes are xDSL `ModulePass`es through `nasir.transforms.arch.ArchPass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, i64

from nasir.dialects import nest, nn
from nasir.errors import LegalityError, PassError
from nasir.transforms.arch import ArchPass, Edit
from nasir.transforms.nest_spec import NestSpec, is_weight

SPATIAL = ("oh", "ow")


def _reason(op: nest.ComputeOp, dim: str) -> str | None:
    names = op.domain.dim_names
    if dim not in names:
        return f"has no dimension {dim} (dims: {', '.join(names)})"
    if dim not in (d for d, _ in op.domain.parallel):
        return f"cannot split {dim}: it is a reduction dim (only parallel dims split into concatenated parts)"
    return None


def split_nest(edit: Edit, op: nest.ComputeOp, dim: str, bounds: list[int], share: bool) -> list[nest.ComputeOp]:
    """Replace `op` by one nest per range [bounds[k], bounds[k+1]) of `dim`, concatenated."""
    spec = NestSpec.of(op)
    axes = [a for a, f in enumerate(spec.out) if f.uses(dim)]
    if len(axes) != 1 or not spec.out[axes[0]].is_dim(dim):
        raise PassError(f"index-split: layer '{spec.name}': the output index {[str(f) for f in spec.out]} does not "
                        f"use {dim} as a plain index on one axis (grouped convs: split co before grouping)")
    parts = []
    for k, (start, stop) in enumerate(zip(bounds, bounds[1:])):
        part = NestSpec.of(op)
        part.name = f"{spec.name}.part{k}"
        part.set_extent(dim, stop - start)
        part.out_shape[axes[0]] = stop - start
        for j, forms in enumerate(part.forms):
            value = part.inputs[j]
            if not any(f.uses(dim) for f in forms):
                if is_weight(value) and not share:
                    part.inputs[j] = edit.reshaped(value, part.input_shape(j), lambda w: w, op, part.name)
                continue
            if is_weight(value):
                w_axes = [a for a, f in enumerate(forms) if f.is_dim(dim)]
                if not w_axes:
                    raise PassError(f"index-split: layer '{spec.name}': weight input {j} is indexed by {dim} "
                                    f"in a way that cannot be sliced")
                rows = np.arange(start, stop)
                part.inputs[j] = edit.kept(value, part.input_shape(j), lambda w, a=w_axes[0]: np.take(w, rows, a),
                                           lambda s: edit.kaiming(s, f"{part.name}:{j}"), op, part.name)
            else:
                for f in forms:
                    f.substitute(dim, {dim: 1}, start)
        parts.append(part.build())
    concat = nn.ConcatOp.create(operands=[p.results[0] for p in parts], result_types=[op.results[0].type],
                                properties={"axis": IntegerAttr(axes[0], i64)}).named(f"{spec.name}.concat")
    edit.replace(op, parts + [concat])
    return parts


def _bounds(what: str, layer: str, dim: str, extent: int, at: int | None, parts: int | None) -> list[int]:
    if (at is None) == (parts is None):
        raise PassError(f"{what}: give exactly one of at=N or parts=P")
    if at is not None:
        if not 0 < at < extent:
            raise LegalityError(f"{what}: layer '{layer}': at={at} must lie inside dimension {dim} = {extent}")
        return [0, at, extent]
    if parts < 2 or extent % parts:
        raise LegalityError(f"{what}: layer '{layer}': dimension {dim} = {extent} does not split into "
                            f"{parts} equal parts")
    return [extent // parts * k for k in range(parts + 1)]


@dataclass(frozen=True)
class IndexSplitPass(ArchPass):
    """`index-split{dim=D at=N | parts=P layers=REGEX}`: parts `<layer>.partK`, concatenated."""

    name = "index-split"

    dim: str = "co"
    at: int | None = None
    parts: int | None = None

    def check_options(self) -> None:
        if (self.at is None) == (self.parts is None):
            raise PassError("index-split: give exactly one of at=N or parts=P")

    def applies(self, op: nest.ComputeOp) -> str | None:
        return _reason(op, self.dim)

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        bounds = _bounds(self.name, op.layer_name, self.dim, op.domain.extent(self.dim), self.at, self.parts)
        split_nest(edit, op, self.dim, bounds, share=True)


@dataclass(frozen=True)
class UnsharePass(ArchPass):
    """`unshare{dim=oh|ow parts=P layers=REGEX init=kaiming|inherit seed=0}`: bands with their own weights."""

    name = "unshare"

    dim: str = "oh"
    parts: int = 2

    def check_options(self) -> None:
        if self.dim not in SPATIAL:
            raise PassError(f"unshare: unknown dim '{self.dim}' (choose from {', '.join(SPATIAL)})")

    def applies(self, op: nest.ComputeOp) -> str | None:
        return _reason(op, self.dim)

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        bounds = _bounds(self.name, op.layer_name, self.dim, op.domain.extent(self.dim), None, self.parts)
        split_nest(edit, op, self.dim, bounds, share=False)
