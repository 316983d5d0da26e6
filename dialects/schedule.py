"""How a nest runs: `Schedule` (splits, fusions, order, vector, unroll, parallel, pack) and the
names of the loops it makes (`Loop`).

A schedule is stored on a `nest.compute` as a dictionary attribute:

    schedule = {splits = [["co", 16]], order = ["n", "co.o", "oh", "ow", "ci", "kh", "kw", "co.i"],
                vector = "co.i", parallel = "co.o"}

and read back with `Schedule.from_attr`; `Schedule.loops(domain)` lists the loops it makes of a
domain, outermost first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute
from xdsl.utils.exceptions import VerifyException

if TYPE_CHECKING:
    from nasir.dialects.nest import DomainAttr


class Loop(str):
    """The name of a schedule's loop, which says what it runs: a domain dim (`co`), the outer or
    inner part of a split (`co.o`, `co.i`; split again, `co.o.i`), or a fusion of loops (`oh*ow`).

        Loop.outer("co") == "co.o"      Loop("co.o.i").dim == "co"      Loop("co.i*ci").dims == {"co", "ci"}
    """

    @staticmethod
    def outer(loop: str) -> Loop:
        return Loop(f"{loop}.o")

    @staticmethod
    def inner(loop: str) -> Loop:
        return Loop(f"{loop}.i")

    @property
    def dims(self) -> set[str]:
        """The domain dims the loop enumerates."""
        return {part.split(".")[0] for part in self.split("*")}

    @property
    def dim(self) -> str:
        """The domain dim of a loop that is not a fusion."""
        return self.split(".")[0]

    @property
    def parent(self) -> str:
        """The loop a split part was split from."""
        return self.rsplit(".", 1)[0]

    @property
    def is_inner(self) -> bool:
        return self.endswith(".i")


@dataclass
class LoopDerivation:
    """How a schedule's loops come from a domain: `loops` (name, extent) in execution order; each
    split loop's (extent, factor); each fused loop's (outer, inner, inner's extent)."""

    loops: list[tuple[str, int]]
    splits: dict[str, tuple[int, int]]
    fusions: dict[str, tuple[str, str, int]]


@dataclass
class Schedule:
    """How a nest runs: loop structure derived from the domain by splits and fusions, then ordered.

    - `splits`: (loop, factor) in application order; loop `co` becomes `co.o` (outer, extent
      ceil(E / factor)) and `co.i` (inner, extent factor). A factor need not divide the extent:
      lowering guards the tail.
    - `fusions`: (outer, inner) adjacent loops merged into one loop named `outer*inner`. The
      splits of fused loops apply after the fusions, the others before: `splits = [["oh*ow", 6]],
      fusions = [["oh", "ow"]]` makes `oh*ow.o` and `oh*ow.i` (a 1x1 conv's 8 x 8 points, 6 a tile).
    - `order`: the loop names outermost first (default: creation order).
    - `vector`: the loop executed with vector instructions (innermost), `unroll`: loop -> factor,
      `parallel`: the loop spread over threads, `pack`: input index -> packed layout
      (e.g. "NCHW16c", "OIHW16i16o").

    Stored on the op as a dictionary attribute:
    `schedule = {splits = [["co", 16]], order = ["n", "co.o", ...], vector = "co.i", parallel = "co.o"}`.
    """

    splits: list[tuple[str, int]] = field(default_factory=list)
    fusions: list[tuple[str, str]] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    vector: str | None = None
    unroll: dict[str, int] = field(default_factory=dict)
    parallel: str | None = None
    pack: dict[int, str] = field(default_factory=dict)

    def splits_of_fused(self, fused: bool) -> list[tuple[str, int]]:
        """The splits of fused loops (`oh*ow`: they apply after the fusions) or of the others
        (before them), in order."""
        return [(name, factor) for name, factor in self.splits if ("*" in name) == fused]

    def derive(self, domain: DomainAttr) -> LoopDerivation:
        """The loops the splits and fusions make of `domain`, in execution order."""
        loops = dict(domain.dims)
        created = list(loops)
        splits: dict[str, tuple[int, int]] = {}
        fusions: dict[str, tuple[str, str, int]] = {}

        def split(name: str, factor: int) -> None:
            if name not in loops:
                raise VerifyException(f"schedule: cannot split unknown loop '{name}'")
            if factor < 1:
                raise VerifyException(f"schedule: split factor of '{name}' must be positive")
            extent = loops.pop(name)
            splits[name] = (extent, factor)
            pos = created.index(name)
            created[pos: pos + 1] = [Loop.outer(name), Loop.inner(name)]
            loops[Loop.outer(name)], loops[Loop.inner(name)] = -(-extent // factor), factor

        for name, factor in self.splits_of_fused(False):
            split(name, factor)
        for outer, inner in self.fusions:
            if outer not in loops or inner not in loops:
                raise VerifyException(f"schedule: cannot fuse unknown loops '{outer}', '{inner}'")
            fused = f"{outer}*{inner}"
            fusions[fused] = (outer, inner, loops[inner])
            loops[fused] = loops.pop(outer) * loops.pop(inner)
            created.remove(inner)
            created[created.index(outer)] = fused
        for name, factor in self.splits_of_fused(True):
            split(name, factor)
        order = self.order or created
        if sorted(order) != sorted(created):
            raise VerifyException(f"schedule: order {order} is not a permutation of the loops {created}")
        return LoopDerivation([(name, loops[name]) for name in order], splits, fusions)

    def loops(self, domain: DomainAttr) -> list[tuple[str, int]]:
        """The loops (name, extent) in execution order, outermost first."""
        return self.derive(domain).loops

    def tile_start(self, domain: DomainAttr) -> int:
        """Where the register tile begins in the loop order: at the first loop over a reduction
        dim, inside which the tile's parallel loops are unrolled whole; in a nest without one, at
        the loops unrolled whole just outside the vector loop (a copy nest's channels, which its
        store transposes into a channel-blocked output), else at the vector loop, else the end.

            order = ["n", "co.o", "oh.o", "ci", "kh", "kw", "oh.i", "co.i", "ow.i"] -> 3 (ci)
            order = ["n", "c.o", "h", "w.o", "c.i", "w.i"], unroll = {c.i = 8}, vector = "w.i" -> 4
        """
        return self._tile_start(self.derive(domain).loops, domain)

    def outer_loops(self, domain: DomainAttr) -> list[str]:
        """The loops outside the register tile (`tile_start`), the vector loop aside: those that
        step from tile to tile, one of them over threads (conv's n, co.o, oh.o)."""
        loops = self.derive(domain).loops
        return [name for name, _ in loops[: self._tile_start(loops, domain)] if name != self.vector]

    def tile_loops(self, domain: DomainAttr) -> list[str]:
        """The register tile's parallel loops: those from `tile_start` on that enumerate no
        reduction dim, the vector loop aside (conv's oh.i, co.i)."""
        loops = self.derive(domain).loops
        reductions = {name for name, _ in domain.reduction}
        return [name for name, _ in loops[self._tile_start(loops, domain):]
                if not Loop(name).dims & reductions and name != self.vector]

    def _tile_start(self, loops: list[tuple[str, int]], domain: DomainAttr) -> int:
        """`tile_start` of the loops `derive` made of `domain`."""
        reductions = {name for name, _ in domain.reduction}
        start = next((i for i, (name, _) in enumerate(loops) if Loop(name).dims & reductions), None)
        if start is not None:
            return start
        if self.vector is None:
            return len(loops)
        start = [name for name, _ in loops].index(self.vector)
        while start and self.unroll.get(loops[start - 1][0], 1) >= loops[start - 1][1] > 1:
            start -= 1
        return start

    def verify(self, domain: DomainAttr) -> None:
        names = [n for n, _ in self.loops(domain)]
        for label, loop in (("vector", self.vector), ("parallel", self.parallel)):
            if loop is not None and loop not in names:
                raise VerifyException(f"schedule: {label} loop '{loop}' is not one of {names}")
        for loop, factor in self.unroll.items():
            if loop not in names or factor < 1:
                raise VerifyException(f"schedule: bad unroll '{loop}' x{factor}")

    def to_attr(self) -> DictionaryAttr:
        entries: dict[str, Attribute] = {}
        if self.splits:
            entries["splits"] = ArrayAttr([ArrayAttr([StringAttr(n), IntegerAttr(f, i64)]) for n, f in self.splits])
        if self.fusions:
            entries["fusions"] = ArrayAttr([ArrayAttr([StringAttr(a), StringAttr(b)]) for a, b in self.fusions])
        if self.order:
            entries["order"] = ArrayAttr([StringAttr(n) for n in self.order])
        if self.vector is not None:
            entries["vector"] = StringAttr(self.vector)
        if self.unroll:
            entries["unroll"] = DictionaryAttr({k: IntegerAttr(v, i64) for k, v in self.unroll.items()})
        if self.parallel is not None:
            entries["parallel"] = StringAttr(self.parallel)
        if self.pack:
            entries["pack"] = DictionaryAttr({str(k): StringAttr(v) for k, v in self.pack.items()})
        return DictionaryAttr(entries)

    @staticmethod
    def from_attr(attr: DictionaryAttr | None, domain: DomainAttr | None = None) -> "Schedule":
        if attr is None:
            return Schedule()
        d = attr.data
        s = Schedule()
        if "splits" in d:
            s.splits = [(p.data[0].data, p.data[1].value.data) for p in d["splits"].data]
        if "fusions" in d:
            s.fusions = [(p.data[0].data, p.data[1].data) for p in d["fusions"].data]
        if "order" in d:
            s.order = [n.data for n in d["order"].data]
        if "vector" in d:
            s.vector = d["vector"].data
        if "unroll" in d:
            s.unroll = {k: v.value.data for k, v in d["unroll"].data.items()}
        if "parallel" in d:
            s.parallel = d["parallel"].data
        if "pack" in d:
            s.pack = {int(k): v.data for k, v in d["pack"].data.items()}
        return s
