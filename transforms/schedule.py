"""Schedule transforms: meaning-preserving loop rewrites of `nest.compute` ops.

They run on the nest level, after the architecture transforms and before lowering, and edit only
the nest's `schedule` attribute (`Schedule`): domain, accesses and weights stay as they are, so
every backend computes the same values (up to the float reassociation that
`nasir.transforms.analysis.dependences` documents and checks). Each pass asks the dependence analysis before
it edits and raises `LegalityError` with the reason when a request would break a dependence.

    interchange{order=ci,co}            permute the named loops among the positions they hold
    strip-mine{dim=co factor=16}        co -> co.o (outer), co.i (inner, extent 16)
    tile{dims=oh,ow factors=4,8}        strip-mine each, then all outer parts before all inner parts
    unroll{dim=kw factor=3}             unroll a loop (factor omitted: fully)
    fuse{dims=oh,ow}                    merge adjacent loops into one loop `oh*ow`
    vectorize{dim="co.i"}               run the innermost (parallel) loop with vector instructions
    parallel{dim="co.o"}                spread a loop over threads (not a reduction loop)
    pack{operand=1 layout=OIHW16i16o}   store an input in a blocked layout while the nest runs

Loop names with `.` or `*` (made by splits and fusions) are quoted in pipeline strings:
`vectorize{dim="co.i"}`. `layers=` (a name or a regular expression matched against the whole nest
name) selects nests; without it every nest that has the named loops is transformed. A request that
applies nowhere, or to a selected nest that lacks the loop, is an error naming layer and loop; on
any error no nest is changed.

    nest.compute ... {domain = #nest.domain<[n = 1, co = 32, oh = 8, ow = 8], [ci = 16, kh = 3, kw = 3]>, ...}
    -- strip-mine{dim=co factor=8},interchange{order=ow,"co.i"} -->
    nest.compute ... {..., schedule = {splits = [["co", 8 : i64]],
                                       order = ["n", "co.o", "ow", "oh", "co.i", "ci", "kh", "kw"]}}
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.schedule import Loop, Schedule
from nasir.dialects.shapes import shape_of
from nasir.errors import LegalityError, PassError
from nasir.transforms.analysis import dependences


def select_nests(module: ModuleOp, layers: str | None, what: str) -> list[nest.ComputeOp]:
    """Nests whose name matches `layers` fully (all nests when None); PassError if none matches."""
    nests = [op for op in module.walk() if isinstance(op, nest.ComputeOp)]
    if layers is None:
        return nests
    try:
        pattern = re.compile(layers)
    except re.error as e:
        raise PassError(f"{what}: layers='{layers}' is not a valid regular expression ({e})") from None
    chosen = [op for op in nests if op.layer_name == layers or pattern.fullmatch(op.layer_name)]
    if not nests:
        raise PassError(f"{what}: layers='{layers}' matches no nest: the model has none (it is at nn level); "
                        "run convert-nn-to-nest first (e.g. -p 'convert-nn-to-nest,...')")
    if not chosen:
        names = ", ".join(op.layer_name for op in nests[:20]) + (", ..." if len(nests) > 20 else "")
        raise PassError(f"{what}: layers='{layers}' matches no nest (nests: {names})")
    return chosen


class ScheduleEdit(ModulePass, ABC):
    """Shared driver: pick the nests that have `needed()` loops, compute every new schedule, then set them.

    Subclasses are frozen dataclasses with the pass options, `layers` among them.
    """

    @abstractmethod
    def needed(self) -> list[str]:
        """The loop names the request refers to."""

    def lacks(self, op: nest.ComputeOp, order: list[str]) -> str | None:
        """Why the request does not apply to `op` (skipped by default, an error if named), or None."""
        missing = [loop for loop in self.needed() if loop not in order]
        return f"has no loop '{missing[0]}' (its loops: {', '.join(order)})" if missing else None

    @abstractmethod
    def edit(self, op: nest.ComputeOp, sched: Schedule, order: list[str]) -> None:
        """Change `sched` (a fresh copy; `order` is its current loop order) or raise a NasirError."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        loops = self.needed()
        edits: list[tuple[nest.ComputeOp, Schedule]] = []
        for nest_op in select_nests(op, self.layers, self.name):
            sched = nest_op.get_schedule()
            order = [name for name, _ in sched.loops(nest_op.domain)]
            reason = self.lacks(nest_op, order)
            if reason and self.layers is None:
                continue
            if reason:
                raise PassError(f"{self.name}: nest '{nest_op.layer_name}' {reason}")
            sched.order = list(order)
            self.edit(nest_op, sched, order)
            edits.append((nest_op, sched))
        if not edits:
            raise PassError(f"{self.name}: applies to no nest" + (f" (none has loop(s) {', '.join(loops)})" if loops else ""))
        for nest_op, sched in edits:
            created = Schedule(splits=sched.splits, fusions=sched.fusions).loops(nest_op.domain)
            if sched.order == [name for name, _ in created]:
                sched.order = []  # domain order: leave it implicit
            sched.verify(nest_op.domain)
            if sched == Schedule():
                nest_op.properties.pop("schedule", None)
            else:
                nest_op.properties["schedule"] = sched.to_attr()


def _extent(op: nest.ComputeOp, sched: Schedule, loop: str) -> int:
    return dict(sched.loops(op.domain))[loop]


def _check_unmarked(sched: Schedule, loop: str, action: str, layer: str) -> None:
    """A loop that is vectorized, parallel or unrolled keeps its name: it cannot be split or fused."""
    marks = [label for label, hit in (("vectorized", sched.vector == loop), ("parallel", sched.parallel == loop),
                                      ("unrolled", loop in sched.unroll)) if hit]
    if marks:
        raise LegalityError(f"{action}: loop '{loop}' of nest '{layer}' is already {marks[0]}; "
                            f"{action} it before marking it")
    if "*" in loop and action == "strip-mine":
        raise PassError(f"strip-mine: loop '{loop}' of nest '{layer}' is fused; split its parts before fusing")


def _reorder(sched: Schedule, order: list[str], layer: str, action: str) -> None:
    """Set a new loop order; the vector loop must stay innermost."""
    if sched.vector is not None and order[-1] != sched.vector:
        raise LegalityError(f"{action}: nest '{layer}' runs loop '{sched.vector}' as vector lanes, which must stay "
                            f"innermost (new order: {', '.join(order)})")
    sched.order = order


def _split(sched: Schedule, order: list[str], loop: str, factor: int, extent: int, layer: str,
           action: str) -> list[str]:
    if factor < 1 or factor > extent:
        raise PassError(f"{action}: factor {factor} for loop '{loop}' of nest '{layer}' must be in 1..{extent} "
                        f"(the loop's extent)")
    _check_unmarked(sched, loop, action, layer)
    sched.splits.append((loop, factor))
    pos = order.index(loop)
    sched.order = order[:pos] + [Loop.outer(loop), Loop.inner(loop)] + order[pos + 1:]
    return sched.order


@dataclass(frozen=True)
class InterchangePass(ScheduleEdit):
    """Permute the named loops among the positions they occupy (TVM's `reorder`); others stay put.

    Loops `n, co, oh, ow, ci, kh, kw` with `interchange{order=ci,co}` become `n, ci, oh, ow, co, kh, kw`.
    Always legal: parallel loops carry nothing and reductions are reorderable (see dependences).
    """

    name = "interchange"
    order: tuple[str, ...]
    layers: str | None = None

    def needed(self) -> list[str]:
        if len(set(self.order)) != len(self.order):
            raise PassError(f"interchange: order={','.join(self.order)} names a loop twice")
        return list(self.order)

    def edit(self, op, sched, order):
        slots = sorted(order.index(loop) for loop in self.order)
        new = list(order)
        for slot, loop in zip(slots, self.order):
            new[slot] = loop
        _reorder(sched, new, op.layer_name, self.name)


@dataclass(frozen=True)
class StripMinePass(ScheduleEdit):
    """Split loop `dim` into `dim.o` (extent ceil(E/factor)) and `dim.i` (extent factor), in place.

    A factor that does not divide the extent is legal: lowering guards the tail.
    """

    name = "strip-mine"
    dim: str
    factor: int
    layers: str | None = None

    def needed(self) -> list[str]:
        return [self.dim]

    def edit(self, op, sched, order):
        _split(sched, order, self.dim, self.factor, _extent(op, sched, self.dim), op.layer_name, self.name)


@dataclass(frozen=True)
class TilePass(ScheduleEdit):
    """Strip-mine each of `dims` by its factor, then move the inner parts after the last outer part.

    `tile{dims=oh,ow factors=4,8}` on `n, co, oh, ow, ...` gives `n, co, oh.o, ow.o, oh.i, ow.i, ...`.
    """

    name = "tile"
    dims: tuple[str, ...]
    factors: tuple[int, ...]
    layers: str | None = None

    def needed(self) -> list[str]:
        if len(self.dims) != len(self.factors):
            raise PassError(f"tile: {len(self.dims)} dims but {len(self.factors)} factors")
        if len(set(self.dims)) != len(self.dims):
            raise PassError(f"tile: dims={','.join(self.dims)} names a loop twice")
        return list(self.dims)

    def edit(self, op, sched, order):
        for dim, factor in zip(self.dims, self.factors):
            order = _split(sched, order, dim, factor, _extent(op, sched, dim), op.layer_name, self.name)
        inner = [Loop.inner(dim) for dim in self.dims]
        rest = [loop for loop in order if loop not in inner]
        last = max(rest.index(Loop.outer(dim)) for dim in self.dims)
        _reorder(sched, rest[:last + 1] + inner + rest[last + 1:], op.layer_name, self.name)


@dataclass(frozen=True)
class UnrollPass(ScheduleEdit):
    """Unroll loop `dim` by `factor` (default: its whole extent). Reorders nothing: always legal."""

    name = "unroll"
    dim: str
    factor: int | None = None
    layers: str | None = None

    def needed(self) -> list[str]:
        return [self.dim]

    def edit(self, op, sched, order):
        extent = _extent(op, sched, self.dim)
        factor = extent if self.factor is None else self.factor
        if not 1 <= factor <= extent:
            raise PassError(f"unroll: factor {factor} for loop '{self.dim}' of nest '{op.layer_name}' must be in "
                            f"1..{extent} (the loop's extent)")
        sched.unroll[self.dim] = factor


@dataclass(frozen=True)
class FusePass(ScheduleEdit):
    """Merge adjacent loops (outermost first) into one loop `a*b` with the product extent.

    Only loops that are adjacent in the current order can merge: anything else would move the loops
    between them (LegalityError; interchange them next to each other first).
    """

    name = "fuse"
    dims: tuple[str, ...]
    layers: str | None = None

    def needed(self) -> list[str]:
        if len(self.dims) < 2 or len(set(self.dims)) != len(self.dims):
            raise PassError(f"fuse: dims={','.join(self.dims)} must name two or more different loops")
        return list(self.dims)

    def edit(self, op, sched, order):
        fused = self.dims[0]
        for loop in self.dims[1:]:
            dependences.check_adjacent(order, fused, loop, op.layer_name)
            dependences.check_fusable(op, fused, loop)
            for part in (fused, loop):
                _check_unmarked(sched, part, self.name, op.layer_name)
            sched.fusions.append((fused, loop))
            pos = order.index(fused)
            order = order[:pos] + [f"{fused}*{loop}"] + order[pos + 2:]
            fused = f"{fused}*{loop}"
        sched.order = order


@dataclass(frozen=True)
class VectorizePass(ScheduleEdit):
    """Run the innermost loop `dim` as vector lanes: a parallel, unfused loop (see dependences)."""

    name = "vectorize"
    dim: str
    layers: str | None = None

    def needed(self) -> list[str]:
        return [self.dim]

    def edit(self, op, sched, order):
        if order[-1] != self.dim:
            raise LegalityError(f"vectorize: loop '{self.dim}' of nest '{op.layer_name}' is not innermost "
                                f"(order: {', '.join(order)}); interchange it inside first")
        if sched.parallel == self.dim:
            raise LegalityError(f"vectorize: loop '{self.dim}' of nest '{op.layer_name}' already runs in parallel")
        dependences.check_vector(op, self.dim)
        sched.vector = self.dim


@dataclass(frozen=True)
class ParallelPass(ScheduleEdit):
    """Spread loop `dim` over threads; illegal on a loop that carries the accumulation. One per nest."""

    name = "parallel"
    dim: str
    layers: str | None = None

    def needed(self) -> list[str]:
        return [self.dim]

    def edit(self, op, sched, order):
        dependences.check_parallel(op, self.dim)
        if sched.parallel not in (None, self.dim):
            raise LegalityError(f"parallel: nest '{op.layer_name}' already runs loop '{sched.parallel}' in parallel "
                                f"(one parallel loop per nest)")
        if sched.vector == self.dim:
            raise LegalityError(f"parallel: loop '{self.dim}' of nest '{op.layer_name}' is vectorized")
        sched.parallel = self.dim


_LAYOUT = re.compile(r"([A-Z])|([0-9]+)([a-z])")
_AXES = {(True, 4): "OIHW", (False, 4): "NCHW", (True, 2): "OI", (False, 2): "NC", (True, 1): "O", (False, 1): "C"}


def operand_axes(op: nest.ComputeOp, k: int) -> str | None:
    """Axis letters of input `k` of a nest for `pack` layouts ("OIHW" for a conv weight), None for
    ranks without letters."""
    value = op.inputs[k]
    return _AXES.get((isinstance(value.owner, nn.WeightOp), len(shape_of(value))))


def parse_layout(layout: str) -> list[tuple[str, int]]:
    """`"NCHW16c"` -> [(N, 0), (C, 0), (H, 0), (W, 0), (C, 16)]: the axes in order, then the blocks.

    Upper-case letters name axes; `Kx` blocks axis X by K (the last block is innermost).
    """
    parts = _LAYOUT.findall(layout)
    if not parts or "".join(u or f"{k}{low}" for u, k, low in parts) != layout:
        raise PassError(f"pack: layout '{layout}' is not axis letters with optional blocks, like NCHW16c")
    outer = [u for u, _, _ in parts if u]
    blocks = [(low.upper(), int(k)) for u, k, low in parts if not u]
    for axis, k in blocks:
        if axis not in outer or k < 1:
            raise PassError(f"pack: layout '{layout}' blocks axis '{axis.lower()}' that it does not name")
    return [(u, 0) for u in outer] + blocks


def layout_mismatch(axes: str, shape, layout: str) -> str | None:
    """Why `layout` cannot store an array of `shape` (axes named by `axes`): a block that does not
    divide its axis (after the blocks inside it). None when it can."""
    remaining = dict(zip(axes, shape))
    for axis, block in reversed(parse_layout(layout)):
        if block and remaining[axis] % block:
            return (f"block {block}{axis.lower()} of layout '{layout}' does not divide axis {axis} "
                    f"(extent {remaining[axis]})")
        if block:
            remaining[axis] //= block
    return None


@dataclass(frozen=True)
class PackPass(ScheduleEdit):
    """Store input `operand` in a blocked layout while the nest runs (NCHW16c, OIHW16i16o, NHWC, ...).

    Pure data layout: legal whenever every block divides its axis (after the blocks inside it).
    Activations use the letters NCHW (NC, C), weights OIHW (OI, O).
    """

    name = "pack"
    operand: int
    layout: str
    layers: str | None = None

    def needed(self) -> list[str]:
        parse_layout(self.layout)
        return []

    def axes(self, op: nest.ComputeOp) -> str | None:
        return operand_axes(op, self.operand)

    def lacks(self, op, order):
        if not 0 <= self.operand < len(op.inputs):
            return f"has {len(op.inputs)} inputs, no operand {self.operand}"
        if self.axes(op) is None:
            return f"has operand {self.operand} of rank {len(shape_of(op.inputs[self.operand]))}; packing supports ranks 1, 2 and 4"
        outer = [axis for axis, block in parse_layout(self.layout) if not block]
        if sorted(outer) != sorted(self.axes(op)):
            return (f"has operand {self.operand} with axes {self.axes(op)}, which layout '{self.layout}' does not "
                    f"order (its upper-case letters must be a permutation of them)")
        return None

    def edit(self, op, sched, order):
        problem = layout_mismatch(self.axes(op), shape_of(op.inputs[self.operand]), self.layout)
        if problem:
            raise LegalityError(f"pack: {problem} of operand {self.operand} of nest '{op.layer_name}'")
        sched.pack[self.operand] = self.layout
