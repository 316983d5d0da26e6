"""Shared machinery of the architecture transforms (bottleneck, group, window, split).

Architecture transforms run on nest IR (after `convert-nn-to-nest`) and change what a nest computes:
its domain, its access maps and the shapes (and values) of its weights. This module gives them:

- `NestSpec` (`nest_spec.py`): the editable copy of a nest a transform rewrites;
- `Edit`: the transaction of one pass run: new weights (seeded Kaiming or derived from the trained
  ones), replacement of ops, and propagation of a changed channel count to the consumers;
- `ArchPass`: the driver. It runs the rewrite on a clone of the module and swaps the result in only
  when every selected nest was rewritten, so a failing transform leaves the module (and the weight
  store) exactly as it was. A caller that throws the module away on failure anyway (`Model.transform`
  works on its own copy) runs the passes `in_place()`, which skips that clone: one module clone per
  pass was a third of the time a search spends transforming a candidate.

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
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, weights_of
from nasir.dialects.shapes import shape_of, tensor
from nasir.errors import LegalityError, PassError
from nasir.transforms.nest_spec import NestSpec, channel_dim, is_conv, is_weight
from nasir.transforms.schedule import select_nests

INITS = ("kaiming", "inherit")

_TRANSACTIONAL: ContextVar[bool] = ContextVar("nasir_arch_transactional", default=True)


@contextmanager
def in_place() -> Iterator[None]:
    """Architecture passes inside the block rewrite the module itself, not a clone swapped in on
    success: a pass that fails leaves it half rewritten, so only for modules the caller drops then."""
    token = _TRANSACTIONAL.set(False)
    try:
        yield
    finally:
        _TRANSACTIONAL.reset(token)


# --- seeded weights ----------------------------------------------------------------------------

KAIMING_CACHE_BYTES = 768 << 20
_drawn: OrderedDict[tuple, np.ndarray] = OrderedDict()
_drawn_bytes = 0


def kaiming(shape: tuple[int, ...], key: str, seed: int) -> np.ndarray:
    """The seeded Kaiming-normal value of weight `key` (fan-in, gain sqrt(2); zeros below 2-D).

    A pure function of its arguments, so its results are remembered (read-only, least recently
    used dropped beyond KAIMING_CACHE_BYTES): a search transforms the same layers the same way
    in candidate after candidate, and drawing was a third of the time of a transform."""
    global _drawn_bytes
    if len(shape) < 2:
        return np.zeros(shape, np.float32)
    memo = (shape, key, seed)
    if memo in _drawn:
        _drawn.move_to_end(memo)
        return _drawn[memo]
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    value = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / int(np.prod(shape[1:]))))
    value.flags.writeable = False
    _drawn[memo] = value
    _drawn_bytes += value.nbytes
    while _drawn_bytes > KAIMING_CACHE_BYTES and len(_drawn) > 1:
        _drawn_bytes -= _drawn.popitem(last=False)[1].nbytes
    return value


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
        return kaiming(tuple(shape), key, self.seed)

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
            elif isinstance(user, nn.UnaryOp) and not isinstance(user, nn.SoftmaxBase):
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

    Every transform takes `layers` (a regular expression of the nests to rewrite), `init` (`kaiming`,
    or `inherit` to slice trained weights) and `seed`. Subclasses declare their own options and
    implement `applies` (is the nest of the right kind: otherwise it is skipped, or named in an
    error when it alone was selected) and `rewrite` (raise a NasirError or replace the nest through
    `edit`). Without `layers`, nests where the request is illegal (a factor that does not divide)
    are skipped unless none is left.
    """

    layers: str | None = None
    init: str = "kaiming"
    seed: int = 0

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
        work = op.clone() if _TRANSACTIONAL.get() else op
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
        if work is not op:
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


def check_factor(what: str, factor: int) -> None:
    """PassError unless `factor` (an option) is a positive integer."""
    if factor < 1:
        raise PassError(f"{what}: factor must be a positive integer, got {factor}")


def divides(what: str, layer: str, dim: str, extent: int, factor: int, note: str = "") -> None:
    """LegalityError unless `factor` divides `extent`, naming layer, dimension and values."""
    check_factor(what, factor)
    if extent % factor:
        raise LegalityError(f"{what}: layer '{layer}': dimension {dim} = {extent}{note} is not divisible by "
                            f"factor {factor}")
