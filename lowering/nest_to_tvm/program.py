"""A nest-level module's `@main` as a Relax function: the TVM backend's IRModule.

Every `nest.compute` becomes a PrimFunc (`nest_ops.compute` through `te.create_prim_func`) called
with `R.call_tir`; structurally equal nests (the repeated blocks of a ResNet) share one PrimFunc,
as Relax's BlockBuilder deduplicates them. The nn ops convert-nn-to-nest leaves go through
`nn_ops.LOWERINGS`; weights become parameters of `main` after the inputs (`weight_keys` orders
them), so that the library holds code alone and the weights travel apart (a model's weights can be
swapped without building again):

    %w = nn.weight {key = "conv1.weight"}                   @main(x, conv1_weight, conv1_bias) {
    %y = nest.compute %x, %w, %b {name = "conv1", ...}  ->     y = R.call_tir(conv1, (x, conv1_weight, ...), ...)
    func.return %y                                             return y }

`TVM_PIPELINE` brings any nasir module (nn, nest, or architecture-transformed) to the level this
conversion takes: the graph passes and convert-nn-to-nest of the llvm pipeline, without its CPU
schedule, packing and bufferization, which are TVM's business.
"""

from __future__ import annotations

import re
from functools import partial
from typing import IO

import tvm
import tvm_ffi
from tvm import relax, te
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.utils.target import Target

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, attach_weights, io_names, main_func, weights_of
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError
from nasir.lowering.nest_to_tvm import nest_ops, schedule
from nasir.lowering.nest_to_tvm.nn_ops import LOWERINGS
from nasir.lowering.nest_to_tvm.tuning import TVMTuning
from nasir.lowering.passes import run_pipeline
from nasir.lowering.pipeline import TVM_PIPELINE
from nasir.lowering.target import target_of


def symbol(name: str) -> str:
    """A layer name as a TIR function name (`layer1.0.conv1` -> `layer1_0_conv1`)."""
    return re.sub(r"\W", "_", name) or "nest"


def weight_keys(module: ModuleOp) -> list[str]:
    """The keys of the weights `main` reads, in the order of its weight parameters (first use)."""
    keys = [op.key for op in main_func(module).body.block.ops if isinstance(op, nn.WeightOp)]
    return list(dict.fromkeys(keys))


def lower_to_nest(module: ModuleOp) -> ModuleOp:
    """A copy of `module` through `TVM_PIPELINE` (with its weights)."""
    out = module.clone()
    attach_weights(out, WeightStore(weights_of(module)))
    run_pipeline(out, TVM_PIPELINE)
    return out


def prim_func(op: nest.ComputeOp) -> tvm.tirx.PrimFunc:
    """The unscheduled PrimFunc of `op` (its inputs, then its result)."""
    inputs = [te.placeholder(shape_of(v), "float32", name=f"in{k}") for k, v in enumerate(op.inputs)]
    return te.create_prim_func([*inputs, nest_ops.compute(op, inputs)]).without_attr("global_symbol")


def tunable_nests(module: ModuleOp) -> dict[str, tuple[tvm.tirx.PrimFunc, nest.ComputeOp]]:
    """The distinct nests of `module` (nest level) that have no schedule attribute, by the symbol of
    their first layer: each one's PrimFunc and first op."""
    nests: dict[int, tuple[str, tuple[tvm.tirx.PrimFunc, nest.ComputeOp]]] = {}
    for op in main_func(module).body.block.ops:
        if isinstance(op, nest.ComputeOp) and op.schedule is None:
            func = prim_func(op)
            nests.setdefault(tvm_ffi.structural_hash(func), (symbol(op.layer_name), (func, op)))
    return dict(nests.values())


def tunable_funcs(module: ModuleOp) -> dict[str, tvm.tirx.PrimFunc]:
    """The PrimFuncs of `tunable_nests`: what meta_schedule tunes."""
    return {name: func for name, (func, _) in tunable_nests(module).items()}


def _scheduled(op: nest.ComputeOp, gpu: schedule.GPU | None, lanes: int, tuning: TVMTuning | None
               ) -> tvm.tirx.PrimFunc | None:
    """The PrimFunc of `op` scheduled: by its schedule attribute if it has one, else by its tuning
    record (or one transferred), else by `schedule.default_cpu` / `default_gpu`; None: TVM's
    pipeline schedules it (on a GPU, dlight)."""
    if op.schedule is not None:
        return schedule.apply(prim_func(op), op, gpu)
    if tuning is not None:
        tuned = tuning.schedule(prim_func(op))
        if tuned is not None:
            return tuned
    if gpu is not None:
        return schedule.default_gpu(prim_func(op), op, gpu)
    chosen = schedule.default_cpu(op, lanes)
    return None if chosen is None else schedule.apply(prim_func(op), op, gpu, chosen)


def _emit_nest(bb: relax.BlockBuilder, op: nest.ComputeOp, args: list[relax.Expr], gpu: schedule.GPU | None,
               lanes: int, tuning: TVMTuning | None) -> relax.Var:
    """`call_tir` of the PrimFunc of `op`, scheduled (`_scheduled`) or left to TVM's pipeline."""
    func = _scheduled(op, gpu, lanes, tuning)
    if func is None:
        return bb.emit_te(partial(nest_ops.compute, op), args, primfunc_name_hint=symbol(op.layer_name))
    func = func.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
    func = func.with_attr("op_pattern", schedule.OPAQUE)
    gv = bb.add_func(func, symbol(op.layer_name))
    return bb.emit(relax.call_tir(gv, args, relax.TensorType(list(shape_of(op.result)), "float32")))


def to_relax(module: ModuleOp, target: tvm.target.Target | None = None, tuning: TVMTuning | None = None
             ) -> tvm.IRModule:
    """The IRModule of `module` (at the nest level: see `lower_to_nest`): Relax `main(inputs...,
    weights...)` + PrimFuncs, those of scheduled nests scheduled for a CPU, or for a GPU (a cuda
    `target`: its limits, see `schedule.GPU`), those of the others by `tuning`'s records where it has
    them (see `tuning`)."""
    gpu = schedule.GPU.of(target) if target is not None and target.kind.name == "cuda" else None
    main = main_func(module)
    store = weights_of(module)
    lanes = target_of(module).lanes
    inputs, _ = io_names(module)
    bb = relax.BlockBuilder()
    params = [relax.Var(name, relax.TensorType(list(shape_of(arg)), "float32"))
              for name, arg in zip(inputs, main.body.block.args)]
    env: dict[SSAValue, relax.Expr] = dict(zip(main.body.block.args, params))
    weights: dict[str, relax.Var] = {}
    for key in weight_keys(module):
        if key not in store:
            raise LoweringError(f"weight '{key}' is not in the weight store")
        weights[key] = relax.Var(symbol(key), relax.TensorType(list(store[key].shape), "float32"))
    with bb.function("main", [*params, *weights.values()], {"num_input": len(params)}):
        with bb.dataflow():
            for op in main.body.block.ops:
                if isinstance(op, func.ReturnOp):
                    outs = [env[o] for o in op.operands]
                    result = bb.emit_output(outs[0] if len(outs) == 1 else relax.Tuple(outs))
                elif isinstance(op, nn.WeightOp):
                    env[op.result] = weights[op.key]
                elif isinstance(op, nest.ComputeOp):
                    env[op.result] = _emit_nest(bb, op, [env[o] for o in op.inputs], gpu, lanes, tuning)
                elif type(op) in LOWERINGS:
                    env[op.result] = LOWERINGS[type(op)](bb, op, [env[o] for o in op.operands])
                else:
                    raise LoweringError(f"the tvm backend cannot convert '{op.name}' "
                                        f"(layer '{getattr(op, 'layer_name', '')}')")
        bb.emit_func_output(result)
    return bb.get()


def unfused(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod`, changed in place: every PrimFunc opaque to FuseOps, so each layer stays one kernel
    call (for profiles)."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc):
            mod[gv] = func.with_attr("op_pattern", schedule.OPAQUE)
    return mod


class TVMScriptTarget(Target):
    """`nasir-opt -t tvm`: the module as TVM's IRModule (Relax `main` and a PrimFunc per distinct
    nest), printed as TVMScript; nn ops are first taken through `TVM_PIPELINE`."""

    name = "tvm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        print(to_relax(lower_to_nest(module)).script(show_meta=False), file=output)
