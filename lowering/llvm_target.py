"""The host CPU as an LLVM target: triple, CPU name, features, vector width; LLVM IR printing.

Everything target-specific the llvm backend decides is read from here (never hard-coded): the
default schedule asks for `vector_width`, the JIT and `exe.save` for the target machine.
`LLVMIRTarget` is nasir-opt's `-t llvm`: it converts a module at the llvm dialect level (after
convert-loops-to-llvm) to LLVM IR text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target


@dataclass(frozen=True)
class HostTarget:
    triple: str
    cpu: str
    features: str

    @property
    def vector_width(self) -> int:
        """float32 lanes of the widest vector registers."""
        if "+avx512f" in self.features.split(","):
            return 16
        if "+avx" in self.features.split(","):
            return 8
        return 4

    def target_machine(self, opt: int = 3, jit: bool = False):
        """For `jit`, LLVM's JIT code model: MCJIT places code anywhere in the address space, so
        32-bit relocations to libgomp/libm (the small model) can overflow once memory grows."""
        import llvmlite.binding as llvm

        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                            reloc="pic", codemodel="jitdefault" if jit else "default")


@cache
def host_target() -> HostTarget:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    return HostTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), features)


class LLVMIRTarget(Target):
    """`nasir-opt -t llvm`: LLVM IR text of a module lowered by convert-loops-to-llvm."""

    name = "llvm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from nasir.lowering.llvm_ir import to_llvm_ir

        print(to_llvm_ir(module), file=output)
