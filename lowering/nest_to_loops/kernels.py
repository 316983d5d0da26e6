"""Kernel functions of convert-nest-to-loops: the emitter a spec takes, row fusion, softmax, the
kernel of each bufferized op (shared between ops that would give identical kernels) and its
arguments (`KernelArguments`: which it writes, which share bytes, checked against the memory plan).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects import arith, bufferization, func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    UnitAttr,
    f32,
    i8,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import (
    AffineDimExpr,
)

from nasir.dialects import affine, nest, nn
from nasir.dialects.attributes import IN_PLACE, SCRATCH_BYTES, SCRATCH_OFFSET
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.builder import LoopBuilder
from nasir.lowering.nest_to_loops.emitter import NestEmitter
from nasir.lowering.nest_to_loops.spec import Shape, Spec, nest_spec, nn_specs
from nasir.lowering.nest_to_loops.winograd import WinogradEmitter
from nasir.lowering.target import CPUTarget


def emitter_for(b: LoopBuilder, spec: Spec, refs: list[SSAValue], target: CPUTarget) -> NestEmitter:
    """The emitter of `spec` over kernel arguments `refs`: a Winograd conv's (`refs` end with its
    scratch) or the plain one."""
    if spec.winograd:
        return WinogradEmitter(b, spec, refs[:-1], refs[-1], target)
    return NestEmitter(b, spec, refs, target)


def shared_loops(emitter: NestEmitter) -> tuple[str, str]:
    """The outer loops of a nest that a row-fused kernel binds: the outermost loop over blocks of
    the output's channels (axis 1) and the loop over its rows (axis 2, unsplit)."""
    names = [n for n, _ in emitter.spec.dims]
    results = emitter.spec.out_map.results
    (channel,) = {names[d] for d in affine.used_dims(results[1])}
    row = names[results[2].position] if isinstance(results[2], AffineDimExpr) else None
    block = next((l for l in emitter.outer if emitter._origins(l) == {channel}), None)
    if block is None or row not in emitter.outer:
        raise LoweringError(f"nest '{emitter.spec.name}': no outer loops over channel blocks and rows to fuse")
    return block, row


def emit_row_fused(b: LoopBuilder, producer: Spec, consumer: Spec, made_args: list[SSAValue],
                   use_args: list[SSAValue], target: CPUTarget) -> None:
    """The consumer (a max pool) and the producer of its input in one kernel: threads take blocks of
    channels, and for each output row of the consumer the producer first computes the input rows
    it reaches that are not yet there, so the consumer reads them from L1/L2 instead of from
    wherever the whole tensor went (ResNet-34's stem writes 3.2 MB):

        parallel for cb in channel blocks:
          for pr in consumer rows:
            for sr in (hi(pr - 1), hi(pr)]:  producer row sr, channels of cb
            consumer row pr, channels of cb        // hi(pr) = min(s * pr + reach, rows - 1)

    `made_args`: the producer's kernel arguments (operands, result, a Winograd conv's scratch);
    `use_args`: the consumer's but its input, the producer's result (epilogue operands, result)."""
    made = emitter_for(b, producer, made_args, target)
    use = NestEmitter(b, consumer, [made.out, *use_args], target)
    (made_block, made_row), (use_block, use_row) = shared_loops(made), shared_loops(use)
    blocks = made.extent[made_block]
    if use.extent[use_block] != blocks:
        raise LoweringError(f"nest '{consumer.name}': {use.extent[use_block]} channel blocks, its producer "
                            f"'{producer.name}' {blocks}: cannot fuse their rows")
    names = [n for n, _ in consumer.dims]
    form = affine.linear_form(consumer.maps[0].results[2])
    stride = form[0].get(names.index(use_row), 0)
    reach = form[1] + sum(c * (consumer.dims[d][1] - 1) for d, c in form[0].items() if c > 0 and d >= consumer.npar)
    rows = producer.out_shape[2]

    def last_row(pr: SSAValue) -> SSAValue:
        at = b.addi(b.muli(pr, b.idx(stride)), b.idx(reach))
        return b.add(arith.MinSIOp(at, b.idx(rows - 1)))

    def block_rows(cb: SSAValue) -> None:
        def row(pr, carried):
            first = b.add(arith.SelectOp(b.add(arith.CmpiOp(pr, b.idx(0), "eq")), b.idx(0),
                                         b.addi(last_row(b.add(arith.SubiOp(pr, b.idx(1)))), b.idx(1))))
            b.for_(first, b.addi(last_row(pr), b.idx(1)), 1, [], lambda sr, c: (
                made.emit({made_block: b.lin(cb), made_row: b.lin(sr)}, threads=False), c)[1])
            use.emit({use_block: b.lin(cb), use_row: b.lin(pr)}, threads=False)
            return carried

        b.loop(dict(consumer.dims)[use_row], 1, [], row)  # not out_shape's rows: pad-planes' row below

    made.prepare()
    if blocks > 1:
        b.parallel(blocks, block_rows)
    else:
        block_rows(b.idx(0))


def softmax_kernel(b: LoopBuilder, shape: Shape, axis: int, x: SSAValue, y: SSAValue, log: bool = False) -> None:
    """y = exp(x - max) / sum(exp(x - max)) along `axis` (`log`: y = x - max - log(sum(exp(x - max)))),
    scalar loops (LLVM vectorises them)."""
    others = [a for a in range(len(shape)) if a != axis]

    def outer(i, at):
        if i < len(others):
            b.loop(shape[others[i]], 1, [], lambda iv, c: (outer(i + 1, {**at, others[i]: iv}), c)[1])
            return

        def index(iv):
            return [iv if a == axis else at[a] for a in range(len(shape))]

        n = shape[axis]
        mx = b.loop(n, 1, [b.const(-math.inf, f32)], lambda iv, c: [b.maximum(b.load(x, index(iv)), c[0])])[0]

        def expsum(iv, c):
            e = b.unary("exp", b.binary("sub", b.load(x, index(iv)), mx))
            if not log:
                b.store(e, y, index(iv))
            return [b.binary("add", c[0], e)]

        total = b.loop(n, 1, [b.const(0.0, f32)], expsum)[0]
        if log:
            shift = b.binary("add", mx, b.unary("log", total))
            b.loop(n, 1, [], lambda iv, c: (b.store(b.binary("sub", b.load(x, index(iv)), shift), y, index(iv)), c)[1])
            return
        inv = b.binary("div", b.const(1.0, f32), total)
        b.loop(n, 1, [], lambda iv, c: (b.store(b.binary("mul", b.load(y, index(iv)), inv), y, index(iv)), c)[1])

    outer(0, {})


def make_kernel(name: str, arg_types: list[MemRefType], emit, aliased: frozenset[int] = frozenset(),
                mask_registers: bool = True) -> func.FuncOp:
    """A private kernel `@name(args...)` with noalias memref arguments but the `aliased` ones (an
    operand the result is written over, and the result); `emit(builder, args)` fills it with a
    `LoopBuilder` for a target with or without `mask_registers`."""
    block = Block(arg_types=arg_types)
    b = LoopBuilder(block, mask_registers)
    emit(b, list(block.args))
    b.block = block
    b.add(func.ReturnOp())
    noalias = DictionaryAttr({"llvm.noalias": UnitAttr()})
    return func.FuncOp(name, (arg_types, []), Region(block), "private",
                       arg_attrs=ArrayAttr([DictionaryAttr({}) if k in aliased else noalias
                                            for k in range(len(arg_types))]))


def kernel_for(name: str, op: Operation, arg_types: list[MemRefType], aliased: frozenset[int],
               target: CPUTarget) -> func.FuncOp:
    if isinstance(op, nn.SoftmaxBase):
        return make_kernel(name, arg_types, lambda b, a: softmax_kernel(
            b, shape_of(op.results[0]), op.axis.value.data % len(shape_of(op.results[0])), a[0], a[1],
            log=isinstance(op, nn.LogSoftmaxOp)), mask_registers=target.mask_registers)
    specs = [nest_spec(op)] if isinstance(op, nest.ComputeOp) else nn_specs(op, target)

    def emit(b, args):
        for spec in specs:
            emitter = emitter_for(b, spec, args, target)
            emitter.prepare()
            emitter.emit()

    return make_kernel(name, arg_types, emit, aliased, target.mask_registers)


@dataclass(frozen=True)
class KernelArguments:
    """The memrefs a kernel takes: an op's operands', its result's and its scratch's (`refs`),
    those it writes (`written`: result and scratch) and those that share bytes (`aliased`: the
    operand nest-bufferize let the op write over, `IN_PLACE`, every other operand that is the same
    buffer (a residual an epilogue adds twice, `x + x`), and the result)."""

    refs: list[SSAValue]
    written: frozenset[int]
    aliased: frozenset[int]

    @staticmethod
    def of(op: Operation, refs: list[SSAValue]) -> KernelArguments:
        operands = len(op.operands)
        over = IN_PLACE.get(op, None)
        same = {k for k in range(operands) if over is not None and refs[k] is refs[over]}
        return KernelArguments(refs, frozenset(range(operands, len(refs))),
                               frozenset() if over is None else frozenset(same | {operands}))

    def then(self, consumer: KernelArguments) -> KernelArguments:
        """The arguments of one kernel that runs this op and `consumer`, whose operand 0 is this
        op's result (not an argument of their kernel: `emit_row_fused`)."""
        def shifted(ks: frozenset[int]) -> frozenset[int]:
            return frozenset(len(self.refs) + k - 1 for k in ks)

        return KernelArguments(self.refs + consumer.refs[1:], self.written | shifted(consumer.written),
                               self.aliased | shifted(consumer.aliased))

    def check_disjoint(self, layer: str) -> None:
        """Raise if an argument the kernel writes shares workspace bytes with another argument
        but the aliased pair: the memory plan (nest-bufferize) would let the kernel overwrite
        what it still reads, and its noalias arguments would lie to LLVM."""
        spans = [_workspace_span(r) for r in self.refs]
        for w in sorted(self.written):
            for k, span in enumerate(spans):
                if k != w and not {k, w} <= self.aliased and _overlap(spans[w], span):
                    raise LoweringError(f"kernel '{layer}': argument {w}, which it writes, shares workspace bytes "
                                        f"with argument {k}: the memory plan does not match when the kernel runs")


def _workspace_span(ref: SSAValue) -> tuple[SSAValue, int, int] | None:
    """(buffer, first byte, end byte) of a `memref.view` at a constant offset, else None."""
    view = ref.owner
    if not isinstance(view, memref.ViewOp) or not isinstance(view.byte_shift.owner, arith.ConstantOp):
        return None
    start = view.byte_shift.owner.value.value.data
    size = math.prod(view.result.type.get_shape()) * view.result.type.element_type.bitwidth // 8
    return view.source, start, start + size


def _overlap(a: tuple[SSAValue, int, int] | None, b: tuple[SSAValue, int, int] | None) -> bool:
    return a is not None and b is not None and a[0] is b[0] and a[1] < b[2] and b[1] < a[2]


def concat_copies(op: Operation, refs: list[SSAValue]) -> list[Operation] | None:
    """A concat into a slice of the workspace arena whose inputs are contiguous blocks of it
    (`nn.ConcatOp.blocks`: NCHW channels, batch 1) needs no kernel: each input is copied
    (`memref.copy`, a memcpy) into a `memref.view` at its byte offset, unless nest-bufferize
    computed it there already (a DenseNet block's layers write their channels into the block's
    concat: no copy at all). None otherwise.

        %s1 = arith.addi %shift, %c1024 : index   // %dest = memref.view %ws[%shift]
        %d1 = memref.view %ws[%s1][] : memref<4096xi8> to memref<1x4x8x8xf32>
        memref.copy %x1, %d1 : memref<1x4x8x8xf32> to memref<1x4x8x8xf32>
    """
    view = refs[-1].owner
    if not isinstance(op, nn.ConcatOp) or not isinstance(view, memref.ViewOp):
        return None
    blocks = op.blocks()
    if blocks is None or any(r.type.element_type != f32 for r in refs):
        return None
    dest = _workspace_span(refs[-1])
    ops: list[Operation] = []
    for src, start in zip(refs[:-1], blocks):
        span = _workspace_span(src)
        if dest is not None and span is not None and span[:2] == (dest[0], dest[1] + 4 * start):
            continue  # computed in place
        shift = arith.ConstantOp(IntegerAttr(4 * start, IndexType()))
        at = arith.AddiOp(view.byte_shift, shift)
        part = memref.ViewOp(view.source, at, [], src.type)
        ops += [shift, at, part, memref.CopyOp(src, part)]
    return ops


def scratch_view(op: Operation, workspace: SSAValue, before: Operation) -> SSAValue:
    """The workspace bytes nest-bufferize reserved for `op`'s kernel (`SCRATCH_OFFSET`), as a view
    inserted before `before`."""
    at = arith.ConstantOp(IntegerAttr(SCRATCH_OFFSET.get(op), IndexType()))
    size = SCRATCH_BYTES.get(op)
    view = memref.ViewOp(workspace, at, [], MemRefType(i8, [size]))
    before.parent_block().insert_ops_before([at, view], before)
    return view.result


def erase_group(mat: bufferization.MaterializeInDestinationOp, compute: Operation) -> None:
    """Drop a lowered `to_tensor -> op -> materialize_in_destination` group."""
    tensors = [v.owner for v in compute.operands]
    mat.detach(); mat.erase()
    compute.detach(); compute.erase()
    for t in tensors:
        if not t.tensor.uses:
            t.detach(); t.erase()


def kernel_key(op: Operation, arg_types: list[MemRefType]) -> tuple:
    """Ops with equal keys get one shared kernel: everything the kernel is generated from (op kind,
    properties and attributes but the layer name, memref types), e.g. the identical convs of the
    blocks of one ResNet stage."""
    def attrs(d):
        return tuple(sorted((k, str(v)) for k, v in d.items() if k not in ("name", SCRATCH_OFFSET.name)))

    return op.name, attrs(op.properties), attrs(op.attributes), tuple(str(t) for t in arg_types)
