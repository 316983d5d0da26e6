"""Versions of a tile by where it runs: interior tiles unchecked, edges with the checks they need, a narrow last tile.

A part of `NestEmitter` (`nasir.lowering.nest_to_loops.emitter`), which holds the spec, the
builder and the loops these methods read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from nasir.dialects.affine import monotone_in
from nasir.dialects.schedule import Loop
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.spec import Spec
from nasir.lowering.target import CPUTarget

EDGE_SHARE = 1 / 8
"""The share of an outer loop's iterations under which its edge runs, each in a version of its own
(see `NestEmitter.interior`), version the loops inside them too: the first and last of 28 to 56
rows then run their tiles as the inner rows do, the first and last tile of the row in versions of
their own, with only the padded row's reads left out. On Zen 3 (interleaved per-layer profile)
ResNet-34 imagenet's 3x3 convs on 56 x 56 ran 0.96x the time so, on 28 x 28 0.92x (the network
0.975x), ResNeXt-29's grouped 3x3 convs on 32 x 32 0.87x, WRN-40-2 0.96x, against versions of
the edge rows that guard each tile, or none (56 rows). Edges that make more of their loop (16 rows
or fewer, a row's 7 tiles) keep the guarded tile: nested there, ResNeXt's grouped 3x3 convs on
16 x 16 ran 1.03-1.04x the time, and the code grows with every small image."""


class Versioning:
    """Versions of a tile by where it runs: interior tiles unchecked, edges with the checks they need, a narrow last tile."""

    spec: Spec
    b: LoopBuilder
    target: CPUTarget

    def _checks_everywhere(self) -> frozenset:
        """The (input, axis, side) of every read that may leave its input at the current point."""
        sides = set()
        for k in range(len(self.spec.maps)):
            for a, (lo, hi, size) in enumerate(self.read_bounds(k)):
                if lo < 0:
                    sides.add((k, a, "low"))
                if hi >= size:
                    sides.add((k, a, "high"))
        return frozenset(sides)

    def check_runs(self, name: str) -> list[tuple[int, int, frozenset]]:
        """Outer loop `name`'s iterations as runs [a, b) that need the same bounds checks.

        Where every read moves one way as the loop runs (`monotone_in`), each check holds on a
        prefix or a suffix of the iterations, so two iterations that need the same checks bound a
        run: the iterations are bisected between those that differ (a 22000-wide pool: 40
        iterations looked at, not 22000). Otherwise iterations are halved until a part needs no
        check over its whole range (bounds over a part hold for each of its iterations) or is one
        iteration (a reshape's copy, its reads under mod: one look)."""
        def need(lo: int, hi: int) -> frozenset:
            self.ranges[name] = (lo, hi)
            return self._checks_everywhere()

        last = self.extent[name] - 1
        dims = {i for i, (dim, _) in enumerate(self.spec.dims) if dim in Loop(name).dims}
        if all(monotone_in(e, dims) for amap in self.spec.maps for e in amap.results):
            needs = {0: need(0, 0), last: need(last, last)}
            pending = [(0, last)]
            while pending:
                a, b = pending.pop()
                if b - a > 1 and needs[a] != needs[b]:
                    mid = (a + b) // 2
                    needs[mid] = need(mid, mid)
                    pending += [(a, mid), (mid, b)]
        else:
            needs = {}
            pending = [(0, last)]
            while pending:
                a, b = pending.pop()
                if a == b:
                    needs[a] = need(a, a)
                elif not need(a, b):
                    needs[a] = needs[b] = frozenset()
                else:
                    mid = (a + b) // 2
                    pending += [(a, mid), (mid + 1, b)]
        del self.ranges[name]
        runs: list[tuple[int, int, frozenset]] = []
        for v in sorted(needs):
            if runs and runs[-1][2] == needs[v]:
                runs[-1] = (runs[-1][0], v + 1, needs[v])
            else:
                runs.append((v, v + 1, needs[v]))
        return runs

    def interior(self, name: str) -> tuple[tuple[int, int], list[tuple[int, int]], bool] | None:
        """[lo, hi]: the longest run of iterations of outer loop `name` needing the fewest bounds
        checks (a padded conv's interior rows / tiles), with the edge runs around it that get tile
        versions of their own, and whether those version the loops inside them too; None when
        every iteration needs the same checks. Edge runs get versions when they are at most one
        per side (a padded conv's first and last rows, or tiles of a row: with the index a
        constant there, every read of the unrolled points is known to be inside or padding);
        otherwise [] leaves them to the guarded tile. Their versions nest the inner loops' when
        they make less than EDGE_SHARE of the iterations."""
        runs = self.check_runs(name)
        fewest = min(len(need) for _, _, need in runs)
        a, b, _ = max((r for r in runs if len(r[2]) == fewest), key=lambda r: r[1] - r[0])
        if (a, b) == (0, self.extent[name]):
            return None
        edges = [(lo, hi - 1) for lo, hi, _ in runs if (lo, hi) != (a, b)]
        share = sum(hi + 1 - lo for lo, hi in edges) / self.extent[name]
        return (a, b - 1), (edges if len(edges) <= 2 else []), share < EDGE_SHARE

    @contextmanager
    def _within(self, name: str, lo: int, hi: int) -> Iterator[None]:
        """Emit code for the iterations lo..hi of outer loop `name` (a constant when lo == hi)."""
        with self._restoring([name]):
            if lo == hi:
                self.bind(name, Lin(None, lo))
            else:
                self.ranges[name] = (lo, hi)
            yield

    def _versions(self, box: list[tuple[str, tuple[int, int], list[tuple[int, int]], bool]]) -> None:
        b = self.b
        if not box:
            return self._guarded_tile()
        (name, interior, edges, nested), rest = box[0], box[1:]

        def version(lo: int, hi: int, inner: list) -> Callable[[], None]:
            def emit():
                with self._within(name, lo, hi):
                    self._versions(inner)
            return emit

        def test(lo: int, hi: int) -> SSAValue:
            return b.below(b.lin_add(self.ivs[name], Lin(None, -lo)), hi + 1 - lo, None)

        branches = [(interior, version(*interior, rest))] + [(e, version(*e, rest if nested else [])) for e in edges]
        orelse = branches.pop()[1] if edges else self._guarded_tile
        for (lo, hi), emit in reversed(branches):
            orelse = lambda lo=lo, hi=hi, emit=emit, orelse=orelse: b.if_(test(lo, hi), emit, orelse)
        orelse()

    def interior_box(self) -> list[tuple[str, tuple[int, int], list[tuple[int, int]], bool]]:
        """For each outer loop with an interior (see `interior`), its iterations there, its edge
        runs with versions of their own and whether those nest the inner loops' versions, the
        largest interior (as a fraction of its loop) first, when together they remove bounds
        checks; [] otherwise."""
        box = {}
        for name in self.outer:
            inner = self.interior(name) if self.extent[name] > 1 else None
            if inner is not None:
                box[name] = inner
        everywhere = self._checks_everywhere()
        self.ranges.update({name: interior for name, (interior, _, _) in box.items()})
        fewer = self._checks_everywhere() < everywhere
        self.ranges.clear()
        if not fewer:
            return []
        order = sorted(box.items(), key=lambda item: -(item[1][0][1] - item[1][0][0] + 1) / self.extent[item[0]])
        return [(name, *inner) for name, inner in order]

    def _guarded_tile(self) -> None:
        """Guards of split tails that the iterations of this version can reach, then the tile
        (the inner tiles of a 56-wide row split by 16 need no lane mask, only the last does).
        A last tile whose vector holds at most half its lanes (`tail_width`) runs on vectors of
        that many lanes in a version of its own:

            if ow.o == 3: tile on vector<8xf32> (ow 48..55)  else: tile on vector<16xf32>
        """
        tail = self.tail_width()
        if tail is None:
            return self._guarded_tile_of_width()
        loop = Loop.outer(self._vector_dim())
        last = self.extent[loop] - 1

        def emit(first: int) -> None:
            saved, self.width = self.width, tail if first == last else self.width
            try:
                self._guarded_tile_of_width()
            finally:
                self.width = saved

        self._last_apart(loop, emit)

    def _last_apart(self, loop: str, emit: Callable[[int], None]) -> None:
        """`emit(first)` for outer loop `loop`'s last iteration and for the iterations before it
        that this version runs (`first` the lowest), each in a version of its own with `loop`
        bound to them; only the last one where no other runs here:

            if ow.o == 3: emit(3)  else: emit(lo)     (ow.o in lo..3)
        """
        last, lo = self.extent[loop] - 1, self.dim_range(loop)[0]

        def version(first: int, final: int) -> Callable[[], None]:
            def run():
                with self._within(loop, first, final):
                    emit(first)
            return run

        if lo == last:
            return version(last, last)()
        at_last = self.b.add(arith.CmpiOp(self.b.scalar(self.value(loop)), self.b.idx(last), "eq"))
        self.b.if_(at_last, version(last, last), version(lo, last - 1))

    def tail_width(self) -> int | None:
        """Lanes of the vectors of the last tile of a vector loop split with a tail of at most half
        the width (the tail's next power of two, at least 4: 8 for a 56-wide row of 16 lanes),
        when the lanes are contiguous in the output (a spatial schedule); None otherwise. Such
        a tile's FMAs are half as wide; where the CPU splits 16-lane FMAs in two (Zen 4), it runs
        them twice as fast (ResNet-34 group16's 56-wide grouped convs: 0.88x the time)."""
        if self.vec is None or not Loop(self.vec).is_inner or self.transposed_row() is not None:
            return None
        dim = self._vector_dim()
        extent, factor = self.split_extents.get(dim, (0, 0))
        tail = extent % factor if factor == self.width else 0
        narrow = max(4, 1 << max(tail - 1, 0).bit_length())
        loop = Loop.outer(dim)
        if not tail or narrow > self.width // 2 or loop not in self.outer:
            return None
        return narrow if self.dim_range(loop)[1] == self.extent[loop] - 1 else None

    def _guarded_tile_of_width(self) -> None:
        """The tile under the guards of the split tails it can reach: those of outer loops as one
        condition around it, those its own points reach inside it. A split whose inner loop is in
        the tile and whose outer loop runs here reaches its tail in its last iteration only: that
        one runs in a version of its own, the others without the guard (a 3x3 conv's 2 x 5 tiles
        on 14-wide rows, 3 a row, in its padded first and last rows, which keep this version):

            if ow.o == 2: tile (point 4 past the row: skipped)  else: tile (no checks)
        """
        b = self.b
        bound = set(self.outer)
        outer_guards, inner_guards = [], []
        for name, e in self.guards():
            if self.dim_range(name)[1] < e:
                continue
            (outer_guards if self._loops_of(name) <= bound else inner_guards).append((name, e))
        for name, e in inner_guards:
            # a register tile over a split's inner loop reaches past the end in the last tile
            # only: the others run unguarded (a 1x1 conv's 2 x 6 tiles on 64 points, 10 of 11)
            split = Loop.outer(name)
            if split not in bound:
                continue
            last, lo = self.extent[split] - 1, self.dim_range(split)[0]
            if lo >= last:
                continue
            with self._within(split, lo, last - 1):
                if self.dim_range(name)[1] >= e:
                    continue
            return self._last_apart(split, lambda _: self._guarded_tile_of_width())
        if outer_guards:
            cond = b.all_of([b.below(self.value(n), e, None) for n, e in outer_guards])
            b.if_(cond, lambda: self.emit_tile(inner_guards))
        else:
            self.emit_tile(inner_guards)
