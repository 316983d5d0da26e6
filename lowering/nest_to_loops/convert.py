"""convert-nest-to-loops: each bufferized compute op becomes a kernel function of scf loops.

Runs after nest-bufferize. Every `to_tensor -> op -> materialize_in_destination` group in @main
becomes `func.call @<layer>(%inputs..., %dest) {nasir.layer = "<layer>", nasir.macs = <MACs>,
nasir.layer_class = "conv 3x3"}` of a private kernel whose arguments are the memrefs (the attributes
name what the call computes, for profiles: `convert-loops-to-llvm{profile=true}`);
ops that would give identical kernels (same nest, schedule and memref types) share one, named after
the first such layer, so compile time grows with the distinct layer shapes, not the depth.
A kernel follows the nest's schedule (data, see `nasir.dialects.schedule.Schedule`):

- loops in `Schedule.loops(domain)` order; parallel loops outside the first reduction loop are the
  "outer" loops, `parallel` among them becomes `scf.parallel` (spread over threads);
- the vector loop (innermost) becomes lanes of `vector<W x f32>` values (the module's
  `nasir.vectors` lists each kernel's W, for checks of code that cannot run here); other parallel loops placed
  inside the reductions must be fully unrolled (a register tile): one accumulator per tile point,
  carried through the reduction loops as `scf.for` iter_args (in a nest without reductions, the
  loops unrolled whole just outside the vector loop); a tile whose lanes are strided in the
  output is transposed in registers before its stores (`Tiles.transposed_row`);
- `unroll` replicates loop bodies; split tails (factor not dividing the extent) are guarded:
  outer ones by `scf.if`, inner ones by lane masks; a spatial vector loop's last tile that holds
  at most half a vector runs on narrower vectors (`NestEmitter.tail_width`); the taps of a
  window unrolled along a strided tile row come by input phase (`NestEmitter.tap_order`: a
  stride-2 7x7 conv's kw = 0, 2, 4, 6, 1, 3, 5);
- input reads that may fall outside the input (padding) are masked: masked vector loads (or
  clamped scalar loads + select) yield the combiner's identity, and `avg` counts in-bounds reads.

    func.func private @conv(%x: memref<1x3x8x8xf32>, %w: memref<4x3x3x3xf32>, %y: memref<1x4x8x8xf32>) {
      scf.parallel (%co) = (%c0) to (%c4) step (%c1) {
        scf.for %oh = %c0 to %c8 step %c1 {
          %r = scf.for %ci = ... iter_args(%acc = %zero) -> (vector<8xf32>) {
            ... vector.maskedload %x[...], %mask, %zero ... math.fma ...
          }
          vector.store %r, %y[%c0, %co, %oh, %c0] : memref<1x4x8x8xf32>, vector<8xf32>
        }
      }
    }

The nn ops kept at the nest level (concat, pad with a value, reshape copies, lrn, batch_norm) are
turned into internal nests (`Spec`) and share this code; softmax has its own small kernel. A channel
concat into the workspace arena needs no kernel: its inputs are memcpys into views (`concat_copies`).
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import bufferization, func
from xdsl.dialects.builtin import (
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from nasir.dialects import nest
from nasir.dialects.attributes import FUSE_ROWS, LAYER, LAYER_CLASS, MACS, SCRATCH_OFFSET, UNCLASSIFIED, VECTORS
from nasir.dialects.module import main_func, sanitize
from nasir.dialects.nest import macs
from nasir.errors import LoweringError
from nasir.lowering.nest_to_loops.kernels import (
    KernelArguments,
    concat_copies,
    emit_row_fused,
    erase_group,
    kernel_for,
    kernel_key,
    make_kernel,
    scratch_view,
)
from nasir.lowering.nest_to_loops.spec import Spec, nest_spec
from nasir.lowering.target import target_of


class ConvertNestToLoopsPass(ModulePass):
    """Lower every bufferized nest.compute / nn op in @main to a kernel of scf loops and a call.

    Max combiners and clamps (ReLU, clip, ...) are compares and selects that keep NaN, as torch and
    ONNX Runtime do (arith.maxnumf would drop it). Kernel arguments are `noalias` but the operand a
    nest writes over (`nasir.in_place`) and its result; a kernel that would write workspace bytes
    another of its arguments holds is refused (a memory plan out of step with the kernels). The
    module's `nasir.vectors` lists each kernel's vectorised nests and the lanes of their vector
    loops: `[{kernel = "conv", layer = "conv", lanes = 16}]`."""

    name = "convert-nest-to-loops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fn = main_func(op)
        if fn.function_type.inputs.data and not isinstance(fn.function_type.inputs.data[0], MemRefType):
            raise LoweringError("convert-nest-to-loops: run nest-bufferize first")
        target = target_of(op)
        taken: set[str] = {"main"}
        shared: dict[tuple, str] = {}
        kernels: list[func.FuncOp] = []
        vectors: list[dict] = []
        groups = [mat for mat in fn.body.block.ops if isinstance(mat, bufferization.MaterializeInDestinationOp)]
        fused_inputs = _fused_inputs(groups)
        held: dict[SSAValue, tuple] = {}
        for mat in groups:
            compute = mat.source.owner
            args = _kernel_arguments(compute, mat, fn.body.block.args[-1])
            copies = concat_copies(compute, args.refs)
            if copies is not None:
                fn.body.block.insert_ops_before(copies, mat)
                erase_group(mat, compute)
                continue
            layer = getattr(compute, "layer_name", "") or compute.name.split(".")[1]
            if mat.dest in fused_inputs:
                held[mat.dest] = (nest_spec(compute), args, kernel_key(compute, [r.type for r in args.refs]), layer,
                                  macs(compute), compute.layer_class)
                erase_group(mat, compute)
                continue
            key = kernel_key(compute, [r.type for r in args.refs])
            count = macs(compute)
            if FUSE_ROWS.on(compute):
                if args.refs[0] not in held:
                    raise LoweringError(f"nest '{layer}': {FUSE_ROWS.name} needs its input written by a nest")
                spec, producer_args, producer_key, producer_layer, producer_macs, producer_class = held.pop(args.refs[0])
                specs = [(producer_layer, spec), (layer, nest_spec(compute))]
                classes = [producer_class, compute.layer_class]
                made = len(producer_args.refs)
                args = producer_args.then(args)  # the pool's other operands (an epilogue's) and result
                key, layer, count = (producer_key, key), f"{producer_layer}+{layer}", producer_macs + count
                kernel = lambda name, types, aliased, c=compute, p=spec, n=made: make_kernel(  # noqa: E731
                    name, types, lambda b, a: emit_row_fused(b, p, nest_spec(c), a[:n], a[n:], target), aliased,
                    target.mask_registers)
            else:
                specs = [(layer, nest_spec(compute))] if isinstance(compute, nest.ComputeOp) else []
                classes = [compute.layer_class] if specs else []
                kernel = lambda name, types, aliased, c=compute: kernel_for(  # noqa: E731
                    name, c, types, aliased, target)
            args.check_disjoint(layer)
            name = shared.get(key)
            if name is None:
                name = shared[key] = _fresh_name(layer, taken)
                kernels.append(kernel(name, [r.type for r in args.refs], args.aliased))
                vectors += [{"kernel": name, "layer": nest_layer, "lanes": lanes}
                            for nest_layer, s in specs if (lanes := vector_lanes(s)) > 1]
            call = func.CallOp(name, args.refs, [])
            LAYER.set(call, layer)
            MACS.set(call, count)
            LAYER_CLASS.set(call, "+".join(classes) or UNCLASSIFIED)
            fn.body.block.insert_op_before(call, mat)
            erase_group(mat, compute)
        if held:  # a producer no kernel computed: its readers would read whatever the bytes hold
            raise LoweringError(f"{FUSE_ROWS.name}: no kernel computes the rows of "
                                f"{', '.join(repr(h[3]) for h in held.values())} (a fused pool's producer fused in turn)")
        for k in kernels:
            op.body.block.add_op(k)
        if vectors:
            VECTORS.set(op, vectors)


def vector_lanes(spec: Spec) -> int:
    """The extent of `spec`'s vector loop (1 for a nest without one)."""
    vector = spec.schedule.vector
    return dict(spec.schedule.loops(spec.domain))[vector] if vector is not None else 1


def _fused_inputs(groups: list[bufferization.MaterializeInDestinationOp]) -> set[SSAValue]:
    """The buffers of producers whose rows a consumer's kernel computes (FUSE_ROWS): their ops
    are held until that consumer's kernel is made."""
    fused = {mat.source.owner.operands[0].owner.memref for mat in groups if FUSE_ROWS.on(mat.source.owner)}
    for ref in fused:
        readers = [use.operation for use in ref.uses if isinstance(use.operation, bufferization.ToTensorOp)]
        if len(readers) != 1 or len(list(readers[0].tensor.uses)) != 1:
            raise LoweringError(f"{FUSE_ROWS.name}: the fused pool must be the only reader of its input")
    return fused


def _kernel_arguments(compute: Operation, mat: bufferization.MaterializeInDestinationOp,
                      workspace: SSAValue) -> KernelArguments:
    """The memrefs a bufferized op's kernel takes: its operands', its result's, and its scratch."""
    refs = []
    for v in compute.operands:
        assert isinstance(v.owner, bufferization.ToTensorOp)
        refs.append(v.owner.memref)
    refs.append(mat.dest)
    if SCRATCH_OFFSET.on(compute):
        refs.append(scratch_view(compute, workspace, mat))
    return KernelArguments.of(compute, refs)


def _fresh_name(layer: str, taken: set[str]) -> str:
    """A kernel name from the layer's, not yet `taken` (which it joins)."""
    name, n = sanitize(layer) or "kernel", 1
    while name in taken:
        name, n = f"{sanitize(layer)}_{n}", n + 1
    taken.add(name)
    return name
