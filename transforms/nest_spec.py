"""Nests as the architecture transforms edit them: access forms over named dims and an editable
copy of a `nest.compute`.

- `Form`: one access-map result as a linear combination of *named* domain dims plus a constant, so a
  transform can say "replace co by g*8 + co" or "drop ci" without renumbering d0, d1, ...;
- `NestSpec`: an editable copy of a `nest.compute` (domain, forms, inputs, epilogue, schedule), made
  from its `NestView`, that builds the replacement op.

    spec = NestSpec.of(conv)               # a 3x3 conv, domain n, co, oh, ow | ci, kh, kw
    str(spec.forms[0][2])                  # 'oh + kh + -1': the input row it reads
    spec.set_extent("co", 32); spec.build()   # the same nest with 32 output channels
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap

from nasir.dialects import affine, nest, nn
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Loop, Schedule
from nasir.errors import PassError

# --- access forms ------------------------------------------------------------------------------

@dataclass
class Form:
    """`sum(terms[d] * d) + const` over named dims; `raw` keeps a non-linear result as it is."""

    terms: dict[str, int] = field(default_factory=dict)
    const: int = 0
    raw: tuple[AffineExpr, tuple[str, ...]] | None = None

    @staticmethod
    def parse(expr: AffineExpr, names: Sequence[str]) -> Form:
        lin = affine.linear_form(expr)
        if lin is None:
            return Form(raw=(expr, tuple(names)))
        return Form({names[p]: c for p, c in lin[0].items() if c}, lin[1])

    @staticmethod
    def dim(name: str) -> Form:
        return Form({name: 1})

    def coeff(self, name: str) -> int:
        return self.terms.get(name, 0)

    def uses(self, name: str) -> bool:
        return name in _raw_dims(self.raw) if self.raw else name in self.terms

    def copy(self) -> Form:
        return Form(dict(self.terms), self.const, self.raw)

    def is_dim(self, name: str) -> bool:
        return self.raw is None and self.terms == {name: 1} and self.const == 0

    def set(self, name: str, coeff: int) -> None:
        self._linear(name)
        self.terms.pop(name, None)
        if coeff:
            self.terms[name] = coeff

    def substitute(self, name: str, terms: dict[str, int], const: int = 0) -> None:
        """Replace dim `name` by `sum(terms) + const`."""
        if not self.uses(name):
            return
        self._linear(name)
        a = self.terms.pop(name)
        for d, c in terms.items():
            self.set(d, self.coeff(d) + a * c)
        self.const += a * const

    def _linear(self, name: str) -> None:
        if self.raw is not None:
            raise PassError(f"access {self.raw[0]} is not linear: cannot rewrite its dim '{name}'")

    def expr(self, names: Sequence[str]) -> AffineExpr:
        if self.raw is not None:
            expr, old = self.raw
            missing = [d for d in _raw_dims(self.raw) if d not in names]
            if missing:
                raise PassError(f"access {expr} uses the removed dim '{missing[0]}'")
            return expr.replace_dims_and_symbols(
                [AffineExpr.dimension(names.index(d)) if d in names else AffineExpr.constant(0) for d in old], [])
        missing = [d for d in self.terms if d not in names]
        if missing:
            raise PassError(f"access {self} uses the removed dim '{missing[0]}'")
        out: AffineExpr | None = None
        for d in sorted(self.terms, key=names.index):
            term = AffineExpr.dimension(names.index(d)) * self.terms[d]
            out = term if out is None else out + term
        if out is None:
            return AffineExpr.constant(self.const)
        return out + self.const if self.const else out

    def range(self, extents: dict[str, int]) -> tuple[int, int]:
        names = list(extents)
        return affine.expr_range(self.expr(names), [extents[d] for d in names])

    def __str__(self) -> str:
        if self.raw is not None:
            return str(self.raw[0])
        parts = [f"{d}*{c}" if c != 1 else d for d, c in self.terms.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def _raw_dims(raw: tuple[AffineExpr, tuple[str, ...]]) -> set[str]:
    return {raw[1][p] for p in affine.used_dims(raw[0])}


# --- editable nests ----------------------------------------------------------------------------

@dataclass
class NestSpec:
    """An editable copy of a `nest.compute`; `build()` makes the replacement op."""

    name: str
    parallel: list[list]  # [name, extent]
    reduction: list[list]
    inputs: list[SSAValue]
    forms: list[list[Form]]
    out: list[Form]
    out_shape: list[int]
    combiner: str
    epilogue: list[str]
    schedule: Schedule | None

    @staticmethod
    def of(op: nest.ComputeOp) -> NestSpec:
        view = NestView.of(op)
        names = [d for d, _ in view.dims]
        return NestSpec(
            view.name, [list(d) for d in view.dims[: view.npar]], [list(d) for d in view.dims[view.npar:]],
            list(op.inputs), [[Form.parse(e, names) for e in m.results] for m in view.maps],
            [Form.parse(e, names) for e in view.out_map.results], list(view.out_shape), view.combiner,
            [s.data for s in op.epilogue.data], op.get_schedule() if op.schedule is not None else None)

    @property
    def dims(self) -> list[list]:
        return self.parallel + self.reduction

    @property
    def names(self) -> list[str]:
        return [d for d, _ in self.dims]

    def has(self, name: str) -> bool:
        return name in self.names

    def is_parallel(self, name: str) -> bool:
        return name in (d for d, _ in self.parallel)

    def extent(self, name: str) -> int:
        for d, e in self.dims:
            if d == name:
                return e
        raise KeyError(name)

    def set_extent(self, name: str, extent: int) -> None:
        for dim in self.dims:
            if dim[0] == name:
                dim[1] = extent

    def add_dim(self, name: str, extent: int, before: str | None = None, after: str | None = None) -> None:
        """A new dim next to an existing one (same kind); the schedule gets it next to it too."""
        anchor = before or after
        group = self.parallel if self.is_parallel(anchor) else self.reduction
        pos = [d for d, _ in group].index(anchor) + (1 if after else 0)
        group.insert(pos, [name, extent])
        if self.schedule is not None and self.schedule.order:
            order = self.schedule.order
            loops = [i for i, loop in enumerate(order) if Loop(loop).dims & {anchor}]
            order.insert(loops[0] if before else loops[-1] + 1, name)

    def drop_dim(self, name: str) -> None:
        """Remove a dim no form uses any more (its schedule entries go too)."""
        self.parallel = [d for d in self.parallel if d[0] != name]
        self.reduction = [d for d in self.reduction if d[0] != name]
        s = self.schedule
        if s is not None:
            touched = [loop for loop, _ in s.splits if loop == name] or [a for a, b in s.fusions if name in (a, b)]
            if touched:
                self.schedule = None  # loops built from the removed dim cannot survive; back to domain order
                return
            s.order = [loop for loop in s.order if loop != name]
            s.unroll.pop(name, None)
            s.vector = None if s.vector == name else s.vector
            s.parallel = None if s.parallel == name else s.parallel

    def unique(self, base: str) -> str:
        name, k = base, 2
        while self.has(name):
            name, k = f"{base}{k}", k + 1
        return name

    def all_forms(self, skip: Sequence[int] = ()) -> list[Form]:
        return [f for k, forms in enumerate(self.forms) if k not in skip for f in forms] + self.out

    def input_shape(self, k: int) -> list[int]:
        """Shape that input k must have for its forms to stay in bounds (what a weight becomes)."""
        extents = dict(self.dims)
        return [f.range(extents)[1] + 1 for f in self.forms[k]]

    def build(self) -> nest.ComputeOp:
        names = self.names
        domain = nest.DomainAttr.make([tuple(d) for d in self.parallel], [tuple(d) for d in self.reduction])
        maps = [AffineMap(len(names), 0, tuple(f.expr(names) for f in forms)) for forms in self.forms]
        out_map = AffineMap(len(names), 0, tuple(f.expr(names) for f in self.out))
        return nest.ComputeOp.make(self.name, self.inputs, domain, maps, out_map, self.out_shape, self.combiner,
                                   self.epilogue, self.schedule)


def is_weight(value: SSAValue) -> bool:
    return isinstance(value.owner, nn.WeightOp)


def is_conv(op: nest.ComputeOp) -> bool:
    """A contraction of a data input with a weight: the nests architecture transforms reshape."""
    return op.kind == "mac" and len(op.inputs) >= 2 and is_weight(op.inputs[1]) and not is_weight(op.inputs[0])


def channel_dim(spec: NestSpec, k: int) -> str | None:
    """The dim that indexes the channel axis (1) of input k when it is read plainly, else None."""
    form = spec.forms[k][1] if len(spec.forms[k]) > 1 else None
    if form is None or form.raw is not None or len(form.terms) != 1 or form.const:
        return None
    (d, c), = form.terms.items()
    return d if c == 1 else None


def spatial_axis(spec: NestSpec, k: int, dim: str) -> int:
    """The axis of input k whose index uses `dim` (a conv's input row for oh, column for ow)."""
    axes = [a for a, f in enumerate(spec.forms[k]) if f.uses(dim)]
    if len(axes) != 1:
        raise PassError(f"nest '{spec.name}': input {k} reads dim {dim} on axes {axes}, expected one")
    return axes[0]
