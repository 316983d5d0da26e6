"""Shared machinery of the architecture transforms (bottleneck, group, window, split).

Architecture transforms run on nest IR (after `convert-nn-to-nest`) and change what a nest computes:
its domain, its access maps and the shapes (and values) of its weights. This module gives them:

- `Form`: one access-map result as a linear combination of *named* domain dims plus a constant, so a
  transform can say "replace co by g*8 + co" or "drop ci" without renumbering d0, d1, ...;
- `NestSpec`: an editable copy of a `nest.compute` (domain, forms, inputs, epilogue, schedule) that
  builds the replacement op;
- `Edit`: the transaction of one pass run: new weights (seeded Kaiming or derived from the trained
  ones), replacement of ops, and propagation of a changed channel count to the consumers;
- `ArchPass`: the driver. It runs the rewrite on a clone of the module and swaps the result in only
  when every selected nest was rewritten, so a failing transform leaves the module (and the weight
  store) exactly as it was.

Weights (`init=` option of every architecture pass): `kaiming` (default) gives every weight whose
nest is transformed a fresh seeded Kaiming-normal value (fan-in mode, gain sqrt(2); biases zero); the
seed is `seed=` combined with the new weight's name, so a pipeline is reproducible. `inherit` derives
the new value from the trained one (each pass documents how) and is an error when the store lacks
it. Changes that keep meaning (slicing batch-norm statistics to the surviving channels, index-split
parts) always derive from the present value and fall back to a fresh one only when the value is
absent (IR-only use, e.g. FileCheck tests).
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, weights_of
from nasir.dialects.nest import Loop
from nasir.dialects.nn import shape_of, tensor
from nasir.errors import LegalityError, PassError
from nasir.transforms.schedule import select_nests

INITS = ("kaiming", "inherit")


# --- access forms ------------------------------------------------------------------------------

@dataclass
class Form:
    """`sum(terms[d] * d) + const` over named dims; `raw` keeps a non-linear result as it is."""

    terms: dict[str, int] = field(default_factory=dict)
    const: int = 0
    raw: tuple[AffineExpr, tuple[str, ...]] | None = None

    @staticmethod
    def parse(expr: AffineExpr, names: Sequence[str]) -> "Form":
        lin = nest.linear_form(expr)
        if lin is None:
            return Form(raw=(expr, tuple(names)))
        return Form({names[p]: c for p, c in lin[0].items() if c}, lin[1])

    @staticmethod
    def dim(name: str) -> "Form":
        return Form({name: 1})

    def coeff(self, name: str) -> int:
        return self.terms.get(name, 0)

    def uses(self, name: str) -> bool:
        return name in _raw_dims(self.raw) if self.raw else name in self.terms

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
        return nest.expr_range(self.expr(names), [extents[d] for d in names])

    def __str__(self) -> str:
        if self.raw is not None:
            return str(self.raw[0])
        parts = [f"{d}*{c}" if c != 1 else d for d, c in self.terms.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def _raw_dims(raw: tuple[AffineExpr, tuple[str, ...]]) -> set[str]:
    return {raw[1][p] for p in nest.used_dims(raw[0])}


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
    schedule: nest.Schedule | None

    @staticmethod
    def of(op: nest.ComputeOp) -> "NestSpec":
        names = op.domain.dim_names
        return NestSpec(
            op.layer_name, [list(d) for d in op.domain.parallel], [list(d) for d in op.domain.reduction],
            list(op.inputs), [[Form.parse(e, names) for e in m.results] for m in op.access_maps],
            [Form.parse(e, names) for e in op.output_map.results], list(shape_of(op.result)), op.kind,
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


# --- the transaction ---------------------------------------------------------------------------

class Edit:
    """One pass run on a working clone: weight creation, op replacement, channel propagation."""

    def __init__(self, module: ModuleOp, store: WeightStore, init: str, seed: int, what: str):
        if init not in INITS:
            raise PassError(f"{what}: unknown init '{init}' (choose from {', '.join(INITS)})")
        self.module, self.init, self.seed, self.what = module, init, seed, what
        self.store = WeightStore(store)  # staged: new names land here, committed on success
        self.new: set[str] = set()
        self.replaced: set[str] = set()
        self.taken = {op.key for op in module.walk() if isinstance(op, nn.WeightOp)}  # values may be absent

    # weights --------------------------------------------------------------------------------
    def value(self, v: SSAValue) -> np.ndarray | None:
        return self.store.get(v.owner.key) if is_weight(v) else None

    def kaiming(self, shape: Sequence[int], key: str) -> np.ndarray:
        if len(shape) < 2:
            return np.zeros(shape, np.float32)
        rng = np.random.default_rng([self.seed, zlib.crc32(key.encode())])
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def weight(self, old: SSAValue, array: np.ndarray | Callable[[str], np.ndarray], before: Operation) -> SSAValue:
        """A new nn.weight op (before `before`) under a fresh name derived from `old`'s, holding
        `array` (or `array(name)`, for values seeded by their name)."""
        base, n = old.owner.key, 1
        key = base
        while key in self.store or key in self.taken:
            key, n = f"{base}_{n}", n + 1
        self.taken.add(key)
        value = np.ascontiguousarray(array(key) if callable(array) else array, np.float32)
        self.store[key] = value
        self.new.add(key)
        self.replaced.add(old.owner.key)
        op = nn.WeightOp.make(key, value.shape)
        before.parent_block().insert_op_before(op, before)
        return op.result

    def reshaped(self, old: SSAValue, shape: Sequence[int], inherit: Callable[[np.ndarray], np.ndarray],
                 before: Operation, layer: str) -> SSAValue:
        """The weight of a transformed nest: fresh Kaiming, or `inherit(trained value)`."""
        if self.init == "kaiming":
            return self.weight(old, lambda key: self.kaiming(shape, key), before)
        return self.weight(old, self._derive(old, shape, inherit, layer), before)

    def kept(self, old: SSAValue, shape: Sequence[int], derive: Callable[[np.ndarray], np.ndarray],
             fresh: Callable[[Sequence[int]], np.ndarray], before: Operation, layer: str) -> SSAValue:
        """A weight whose meaning survives (sliced statistics, split parts): derived when present."""
        if self.value(old) is None and self.init == "kaiming":
            return self.weight(old, fresh(shape), before)
        return self.weight(old, self._derive(old, shape, derive, layer), before)

    def _derive(self, old: SSAValue, shape, fn, layer: str) -> np.ndarray:
        value = self.value(old)
        if value is None:
            raise PassError(f"{self.what}: init=inherit needs the trained value of weight '{old.owner.key}' "
                            f"(layer '{layer}'), which the weight store does not have")
        out = np.asarray(fn(value), np.float32)
        assert tuple(out.shape) == tuple(shape), (out.shape, shape)
        return out

    # ops ------------------------------------------------------------------------------------
    def replace(self, old: Operation, new: Operation | Sequence[Operation]) -> Operation:
        """Put `new` (the last op gives the value) in place of `old`, whose uses move to it."""
        ops = [new] if isinstance(new, Operation) else list(new)
        for op in ops:
            old.parent_block().insert_op_before(op, old)
        old.results[0].replace_all_uses_with(ops[-1].results[0])
        old.parent_block().erase_op(old)
        return ops[-1]

    def find(self, name: str) -> nest.ComputeOp:
        for op in self.module.walk():
            if isinstance(op, nest.ComputeOp) and op.layer_name == name:
                return op
        raise PassError(f"{self.what}: nest '{name}' vanished during the rewrite")

    # channel propagation --------------------------------------------------------------------
    def propagate_channels(self, value: SSAValue, kept: np.ndarray, old: int, why: str) -> None:
        """`value` now has only the channels `kept` of its `old` ones on axis 1: update its consumers.

        Element-wise and pool nests, nn.batch_norm and nn activations shrink with it (their per-channel
        weights sliced), and the next conv reads fewer input channels (and stops the walk). Anything
        else is a block boundary the change cannot cross: LegalityError with `why` and the reason.
        """
        for use in list(value.uses):
            user, k = use.operation, use.index
            if isinstance(user, nest.ComputeOp):
                self._into_nest(user, k, value, kept, old, why)
            elif isinstance(user, nn.BatchNormOp) and k == 0:
                self._into_batch_norm(user, value, kept, old, why)
            elif isinstance(user, nn.UnaryOp) and not isinstance(user, nn.SoftmaxOp):
                new = type(user).create(operands=[value], properties=dict(user.properties),
                                        result_types=[tensor(shape_of(value))])
                self.propagate_channels(self.replace(user, new).results[0], kept, old, why)
            else:
                what = "the model output" if isinstance(user, func.ReturnOp) else f"'{_label(user)}' ({user.name})"
                raise LegalityError(f"{why}: the channel change reaches {what}, a block boundary whose shape "
                                    f"must stay {list(_old_shape(value, old))}")

    def _into_nest(self, user: nest.ComputeOp, k: int, value: SSAValue, kept: np.ndarray, old: int,
                   why: str) -> None:
        spec = NestSpec.of(user)
        spec.inputs[k] = value
        d = channel_dim(spec, k)
        new_c = len(kept)
        if user.kind == "mac" and k == 0 and is_conv(user):
            if d is None or spec.is_parallel(d):
                raise LegalityError(f"{why}: the next conv '{user.layer_name}' reads its input channels as "
                                    f"{spec.forms[0][1]} (grouped), which a channel change cannot pass into")
            spec.set_extent(d, new_c)
            for j, forms in enumerate(spec.forms):
                axes = [a for a, f in enumerate(forms) if f.is_dim(d)]
                if j and axes:
                    w = spec.inputs[j]
                    spec.inputs[j] = self.reshaped(w, spec.input_shape(j), lambda a, ax=axes[0]: np.take(a, kept, ax),
                                                   user, user.layer_name)
            self.replace(user, spec.build())
            return
        if user.kind == "mac" or d is None or not spec.is_parallel(d) or not spec.out[1].is_dim(d):
            raise LegalityError(f"{why}: the channel change reaches nest '{user.layer_name}' (operand {k}), "
                                f"which does not carry channels through one-to-one")
        spec.set_extent(d, new_c)
        spec.out_shape[1] = new_c
        for j, forms in enumerate(spec.forms):
            if j == k or not any(f.uses(d) for f in forms):
                continue
            other = spec.inputs[j]
            axes = [a for a, f in enumerate(forms) if f.is_dim(d)]
            if other is value:
                continue
            if not is_weight(other) or not axes:
                raise LegalityError(
                    f"{why}: the channel change reaches '{user.layer_name}', which combines it with "
                    f"{_label(other.owner)!r} of unchanged shape {list(shape_of(other))} (a residual or "
                    f"branch join: both sides must have {old} channels)")
            spec.inputs[j] = self.kept(other, spec.input_shape(j), lambda a, ax=axes[0]: np.take(a, kept, ax),
                                       lambda s: np.zeros(s, np.float32), user, user.layer_name)
        new = self.replace(user, spec.build())
        self.propagate_channels(new.results[0], kept, old, why)

    def _into_batch_norm(self, user: nn.BatchNormOp, value: SSAValue, kept: np.ndarray, old: int, why: str) -> None:
        fills = (1.0, 0.0, 0.0, 1.0)  # scale, bias, mean, var of an identity batch-norm
        params = [self.kept(p, (len(kept),), lambda a: a[kept], lambda s, f=f: np.full(s, f, np.float32),
                            user, _label(user))
                  for p, f in zip(user.operands[1:], fills)]
        new = nn.BatchNormOp.new(value, *params, epsilon=user.epsilon.value.data)
        if user.layer is not None:
            new.named(user.layer_name)
        self.propagate_channels(self.replace(user, new).results[0], kept, old, why)

    # commit ---------------------------------------------------------------------------------
    def drop_dead_weights(self) -> None:
        for op in list(self.module.walk()):
            if isinstance(op, nn.WeightOp) and not op.result.uses:
                op.parent_block().erase_op(op)


def _label(op: Operation | Block) -> str:
    """How an error names the producer of a value: layer name, weight name, or the model input."""
    if isinstance(op, Block):
        return "the model input"
    if isinstance(op, nest.ComputeOp):
        return op.layer_name
    if isinstance(op, nn.WeightOp):
        return op.key
    return getattr(op, "layer_name", "") or op.name


def _old_shape(value: SSAValue, channels: int) -> tuple[int, ...]:
    shape = list(shape_of(value))
    shape[1] = channels
    return tuple(shape)


# --- the pass driver ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ArchPass(ModulePass, ABC):
    """Driver of every architecture transform.

    Subclasses declare their options (with `layers`, `init`, `seed`) and implement `applies` (is the
    nest of the right kind: otherwise it is skipped, or named in an error when it alone was selected)
    and `rewrite` (raise a NasirError or replace the nest through `edit`). Without `layers`, nests
    where the request is illegal (a factor that does not divide) are skipped unless none is left.
    """

    @abstractmethod
    def applies(self, op: nest.ComputeOp) -> str | None:
        """None if the transform can rewrite this kind of nest, else why not."""

    @abstractmethod
    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        """Rewrite `op` (in the working clone) through `edit`, or raise."""

    def check_options(self) -> None:
        """Raise PassError for option values that are wrong whatever the nest."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        layers = self.layers or None
        work = op.clone()
        edit = Edit(work, weights_of(op), self.init, self.seed, self.name)
        chosen = select_nests(work, layers, self.name)
        targets = [n.layer_name for n in chosen if self.applies(n) is None]
        if not targets:
            if not chosen:
                raise PassError(f"{self.name}: the module has no nests (run convert-nn-to-nest first)")
            raise PassError(f"{self.name}: nest '{chosen[0].layer_name}' {self.applies(chosen[0])}")
        done, first_error = 0, None
        for name in targets:
            if layers is None:
                trial = work.clone()
                trial_edit = Edit(trial, edit.store, self.init, self.seed, self.name)
                try:
                    self.rewrite(trial_edit, trial_edit.find(name))
                except LegalityError as e:
                    first_error = first_error or e
                    continue
            self.rewrite(edit, edit.find(name))
            done += 1
        if not done:
            raise first_error
        edit.drop_dead_weights()
        _swap(op, work)
        store = weights_of(op)
        store.update({k: edit.store[k] for k in edit.new})
        live = {w.key for w in op.walk() if isinstance(w, nn.WeightOp)}
        for key in (edit.new | edit.replaced) - live:
            store.pop(key, None)


def _swap(module: ModuleOp, work: ModuleOp) -> None:
    old, new = module.body.blocks[0], work.body.blocks[0]
    work.body.detach_block(new)
    module.body.detach_block(old)
    module.body.add_block(new)
    old.erase()


def divides(what: str, layer: str, dim: str, extent: int, factor: int, note: str = "") -> None:
    """LegalityError unless `factor` divides `extent`, naming layer, dimension and values."""
    if factor < 1:
        raise PassError(f"{what}: factor must be a positive integer, got {factor}")
    if extent % factor:
        raise LegalityError(f"{what}: layer '{layer}': dimension {dim} = {extent}{note} is not divisible by "
                            f"factor {factor}")


def spatial_axis(spec: NestSpec, k: int, dim: str) -> int:
    """The axis of input k whose index uses `dim` (a conv's input row for oh, column for ow)."""
    axes = [a for a, f in enumerate(spec.forms[k]) if f.uses(dim)]
    if len(axes) != 1:
        raise PassError(f"nest '{spec.name}': input {k} reads dim {dim} on axes {axes}, expected one")
    return axes[0]

