"""The function convert-loops-to-llvm is building, and what the lowerings of its ops share.

Each func.func is rebuilt as an llvm.func in program order: `FuncLowering.lower` looks the op up by
type in the module's table of lowerings (`Lowering`s, one small function per op kind: arithmetic.py,
memory.py, vectors.py, control_flow.py, parallel.py), which appends llvm ops to the current block
and maps the op's results to their values (`FuncLowering.replace`, `vmap`):

    %y = arith.mulf %x, %w : f32          ->  %y' = llvm.fmul %x', %w' : f32     (vmap[%y] = %y')

Why not xDSL rewrite patterns applied in place: every type of the function changes at once
(memrefs become pointers, `index` i64, block arguments included), a loop becomes blocks that the
ops after it land in, and constants are shared across the function and address arithmetic within
a block, which needs the ops met in program order; so the function is rebuilt with a value map,
each op's lowering picked by its type as a pattern's `match_and_rewrite` would be.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from functools import cache

from xdsl.dialects import arith, func, llvm, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    UnitAttr,
    VectorType,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.traits import is_side_effect_free

from nasir.errors import LoweringError
from nasir.lowering.loops_to_llvm.chunks import ChunkAccess, Rechunk, Unsynced

PTR = llvm.LLVMPointerType()

Lowering = Callable[["FuncLowering", Operation], None]
"""Lowers one op (of the type it is registered for) into the function being built."""


def llvm_type(ty: Attribute) -> Attribute:
    if isinstance(ty, MemRefType):
        return PTR
    if isinstance(ty, IndexType):
        return i64
    if isinstance(ty, VectorType) and isinstance(ty.element_type, IndexType):
        return VectorType(i64, ty.get_shape())
    return ty


def vector_suffix(ty: VectorType) -> str:
    """The type mangling of an intrinsic over `vector<16xf32>`: `v16f32`."""
    return f"v{ty.get_shape()[0]}f32"


@cache
def shuffle_mask(lanes: tuple[int, ...]) -> DenseArrayBase:
    """Shuffle masks, made once (building attributes is a large part of this pass's time)."""
    return DenseArrayBase.from_list(i32, list(lanes))


@cache
def _i64_attr(n: int) -> IntegerAttr:
    return IntegerAttr(n, i64)


def _split_constant(v: SSAValue) -> tuple[SSAValue | None, int]:
    """`v` as `base + c` with a constant c (base None when v is a constant), one level deep."""
    owner = v.owner
    if isinstance(owner, arith.ConstantOp):
        return None, owner.value.value.data
    if isinstance(owner, arith.AddiOp):
        for x, y in ((owner.lhs, owner.rhs), (owner.rhs, owner.lhs)):
            if isinstance(y.owner, arith.ConstantOp):
                return x, y.owner.value.value.data
    return v, 0


class FuncLowering:
    """Translates one func.func body into blocks of an llvm.func region."""

    def __init__(self, module: ModuleLowering, name: str, region: Region):
        self.module = module
        self.name = name
        self.region = region
        self.vmap: dict[SSAValue, SSAValue] = {}
        self.entry: Block = region.blocks[0]
        self.block: Block = self.entry
        self.n_parallel = 0
        self.consts: dict[tuple[Attribute, Attribute], SSAValue] = {}
        self.shared: dict[tuple, SSAValue] = {}
        self.main_start: SSAValue | None = None
        self.first_thread: SSAValue | None = None
        """i1: whether this is thread 0 (`on_first_thread`), computed once at the entry."""
        self.team_size: SSAValue | None = None
        """i64: the team's threads (`barrier_unless_same_chunks`), read once at the entry."""
        self.unsynced = Unsynced()
        """In @main's team: what its threads touched since the last `barrier` (chunked kernels'
        chunks, the first thread's copies); a call waits at a barrier first if its accesses could
        meet them (`control_flow.call`, `memory.copy`)."""

    # Ops --------------------------------------------------------------------------------------
    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            self.lower(op)

    def lower(self, op: Operation) -> None:
        """Lower `op` by the lowering of its type; llvm ops (lane masks of convert-nest-to-loops)
        are copied onto the new values. In @main, an op with effects that waits for nothing of its
        own (not a call or a copy) waits at a barrier for what the team touched (`unsynced`)."""
        if self.unsynced and not isinstance(op, (func.CallOp, memref.CopyOp, func.ReturnOp)) and not is_side_effect_free(op):
            self.barrier()
        lowering = self.module.lowerings.get(type(op))
        if lowering is not None:
            lowering(self, op)
        elif op.dialect_name() == "llvm":
            new = op.clone(value_mapper={o: self.v(o) for o in op.operands})
            self.add(new)
            self.replace(op, *new.results)
        else:
            raise LoweringError(f"convert-loops-to-llvm: op '{op.name}' in @{self.name} is not supported")

    def replace(self, op: Operation, *values: SSAValue) -> None:
        """`op`'s results are `values` in the new function (a rewrite pattern's `replace_op`)."""
        self.vmap.update(zip(op.results, values))

    def v(self, value: SSAValue) -> SSAValue:
        return self.vmap[value]

    # Building ---------------------------------------------------------------------------------
    def add(self, op: Operation) -> SSAValue | None:
        self.block.add_op(op)
        return op.results[0] if op.results else None

    def new_block(self, arg_types: Sequence[Attribute] = ()) -> Block:
        block = Block(arg_types=list(arg_types))
        self.region.add_block(block)
        return block

    def hoist(self, *ops: Operation) -> None:
        """Put `ops`, in order, at the top of the entry block, where they dominate every use and
        run once (an alloca inside a loop would grow the stack on each iteration)."""
        first = self.entry.first_op
        for op in ops:
            self.entry.insert_op_before(op, first) if first is not None else self.entry.add_op(op)

    def const(self, value: Attribute, ty: Attribute) -> SSAValue:
        """A scalar constant, made once per function at the top of the entry block (dominating
        every use): unrolled kernels would otherwise repeat the same strides thousands of times."""
        key = (value, ty)
        if key not in self.consts:
            c = llvm.ConstantOp(value, ty)
            self.hoist(c)
            self.consts[key] = c.results[0]
        return self.consts[key]

    def chunk_size(self, iterations: int, threads: SSAValue) -> SSAValue:
        """i64: the iterations each of `threads` (an i64) runs of a parallel loop of `iterations`,
        ceil(iterations / threads), the last threads' chunks short or empty (`parallel._chunk`)."""
        less = self.cse(llvm.SubOp, threads, self.i64c(1))
        return self.add(llvm.SDivOp(self.add(llvm.AddOp(self.i64c(iterations), less)), threads))

    def i64c(self, n: int) -> SSAValue:
        return self.const(_i64_attr(n), i64)

    def i32c(self, n: int) -> SSAValue:
        return self.const(IntegerAttr(n, i32), i32)

    def cse(self, kind: type[Operation], a: SSAValue, b: SSAValue) -> SSAValue:
        """`kind(a, b)`, reused within the current block: the unrolled loads of a register tile
        share their row offsets (`co * 576`, `co * 576 + ci * 9`)."""
        key = (self.block, kind, a, b)
        if key not in self.shared:
            self.shared[key] = self.add(kind(a, b))
        return self.shared[key]

    def address(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        """Pointer to element `indices` of a memref (row-major, static shape):

            %m[%i, 3] of memref<4x8xf32>  ->  %o = mul %i, 8   %o3 = add %o, 3   gep float, %m, %o3
        """
        shape = ref.type.get_shape()
        lin, offset = None, 0
        for a, i in enumerate(indices):
            stride = math.prod(shape[a + 1:])
            base, c = _split_constant(i)  # constant parts fold into one offset (n = 0, unrolled taps)
            offset += c * stride
            if base is None:
                continue
            term = self.v(base) if stride == 1 else self.cse(llvm.MulOp, self.v(base), self.i64c(stride))
            lin = term if lin is None else self.cse(llvm.AddOp, lin, term)
        if offset:
            lin = self.i64c(offset) if lin is None else self.cse(llvm.AddOp, lin, self.i64c(offset))
        if lin is None:
            return self.v(ref)
        return self.add(llvm.GEPOp(self.v(ref), [llvm.GEP_USE_SSA_VAL], ref.type.element_type, ssa_indices=[lin]))

    def vector_address(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        """`address`, as an opaque pointer: llvmlite types pointers into allocas (`float*`) and
        then refuses to load or store vectors through them."""
        ptr = self.address(ref, indices)
        return self.add(llvm.BitcastOp(ptr, PTR)) if isinstance(ref.owner, memref.AllocaOp) else ptr

    def splat(self, value: SSAValue, width: int) -> SSAValue:
        """`value` in each of `width` lanes: insertelement into lane 0, shufflevector <0, 0, ...>."""
        ty = VectorType(value.type, [width])
        one = self.add(llvm.InsertElementOp(self.add(llvm.UndefOp(ty)), value, self.i32c(0)))
        return self.add(llvm.ShuffleVectorOp(one, one, shuffle_mask((0,) * width), ty))

    def ticks(self) -> SSAValue:
        return self.add(llvm.CallIntrinsicOp("llvm.readcyclecounter", [], [i64]))

    def count_ticks(self, slot: int, start: SSAValue) -> None:
        """Add the ticks since `start` to profile counter `slot` (in the workspace, @main's last
        argument); in @main's team, the first thread's alone (`on_first_thread`)."""
        spent = self.add(llvm.SubOp(self.ticks(), start))
        at = self.add(llvm.GEPOp(self.entry.args[-1], [self.module.profile_offset + 8 * slot], i8))

        def add() -> None:
            total = self.add(llvm.AddOp(self.add(llvm.LoadOp(at, i64, alignment=8)), spent))
            self.add(llvm.StoreOp(total, at, alignment=8))

        self.on_first_thread(add)

    def barrier(self) -> None:
        """`llvm.call @GOMP_barrier()`: the team's threads wait for each other (outside a team, a
        no-op); what each touched before is then seen by all (`unsynced`)."""
        self.add(llvm.CallOp("GOMP_barrier"))
        self.unsynced.clear()

    def barrier_unless_same_chunks(self, rechunks: Iterable[Rechunk]) -> None:
        """A barrier taken unless every `Rechunk` gives each thread the same elements at the
        team's size (all threads agree, so all take it or none); `unsynced` keeps what it has
        (after the barrier, more than it needs; without it, the same chunks).

            %n = omp_get_num_threads()     (at the entry)
            %a = 1 * ((16 + %n - 1) / %n)   %b = 2 * ((8 + %n - 1) / %n)
            llvm.cond_br (%a != %b), ^wait, ^go      ^wait: llvm.call @GOMP_barrier()
        """
        if self.team_size is None:
            n = llvm.CallOp("omp_get_num_threads", return_type=i32)
            size = llvm.SExtOp(n.results[0], i64)
            self.hoist(n, size)
            self.team_size = size.results[0]
        differ = None
        for r in sorted(rechunks, key=lambda r: (r.length, r.scales)):
            a, b = (self.add(llvm.MulOp(self.i64c(s), self.chunk_size(r.length // s, self.team_size))) for s in r.scales)
            ne = self.add(llvm.ICmpOp(a, b, IntegerAttr(1, i64)))  # ne
            differ = ne if differ is None else self.add(llvm.OrOp(differ, ne))
        wait, go = self.new_block(), self.new_block()
        self.add(llvm.CondBrOp(differ, wait, [], go, []))
        self.block = wait
        self.add(llvm.CallOp("GOMP_barrier"))
        self.add(llvm.BrOp(go))
        self.block = go

    def on_first_thread(self, emit: Callable[[], None]) -> None:
        """What `emit()` adds, run by thread 0 alone (of @main's team; outside one, the only thread)."""
        if self.first_thread is None:
            tid, zero = llvm.CallOp("omp_get_thread_num", return_type=i32), llvm.ConstantOp(IntegerAttr(0, i32), i32)
            is_first = llvm.ICmpOp(tid.results[0], zero.results[0], IntegerAttr(0, i64))  # eq
            self.hoist(tid, zero, is_first)
            self.first_thread = is_first.results[0]
        first, merge = self.new_block(), self.new_block()
        self.add(llvm.CondBrOp(self.first_thread, first, [], merge, []))
        self.block = first
        emit()
        self.add(llvm.BrOp(merge))
        self.block = merge


class ModuleLowering:
    """What the functions of one module share: the lowerings by op type, the options, the
    functions outlined from them and the descriptions of their checked accesses."""

    def __init__(self, lowerings: dict[type[Operation], Lowering], profile_slots: dict[Operation, int] | None = None,
                 profile_offset: int = 0, checked: bool = False):
        self.lowerings = lowerings
        self.checked = checked
        self.checks: list[DictionaryAttr] = []
        """What each bounds-checked access is (`BOUNDS_CHECKS`), by its number."""
        self.new_funcs: list[Operation] = []
        self.profile_slots = profile_slots or {}
        """Profiled kernel calls of @main and the index of their tick counter."""
        self.profile_offset = profile_offset
        self.team: set[str] = set()
        """Kernels that each thread of @main's team calls (`parallel.team_safe`); the first calls the others alone."""
        self.chunked: dict[str, dict[int, ChunkAccess]] = {}
        """Kernels of `team` whose loop's chunks touch their own chunk of each buffer (`chunks.chunk_accesses`):
        no barrier after their loop; @main waits before a call whose accesses need it."""

    def add_func(self, f: Operation) -> None:
        self.new_funcs.append(f)

    def lower_func(self, fn: func.FuncOp) -> llvm.FuncOp:
        """`func.func private @k(%x: memref<16xf32>)` -> `llvm.func internal @k(%x: !llvm.ptr {llvm.noalias})`
        (@main stays external; arguments without attributes are noalias)."""
        name = fn.sym_name.data
        inputs = [llvm_type(t) for t in fn.function_type.inputs.data]
        region = Region(Block(arg_types=inputs))
        lowering = FuncLowering(self, name, region)
        for old, new in zip(fn.body.block.args, region.blocks[0].args):
            lowering.vmap[old] = new
        if name == "main" and self.profile_slots:
            lowering.main_start = lowering.ticks()
        lowering.lower_block(fn.body.block)
        public = name == "main"
        attrs = fn.arg_attrs if fn.arg_attrs is not None else ArrayAttr(
            [DictionaryAttr({"llvm.noalias": UnitAttr()}) for _ in inputs])
        new = llvm.FuncOp(name, llvm.LLVMFunctionType(inputs),
                          linkage=llvm.LinkageAttr("external" if public else "internal"), body=region)
        new.properties["arg_attrs"] = attrs
        return new
