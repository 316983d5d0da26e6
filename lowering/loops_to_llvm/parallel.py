"""convert-loops-to-llvm: scf.parallel, outlined and run on `nasir_num_threads` threads (libgomp).

The values the loop uses from outside go in a stack struct of i64 slots (pointers as integers);
each thread runs one contiguous chunk of the iterations:

    scf.parallel (%i) = (%c0) to (%c64) step (%c1) { ... %x ... }          in @k
        ->  %ctx = llvm.alloca 1 x i64   llvm.store %x, %ctx
            llvm.cond_br (nasir_num_threads == 1), ^direct, ^spread
            ^direct: llvm.call @k.par0(%ctx)        (LLVM inlines it: the noalias pointers come back)
            ^spread: llvm.call @nasir_parallel(@k.par0, %ctx)
        llvm.func internal @k.par0(%ctx: !llvm.ptr): %x = llvm.load %ctx; [lo, hi) of this thread: ...

With more than one thread @main runs in one team of them (`team_main`): every thread runs its
body, so a kernel called there is called by each of them, and each runs its chunk of the kernel's
loop directly and waits at a barrier (`GOMP_barrier`) instead of forking a team: one fork and
join a call instead of one a kernel (ResNet-34 after `depthwise`, 40 kernels of a few µs: an
empty region's fork and join took 1.1-2.4 µs on a Zen 3 VM, a barrier 0.4-0.7). After a kernel
whose chunks touch only their own chunk of each buffer (`chunks`), @main waits instead, and only
before a call that needs it. A kernel whose
body does more than run parallel loops, in serial loops or not (`team_safe`: a gemm's serial
loop storing vectors), is called by the first thread alone, the others waiting at a barrier
after it; its loops fork a team of their own (nested in @main's: one thread). Called from inside a caller's OpenMP team, @main runs in a
nested team of one thread.

            ^direct (nasir_num_threads == 1 || omp_in_parallel()): llvm.call @k.par0(%ctx)
                     then, in a team, llvm.call @GOMP_barrier()
"""

from __future__ import annotations

from xdsl.dialects import arith, func, llvm, scf
from xdsl.dialects.builtin import IntegerAttr, StringAttr, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.traits import is_side_effect_free

from nasir.errors import LoweringError
from nasir.lowering.loops_to_llvm.control_flow import counted_loop
from nasir.lowering.loops_to_llvm.function import PTR, FuncLowering, Lowering, llvm_type

THREADS_GLOBAL = "nasir_num_threads"
PARALLEL_RUNNER = "nasir_parallel"
MAIN_BODY = "main.body"
MAIN_TEAM = "main.team"


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
    pointers come back) or, in a kernel that @main's team calls on each thread (`team_safe`), on
    each of them (then a barrier, unless the kernel is `chunked`: @main's calls wait where
    needed), else through `@nasir_parallel` (nested in a team: one thread;
    a loop inside an outlined one or in a kernel the team's first thread calls alone)."""
    threads = f.add(llvm.LoadOp(f.add(llvm.AddressOfOp(THREADS_GLOBAL, PTR)), i32))
    single = f.add(llvm.ICmpOp(threads, f.const(IntegerAttr(1, i32), i32), IntegerAttr(0, i64)))  # eq
    team = _in_team(f) if f.name in f.module.team else None
    direct_cond = single if team is None else f.add(llvm.OrOp(single, team))
    cur, direct, spread, merge = f.block, f.new_block(), f.new_block(), f.new_block()
    cur.add_op(llvm.CondBrOp(direct_cond, direct, [], spread, []))
    direct.add_op(llvm.CallOp(name, ctx))
    if team is None or f.name in f.module.chunked:  # a chunked kernel's barrier is @main's (`chunks`)
        direct.add_op(llvm.BrOp(merge))
    else:
        f.block = f.new_block()
        direct.add_op(llvm.CondBrOp(team, f.block, [], merge, []))
        f.barrier()
        f.add(llvm.BrOp(merge))
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
    size = f.chunk_size(ub - lb, nt64)
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


def team_safe(fn: func.FuncOp) -> bool:
    """Whether each thread of @main's team may call kernel `fn` (see the module docstring): its body
    does nothing but run parallel loops, in serial loops or not (each thread runs every iteration
    of the serial loop, its chunk of the parallel loop and a barrier in each), and compute what
    they use.

        scf.for %t = 0 to 3 { scf.parallel (%p) = (0) to (16) { ... } }     team-safe
        scf.for %k = 0 to 64 { vector.store ... }                            not (a gemm's loop)
    """
    return _runs_parallel_loops(fn.body.block)


def _runs_parallel_loops(block: Block) -> bool:
    return all(isinstance(op, (scf.ParallelOp, scf.YieldOp, func.ReturnOp)) or is_side_effect_free(op)
               or isinstance(op, scf.ForOp) and _runs_parallel_loops(op.body.block) for op in block.ops)


def _external(name: str, inputs: list[Attribute], result: Attribute | None = None) -> llvm.FuncOp:
    return llvm.FuncOp(name, llvm.LLVMFunctionType(inputs, result), linkage=llvm.LinkageAttr("external"))


def runtime_decls() -> list[Operation]:
    """The thread-count global, libgomp's entry points and `@nasir_parallel(fn, ctx)`, which runs
    `fn(ctx)` on `nasir_num_threads` threads through `GOMP_parallel`."""
    threads = llvm.GlobalOp(i32, THREADS_GLOBAL, "weak", value=IntegerAttr(1, i32))
    decls = [threads, _external("GOMP_parallel", [PTR, PTR, i32, i32]), _external("GOMP_barrier", []),
             _external("omp_get_thread_num", [], i32), _external("omp_get_num_threads", [], i32),
             _external("omp_in_parallel", [], i32)]
    block = Block(arg_types=[PTR, PTR])
    n = llvm.LoadOp(llvm.AddressOfOp(THREADS_GLOBAL, PTR), i32)
    zero = llvm.ConstantOp(IntegerAttr(0, i32), i32)
    block.add_ops([n.operands[0].owner, n, zero,
                   llvm.CallOp("GOMP_parallel", block.args[0], block.args[1], n.results[0], zero.results[0]),
                   llvm.ReturnOp()])
    decls.append(llvm.FuncOp(PARALLEL_RUNNER, llvm.LLVMFunctionType([PTR, PTR]), body=Region(block)))
    return decls


def _in_team(f: FuncLowering) -> SSAValue:
    """i1: whether the calling thread is one of a team (of @main, `team_main`)."""
    inside = f.add(llvm.CallOp("omp_in_parallel", return_type=i32))
    return f.add(llvm.ICmpOp(inside, f.i32c(0), IntegerAttr(1, i64)))  # ne


def team_main(main: llvm.FuncOp) -> list[llvm.FuncOp]:
    """@main lowered (`main`) renamed @main.body, and a new @main that runs it on one thread
    (`nasir_num_threads == 1`) or on every thread of one team through @main.team(ctx), which
    unpacks the arguments. Called inside a team of the caller's (native code's own OpenMP
    region), @main runs in a team of one of its own: its kernels' chunks and barriers, and the
    first thread's work, are then its own, not a share of the caller's team.

        llvm.func @main(%x, %y, %w, %ws): %in = omp_in_parallel()
            llvm.cond_br (threads == 1 && !%in), ^one, ^team
          ^one:  llvm.call @main.body(%x, %y, %w, %ws)
          ^team: %ctx = [%x, %y, %w, %ws]
                 llvm.call @GOMP_parallel(@main.team, %ctx, %in ? 1 : threads, 0)
    """
    inputs = list(main.function_type.inputs.data)
    main.sym_name = StringAttr(MAIN_BODY)
    main.linkage = llvm.LinkageAttr("internal")
    region = Region(Block(arg_types=inputs))
    f = FuncLowering(None, "main", region)
    args = list(region.blocks[0].args)
    f.vmap.update({a: a for a in args})
    n = f.add(llvm.LoadOp(f.add(llvm.AddressOfOp(THREADS_GLOBAL, PTR)), i32))
    inside = _in_team(f)
    many = f.add(llvm.ICmpOp(n, f.i32c(1), IntegerAttr(1, i64)))  # ne
    alone, team = f.new_block(), f.new_block()
    f.add(llvm.CondBrOp(f.add(llvm.OrOp(many, inside)), team, [], alone, []))
    f.block = alone
    f.add(llvm.CallOp(MAIN_BODY, *args))
    f.add(llvm.ReturnOp())
    f.block = team
    ctx = _pack(f, args, [PTR] * len(args))
    size = f.add(llvm.SelectOp(inside, f.i32c(1), n))
    f.add(llvm.CallOp("GOMP_parallel", f.add(llvm.AddressOfOp(MAIN_TEAM, PTR)), ctx, size, f.i32c(0)))
    f.add(llvm.ReturnOp())
    new_main = llvm.FuncOp("main", llvm.LLVMFunctionType(inputs), linkage=llvm.LinkageAttr("external"), body=region)
    new_main.properties["arg_attrs"] = main.properties["arg_attrs"]
    body = Region(Block(arg_types=[PTR]))
    t = FuncLowering(None, MAIN_TEAM, body)
    slots = [t.add(llvm.GEPOp(body.blocks[0].args[0], [k], i64)) for k in range(len(inputs))]
    t.add(llvm.CallOp(MAIN_BODY, *[t.add(llvm.IntToPtrOp(t.add(llvm.LoadOp(s, i64)))) for s in slots]))
    t.add(llvm.ReturnOp())
    return [new_main, llvm.FuncOp(MAIN_TEAM, llvm.LLVMFunctionType([PTR]), body=body)]


LOWERINGS: dict[type[Operation], Lowering] = {scf.ParallelOp: parallel}
