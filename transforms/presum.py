"""presum: sum a contraction's input over the reduction dims its weight does not read, once, in a
nest of its own, before the contraction.

`expand{dim=kw}` leaves a conv whose weight is one value for all three taps of a row:
`y = sum over ci, kw of w[co, ci] * x[ci, oh, ow + kw - 1]`. Every output channel sums the same
three inputs again; by distributivity `y = sum over ci of w[co, ci] * z[ci, oh, ow]` with
`z = sum over kw of x[ci, oh, ow + kw - 1]`, computed once per input point: a third of the MACs,
and the contraction left is a plain 1x1 conv that the schedules know. Meaning is kept (up to
float reassociation).

    %y = nest.compute %x, %w {name = "c",
        domain = #nest.domain<[n = 1, co = 64, oh = 16, ow = 16], [ci = 64, kw = 3]>,
        maps = [(n, co, oh, ow, ci, kw) -> (n, ci, oh, ow + kw - 1), (n, co, oh, ow, ci, kw) -> (co, ci, 0, 0)],
        combiner = "mac"}
    ->
    %ones = nn.weight {name = "c.ones"} : tensor<1xf32>
    %z = nest.compute %x, %ones {name = "c.presum",
        domain = #nest.domain<[n = 1, ci = 64, oh = 16, x3 = 16], [kw = 3]>,
        maps = [(n, ci, oh, x3, kw) -> (n, ci, oh, x3 + kw - 1), (...) -> (0)], combiner = "mac"}
        : (...) -> tensor<1x64x16x16xf32>
    %y = nest.compute %z, %w {name = "c",
        domain = #nest.domain<[n = 1, co = 64, oh = 16, ow = 16], [ci = 64]>,
        maps = [(n, co, oh, ow, ci) -> (n, ci, oh, ow), (n, co, oh, ow, ci) -> (co, ci, 0, 0)], combiner = "mac"}

`z` has one axis per axis of the input. Where the input's index does not involve a summed dim, `z`
keeps that axis as it is, and the contraction reads it where it read the input (out of bounds is
zero in both: padding stays padding). Where it does, the index is `g + h` (`h` over the summed
dims) and `z` holds every value `g` takes (`x3` above, from `ow - 1`: -1 .. 14), so the contraction
reads it in bounds, at `g` less its least value. The ones weight keeps the sum a `mac` nest (the
dialect's sum of products), which every backend lowers.

Runs on nests after fuse-epilogue (the last graph pass): a `mac` nest without a schedule whose
weight and epilogue inputs do not read some reduction dim that input 0 reads, when the sums cost
at most a quarter of the MACs they save. Only architecture transforms make such nests
(`expand`; a conv from a model file always has its weight read every tap).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from nasir.dialects import nest, nn
from nasir.dialects.module import weights_of
from nasir.dialects.shapes import shape_of
from nasir.transforms.nest_spec import Form, NestSpec

PAYS = 4
"""The sums' additions times this must not exceed the multiply-adds they save."""


def unread_sums(spec: NestSpec) -> list[str]:
    """The reduction dims of `spec` that input 0 reads and no other input (nor the output) does."""
    others = [f for k, forms in enumerate(spec.forms) if k for f in forms] + spec.out
    return [r for r, _ in spec.reduction
            if any(f.uses(r) for f in spec.forms[0]) and not any(f.uses(r) for f in others)]


def split_form(f: Form, summed: list[str]) -> tuple[Form, Form]:
    """`f` as `g + h`: `h` the terms over `summed`, `g` the rest and the constant."""
    h = Form({d: c for d, c in f.terms.items() if d in summed})
    return Form({d: c for d, c in f.terms.items() if d not in summed}, f.const), h


def sum_axes(spec: NestSpec, summed: list[str]) -> list[tuple[Form, Form, int, int]]:
    """Per axis of input 0, `(g, h, lo, extent)`: its index `g + h` (`split_form`) and the range of
    that axis in the summed tensor: the input's own where `h` is empty, else every value `g` takes."""
    kept = {d: e for d, e in spec.dims if d not in summed}
    out = []
    for f, n in zip(spec.forms[0], shape_of(spec.inputs[0])):
        g, h = split_form(f, summed)
        lo, hi = g.range(kept) if h.terms else (0, n - 1)
        out.append((g, h, lo, hi - lo + 1))
    return out


def presum_plan(op: nest.ComputeOp) -> tuple[NestSpec, list[str]] | None:
    """The nest's spec and the dims to sum first, or None when `presum` leaves it."""
    if op.kind != "mac" or op.schedule is not None:
        return None
    spec = NestSpec.of(op)
    if any(f.raw is not None for f in spec.all_forms()):
        return None
    summed = unread_sums(spec)
    if not summed:
        return None
    sums, left = split_costs(spec, summed)
    return (spec, summed) if sums * PAYS <= nest.macs(op) - left else None


def split_costs(spec: NestSpec, summed: list[str]) -> tuple[int, int]:
    """The multiply-adds of the presum nest (each summed tensor point's sum) and of the
    contraction left after it, were `spec` split over `summed`."""
    extents = dict(spec.dims)
    per_point = math.prod(extents[r] for r in summed)
    size = math.prod(extent for *_, extent in sum_axes(spec, summed))
    return size * per_point, math.prod(extents.values()) // per_point


def computed_macs(op: nest.ComputeOp) -> int:
    """The multiply-adds `op` does once compiled: `nest.macs(op)`, or where presum splits it, the
    sums' and the contraction's (`fold kh, expand kw` on a 64-channel 16 x 16 conv: 64 x 256 x 3
    sums and a 1x1 conv's 64 x 64 x 256, not the 64 x 64 x 256 x 3 its nest reads)."""
    plan = presum_plan(op)
    return nest.macs(op) if plan is None else sum(split_costs(*plan))


class PresumPass(ModulePass):
    """Sum a contraction's input over the dims its weight does not read in a nest before it."""

    name = "presum"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        store = weights_of(op)
        for compute in [o for o in op.walk() if isinstance(o, nest.ComputeOp)]:
            plan = presum_plan(compute)
            if plan is not None:
                rewrite(compute, *plan, store)


def rewrite(op: nest.ComputeOp, spec: NestSpec, summed: list[str], store) -> None:
    extents = dict(spec.dims)
    ones = nn.WeightOp.make(store.add(f"{spec.name}.ones", np.ones(1, np.float32)), (1,))
    sums = NestSpec(f"{spec.name}.presum", [], [[r, extents[r]] for r in summed], [spec.inputs[0], ones.result],
                    [[], [Form()]], [], [], "mac", [], None)
    reads = []
    for a, (g, h, lo, extent) in enumerate(sum_axes(spec, summed)):
        plain = [d for d in g.terms if g.is_dim(d) and not h.terms]  # an axis read as one dim keeps its name
        name = plain[0] if plain and not sums.has(plain[0]) else sums.unique(f"x{a}")
        sums.parallel.append([name, extent])
        sums.forms[0].append(Form({name: 1, **h.terms}, lo))
        sums.out.append(Form.dim(name))
        sums.out_shape.append(extent)
        reads.append(Form(dict(g.terms), g.const - lo))
    first = sums.build()
    op.parent_block().insert_ops_before([ones, first], op)
    spec.inputs[0] = first.results[0]
    spec.forms[0] = reads
    for r in summed:
        spec.drop_dim(r)
    main = spec.build()
    main.attributes.update(op.attributes)  # a padded result (pad-planes' rows) stays padded
    Rewriter.replace_op(op, main)
