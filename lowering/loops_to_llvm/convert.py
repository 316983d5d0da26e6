"""convert-loops-to-llvm: the loop level (func/scf/memref/arith/math/vector) -> xDSL's llvm dialect.

Runs after convert-nest-to-loops; its output is what `nasir.lowering.loops_to_llvm.llvm_ir` hands to LLVM.
Conventions of the generated code:

- memrefs are bare pointers (`!llvm.ptr`, static identity layouts): a load of `%m[%i, %j]` from
  `memref<4x8xf32>` is `getelementptr float, ptr %m, i64 (i*8 + j)`; `memref.view` is a byte
  offset; `index` is i64; kernel arguments keep their `llvm.noalias` attributes;
- structured control flow becomes blocks (`scf.for` -> header with phis, body, exit);
- `scf.parallel` is outlined into `@<kernel>.par<k>(ptr %ctx)`, the values it uses from outside are
  passed in a stack struct, and `@nasir_parallel(fn, ctx)` runs it on `nasir_num_threads` threads
  through libgomp's `GOMP_parallel`; each thread takes one contiguous chunk of the iterations;
  with `nasir_num_threads == 1` the outlined function is called directly (and inlined by LLVM);
- with more threads, @main (lowered as `@main.body`) runs in one team of them: each thread calls
  the kernels and runs its chunk of their loops, a barrier after each (`@GOMP_barrier`), so a call
  forks and joins once, not once a kernel (`parallel.team_main`); after a kernel whose chunks touch
  only their own chunk of each buffer, the barrier is @main's, and only where the next call's
  accesses need it (`chunks`);
- masked vector loads/stores are `llvm.masked.load/store` intrinsic calls;
- with `profile=true`, @main reads the time-stamp counter (`llvm.readcyclecounter`) around each
  kernel call and adds the ticks to one i64 counter per call, kept in the workspace after the arena
  (module attributes `nasir.profile`: the calls' layers, kernels and MACs; `nasir.profile_offset`:
  the counters' byte offset, one more counter for the whole of @main). `Executable.profile` reads
  them;
- with `checked=true`, every load and store of a kernel checks its indices against the memref's
  shape, each axis on its own (a vector's active lanes on the last axis; across a last axis of 1,
  against the whole buffer). An access outside skips
  the memory and records itself in the globals `BOUNDS_GLOBALS` (which access, the axis, the
  index); the module attribute `nasir.bounds_checks` describes each access (kernel, read or
  write, operand, memref type) for the runtime to raise a `BoundsError` with.

    func.func private @relu(%x: memref<16xf32>, %y: memref<16xf32>)   becomes
    llvm.func internal @relu(%x: !llvm.ptr {llvm.noalias}, %y: !llvm.ptr {llvm.noalias})

Each function is rebuilt op by op (`function.FuncLowering`), each op kind by its own lowering,
looked up by type in `LOWERINGS`: arithmetic.py (arith, math), memory.py (memref,
nasir.prefetch), vectors.py (vector), control_flow.py (scf.for, scf.if, func), parallel.py
(scf.parallel), chunks.py (which of @main's calls need a barrier before them); bounds.py checks
the accesses of a checked build.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from nasir.dialects.attributes import UNCLASSIFIED, WORKSPACE_BYTES
from nasir.dialects.module import main_func
from nasir.errors import LoweringError
from nasir.lowering.bufferize import aligned
from nasir.lowering.loops_to_llvm import arithmetic, control_flow, memory, parallel, vectors
from nasir.lowering.loops_to_llvm.bounds import BOUNDS_CHECKS, BOUNDS_GLOBALS
from nasir.lowering.loops_to_llvm.chunks import chunk_accesses
from nasir.lowering.loops_to_llvm.function import Lowering, ModuleLowering
from nasir.lowering.loops_to_llvm.parallel import THREADS_GLOBAL, runtime_decls

# the globals and the attribute the runtime reads and sets are named here, with the pass
__all__ = ["BOUNDS_CHECKS", "BOUNDS_GLOBALS", "LOWERINGS", "THREADS_GLOBAL", "ConvertLoopsToLLVMPass"]

LOWERINGS: dict[type[Operation], Lowering] = {
    **arithmetic.LOWERINGS, **memory.LOWERINGS, **vectors.LOWERINGS, **control_flow.LOWERINGS, **parallel.LOWERINGS}


@dataclass(frozen=True)
class ConvertLoopsToLLVMPass(ModulePass):
    """Lower func/scf/memref/arith/math/vector to the llvm dialect (bare-pointer memrefs).

    `profile=true` times every kernel call of @main; `checked=true` checks the bounds of every
    load and store of the kernels (see the module docstring).
    """

    name = "convert-loops-to-llvm"

    profile: bool = False
    checked: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = [f for f in op.ops if isinstance(f, func.FuncOp)]
        if not funcs:
            return
        slots, offset = self.profile_counters(op) if self.profile else ({}, 0)
        lowering = ModuleLowering(LOWERINGS, slots, offset, self.checked)
        lowering.team = {f.sym_name.data for f in funcs if f.sym_name.data != "main" and parallel.team_safe(f)}
        lowering.chunked = {f.sym_name.data: a for f in funcs if f.sym_name.data in lowering.team
                            and (a := chunk_accesses(f)) is not None}
        new_funcs = [lowering.lower_func(f) for f in funcs]
        at = next((k for k, f in enumerate(new_funcs) if f.sym_name.data == "main"), None)
        if at is not None:
            new_funcs[at + 1:at + 1] = parallel.team_main(new_funcs[at])
        for f in funcs:
            f.detach()
            f.erase()
        op.body.block.add_ops([*runtime_decls(), *new_funcs, *lowering.new_funcs])
        if self.checked:
            op.body.block.add_ops([llvm.GlobalOp(i64, name, "weak", value=IntegerAttr(0, i64)) for name in BOUNDS_GLOBALS])
            op.attributes[BOUNDS_CHECKS] = ArrayAttr(lowering.checks)

    @staticmethod
    def profile_counters(op: ModuleOp) -> tuple[dict[Operation, int], int]:
        """Counter slots of @main's kernel calls; records them (`nasir.profile`) and makes room
        for the counters after the arena (`nasir.profile_offset`, `nasir.workspace_bytes` grows)."""
        if not WORKSPACE_BYTES.on(op):
            raise LoweringError("convert-loops-to-llvm{profile=true}: run nest-bufferize first")
        calls = [c for c in main_func(op).body.block.ops if isinstance(c, func.CallOp)]
        offset = aligned(WORKSPACE_BYTES.get(op))
        op.attributes["nasir.profile"] = ArrayAttr([DictionaryAttr({
            "layer": c.attributes.get("nasir.layer", StringAttr(c.callee.root_reference.data)),
            "kernel": StringAttr(c.callee.root_reference.data),
            "macs": c.attributes.get("nasir.macs", IntegerAttr(0, i64)),
            "class": c.attributes.get("nasir.layer_class", StringAttr(UNCLASSIFIED))}) for c in calls])
        op.attributes["nasir.profile_offset"] = IntegerAttr(offset, i64)
        WORKSPACE_BYTES.set(op, offset + 8 * (len(calls) + 1))
        return {c: k for k, c in enumerate(calls)}, offset
