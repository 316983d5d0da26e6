"""The loops of a nest: values of dims and split or fused loops, binding, the outer loops.

A part of `NestEmitter` (`nasir.lowering.nest_to_loops.emitter`), which holds the spec, the
builder and the loops these methods read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from nasir.dialects.affine import stride_of
from nasir.dialects.schedule import Loop
from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.spec import Spec
from nasir.lowering.target import CPUTarget


class DimValues(Sequence[Lin]):
    """The values of a nest's dims at the current point, each computed when first read: an
    epilogue after the reduction loops reads only parallel dims, and the value of a reduction dim
    there would use the values of loops that have ended (a channel loop split by a block and left
    rolled: `ci.o * 16 + ci.i` outside the loop of `ci.i`)."""

    def __init__(self, loops: LoopStructure):
        self.loops = loops
        self.names = [n for n, _ in loops.spec.dims]
        self.known: dict[int, Lin] = {}

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> Lin:
        if i not in self.known:
            self.known[i] = self.loops.value(self.names[i])
        return self.known[i]


class LoopStructure:
    """The loops of a nest: values of dims and split or fused loops, binding, the outer loops."""

    spec: Spec
    b: LoopBuilder
    target: CPUTarget

    def _origins(self, loop: str) -> set[str]:
        """Domain dims a loop iterates over."""
        if loop in self.fusion_parts:
            a, b_ = self.fusion_parts[loop]
            return self._origins(a) | self._origins(b_)
        if loop in dict(self.spec.dims):
            return {loop}
        return self._origins(Loop(loop).parent)

    def _loops_of(self, name: str) -> set[str]:
        if name in self.extent:
            return {name}
        if name in self.fused_into:
            return self._loops_of(self.fused_into[name][0])
        return self._loops_of(Loop.outer(name)) | self._loops_of(Loop.inner(name))

    def value(self, name: str) -> Lin:
        """Value of a dim or intermediate loop name from the loop ivs bound so far."""
        if name in self.ivs:
            return self.ivs[name]
        b = self.b
        if name in self.fused_into:
            fused, inner_extent, outer = self.fused_into[name]
            f = self.value(fused)
            if f.c and not self.flat_fusion(fused):
                raise LoweringError(f"nest '{self.spec.name}': fused loop '{fused}' cannot be vectorised")
            part = b.divide(Lin(f.s, f.k, 0, f.align), inner_extent, mod=name != outer)
            # lanes of a flat fusion run on along its inner dim, into the next rows (see `flat_fusion`)
            return Lin(part.s, part.k, 0 if name == outer else f.c)
        _, factor = self.split_extents[name]
        return b.lin_add(b.lin_scale(self.value(Loop.outer(name)), factor), self.value(Loop.inner(name)))

    def fusion_of(self, loop: str) -> str | None:
        """The fused loop that `loop` is a split part of (`oh*ow` of `oh*ow.i`), or None."""
        parent = Loop(loop).parent
        return parent if parent in self.fusion_parts else None

    def flat_fusion(self, fused: str) -> bool:
        """Whether the lanes of fused loop `fused` (`oh*ow`) may be stored and read as one run of
        the flat row: the output and every epilogue operand hold its two dims as a plane
        (`holds_plane`) and the inner one is contiguous in the output, so lane j of a point on the
        row is at the point's position + j, across the end of an image row. A transposed tile
        (`transposed_row`) then stores r points of a channel as one vector."""
        operands = {k for _, refs, _ in self.spec.steps for k in refs}
        accesses = [(self.spec.out_map, self.spec.out_shape)] + [(self.spec.maps[k], self.spec.in_shapes[k])
                                                                 for k in sorted(operands)]
        if not self.holds_plane(fused, accesses):
            return False
        inner = [n for n, _ in self.spec.dims].index(self.fusion_parts[fused][1])
        return stride_of(self.spec.out_map, self.spec.out_shape, inner) == 1

    def holds_plane(self, fused: str, accesses: list[tuple]) -> bool:
        """Whether each (map, shape) of `accesses` holds fused loop `fused`'s two dims (`oh*ow`) as a
        plane: a step of the outer one moves as far as the inner one's extent of steps (input 0 of a
        1x1 conv, `W * ow_stride` apart from one row to the next; not a stride-2 conv's)."""
        outer, inner = self.fusion_parts[fused]
        names = [n for n, _ in self.spec.dims]
        if outer not in names or inner not in names:
            return False
        o, i = names.index(outer), names.index(inner)
        row = self.spec.dims[i][1]
        return all(stride_of(amap, shape, o) == row * stride_of(amap, shape, i) for amap, shape in accesses)

    def guards(self) -> list[tuple[str, int]]:
        return [(n, e) for n, (e, f) in self.split_extents.items() if e % f]

    def dim_range(self, name: str) -> tuple[int, int]:
        """Smallest and largest value of a dim or loop at the current point of emission: bound
        loops by the iterations they run (an unrolled one by its constant), others by their extent."""
        if name in self.ranges:
            return self.ranges[name]
        if name in self.extent:
            return 0, self.extent[name] - 1
        if name in self.fused_into:
            return 0, dict(self.spec.dims)[name] - 1
        _, factor = self.split_extents[name]
        (olo, ohi), (ilo, ihi) = self.dim_range(Loop.outer(name)), self.dim_range(Loop.inner(name))
        return olo * factor + ilo, ohi * factor + ihi

    def prepare(self) -> None:
        """Work the kernel does once before the nest's loops (and before a fused kernel's): none
        here; a Winograd conv transforms its input and weights (`WinogradEmitter`)."""

    def emit(self, preset: dict[str, Lin] | None = None, threads: bool = True) -> None:
        """The nest's loops. `preset`: outer loops the caller binds instead (the loops a fused
        kernel shares, see `emit_row_fused`); `threads=False` runs every loop on the caller's
        thread."""
        self.preset, self.threads = preset or {}, threads
        self.box = self.interior_box()
        self._outer(0)

    def bind(self, name: str, lin: Lin) -> None:
        """Give loop or dim `name` the value `lin` (and the range of values it takes) for the code
        emitted next."""
        self.ivs[name] = lin
        if lin.constant:
            self.ranges[name] = (lin.k, lin.k)
        else:
            self.ranges[name] = (0, self.width - 1 if name == self.vec else self.extent[name] - 1)

    @contextmanager
    def _restoring(self, names: list[str]) -> Iterator[None]:
        """Put back the values and ranges `names` are bound to (or unbind them) on leaving: a
        tile version or a look-ahead rebinds loops for the code it emits."""
        saved = {n: (self.ivs.get(n), self.ranges.get(n)) for n in names}
        try:
            yield
        finally:
            for n, (iv, bounds) in saved.items():
                for table, old in ((self.ivs, iv), (self.ranges, bounds)):
                    if old is None:
                        table.pop(n, None)
                    else:
                        table[n] = old

    def _outer(self, i: int) -> None:
        b, sched = self.b, self.spec.schedule
        if i == len(self.outer):
            return self._point_block()
        name = self.outer[i]
        extent = self.extent[name]
        if name in self.preset:
            self.bind(name, self.preset[name])
            return self._outer(i + 1)

        def body(iv, carried):
            self.bind(name, b.lin(iv))
            self._outer(i + 1)
            return carried

        if name == sched.parallel and extent > 1 and self.threads:
            b.parallel(extent, lambda iv: body(iv, []))
        else:
            b.loop(extent, sched.unroll.get(name, 1), [], body)

    def _point_block(self) -> None:
        """Inside the outer loops: the tile in nested versions, one per outer loop with an interior
        (a padded conv's inner rows, then inner tiles of a row), each checking only the reads that
        can still leave the input there; the loop whose interior is largest is tested first. Edge
        runs worth their own version (see `interior`) get one, with the loop a constant in it:

            if oh in rows 1..54:
              if ow.o in tiles 1..5: tile (no checks)
              else if ow.o == 0: tile (ow.o = 0: reads left of the row are padding, skipped)
              else: tile (ow.o = 6)
            else if oh == 0:              (2 of 56 rows, under EDGE_SHARE: ow.o versioned inside)
              if ow.o in tiles 1..5: tile (oh = 0: reads of the row above are padding, skipped)
              else if ow.o == 0: tile (oh = 0, ow.o = 0)
              else: tile (oh = 0, ow.o = 6)
            else: ... (oh = 55)
        """
        self._versions(self.box)

    def _dims(self) -> DimValues:
        return DimValues(self)

    def _vector_dim(self) -> str:
        return Loop(self.vec).parent

    def _first_loop(self, name: str) -> str:
        return sorted(self._loops_of(name))[0]
