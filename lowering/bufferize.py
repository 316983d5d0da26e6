"""nest-bufferize: tensors -> memrefs with a static memory plan (first step of the llvm backend).

Runs on nest-level IR (after convert-nn-to-nest and the schedule passes) and rewrites `@main` into
destination-passing style over four kinds of storage:

- the model's inputs and outputs: arguments of `@main`, in that order;
- `%weights`: one `memref<Nxi8>` holding every weight at a 64-byte aligned offset
  (module attribute `nasir.weight_offsets`, packed once by the runtime);
- `%workspace`: one `memref<Mxi8>` arena holding every intermediate; values whose lifetimes do not
  overlap share bytes (first-fit over program order). `nasir.workspace_bytes` records the peak M.

Each compute op (a `nest.compute` or an nn op the nest level keeps) stays a tensor op, wrapped so
that it reads memrefs and writes into its destination:

    func.func @main(%x: memref<1x3x8x8xf32>, %out: memref<1x4x8x8xf32>,
                    %weights: memref<448xi8>, %workspace: memref<0xi8>) {
      %c0 = arith.constant 0 : index
      %w = memref.view %weights[%c0][] {nasir.weight = "conv.w"} : memref<448xi8> to memref<4x3x3x3xf32>
      %0 = bufferization.to_tensor %x : memref<1x3x8x8xf32> to tensor<1x3x8x8xf32>
      %1 = bufferization.to_tensor %w : memref<4x3x3x3xf32> to tensor<4x3x3x3xf32>
      %2 = nest.compute %0, %1 {...} : (...) -> tensor<1x4x8x8xf32>
      bufferization.materialize_in_destination %2 in writable %out : (tensor<1x4x8x8xf32>, memref<1x4x8x8xf32>) -> ()
      func.return
    }

`nn.reshape` of a value in the weights or the arena is a view at the same offset (no copy).
An op with `nasir.scratch_bytes` (a Winograd conv's transformed input and weights) gets that many
arena bytes of its own, `nasir.scratch_offset`, live while its kernel runs.
Lifetimes follow the kernels, not the ops' places in @main: a nest whose rows its max pool's kernel
computes (`nasir.fuse_rows`) runs when that pool runs, so its operands and scratch live until then
and the pool's result takes none of their bytes (`kernel_steps`; in a VGG block the pool's result
took the bytes of the conv output that the fused conv was still reading).
A nest whose epilogue reads an arena value at its own output index (a residual add) and is that
value's last reader writes its result over it (`in_place_operand`; the nest gets
`nasir.in_place = <operand>`, and convert-nest-to-loops drops `noalias` on the pair): one buffer
less for the caches to hold (ResNet-34 group16: the second convs of the blocks 0.955x the time).
A channel concat's inputs are computed where the concat holds them (`place_concat_inputs`): each
is a view into the concat's bytes, a concat whose inputs all sit so is a view in turn, and the
concat copies only what could not be placed (a DenseNet block: its layers write their channels
into one buffer of the block, and no concat copies anything; DenseNet-121 0.97-0.98x the time).
convert-nest-to-loops turns each wrapped op into loops over the memrefs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, bufferization, func, memref
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    UnitAttr,
    f32,
    i8,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.attributes import (
    FUSE_ROWS,
    IN_PLACE,
    NUM_OUTPUTS,
    PAD_ROWS,
    SCRATCH_BYTES,
    SCRATCH_OFFSET,
    WEIGHT,
    WEIGHT_OFFSETS,
    WEIGHTS_BYTES,
    WORKSPACE_BYTES,
)
from nasir.dialects.module import main_func
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError

ALIGN = 64
"""Byte alignment of every buffer in the weights and the arena (one AVX-512 cache line), and of
the weights and workspace the runtime allocates."""

COMPUTE_OPS = (nest.ComputeOp, nn.ConcatOp, nn.ReshapeOp, nn.SoftmaxBase, nn.LRNOp, nn.PadOp, nn.BatchNormOp)
"""Ops that do work at the nest level: wrapped by this pass, lowered by convert-nest-to-loops."""




def memref_of(shape) -> MemRefType:
    return MemRefType(f32, list(shape))


def nbytes(shape) -> int:
    return 4 * math.prod(shape)


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class Arena:
    """First-fit allocator over a growing byte range; `peak` is the arena size needed."""

    free: list[tuple[int, int]] = field(default_factory=list)  # (offset, size), sorted by offset
    peak: int = 0

    def alloc(self, size: int) -> int:
        size = aligned(size)
        for i, (off, room) in enumerate(self.free):
            if room >= size:
                self.free[i: i + 1] = [(off + size, room - size)] if room > size else []
                return off
        if self.free and self.free[-1][0] + self.free[-1][1] == self.peak:
            off = self.free.pop()[0]
        else:
            off = self.peak
        self.peak = off + size
        return off

    def release(self, off: int, size: int) -> None:
        self.free.append((off, aligned(size)))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for o, s in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.free = merged


def in_place_operand(op: Operation, owns_bytes: Callable[[SSAValue], bool]) -> int | None:
    """The operand whose bytes `op` may write its result over: one that only its epilogue reads,
    at the output's own index (`maps[k] == out_map`: each element is read just before it is
    written), of the result's shape (pad-planes may give either padding rows), and `owns_bytes`
    (an arena value no one reads later)."""
    if not isinstance(op, nest.ComputeOp):
        return None
    result = op.results[0]
    epilogue = {k for _, operands, _ in op.steps for k in operands}
    for k in sorted(epilogue):
        v = op.operands[k]
        uses = [j for j, o in enumerate(op.operands) if o is v]
        if (owns_bytes(v) and shape_of(v) == shape_of(result)
                and all(j in epilogue and op.access_maps[j] == op.output_map for j in uses)):
            return k
    return None


def kernel_steps(body: list[Operation]) -> dict[Operation, int]:
    """The position in `body` of the kernel that runs each op: its own, except for a nest whose
    rows its reader's kernel computes (`FUSE_ROWS`): that reader's. Such a producer reads its
    operands, and writes its result and scratch, while its reader runs, so all of them must hold
    their bytes until then and the reader's result must not take any of them."""
    step = {op: i for i, op in enumerate(body)}
    for i, op in enumerate(body):
        if isinstance(op, nest.ComputeOp) and FUSE_ROWS.on(op) and op.operands[0].owner in step:
            step[op.operands[0].owner] = i
    return step


def plan(body: list[Operation], returned: list[SSAValue]
         ) -> tuple[dict[SSAValue, int], int, set[SSAValue], dict[Operation, int], dict[Operation, int]]:
    """Arena offsets of intermediates (values not returned), the peak bytes, the reshape views,
    the ops that write their result over an operand (`in_place_operand`), and the offsets of the
    ops' scratch (`SCRATCH_BYTES`).

    Lifetimes follow the kernels, not the ops (`kernel_steps`): a value lives from its op until
    the last kernel that reads it has run, an op's scratch until its kernel has run, and an op
    writes over an operand only if no other op of its kernel reads that operand.

    A reshape of an arena value (not returned) is a view: it shares its source's bytes, and the
    bytes live until the last use of any value in the group. So are a concat's inputs computed in
    its bytes (`place_concat_inputs`): the group's bytes live from its first value's op on.
    """
    views: set[SSAValue] = set()
    root: dict[SSAValue, SSAValue] = {}
    for op in body:
        if isinstance(op, nn.ReshapeOp) and op.result not in returned:
            src = op.operands[0]
            if src in root:
                views.add(op.result)
                root[op.result] = root[src]
                continue
        if isinstance(op, COMPUTE_OPS) and op.results[0] not in returned:
            root[op.results[0]] = op.results[0]
    viewed = {root[v] for v in views}
    shift = place_concat_inputs(body, root, viewed)
    viewed |= {root[v] for v in shift}
    step = kernel_steps(body)
    first: dict[SSAValue, SSAValue] = {}  # each group's value computed first
    last: dict[SSAValue, int] = {}
    for op in body:
        for v in op.operands:
            if v in root:
                last[root[v]] = max(last.get(root[v], 0), step[op])
        for r in op.results:
            if r in root:
                first.setdefault(root[r], r)
                last[root[r]] = max(last.get(root[r], 0), step[op])
    arena, offsets, in_place, scratch = Arena(), {}, {}, {}
    dying: dict[int, list[tuple[int, int]]] = {}  # kernel -> (offset, bytes) it is the last to use

    def shares_kernel(v: SSAValue, op: Operation) -> bool:
        return any(use.operation is not op and step.get(use.operation) == step[op] for use in v.uses)

    for i, op in enumerate(body):
        over = None
        if op.results and root.get(op.results[0]) is op.results[0]:
            k = in_place_operand(op, lambda v: root.get(v) is v and v not in viewed and last[v] == step[op]
                                 and not shares_kernel(v, op))
            if k is not None:
                in_place[op], over = k, op.operands[k]
                dying[step[op]].remove((offsets[over], nbytes(shape_of(over))))  # the result's bytes now
        for r in op.results:
            if r in root and first[root[r]] is r:
                group = root[r]
                offsets[group] = offsets[over] if over is not None else arena.alloc(nbytes(shape_of(group)))
                dying.setdefault(last[group], []).append((offsets[group], nbytes(shape_of(group))))
        if SCRATCH_BYTES.on(op):
            scratch[op] = arena.alloc(SCRATCH_BYTES.get(op))
            dying.setdefault(step[op], []).append((scratch[op], SCRATCH_BYTES.get(op)))
        for at, size in dying.pop(i, []):
            arena.release(at, size)
    for v, group in root.items():
        if group is not v:
            offsets[v] = offsets[group] + shift.get(v, 0)
    return offsets, arena.peak, views, in_place, scratch


def place_concat_inputs(body: list[Operation], root: dict[SSAValue, SSAValue],
                        viewed: set[SSAValue]) -> dict[SSAValue, int]:
    """Compute a concat's inputs where the concat holds them (`nn.ConcatOp.blocks`), so that it
    copies nothing: each input an op computes into the arena (its own bytes so far: `root`, no
    reshape of it in `viewed`, no padding rows) is re-rooted into the concat's bytes at its block's
    byte offset, which is returned. Concats are visited last first, so a DenseNet block, whose
    layer k reads concat(x0, ..., x(k-1)), puts every x in the block's last concat, and each
    earlier concat, its inputs all in place in one group at the offsets it would give them, becomes
    a view of that group's first bytes:

        %c1 = nn.concat %x0, %x1 : 1x64x8x8, 1x32x8x8   ->  view of %c2 at 0
        %c2 = nn.concat %x0, %x1, %x2                    ->  %x0 at byte 0, %x1 at 16384, %x2 at 24576

    An input whose block does not start on an `ALIGN` boundary, or that sits elsewhere already (a
    value two concats read at different offsets), is copied as before (`concat_copies`)."""
    shift: dict[SSAValue, int] = {}
    groups: set[SSAValue] = set()

    def free(v: SSAValue) -> bool:
        return root.get(v) is v and v not in viewed and v not in groups and not nest.pad_rows(v)

    for op in reversed(body):
        if not isinstance(op, nn.ConcatOp) or op.results[0] not in root or (blocks := op.blocks()) is None:
            continue
        c = op.results[0]
        at = {(root[v], shift[v] - 4 * b) for v, b in zip(op.operands, blocks) if v in shift}
        if free(c) and len(at) == 1 and all(v in shift for v in op.operands):
            root[c], shift[c] = at.pop()  # every input already where c would put it
            continue
        if nest.pad_rows(c):
            continue
        group, base = root[c], shift.get(c, 0)
        for v, b in zip(op.operands, blocks):
            if free(v) and (base + 4 * b) % ALIGN == 0:
                root[v], shift[v] = group, base + 4 * b
                groups.add(group)
    return shift


class NestBufferizePass(ModulePass):
    """Rewrite @main over memrefs: (inputs, outputs, weights, workspace) with a static memory plan
    whose lifetimes follow the kernels (a nest whose rows its pool's kernel computes, `nasir.fuse_rows`,
    runs there); an op that asks for scratch (`nasir.scratch_bytes`) gets arena bytes at
    `nasir.scratch_offset`; a channel concat's inputs are computed in its bytes."""

    name = "nest-bufferize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fn = main_func(op)
        if any(isinstance(t, MemRefType) for t in fn.function_type.inputs.data):
            return  # already bufferized
        old = fn.body.block
        ret = old.last_op
        assert isinstance(ret, func.ReturnOp)
        returned = list(ret.operands)
        body = [o for o in old.ops if o is not ret]
        for o in body:
            if not isinstance(o, (nn.WeightOp, *COMPUTE_OPS)):
                raise LoweringError(f"nest-bufferize: op '{o.name}' {_layer(o)}is not supported by the llvm backend "
                                    "(run convert-nn-to-nest first)")
        weight_offsets, wbytes = _weight_offsets(body)
        offsets, peak, views, in_place, scratch = plan(body, returned)

        in_types = [memref_of(shape_of(t)) for t in fn.function_type.inputs.data]
        out_types = [memref_of(shape_of(t)) for t in fn.function_type.outputs.data]
        block = Block(arg_types=[*in_types, *out_types, MemRefType(i8, [wbytes]), MemRefType(i8, [peak])])
        n_in, n_out = len(in_types), len(out_types)
        main = _MainOverMemrefs(block, n_in, n_out, dict(zip(old.args, block.args[:n_in])))
        dest_of, copies = main.destinations(returned)
        for o in body:
            if isinstance(o, nn.WeightOp):
                main.weight(o, weight_offsets[o.key])
            elif o.results[0] in views:
                main.buf[o.results[0]] = main.view(main.workspace, offsets[o.results[0]], shape_of(o.results[0]))
            else:
                r = o.results[0]
                main.compute(o, dest_of.get(r) or main.view(main.workspace, offsets[r], shape_of(r)),
                             in_place.get(o), scratch.get(o))
        for v, out_arg in copies:
            main.ops.append(memref.CopyOp(main.buf[v], out_arg))
        main.ops.append(func.ReturnOp())
        block.add_ops(main.ops)

        new_fn = func.FuncOp("main", ([*in_types, *out_types, block.args[-2].type, block.args[-1].type], []),
                             Region(block))
        new_fn.attributes.update({k: v for k, v in fn.attributes.items() if k not in ("function_type", "sym_name")})
        fn.detach()
        fn.erase()
        op.body.block.add_op(new_fn)
        WORKSPACE_BYTES.set(op, peak)
        WEIGHTS_BYTES.set(op, wbytes)
        WEIGHT_OFFSETS.set(op, weight_offsets)
        NUM_OUTPUTS.set(op, n_out)


def _weight_offsets(body: list[Operation]) -> tuple[dict[str, int], int]:
    """Each weight's byte offset in the one weights buffer, and the buffer's size."""
    offsets: dict[str, int] = {}
    size = 0
    for o in body:
        if isinstance(o, nn.WeightOp) and o.key not in offsets:
            offsets[o.key] = size
            size += aligned(nbytes(shape_of(o.result)))
    return offsets, size


class _MainOverMemrefs:
    """The ops of the new @main, `(inputs..., outputs..., weights, workspace)`, as they are made;
    `buf`: the memref holding each old tensor value."""

    def __init__(self, block: Block, n_in: int, n_out: int, buf: dict[SSAValue, SSAValue]):
        self.block, self.n_in = block, n_in
        self.weights, self.workspace = block.args[n_in + n_out], block.args[n_in + n_out + 1]
        self.buf = buf
        self.ops: list[Operation] = []

    def view(self, base: SSAValue, offset: int, shape) -> SSAValue:
        c = arith.ConstantOp(IntegerAttr(offset, IndexType()))
        v = memref.ViewOp(base, c, [], memref_of(shape))
        self.ops.extend([c, v])
        return v.result

    def destinations(self, returned: list[SSAValue]):
        """Where each returned value is computed: its output argument (the first one, if returned
        twice); the values copied to an output instead (an input, a weight, one returned twice)."""
        dest_of: dict[SSAValue, SSAValue] = {}
        copies: list[tuple[SSAValue, SSAValue]] = []
        for k, v in enumerate(returned):
            out_arg = self.block.args[self.n_in + k]
            if v in dest_of or not isinstance(v.owner, COMPUTE_OPS):
                copies.append((v, out_arg))
            else:
                dest_of[v] = out_arg
        return dest_of, copies

    def weight(self, o: nn.WeightOp, offset: int) -> None:
        w = self.view(self.weights, offset, shape_of(o.result))
        WEIGHT.set(w.owner, o.key)
        self.buf[o.result] = w

    def compute(self, o: Operation, dest: SSAValue, over: int | None, scratch_at: int | None) -> None:
        """`o` on tensors read from its operands' memrefs, its result materialized in `dest`."""
        tensors = []
        for v in o.operands:
            t = bufferization.ToTensorOp(self.buf[v])
            if pad := nest.pad_rows(v):  # its readers' bounds stop above the padding rows
                PAD_ROWS.set(t, pad)
            self.ops.append(t)
            tensors.append(t.tensor)
        new = o.clone()
        for i, t in enumerate(tensors):
            new.operands[i] = t
        if over is not None:
            IN_PLACE.set(new, over)
        if scratch_at is not None:
            SCRATCH_OFFSET.set(new, scratch_at)
        self.ops.append(new)
        self.ops.append(bufferization.MaterializeInDestinationOp(
            operands=[new.results[0], dest], result_types=[[]], properties={"writable": UnitAttr()}))
        self.buf[o.results[0]] = dest


def _layer(op: Operation) -> str:
    name = getattr(op, "layer_name", "")
    return f"(layer '{name}') " if name else ""
