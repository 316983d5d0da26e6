"""unfold, fold and shift: Canvas's spatial rearrangements as rewrites of a conv's input access.

Architecture transforms on nest IR (see `nasir.transforms.arch`), acting on the window dim of a
spatial axis (kh for oh, kw for ow) and the conv's data access `oh*s + kh*d - p`:

- `unfold{dim=oh size=K}`: pull K neighbours of oh into the reduction (Canvas: U(c, kh, h, w) =
  I(c, h + kh - K//2, w), then the weights contract it). The window kh must be 1 (a 1xN or 1x1
  conv); it becomes K, centred on the old tap: `oh*s + kh*d - p` -> `oh*s + (kh - (K-1)//2)*d - p`.
  The weight gains K taps on that axis; `init=inherit` puts the trained tap in the centre and zeros
  elsewhere (the function is unchanged).
- `fold{dim=kh}`: the inverse: drop the window, keeping the centre tap c = (K-1)//2:
  `oh*s + kh*d - p` -> `oh*s + (kh + c)*d - p` with kh = 1. `init=inherit` keeps the centre slice of
  the weight. A 3x3 conv becomes 1x3 + 3x1 pieces with index-split then fold on each part:
  `index-split{dim=co parts=2 layers=conv},fold{dim=kh layers=conv.part0},fold{dim=kw layers=conv.part1}`.
- `shift{dim=oh offset=1}`: the conv reads its input one row further (shift-convolution:
  U(c, h, w) = I(c, h + 1, w); reads outside the image are zero): the constant of the row access
  grows by `offset`. Weights keep their shape (`inherit` keeps them as they are).

      x (d0, d4, d2 + d5 - 1, d3 + d6 - 1)  -- shift{dim=ow offset=-1} -->  x (d0, d4, d2 + d5 - 1, d3 + d6 - 2)

Its passes are xDSL `ModulePass`es through `nasir.transforms.arch.ArchPass`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nasir.dialects import nest
from nasir.errors import LegalityError, PassError
from nasir.transforms.arch import ArchPass, Edit
from nasir.transforms.nest_spec import NestSpec, is_conv, spatial_axis

WINDOW = {"oh": "kh", "ow": "kw"}


def conv_with(op: nest.ComputeOp, dims: tuple[str, ...]) -> str | None:
    """None if `op` is a conv with all of `dims`, else why not (an `ArchPass.applies` answer)."""
    if not is_conv(op):
        return "is not a convolution (a mac nest with a weight)"
    missing = [d for d in dims if d not in op.domain.dim_names]
    if missing:
        return f"has no dimension {missing[0]} (dims: {', '.join(op.domain.dim_names)})"
    return None


def _window_axis(spec: NestSpec, window: str) -> int:
    axes = [a for a, f in enumerate(spec.forms[1]) if f.is_dim(window)]
    if len(axes) != 1:
        raise PassError(f"nest '{spec.name}': the weight does not index window dim {window} on one axis")
    return axes[0]


def _resize_window(edit: Edit, op: nest.ComputeOp, window: str, size: int, offset: int, inherit) -> None:
    """Window dim `window` gets extent `size`; the data access replaces it by `window + offset`."""
    spec = NestSpec.of(op)
    axis = _window_axis(spec, window)
    spec.forms[0][spatial_axis(spec, 0, window)].substitute(window, {window: 1}, offset)
    spec.set_extent(window, size)
    spec.inputs[1] = edit.reshaped(spec.inputs[1], spec.input_shape(1), lambda w: inherit(w, axis), op, spec.name)
    edit.replace(op, spec.build())


@dataclass(frozen=True)
class UnfoldPass(ArchPass):
    """`unfold{dim=oh|ow size=K layers=REGEX init=kaiming|inherit seed=0}`."""

    name = "unfold"

    dim: str = "oh"
    size: int = 3

    def check_options(self) -> None:
        if self.dim not in WINDOW:
            raise PassError(f"unfold: unknown dim '{self.dim}' (choose from {', '.join(WINDOW)})")
        if self.size < 1:
            raise PassError(f"unfold: size must be a positive integer, got {self.size}")

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, (self.dim, WINDOW[self.dim]))

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        window = WINDOW[self.dim]
        k = op.domain.extent(window)
        if k != 1:
            raise LegalityError(f"unfold: layer '{op.layer_name}' dimension {window} = {k}: {self.dim} already has "
                                f"a window; fold it first")
        c = (self.size - 1) // 2

        def centred(w: np.ndarray, axis: int) -> np.ndarray:
            pad = [(0, 0)] * w.ndim
            pad[axis] = (c, self.size - 1 - c)
            return np.pad(w, pad)

        _resize_window(edit, op, window, self.size, -c, centred)


@dataclass(frozen=True)
class FoldPass(ArchPass):
    """`fold{dim=kh|kw layers=REGEX init=kaiming|inherit seed=0}`: keep the centre tap of a window.

    Speed on the llvm backend: ResNet-34 with its block convs folded keeps 0.96 (kh, 3x3 -> 1x3)
    and 0.95 (kw, 3x3 -> 3x1) of its MAC reduction at 224x224, 0.93 and 0.87 at 32x32 (Zen 4;
    `make bench ARGS="--models --variants base fold-kh fold-kw"`; issue 5).
    """

    name = "fold"

    dim: str = "kh"

    def check_options(self) -> None:
        if self.dim not in WINDOW.values():
            raise PassError(f"fold: unknown dim '{self.dim}' (choose from {', '.join(WINDOW.values())})")

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, (self.dim,))

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        k = op.domain.extent(self.dim)
        if k == 1:
            raise LegalityError(f"fold: layer '{op.layer_name}' dimension {self.dim} = 1: nothing to fold")
        c = (k - 1) // 2
        _resize_window(edit, op, self.dim, 1, c, lambda w, axis: np.take(w, [c], axis))


@dataclass(frozen=True)
class ShiftPass(ArchPass):
    """`shift{dim=oh|ow offset=N layers=REGEX init=kaiming|inherit seed=0}`: read the input N pixels further."""

    name = "shift"

    dim: str = "oh"
    offset: int = 1

    def check_options(self) -> None:
        if self.dim not in WINDOW:
            raise PassError(f"shift: unknown dim '{self.dim}' (choose from {', '.join(WINDOW)})")
        if self.offset == 0:
            raise PassError("shift: offset must be non-zero (e.g. 1 or -1)")

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, (self.dim,))

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        spec.forms[0][spatial_axis(spec, 0, self.dim)].const += self.offset
        spec.inputs[1] = edit.reshaped(spec.inputs[1], spec.input_shape(1), lambda w: w, op, spec.name)
        edit.replace(op, spec.build())
