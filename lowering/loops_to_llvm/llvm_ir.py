"""LLVM IR from the llvm dialect: xDSL's llvmlite converter, extended, plus O3 for the target CPU.

The last step of the llvm backend before machine code: a module after convert-loops-to-llvm is
converted with `xdsl.backend.llvm.convert.convert_module` (triple and data layout of the module's
target, `nasir.target`), parsed by LLVM and optimised with the new pass manager at O3 for that CPU
(LLVM's own loop and SLP vectorisers off: the code is explicitly vectorised).
"""

from __future__ import annotations

import re
from typing import IO

from llvmlite.ir import types
from xdsl.backend.llvm.convert import convert_module
from xdsl.context import Context
from xdsl.dialects import llvm
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from nasir.errors import LoweringError
from nasir.lowering.target import CPUTarget, target_of


def to_llvm_ir(module: ModuleOp) -> str:
    """LLVM IR text (unoptimised) of a module at the llvm dialect level, for its target."""
    target = target_of(module)
    try:
        ir_module = convert_module(module, fallback_target_triple=target.triple,
                                   data_layout=str(target.target_machine().target_data))
    except NotImplementedError as e:
        raise LoweringError(f"LLVM IR: {e} (run convert-loops-to-llvm first)") from None
    for op in module.ops:  # the converter drops function linkage; internal kernels may be inlined away
        if isinstance(op, llvm.FuncOp) and op.body.blocks and op.linkage.linkage.data == "internal":
            ir_module.get_global(op.sym_name.data).linkage = "internal"
    return _print_opaque(ir_module)


def float_vectors(ir_text: str) -> dict[str, set[int]]:
    """The float32 vector widths each function of LLVM IR text computes with:

        define internal void @conv.par0(ptr %0) { ... <16 x float> ... <8 x float> ... }
        -> {"conv.par0": {16, 8}}
    """
    widths = {}
    for header, body in re.findall(r'^define [^@]*@"?([^"(]+)"?\(([\s\S]*?)^}', ir_text, re.MULTILINE):
        widths[header] = {int(w) for w in re.findall(r"<(\d+) x float>", body)}
    return widths


def _print_opaque(ir_module) -> str:
    """Print with opaque pointers (`ptr`), which LLVM >= 17 requires; llvmlite's IR layer prints
    typed pointers (`i64*`) unless its process-wide switch is off, so it is off while printing."""
    saved = types.ir_layer_typed_pointers_enabled
    types.ir_layer_typed_pointers_enabled = False
    try:
        return str(ir_module)
    finally:
        types.ir_layer_typed_pointers_enabled = saved


def optimize(ir_text: str, target: CPUTarget):
    """Parse and optimise LLVM IR at O3 for `target`; returns the llvmlite ModuleRef."""
    import llvmlite.binding as llvm

    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    tm = target.target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = False
    pto.slp_vectorization = False
    pto.loop_unrolling = True
    pto.loop_interleaving = False
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


class LLVMIRTarget(Target):
    """`nasir-opt -t llvm`: LLVM IR text of a module lowered by convert-loops-to-llvm."""

    name = "llvm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        print(to_llvm_ir(module), file=output)
