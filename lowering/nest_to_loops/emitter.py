"""`NestEmitter`: one `Spec` as scf loops over memrefs, following its schedule.

See the package docstring (`nasir.lowering.nest_to_loops`) for the loop structure it builds.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.accesses import Accesses
from nasir.lowering.nest_to_loops.builder import Lin, LoopBuilder
from nasir.lowering.nest_to_loops.epilogue import Epilogue
from nasir.lowering.nest_to_loops.loops import LoopStructure
from nasir.lowering.nest_to_loops.spec import Spec
from nasir.lowering.nest_to_loops.tiles import Tiles
from nasir.lowering.nest_to_loops.versioning import Versioning
from nasir.lowering.target import CPUTarget


class NestEmitter(LoopStructure, Accesses, Versioning, Tiles, Epilogue):
    """Emits the loops of one Spec for `target` into a kernel whose arguments are `refs`."""

    def __init__(self, b: LoopBuilder, spec: Spec, refs: list[SSAValue], target: CPUTarget):
        self.b, self.spec, self.refs, self.target = b, spec, refs, target
        self.ins = [refs[a] for a in spec.args]
        self.out = refs[-1]
        sched = spec.schedule
        where = f"nest '{spec.name}'"
        try:
            derivation = sched.derive(spec.domain)
        except Exception as e:
            raise LoweringError(f"{where}: bad schedule: {e}") from None
        self.loops = derivation.loops
        self.extent = dict(self.loops)
        self.order = [n for n, _ in self.loops]
        self.split_extents = derivation.splits
        self.fusion_parts = {fused: (a, b_) for fused, (a, b_, _) in derivation.fusions.items()}
        self.fused_into = {part: (fused, inner_extent, a) for fused, (a, b_, inner_extent) in derivation.fusions.items()
                           for part in (a, b_)}
        red_dims = {n for n, _ in spec.dims[spec.npar:]}
        self.is_red = {n: bool(self._origins(n) & red_dims) for n in self.order}
        for n in self.order:
            if self.is_red[n] and self._origins(n) - red_dims:
                raise LoweringError(f"{where}: loop '{n}' fuses parallel and reduction dims")
        self.vec = sched.vector
        if self.vec is not None:
            if self.order[-1] != self.vec:
                raise LoweringError(f"{where}: vector loop '{self.vec}' must be the innermost loop")
            if "*" in self.vec or self.is_red[self.vec]:
                raise LoweringError(f"{where}: vector loop '{self.vec}' must be an unfused parallel loop")
        self.width = self.extent[self.vec] if self.vec else None
        self.outer = sched.outer_loops(spec.domain)
        self.red = [n for n in self.order if self.is_red[n]]
        self.tile = sched.tile_loops(spec.domain)
        for n in self.tile:
            if sched.unroll.get(n, 1) < self.extent[n]:
                raise LoweringError(
                    f"{where}: parallel loop '{n}' sits inside reduction loops; it must be the vector loop or "
                    f"fully unrolled (unroll {n} = {self.extent[n]})")
        if sched.parallel is not None and sched.parallel not in self.outer:
            raise LoweringError(f"{where}: parallel loop '{sched.parallel}' must be outside the reduction loops")
        if sched.pack:
            layouts = ", ".join(f"input {k} as {v}" for k, v in sorted(sched.pack.items()))
            raise LoweringError(f"{where}: the llvm backend packs weights at compile time (pass pack-weights) "
                                f"and picks activation layouts itself (pass pack-activations); packed "
                                f"activations from a schedule are not implemented ({layouts}): remove the "
                                f"pack transform for them")
        self.ivs: dict[str, Lin] = {}
        self.ranges: dict[str, tuple[int, int]] = {}
        self.preset: dict[str, Lin] = {}
        self.threads = True
