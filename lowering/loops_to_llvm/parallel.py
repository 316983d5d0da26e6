"""convert-loops-to-llvm: scf.parallel, outlined and run on `nasir_num_threads` threads (libgomp).

The values the loop uses from outside go in a stack struct of i64 slots (pointers as integers);
each thread runs one contiguous chunk of the iterations:

    scf.parallel (%i) = (%c0) to (%c64) step (%c1) { ... %x ... }          in @k
        ->  %ctx = llvm.alloca 1 x i64   llvm.store %x, %ctx
            llvm.cond_br (nasir_num_threads == 1), ^direct, ^spread
            ^direct: llvm.call @k.par0(%ctx)        (LLVM inlines it: the noalias pointers come back)
            ^spread: llvm.call @nasir_parallel(@k.par0, %ctx)
        llvm.func internal @k.par0(%ctx: !llvm.ptr): %x = llvm.load %ctx; [lo, hi) of this thread: ...
"""

from __future__ import annotations

from xdsl.dialects import arith, llvm, scf
from xdsl.dialects.builtin import IntegerAttr, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from nasir.errors import LoweringError
from nasir.lowering.loops_to_llvm.control_flow import counted_loop
from nasir.lowering.loops_to_llvm.function import PTR, FuncLowering, Lowering, llvm_type

THREADS_GLOBAL = "nasir_num_threads"
PARALLEL_RUNNER = "nasir_parallel"


def parallel(f: FuncLowering, op: scf.ParallelOp) -> None:
    """Outline the body into `@<name>.par<k>(ctx)` and call it, on one thread or on all."""
    free, consts = _free_values(op)
    types = [llvm_type(v.type) for v in free]
    name = f"{f.name}.par{f.n_parallel}"
    f.n_parallel += 1
    if any(t not in (PTR, i64) for t in types):
        raise LoweringError(f"convert-loops-to-llvm: parallel loop in @{f.name} uses a value of type "
                            f"{next(t for t in types if t not in (PTR, i64))} from outside")
    ctx = _pack(f, free, types)
    _run(f, name, ctx)
    f.module.add_func(_outline(f, op, name, free, types, consts))


def _pack(f: FuncLowering, free: list[SSAValue], types: list[Attribute]) -> SSAValue:
    """A stack struct (allocated in the entry block) filled with `free`."""
    count = llvm.ConstantOp(IntegerAttr(max(1, len(free)), i64), i64)
    ctx = llvm.AllocaOp(count, i64, alignment=16)
    f.hoist(count, ctx)
    for k, v in enumerate(free):
        slot = f.add(llvm.GEPOp(ctx.results[0], [k], i64))
        value = f.v(v) if types[k] == i64 else f.add(llvm.PtrToIntOp(f.v(v), i64))
        f.add(llvm.StoreOp(value, slot))
    return ctx.results[0]


def _run(f: FuncLowering, name: str, ctx: SSAValue) -> None:
    """Call `@name(ctx)` directly on one thread (LLVM then inlines it, and the kernel's noalias
    pointers come back), else through `@nasir_parallel`."""
    threads = f.add(llvm.LoadOp(f.add(llvm.AddressOfOp(THREADS_GLOBAL, PTR)), i32))
    single = f.add(llvm.ICmpOp(threads, f.const(IntegerAttr(1, i32), i32), IntegerAttr(0, i64)))  # eq
    cur, direct, spread, merge = f.block, f.new_block(), f.new_block(), f.new_block()
    cur.add_op(llvm.CondBrOp(single, direct, [], spread, []))
    direct.add_ops([llvm.CallOp(name, ctx), llvm.BrOp(merge)])
    f.block = spread
    fn_ptr = f.add(llvm.AddressOfOp(name, PTR))
    f.add(llvm.CallOp(PARALLEL_RUNNER, fn_ptr, ctx))
    f.add(llvm.BrOp(merge))
    f.block = merge


def _outline(f: FuncLowering, op: scf.ParallelOp, name: str, free: list[SSAValue], types: list[Attribute],
             consts: list[Operation]) -> llvm.FuncOp:
    """`@name(ctx)`: unpacks `free`, then runs this thread's chunk of `op`'s iterations."""
    region = Region(Block(arg_types=[PTR]))
    outlined = FuncLowering(f.module, name, region)
    outlined.n_parallel = 1000 * (f.n_parallel + 1)
    ctx = region.blocks[0].args[0]
    for c in consts:  # constants are re-made so LLVM still sees them
        outlined.lower(c)
    for k, v in enumerate(free):
        slot = outlined.add(llvm.GEPOp(ctx, [k], i64))
        value = outlined.add(llvm.LoadOp(slot, i64))
        outlined.vmap[v] = value if types[k] == i64 else outlined.add(llvm.IntToPtrOp(value))
    lo, hi = _chunk(outlined, _constant_bound(op.lowerBound[0], f.name), _constant_bound(op.upperBound[0], f.name))
    counted_loop(outlined, op.body.block, lo, hi, outlined.i64c(1))
    outlined.add(llvm.ReturnOp())
    return llvm.FuncOp(name, llvm.LLVMFunctionType([PTR]), body=region)


def _chunk(f: FuncLowering, lb: int, ub: int) -> tuple[SSAValue, SSAValue]:
    """This thread's iterations [lo, hi) of [lb, ub): equal contiguous chunks."""
    tid = f.add(llvm.CallOp("omp_get_thread_num", return_type=i32))
    nt = f.add(llvm.CallOp("omp_get_num_threads", return_type=i32))
    tid64, nt64 = f.add(llvm.SExtOp(tid, i64)), f.add(llvm.SExtOp(nt, i64))
    n = ub - lb
    size = f.add(llvm.SDivOp(f.add(llvm.AddOp(f.i64c(n), f.add(llvm.SubOp(nt64, f.i64c(1))))), nt64))
    lo = f.add(llvm.AddOp(f.i64c(lb), f.add(llvm.MulOp(tid64, size))))
    hi = f.add(llvm.AddOp(lo, size))
    capped = f.add(llvm.ICmpOp(hi, f.i64c(ub), IntegerAttr(4, i64)))  # sgt
    return lo, f.add(llvm.SelectOp(capped, f.i64c(ub), hi))


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


def runtime_decls() -> list[Operation]:
    """The thread-count global, libgomp's entry points and `@nasir_parallel(fn, ctx)`, which runs
    `fn(ctx)` on `nasir_num_threads` threads through `GOMP_parallel`."""
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


LOWERINGS: dict[type[Operation], Lowering] = {scf.ParallelOp: parallel}
