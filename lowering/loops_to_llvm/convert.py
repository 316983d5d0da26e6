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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from xdsl.context import Context
from xdsl.dialects import arith, func, llvm, math as mathd, memref, scf, vector
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    VectorType,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from nasir.errors import LoweringError
from nasir.lowering.bufferize import aligned
from nasir.dialects.attributes import WORKSPACE_BYTES
from nasir.dialects.llvm import FCmpOp, SelectOp
from nasir.dialects.loops import PrefetchOp
from nasir.dialects.module import main_func

PTR = llvm.LLVMPointerType()
THREADS_GLOBAL = "nasir_num_threads"
BOUNDS_GLOBALS = ("nasir_bounds_access", "nasir_bounds_axis", "nasir_bounds_index")
"""A checked build's record of the first access outside its memref seen: the access's number + 1
(0: none), the axis and the index (a vector's first lane's, on its last axis)."""
BOUNDS_CHECKS = "nasir.bounds_checks"
PARALLEL_RUNNER = "nasir_parallel"


def llvm_type(ty: Attribute) -> Attribute:
    if isinstance(ty, MemRefType):
        return PTR
    if isinstance(ty, IndexType):
        return i64
    if isinstance(ty, VectorType) and isinstance(ty.element_type, IndexType):
        return VectorType(i64, ty.get_shape())
    return ty


def _suffix(ty: VectorType) -> str:
    return f"v{ty.get_shape()[0]}f32"


FLOAT_BINARY = {arith.AddfOp: llvm.FAddOp, arith.SubfOp: llvm.FSubOp, arith.MulfOp: llvm.FMulOp,
                arith.DivfOp: llvm.FDivOp}
INT_BINARY = {arith.AddiOp: llvm.AddOp, arith.SubiOp: llvm.SubOp, arith.MuliOp: llvm.MulOp,
              arith.RemSIOp: llvm.SRemOp, arith.FloorDivSIOp: llvm.SDivOp, arith.AndIOp: llvm.AndOp}
"""floordiv/mod of nest index maps only ever see non-negative operands, where they equal sdiv/srem."""
INTRINSICS = {arith.MaxnumfOp: "llvm.maxnum", arith.MinnumfOp: "llvm.minnum", mathd.ExpOp: "llvm.exp",
              mathd.SqrtOp: "llvm.sqrt", mathd.PowFOp: "llvm.pow", mathd.FmaOp: "llvm.fma"}
"""Called with type-mangled names (`llvm.maxnum.v16f32`): xDSL's converter declares these
intrinsics unmangled, so two vector widths in one module would clash."""


class FuncLowering:
    """Translates one func.func body into blocks of an llvm.func region."""

    def __init__(self, module: "ModuleLowering", name: str, region: Region):
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

    # Helpers ----------------------------------------------------------------------------------
    def add(self, op: Operation) -> SSAValue | None:
        self.block.add_op(op)
        return op.results[0] if op.results else None

    def new_block(self, arg_types: Sequence[Attribute] = ()) -> Block:
        block = Block(arg_types=list(arg_types))
        self.region.add_block(block)
        return block

    def const(self, value: Attribute, ty: Attribute) -> SSAValue:
        """A scalar constant, made once per function at the top of the entry block (dominating
        every use): unrolled kernels would otherwise repeat the same strides thousands of times."""
        key = (value, ty)
        if key not in self.consts:
            c = llvm.ConstantOp(value, ty)
            first = self.entry.first_op
            self.entry.insert_op_before(c, first) if first is not None else self.entry.add_op(c)
            self.consts[key] = c.results[0]
        return self.consts[key]

    def cse(self, kind: type[Operation], a: SSAValue, b: SSAValue) -> SSAValue:
        """`kind(a, b)`, reused within the current block: the unrolled loads of a register tile
        share their row offsets (`co * 576`, `co * 576 + ci * 9`)."""
        key = (self.block, kind, a, b)
        if key not in self.shared:
            self.shared[key] = self.add(kind(a, b))
        return self.shared[key]

    def ticks(self) -> SSAValue:
        return self.add(llvm.CallIntrinsicOp("llvm.readcyclecounter", [], [i64]))

    def count_ticks(self, slot: int, start: SSAValue) -> None:
        """Add the ticks since `start` to profile counter `slot` (in the workspace, @main's last argument)."""
        spent = self.add(llvm.SubOp(self.ticks(), start))
        at = self.add(llvm.GEPOp(self.entry.args[-1], [self.module.profile_offset + 8 * slot], i8))
        total = self.add(llvm.AddOp(self.add(llvm.LoadOp(at, i64, alignment=8)), spent))
        self.add(llvm.StoreOp(total, at, alignment=8))

    def i64c(self, n: int) -> SSAValue:
        return self.const(_i64_attr(n), i64)

    def i32c(self, n: int) -> SSAValue:
        return self.const(IntegerAttr(n, i32), i32)

    def v(self, value: SSAValue) -> SSAValue:
        return self.vmap[value]

    def address(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        """Pointer to element `indices` of a memref (row-major, static shape)."""
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

    # Bounds checks (checked builds) -------------------------------------------------------------
    def access(self, op: Operation, ref: SSAValue, indices: Sequence[SSAValue], emit,
               vector_type: VectorType | None = None, mask: SSAValue | None = None) -> SSAValue | None:
        """`emit()`: the load or store `op` of `ref[indices]` (a vector of `vector_type` along the
        last axis, under `mask`); in a checked build behind a check of each index against the
        memref's shape (see the module docstring):

            ^check: %out = or (idx_a u>= size_a)...   cond_br %out, ^record, ^access
            ^record: store number + 1, axis, index to the globals; br ^next(undef)
            ^access: %v = <op>; br ^next(%v)
        """
        if not self.module.checked:
            return emit()
        shape = ref.type.get_shape()
        width = vector_type.get_shape()[0] if vector_type is not None else 1
        active = self.any_lane(self.v(mask)) if mask is not None else None
        # a vector's lanes run along the last axis; across a last axis of 1 (lanes over the
        # channels of a 1x1 image) they run through memory: checked against the whole buffer
        flat = width > 1 and shape[-1] == 1
        out = axis = index = None
        for a in reversed(range(len(shape))):  # the first axis outside wins the record
            at, size = self.v(indices[a]), shape[a]
            if flat and a == len(shape) - 1:
                at, size, a = self.flat_offset(ref, indices), math.prod(shape), -1
            if a in (-1, len(shape) - 1) and width > 1:
                lanes = self.add(llvm.AddOp(self.splat(at, width), self.iota(width)))
                beyond = self.add(llvm.ICmpOp(lanes, self.splat(self.i64c(size), width), IntegerAttr(9, i64)))
                if mask is not None:
                    beyond = self.add(llvm.AndOp(beyond, self.v(mask)))
                here = self.any_lane(beyond)
            else:
                here = self.add(llvm.ICmpOp(at, self.i64c(size), IntegerAttr(9, i64)))  # uge
                if active is not None:
                    here = self.add(llvm.AndOp(here, active))
            out = here if out is None else self.add(llvm.OrOp(out, here))
            axis = self.i64c(a) if axis is None else self.add(llvm.SelectOp(here, self.i64c(a), axis))
            index = at if index is None else self.add(llvm.SelectOp(here, at, index))
        number = self.module.record_check(self.name, op, ref)
        result = op.results[0].type if op.results else None
        record, access = self.new_block(), self.new_block()
        after = self.new_block([llvm_type(result)] if result is not None else [])
        self.add(llvm.CondBrOp(out, record, [], access, []))
        self.block = record
        for name, value in zip(BOUNDS_GLOBALS, (self.i64c(number + 1), axis, index)):
            self.add(llvm.StoreOp(value, self.add(llvm.AddressOfOp(name, PTR)), alignment=8))
        self.add(llvm.BrOp(after, *([self.add(llvm.UndefOp(llvm_type(result)))] if result is not None else [])))
        self.block = access
        value = emit()
        self.add(llvm.BrOp(after, *([value] if result is not None else [])))
        self.block = after
        return after.args[0] if result is not None else None

    def flat_offset(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        """The row-major element offset of `ref[indices]` (i64)."""
        shape = ref.type.get_shape()
        total = None
        for a, i in enumerate(indices):
            term = self.cse(llvm.MulOp, self.v(i), self.i64c(math.prod(shape[a + 1:])))
            total = term if total is None else self.cse(llvm.AddOp, total, term)
        return total

    def splat(self, value: SSAValue, width: int) -> SSAValue:
        ty = VectorType(value.type, [width])
        one = self.add(llvm.InsertElementOp(self.add(llvm.UndefOp(ty)), value, self.i32c(0)))
        return self.add(llvm.ShuffleVectorOp(one, one, _mask((0,) * width), ty))

    def iota(self, width: int) -> SSAValue:
        ty = VectorType(i64, [width])
        return self.add(llvm.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, list(range(width))), ty))

    def any_lane(self, mask: SSAValue) -> SSAValue:
        width = mask.type.get_shape()[0]
        return self.add(llvm.CallIntrinsicOp(f"llvm.vector.reduce.or.v{width}i1", [mask], [i1]))

    # Ops --------------------------------------------------------------------------------------
    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            self.lower(op)

    def lower(self, op: Operation) -> None:
        r = op.results[0] if op.results else None
        t = type(op)
        if isinstance(op, arith.ConstantOp):
            value, ty = self._const_value(op.value, r.type), llvm_type(r.type)
            scalar = isinstance(value, (IntegerAttr, FloatAttr))
            self.vmap[r] = self.const(value, ty) if scalar else self.add(llvm.ConstantOp(value, ty))
        elif t in FLOAT_BINARY:
            self.vmap[r] = self.add(FLOAT_BINARY[t](self.v(op.operands[0]), self.v(op.operands[1])))
        elif t in INT_BINARY:
            self.vmap[r] = self.add(INT_BINARY[t](self.v(op.operands[0]), self.v(op.operands[1])))
        elif t in INTRINSICS:
            name = f"{INTRINSICS[t]}.{_suffix(r.type) if isinstance(r.type, VectorType) else 'f32'}"
            self.vmap[r] = self.add(llvm.CallIntrinsicOp(name, [self.v(o) for o in op.operands], [r.type]))
        elif isinstance(op, (arith.MinSIOp, arith.MaxSIOp)):
            a, b = self.v(op.lhs), self.v(op.rhs)
            pred = 2 if isinstance(op, arith.MinSIOp) else 4  # slt / sgt
            self.vmap[r] = self.add(llvm.SelectOp(self.add(llvm.ICmpOp(a, b, IntegerAttr(pred, i64))), a, b))
        elif isinstance(op, arith.CmpfOp):  # one i1 per lane (arith.cmpf of vectors states a scalar i1)
            self.vmap[r] = self.add(FCmpOp(self.v(op.lhs), self.v(op.rhs), op.predicate))
        elif isinstance(op, arith.CmpiOp):
            self.vmap[r] = self.add(llvm.ICmpOp(self.v(op.lhs), self.v(op.rhs), op.predicate))
        elif isinstance(op, arith.IndexCastOp):  # index is i64; i32 lanes of masks are truncated
            narrow = r.type not in (i64, IndexType())
            self.vmap[r] = self.add(llvm.TruncOp(self.v(op.input), r.type)) if narrow else self.v(op.input)
        elif isinstance(op, arith.SelectOp):
            self.vmap[r] = self.add(SelectOp(self.v(op.cond), self.v(op.lhs), self.v(op.rhs)))
        elif op.dialect_name() == "llvm":
            new = op.clone(value_mapper={o: self.v(o) for o in op.operands})
            self.add(new)
            for old, res in zip(op.results, new.results):
                self.vmap[old] = res
        elif isinstance(op, memref.LoadOp):
            self.vmap[r] = self.access(op, op.memref, op.indices, lambda: self.add(
                llvm.LoadOp(self.address(op.memref, op.indices), f32, alignment=4)))
        elif isinstance(op, PrefetchOp):  # read, high locality, data cache
            self.add(llvm.CallIntrinsicOp("llvm.prefetch.p0", [self.address(op.ref, op.indices), self.i32c(0),
                                                               self.i32c(3), self.i32c(1)], []))
        elif isinstance(op, memref.StoreOp):
            self.access(op, op.memref, op.indices, lambda: self.add(
                llvm.StoreOp(self.v(op.value), self.address(op.memref, op.indices), alignment=4)))
        elif isinstance(op, memref.ViewOp):
            self.vmap[r] = self.add(llvm.GEPOp(self.v(op.source), [llvm.GEP_USE_SSA_VAL], i8,
                                               ssa_indices=[self.v(op.byte_shift)]))
        elif isinstance(op, memref.AllocaOp):
            n = math.prod(r.type.get_shape())
            size = llvm.ConstantOp(IntegerAttr(n, i64), i64)
            alloca = llvm.AllocaOp(size, f32, alignment=64)
            first = self.entry.first_op
            for new in (size, alloca):  # in the entry block: allocas inside loops would grow the stack
                self.entry.insert_op_before(new, first) if first is not None else self.entry.add_op(new)
            self.vmap[r] = alloca.results[0]
        elif isinstance(op, memref.CopyOp):
            nbytes = 4 * math.prod(op.source.type.get_shape())
            self.add(llvm.CallIntrinsicOp("llvm.memcpy.p0.p0.i64", [self.v(op.destination), self.v(op.source),
                                          self.i64c(nbytes), self.const(IntegerAttr(0, i1), i1)], []))
        elif isinstance(op, vector.LoadOp):
            self.vmap[r] = self.access(op, op.base, op.indices, lambda: self.add(
                llvm.LoadOp(self.vector_address(op.base, op.indices), r.type, alignment=4)), r.type)
        elif isinstance(op, vector.StoreOp):
            self.access(op, op.base, op.indices, lambda: self.add(
                llvm.StoreOp(self.v(op.vector), self.vector_address(op.base, op.indices), alignment=4)),
                op.vector.type)
        elif isinstance(op, vector.MaskedLoadOp):
            align = self.const(IntegerAttr(4, i32), i32)
            self.vmap[r] = self.access(op, op.base, op.indices, lambda: self.add(llvm.CallIntrinsicOp(
                f"llvm.masked.load.{_suffix(r.type)}.p0",
                [self.address(op.base, op.indices), align, self.v(op.mask), self.v(op.pass_thru)], [r.type])),
                r.type, op.mask)
        elif isinstance(op, vector.MaskedStoreOp):
            align = self.const(IntegerAttr(4, i32), i32)
            self.access(op, op.base, op.indices, lambda: self.add(llvm.CallIntrinsicOp(
                f"llvm.masked.store.{_suffix(op.value_to_store.type)}.p0",
                [self.v(op.value_to_store), self.address(op.base, op.indices), align, self.v(op.mask)], [])),
                op.value_to_store.type, op.mask)
        elif isinstance(op, vector.BroadcastOp):
            self.vmap[r] = self.splat(self.v(op.source), r.type.get_shape()[0])
        elif isinstance(op, vector.ShuffleOp):
            mask = _mask(tuple(op.mask.get_values()))
            self.vmap[r] = self.add(llvm.ShuffleVectorOp(self.v(op.v1), self.v(op.v2), mask, r.type))
        elif isinstance(op, scf.ForOp):
            self.lower_for(op)
        elif isinstance(op, scf.IfOp):
            self.lower_if(op)
        elif isinstance(op, scf.ParallelOp):
            self.lower_parallel(op)
        elif isinstance(op, func.CallOp):
            slot = self.module.profile_slots.get(op)
            start = self.ticks() if slot is not None else None
            self.add(llvm.CallOp(op.callee.root_reference.data, *[self.v(o) for o in op.arguments]))
            if slot is not None:
                self.count_ticks(slot, start)
        elif isinstance(op, func.ReturnOp):
            if self.main_start is not None:
                self.count_ticks(len(self.module.profile_slots), self.main_start)
            self.add(llvm.ReturnOp())
        else:
            raise LoweringError(f"convert-loops-to-llvm: op '{op.name}' in @{self.name} is not supported")

    def _const_value(self, value: Attribute, ty: Attribute) -> Attribute:
        if isinstance(value, IntegerAttr) and isinstance(ty, IndexType):
            return IntegerAttr(value.value.data, i64)
        if isinstance(value, IntegerAttr) and ty == i1:
            return IntegerAttr(value.value.data, i1)
        if isinstance(value, DenseIntOrFPElementsAttr) and isinstance(ty, VectorType) and ty.element_type == i1:
            return DenseIntOrFPElementsAttr.from_list(ty, [int(bool(x)) for x in value.get_values()])
        return value

    # Control flow -----------------------------------------------------------------------------
    def lower_for(self, op: scf.ForOp) -> None:
        body = op.body.block
        carried_types = [llvm_type(a.type) for a in body.args[1:]]
        header = self.new_block([i64, *carried_types])
        self.add(llvm.BrOp(header, self.v(op.lb), *[self.v(a) for a in op.iter_args]))
        inner = self.new_block()
        self.block = header
        cond = self.add(llvm.ICmpOp(header.args[0], self.v(op.ub), IntegerAttr(2, i64)))  # slt
        for old, new in zip(body.args, header.args):
            self.vmap[old] = new
        self.block = inner
        for o in body.ops:
            if isinstance(o, scf.YieldOp):
                nxt = self.add(llvm.AddOp(header.args[0], self.v(op.step)))
                self.add(llvm.BrOp(header, nxt, *[self.v(y) for y in o.operands]))
            else:
                self.lower(o)
        exit_block = self.new_block()
        header.add_op(llvm.CondBrOp(cond, inner, [], exit_block, []))
        for res, arg in zip(op.results, header.args[1:]):
            self.vmap[res] = arg
        self.block = exit_block

    def lower_if(self, op: scf.IfOp) -> None:
        if op.results:
            raise LoweringError("convert-loops-to-llvm: only scf.if without results is supported")
        cur = self.block
        starts, ends = [], []  # first and last block of each branch
        for region in (op.true_region, op.false_region):
            if not region.blocks:
                continue
            self.block = self.new_block()
            starts.append(self.block)
            for o in region.block.ops:
                if not isinstance(o, scf.YieldOp):
                    self.lower(o)
            ends.append(self.block)
        merge = self.new_block()
        for end in ends:
            end.add_op(llvm.BrOp(merge))
        cur.add_op(llvm.CondBrOp(self.v(op.cond), starts[0], [], starts[1] if len(starts) == 2 else merge, []))
        self.block = merge

    def lower_parallel(self, op: scf.ParallelOp) -> None:
        """Outline the body into `@<name>.par<k>(ctx)`; each thread runs one chunk of iterations."""
        body = op.body.block
        free, consts = _free_values(op)
        types = [llvm_type(v.type) for v in free]
        fname = f"{self.name}.par{self.n_parallel}"
        self.n_parallel += 1
        if any(t not in (PTR, i64) for t in types):
            raise LoweringError(f"convert-loops-to-llvm: parallel loop in @{self.name} uses a value of type "
                                f"{next(t for t in types if t not in (PTR, i64))} from outside")
        # Caller: pack the free values into i64 stack slots and run the outlined function.
        count = llvm.ConstantOp(IntegerAttr(max(1, len(free)), i64), i64)
        ctx = llvm.AllocaOp(count, i64, alignment=16)
        first = self.entry.first_op
        for new in (count, ctx):
            self.entry.insert_op_before(new, first) if first is not None else self.entry.add_op(new)
        for k, v in enumerate(free):
            slot = self.add(llvm.GEPOp(ctx.results[0], [k], i64))
            value = self.v(v) if types[k] == i64 else self.add(llvm.PtrToIntOp(self.v(v), i64))
            self.add(llvm.StoreOp(value, slot))
        # One thread: a direct call, which LLVM inlines (the kernel's noalias pointers come back).
        threads = self.add(llvm.LoadOp(self.add(llvm.AddressOfOp(THREADS_GLOBAL, PTR)), i32))
        single = self.add(llvm.ICmpOp(threads, self.const(IntegerAttr(1, i32), i32),
                                      IntegerAttr(0, i64)))  # eq
        cur, direct, spread, merge = self.block, self.new_block(), self.new_block(), self.new_block()
        cur.add_op(llvm.CondBrOp(single, direct, [], spread, []))
        direct.add_ops([llvm.CallOp(fname, ctx.results[0]), llvm.BrOp(merge)])
        self.block = spread
        fn_ptr = self.add(llvm.AddressOfOp(fname, PTR))
        self.add(llvm.CallOp(PARALLEL_RUNNER, fn_ptr, ctx.results[0]))
        self.add(llvm.BrOp(merge))
        self.block = merge

        # Outlined function.
        region = Region(Block(arg_types=[PTR]))
        outlined = FuncLowering(self.module, fname, region)
        outlined.n_parallel = 1000 * (self.n_parallel + 1)
        ctx_arg = region.blocks[0].args[0]
        for c in consts:  # constants are re-made so LLVM still sees them
            outlined.lower(c)
        for k, v in enumerate(free):
            slot = outlined.add(llvm.GEPOp(ctx_arg, [k], i64))
            value = outlined.add(llvm.LoadOp(slot, i64))
            outlined.vmap[v] = value if types[k] == i64 else outlined.add(llvm.IntToPtrOp(value))
        lo, hi = outlined.chunk(_constant_bound(op.lowerBound[0], self.name), _constant_bound(op.upperBound[0], self.name))
        header = outlined.new_block([i64])
        outlined.add(llvm.BrOp(header, lo))
        inner = outlined.new_block()
        outlined.block = header
        cond = outlined.add(llvm.ICmpOp(header.args[0], hi, IntegerAttr(2, i64)))
        outlined.vmap[body.args[0]] = header.args[0]
        outlined.block = inner
        for o in body.ops:
            if isinstance(o, scf.ReduceOp):
                nxt = outlined.add(llvm.AddOp(header.args[0], outlined.i64c(1)))
                outlined.add(llvm.BrOp(header, nxt))
            else:
                outlined.lower(o)
        exit_block = outlined.new_block()
        header.add_op(llvm.CondBrOp(cond, inner, [], exit_block, []))
        outlined.block = exit_block
        outlined.add(llvm.ReturnOp())
        self.module.add_func(llvm.FuncOp(fname, llvm.LLVMFunctionType([PTR]), body=region))

    def chunk(self, lb: int, ub: int) -> tuple[SSAValue, SSAValue]:
        """This thread's iterations [lo, hi) of [lb, ub): equal contiguous chunks."""
        tid = self.add(llvm.CallOp("omp_get_thread_num", return_type=i32))
        nt = self.add(llvm.CallOp("omp_get_num_threads", return_type=i32))
        tid64, nt64 = self.add(llvm.SExtOp(tid, i64)), self.add(llvm.SExtOp(nt, i64))
        n = ub - lb
        size = self.add(llvm.SDivOp(self.add(llvm.AddOp(self.i64c(n), self.add(llvm.SubOp(nt64, self.i64c(1))))), nt64))
        lo = self.add(llvm.AddOp(self.i64c(lb), self.add(llvm.MulOp(tid64, size))))
        hi = self.add(llvm.AddOp(lo, size))
        capped = self.add(llvm.ICmpOp(hi, self.i64c(ub), IntegerAttr(4, i64)))  # sgt
        return lo, self.add(llvm.SelectOp(capped, self.i64c(ub), hi))


@cache
def _i64_attr(n: int) -> IntegerAttr:
    return IntegerAttr(n, i64)


@cache
def _mask(lanes: tuple[int, ...]) -> DenseArrayBase:
    """Shuffle masks, made once (building attributes is a large part of this pass's time)."""
    return DenseArrayBase.from_list(i32, list(lanes))


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


def _constant_bound(v: SSAValue, where: str) -> int:
    """The constant an scf.parallel bound is defined by."""
    if isinstance(v.owner, arith.ConstantOp):
        return v.owner.value.value.data
    raise LoweringError(f"convert-loops-to-llvm: parallel loop bound in @{where} is not a constant")


def _free_values(op: Operation) -> tuple[list[SSAValue], list[Operation]]:
    """Values used inside `op`'s regions but defined outside it, and the constants among them."""
    inside: set[SSAValue] = set()
    for o in op.walk():
        if o is not op:
            inside.update(o.results)
        for region in o.regions:
            for block in region.blocks:
                inside.update(block.args)
    free: list[SSAValue] = []
    consts: list[Operation] = []
    for o in op.walk():
        if o is op:
            continue
        for v in o.operands:
            if v in inside:
                continue
            if isinstance(v.owner, arith.ConstantOp):
                if v.owner not in consts:
                    consts.append(v.owner)
            elif v not in free:
                free.append(v)
    return free, consts


class ModuleLowering:
    def __init__(self, module: ModuleOp, profile_slots: dict[Operation, int] | None = None, profile_offset: int = 0,
                 checked: bool = False):
        self.module = module
        self.checked = checked
        self.checks: list[DictionaryAttr] = []
        """What each bounds-checked access is (`BOUNDS_CHECKS`)."""
        self.new_funcs: list[Operation] = []
        self.profile_slots = profile_slots or {}
        """Profiled kernel calls of @main and the index of their tick counter."""
        self.profile_offset = profile_offset

    def add_func(self, f: Operation) -> None:
        self.new_funcs.append(f)

    def record_check(self, function: str, op: Operation, ref: SSAValue) -> int:
        """Number a checked access of `ref` by `op` in `function` (a kernel or its outlined
        parallel body) and describe it."""
        if isinstance(ref, BlockArgument):
            operand = f"argument {ref.index}"
        elif isinstance(ref.owner, memref.ViewOp) and isinstance(ref.owner.source, BlockArgument):
            operand = f"a view of argument {ref.owner.source.index}"
        else:
            operand = "a stack buffer"
        writes = isinstance(op, (memref.StoreOp, vector.StoreOp, vector.MaskedStoreOp))
        self.checks.append(DictionaryAttr({
            "kernel": StringAttr(function.split(".par")[0]), "access": StringAttr("write" if writes else "read"),
            "operand": StringAttr(operand), "type": StringAttr(str(ref.type))}))
        return len(self.checks) - 1

    def lower_func(self, fn: func.FuncOp) -> llvm.FuncOp:
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


def runtime_decls() -> list[Operation]:
    """The thread-count global, libgomp's entry points and `@nasir_parallel(fn, ctx)`."""
    threads = llvm.GlobalOp(i32, THREADS_GLOBAL, "weak", value=IntegerAttr(1, i32))
    decls = [threads,
             llvm.FuncOp("GOMP_parallel", llvm.LLVMFunctionType([PTR, PTR, i32, i32]), linkage=llvm.LinkageAttr("external")),
             llvm.FuncOp("omp_get_thread_num", llvm.LLVMFunctionType([], i32), linkage=llvm.LinkageAttr("external")),
             llvm.FuncOp("omp_get_num_threads", llvm.LLVMFunctionType([], i32), linkage=llvm.LinkageAttr("external"))]
    block = Block(arg_types=[PTR, PTR])
    n = llvm.LoadOp(llvm.AddressOfOp(THREADS_GLOBAL, PTR), i32)
    zero = llvm.ConstantOp(IntegerAttr(0, i32), i32)
    block.add_ops([n.operands[0].owner, n, zero,
                   llvm.CallOp("GOMP_parallel", block.args[0], block.args[1], n.results[0], zero.results[0]),
                   llvm.ReturnOp()])
    decls.append(llvm.FuncOp(PARALLEL_RUNNER, llvm.LLVMFunctionType([PTR, PTR]), body=Region(block)))
    return decls


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
        lowering = ModuleLowering(op, slots, offset, self.checked)
        new_funcs = [lowering.lower_func(f) for f in funcs]
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
            "macs": c.attributes.get("nasir.macs", IntegerAttr(0, i64))}) for c in calls])
        op.attributes["nasir.profile_offset"] = IntegerAttr(offset, i64)
        WORKSPACE_BYTES.set(op, offset + 8 * (len(calls) + 1))
        return {c: k for k, c in enumerate(calls)}, offset
