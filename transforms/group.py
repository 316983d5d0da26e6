"""group and depthwise: tile a conv's co and ci by a common factor and drop the cross-group work.

Architecture transforms on nest IR (see `nasir.transforms.arch`). With G0 groups already present
(a dense conv has none), Co/Ci the per-group output/input channels, `group{factor=G}` makes G0*G
groups of Co/G and Ci/G channels: MACs and weights divide by G (BACKGROUND.md section 1):

    O[g*Co/G + co', oh, ow] += W[g*Co/G + co', ci', kh, kw] * I[g*Ci/G + ci', ...]

    domain = #nest.domain<[n = 1, co = 8, oh = 8, ow = 8], [ci = 4, kh = 3, kw = 3]>
      x (d0, d4, d2 + d5 - 1, d3 + d6 - 1), w (d1, d4, d5, d6), out (d0, d1, d2, d3)
    -- group{factor=2} -->
    domain = #nest.domain<[n = 1, g = 2, co = 4, oh = 8, ow = 8], [ci = 2, kh = 3, kw = 3]>
      x (d0, d1 * 2 + d5, ...), w (d1 * 4 + d2, d5, d6, d7), out (d0, d1 * 4 + d2, d3, d4)

The weight becomes [Co_total, Ci/G, kh, kw] (PyTorch's grouped layout). When a group has a single
input channel left, ci is dropped as in convert-nn-to-nest's depthwise form (x reads channel g).
`depthwise` is group with G = Ci (per group): every output channel reads one input channel; Co must
be a multiple of Ci. `init=inherit` keeps the block-diagonal slices of the trained weight: output
channel o of new group g' = g*G + h reads old input channels h*Ci/G .. (h+1)*Ci/G - 1 of its group.

Its passes are xDSL `ModulePass`es through `nasir.transforms.arch.ArchPass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nasir.dialects import nest
from nasir.errors import PassError
from nasir.transforms.arch import ArchPass, Edit, check_factor, divides
from nasir.transforms.nest_spec import NestSpec, is_conv


def _reason(op: nest.ComputeOp) -> str | None:
    if not is_conv(op):
        return "is not a convolution (a mac nest with a weight)"
    names = op.domain.dim_names
    if "co" not in names or "ci" not in names:
        return f"has no co/ci dims to group (dims: {', '.join(names)}; a depthwise conv has no ci)"
    return None


def group_nest(edit: Edit, op: nest.ComputeOp, factor: int, what: str) -> None:
    """Replace conv `op` by its grouped version with `factor` times more groups."""
    spec = NestSpec.of(op)
    g0 = spec.extent("g") if spec.has("g") else 1
    co, ci = spec.extent("co"), spec.extent("ci")
    note = f" (per group, {g0} groups)" if g0 > 1 else ""
    divides(what, spec.name, "co", co, factor, note)
    divides(what, spec.name, "ci", ci, factor, note)
    if factor == 1:
        return
    co2, ci2 = co // factor, ci // factor
    old_weight = spec.inputs[1]
    for k, forms in enumerate(spec.forms + [spec.out]):
        for f in forms:
            # Old co = h*co2 + co', ci = h*ci2 + ci' (h: position inside the old group); the weight
            # keeps ci group-local. The form's old g term (g*b) and h term merge into g' = g*G + h.
            c = f.coeff("co") * co2 + (0 if k == 1 else f.coeff("ci") * ci2)
            if f.raw is None and g0 > 1 and f.coeff("g") != factor * c:
                raise PassError(f"{what}: layer '{spec.name}': access {f} does not have the grouped-conv form")
            if c:
                f.set("g", c)
    spec.set_extent("co", co2)
    spec.set_extent("ci", ci2)
    if g0 > 1:
        spec.set_extent("g", g0 * factor)
    else:
        spec.add_dim("g", factor, before="co")
    if ci2 == 1:
        for f in spec.all_forms():
            f.substitute("ci", {})
        spec.drop_dim("ci")
    w_axes = [f.uses("co") for f in spec.forms[1]]
    if w_axes[:2] != [True, False]:
        raise PassError(f"{what}: layer '{spec.name}': the weight is not laid out [out channels, in channels, ...]")

    def inherit(w: np.ndarray) -> np.ndarray:
        o = np.arange(w.shape[0])
        h = (o // co2) % factor
        cols = h[:, None] * ci2 + np.arange(ci2)[None, :]
        return w[o[:, None], cols]

    spec.inputs[1] = edit.reshaped(old_weight, spec.input_shape(1), inherit, op, spec.name)
    edit.replace(op, spec.build())


@dataclass(frozen=True)
class GroupPass(ArchPass):
    """`group{factor=G layers=REGEX init=kaiming|inherit seed=0}`: G times more groups per conv."""

    name = "group"

    factor: int = 2

    def check_options(self) -> None:
        check_factor(self.name, self.factor)

    def applies(self, op: nest.ComputeOp) -> str | None:
        return _reason(op)

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        group_nest(edit, op, self.factor, self.name)


@dataclass(frozen=True)
class DepthwisePass(ArchPass):
    """`depthwise{layers=REGEX init=kaiming|inherit seed=0}`: one input channel per output channel group."""

    name = "depthwise"


    def applies(self, op: nest.ComputeOp) -> str | None:
        return _reason(op)

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        co, ci = op.domain.extent("co"), op.domain.extent("ci")
        divides(self.name, op.layer_name, "co", co, ci, f" (a depthwise conv needs a multiple of ci = {ci})")
        group_nest(edit, op, ci, self.name)
