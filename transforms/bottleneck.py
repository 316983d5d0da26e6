"""bottleneck: shrink the range of one conv loop by a factor B (BACKGROUND.md section 1).

Architecture transform on nest IR (see `nasir.transforms.arch`); `bottleneck{dim=D factor=B}`:

- `dim=co`: the conv keeps Co/B filters of each group: under `init=inherit` those that carry
  most (the largest filter norms, times the size a batch norm that reads the conv gives each
  channel: |scale| / sqrt(var + eps)), else the first ones (output channel g*Co + j survives iff
  j < Co/B). Weight rows and bias shrink to match; the new channel count is
  carried forward: element-wise and pool nests and nn.batch_norm shrink (their per-channel weights
  sliced to the surviving channels), and the next conv reads fewer input channels (its weight
  columns: the surviving ones under `init=inherit`). The walk refuses (LegalityError naming layer,
  dimension and value) when the change would reach a block boundary: a residual add or branch join
  whose other operand keeps its shape, a concat, a reshape/flatten, a gemm, a grouped next conv, or
  the model output.

      domain = #nest.domain<[n = 1, co = 8, ...], ...>  -- bottleneck{dim=co factor=2} -->  co = 4

- `dim=ci`: the conv reads only the first Ci/B input channels (of each group: `g*Ci + ci` with
  ci < Ci/B). The paper reaches ci through an interchange; on nest IR it is the same range change.
  Weight columns: the first Ci/B. Nothing downstream changes.
- `dim=oh` / `dim=ow` (spatial bottleneck): the conv computes only every B-th output row (column):
  its domain shrinks to Oh/B and its input row index `oh*s + kh - p` becomes `oh*(s*B) + kh - p`
  (the conv runs with stride s*B). A copy nest `<layer>.expand` then repeats each computed row B
  times (nearest-neighbour upsampling, `out[oh*B + sh] = small[oh]`), so consumers see the shape
  they expect. A second spatial bottleneck of the same conv widens the existing expand nest.
  PyTorch: `F.conv2d(x, w, b, stride=(s*B, s), padding=p)[:, :, :Oh//B].repeat_interleave(B, 2)`.
  The paper's spatial bottleneck is `interchange -> bottleneck(h) -> interchange -> bottleneck(w)
  -> interchange` (see `nasir.transforms.compositions.spatial_bottleneck`); interchanges only reorder.

MACs and weights shrink by B. `init=inherit` slices trained weights as described; the default
re-initialises the transformed conv's weight (Kaiming) and zeroes a shrunk bias.

Its passes are xDSL `ModulePass`es through `nasir.transforms.arch.ArchPass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import SSAValue

from nasir.dialects import nest, nn
from nasir.errors import LegalityError, PassError
from nasir.transforms.arch import ArchPass, Edit, check_factor, divides
from nasir.transforms.nest_spec import Form, NestSpec, is_conv, is_weight, spatial_axis

DIMS = ("co", "ci", "oh", "ow")


@dataclass(frozen=True)
class BottleneckPass(ArchPass):
    """`bottleneck{dim=co|ci|oh|ow factor=B layers=REGEX init=kaiming|inherit seed=0}`."""

    name = "bottleneck"

    dim: str = "co"
    factor: int = 2

    def check_options(self) -> None:
        if self.dim not in DIMS:
            raise PassError(f"bottleneck: unknown dim '{self.dim}' (choose from {', '.join(DIMS)})")
        check_factor(self.name, self.factor)

    def applies(self, op: nest.ComputeOp) -> str | None:
        if not is_conv(op):
            return "is not a convolution (a mac nest with a weight)"
        if self.dim not in op.domain.dim_names:
            return f"has no dimension {self.dim} (dims: {', '.join(op.domain.dim_names)})"
        return None

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        extent = spec.extent(self.dim)
        groups = spec.extent("g") if spec.has("g") else 1
        divides(self.name, spec.name, self.dim, extent, self.factor, f" (per group, {groups} groups)" if
                groups > 1 and self.dim in ("co", "ci") else "")
        if self.factor == 1:
            return
        why = f"bottleneck: layer '{spec.name}' dimension {self.dim} = {extent} -> {extent // self.factor}"
        if self.dim == "co":
            _channels_out(edit, op, spec, self.factor, why)
        elif self.dim == "ci":
            _channels_in(edit, op, spec, self.factor)
        else:
            _spatial(edit, op, spec, self.dim, self.factor, why)


def _channels_out(edit: Edit, op: nest.ComputeOp, spec: NestSpec, b: int, why: str) -> None:
    co = spec.extent("co")
    co2 = co // b
    groups = spec.extent("g") if spec.has("g") else 1
    scores = _filter_scores(edit, op, spec, groups * co) if edit.init == "inherit" else None
    if scores is None:
        kept = np.array([g * co + j for g in range(groups) for j in range(co2)])
    else:  # per group, the co2 filters that matter most, in their order
        kept = np.concatenate([g * co + np.sort(np.argsort(-scores[g * co:(g + 1) * co], kind="stable")[:co2])
                               for g in range(groups)])
    for f in spec.all_forms():
        if f.uses("co") and f.coeff("g"):
            f.set("g", f.coeff("co") * co2)
    spec.set_extent("co", co2)
    spec.out_shape[1] = len(kept)
    for k, forms in enumerate(spec.forms):
        axes = [a for a, f in enumerate(forms) if f.uses("co")]
        if not axes:
            continue
        value = spec.inputs[k]
        if not is_weight(value):
            raise LegalityError(f"{why}: the nest reads input {k} (shape {list(spec.input_shape(k))}) per output "
                                f"channel, a fused residual add whose shape cannot change")
        take = lambda a, ax=axes[0]: np.take(a, kept, ax)  # noqa: E731
        spec.inputs[k] = edit.reshaped(value, spec.input_shape(k), take, op, spec.name)
    new = edit.replace(op, spec.build())
    edit.propagate_channels(new.results[0], kept, groups * co, why)


def _filter_scores(edit: Edit, op: nest.ComputeOp, spec: NestSpec, channels: int) -> np.ndarray | None:
    """How much each output channel of a conv with trained weights carries: its filter's L2 norm,
    times |scale| / sqrt(var + eps) of a batch norm that alone reads the conv (the channel's size
    after normalisation); None without the trained weight."""
    weight = edit.value(spec.inputs[1])
    axes = [a for a, f in enumerate(spec.forms[1]) if f.uses("co")]
    if weight is None or len(axes) != 1:
        return None
    w = np.moveaxis(np.asarray(weight, np.float64), axes[0], 0).reshape(weight.shape[axes[0]], -1)
    if len(w) != channels:
        return None
    scores = np.linalg.norm(w, axis=1)
    users = [u.operation for u in op.results[0].uses]
    if len(users) == 1 and isinstance(users[0], nn.BatchNormOp):
        scale, _, _, var = (edit.value(v) for v in users[0].operands[1:])
        if scale is not None and var is not None and scale.shape == var.shape == (channels,):
            scores = scores * np.abs(scale) / np.sqrt(var + users[0].epsilon.value.data)
    return scores


def _channels_in(edit: Edit, op: nest.ComputeOp, spec: NestSpec, b: int) -> None:
    ci2 = spec.extent("ci") // b
    spec.set_extent("ci", ci2)
    axes = [a for a, f in enumerate(spec.forms[1]) if f.is_dim("ci")]
    spec.inputs[1] = edit.reshaped(spec.inputs[1], spec.input_shape(1),
                                   lambda a: np.take(a, np.arange(ci2), axes[0]), op, spec.name)
    edit.replace(op, spec.build())


def _spatial(edit: Edit, op: nest.ComputeOp, spec: NestSpec, dim: str, b: int, why: str) -> None:
    out_axis = next(a for a, f in enumerate(spec.out) if f.uses(dim))
    for k, forms in enumerate(spec.forms):
        if k and any(f.uses(dim) for f in forms):
            raise LegalityError(f"{why}: the nest reads input {k} per output position (a fused residual add); "
                                f"apply the spatial bottleneck before fuse-epilogue")
    axis = spatial_axis(spec, 0, dim)
    row = spec.forms[0][axis]
    row.set(dim, row.coeff(dim) * b)
    extent = spec.extent(dim)
    spec.set_extent(dim, extent // b)
    spec.out_shape[out_axis] = extent // b
    spec.inputs[1] = edit.reshaped(spec.inputs[1], spec.input_shape(1), lambda a: a, op, spec.name)
    old_value = op.results[0]
    users = [u.operation for u in old_value.uses]
    expand = users[0] if len(users) == 1 and isinstance(users[0], nest.ComputeOp) and \
        users[0].layer_name == f"{spec.name}.expand" else None
    new = spec.build()
    if expand is None:
        shape = list(spec.out_shape)
        shape[out_axis] = extent
        edit.replace(op, [new, _expand_nest(spec.name, new.results[0], shape, out_axis, b)])
        return
    edit.replace(op, new)
    _widen(edit, expand, new.results[0], out_axis, b)


def _expand_nest(layer: str, small: SSAValue, shape: list[int], axis: int, b: int) -> nest.ComputeOp:
    """`out[..., i*B + s, ...] = small[..., i, ...]` over the output `shape`."""
    names = ["n", "c", "h", "w"] if len(shape) == 4 else [f"i{k}" for k in range(len(shape))]
    spec = NestSpec(f"{layer}.expand", [[n, e] for n, e in zip(names, shape)], [], [small],
                    [[Form.dim(n) for n in names]], [Form.dim(n) for n in names], list(shape), "copy", [], None)
    _spread(spec, names[axis], b)
    return spec.build()


def _widen(edit: Edit, expand: nest.ComputeOp, small: SSAValue, axis: int, b: int) -> None:
    spec = NestSpec.of(expand)
    spec.inputs[0] = small
    dim = next(d for d in spec.names if spec.forms[0][axis].uses(d))
    _spread(spec, dim, b)
    edit.replace(expand, spec.build())


def _spread(spec: NestSpec, dim: str, b: int) -> None:
    """Dim `dim` of a copy nest reads B times fewer positions, each written to B outputs."""
    s = spec.unique("s" + dim[-1])
    spec.set_extent(dim, spec.extent(dim) // b)
    spec.add_dim(s, b, after=dim)
    for f in spec.out:
        f.substitute(dim, {dim: b, s: 1})
