"""convert-loops-to-llvm: scf.for and scf.if become blocks; func.call and func.return their llvm ops.

    scf.for %i = %lb to %ub step %s iter_args(%a = %x) { ... scf.yield %y }
        ->    llvm.br ^header(%lb, %x)
            ^header(%i, %a):  %go = llvm.icmp "slt" %i, %ub   llvm.cond_br %go, ^body, ^exit
            ^body:  ...   %next = llvm.add %i, %s   llvm.br ^header(%next, %y)
            ^exit:  (the loop's results are ^header's %a)
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func, llvm, scf
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from nasir.errors import LoweringError
from nasir.lowering.loops_to_llvm.chunks import call_accesses
from nasir.lowering.loops_to_llvm.function import FuncLowering, Lowering, llvm_type


def counted_loop(f: FuncLowering, body: Block, lo: SSAValue, hi: SSAValue, step: SSAValue,
                 inits: Sequence[SSAValue] = (), carried_types: Sequence[Attribute] = ()) -> Sequence[SSAValue]:
    """`body` as the blocks of `for (i = lo; i < hi; i += step)` (see the module docstring): its
    arguments are `i` and the values carried from `inits`; its terminator branches back with the
    next ones (scf.yield; scf.reduce of a parallel loop carries nothing). Returns the carried
    values after the loop."""
    header = f.new_block([i64, *carried_types])
    f.add(llvm.BrOp(header, lo, *inits))
    inner = f.new_block()
    f.block = header
    cond = f.add(llvm.ICmpOp(header.args[0], hi, IntegerAttr(2, i64)))  # slt
    for old, new in zip(body.args, header.args):
        f.vmap[old] = new
    f.block = inner
    for o in body.ops:
        if isinstance(o, (scf.YieldOp, scf.ReduceOp)):
            nxt = f.add(llvm.AddOp(header.args[0], step))
            yielded = o.operands if isinstance(o, scf.YieldOp) else ()
            f.add(llvm.BrOp(header, nxt, *[f.v(y) for y in yielded]))
        else:
            f.lower(o)
    exit_block = f.new_block()
    header.add_op(llvm.CondBrOp(cond, inner, [], exit_block, []))
    f.block = exit_block
    return header.args[1:]


def for_loop(f: FuncLowering, op: scf.ForOp) -> None:
    """`counted_loop`, whose carried values are the results."""
    body = op.body.block
    carried = counted_loop(f, body, f.v(op.lb), f.v(op.ub), f.v(op.step), [f.v(a) for a in op.iter_args],
                           [llvm_type(a.type) for a in body.args[1:]])
    f.replace(op, *carried)


def if_then(f: FuncLowering, op: scf.IfOp) -> None:
    """`scf.if %c { A } else { B }` -> `llvm.cond_br %c, ^a, ^b`, each branch ending in `llvm.br ^merge`."""
    if op.results:
        raise LoweringError("convert-loops-to-llvm: only scf.if without results is supported")
    cur = f.block
    starts, ends = [], []  # first and last block of each branch
    for region in (op.true_region, op.false_region):
        if not region.blocks:
            continue
        f.block = f.new_block()
        starts.append(f.block)
        for o in region.block.ops:
            if not isinstance(o, scf.YieldOp):
                f.lower(o)
        ends.append(f.block)
    merge = f.new_block()
    for end in ends:
        end.add_op(llvm.BrOp(merge))
    cur.add_op(llvm.CondBrOp(f.v(op.cond), starts[0], [], starts[1] if len(starts) == 2 else merge, []))
    f.block = merge


def call(f: FuncLowering, op: func.CallOp) -> None:
    """`llvm.call`; a profiled kernel call of @main adds its ticks to its counter. In @main, a
    kernel that its team's threads may not all run (not in `FuncLowering.module.team`) is called
    by the first, the others waiting at a barrier after it (`nasir.lowering.loops_to_llvm.parallel`);
    one they all call waits at a barrier first if a thread touched memory since the last one
    (`FuncLowering.unsynced`) that the call could meet: a `chunked` kernel's own chunks need none
    (`chunks`), the same axis in chunks of another scale one unless the run's thread count gives
    each thread the same elements (`Rechunk`), another kernel waits for anything."""
    slot = f.module.profile_slots.get(op)
    start = f.ticks() if slot is not None else None
    callee = op.callee.root_reference.data

    def emit() -> None:
        f.add(llvm.CallOp(callee, *[f.v(o) for o in op.arguments]))

    chunked = f.module.chunked.get(callee)
    if f.name != "main":
        emit()
    elif chunked is not None:
        accesses = call_accesses(op, chunked)
        if f.unsynced.conflicts(accesses):
            f.barrier()
        elif rechunks := f.unsynced.rechunks(accesses):
            f.barrier_unless_same_chunks(rechunks)
        emit()
        f.unsynced.add(accesses)
    else:
        if f.unsynced:
            f.barrier()
        if callee in f.module.team:
            emit()  # its loops end with barriers
            f.unsynced.clear()
        else:
            f.on_first_thread(emit)
            f.barrier()
    if slot is not None:
        f.count_ticks(slot, start)


def return_(f: FuncLowering, op: func.ReturnOp) -> None:
    """`llvm.return`; a profiled @main first adds its own ticks to the last counter."""
    if f.main_start is not None:
        f.count_ticks(len(f.module.profile_slots), f.main_start)
    f.add(llvm.ReturnOp())


LOWERINGS: dict[type[Operation], Lowering] = {
    scf.ForOp: for_loop,
    scf.IfOp: if_then,
    func.CallOp: call,
    func.ReturnOp: return_,
}
