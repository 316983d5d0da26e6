"""`nasir-opt`: xDSL's opt driver with nasir's dialects, passes, ONNX frontend and targets.

It is the command-line face of `Model.transform`: the same pipeline spelling, run on one file.

    nasir-opt model.onnx                             # the nn IR of an ONNX file
    nasir-opt model.onnx -p convert-nn-to-nest       # the nest IR
    nasir-opt model.mlir --weights model.npz -p convert-nn-to-nest --print-weights
    nasir-opt model.onnx -p "$PIPELINE" -t llvm --cpu znver3   # LLVM IR for an AVX2 CPU
    nasir-opt model.onnx -p 'convert-nn-to-nest,group{factor=2}' -t tvm   # TVMScript: Relax + PrimFuncs

Inputs are `.mlir` (nasir IR; `--weights FILE.npz` supplies the weight store, `dense_resource`
blobs in the file are taken into it) or `.onnx` (imported by `nasir.frontend.onnx_import`). The store
rides along with the module (`nasir.model.weights_of`) so passes that need weights find it. `--cpu`
marks the module with the CPU its passes and `-t llvm` compile for (`nasir.target`, see
`nasir.lowering.target`); without it a module keeps its own mark, else the host's CPU.
User mistakes print one `nasir-opt: error: ...` line and exit 1; parse errors keep xDSL's caret
diagnostics.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

from nasir.errors import FrontendError, NasirError, PassError
from nasir.tools.console import fail


def _mlir_target() -> type[Target]:
    from xdsl.targets.mlir import MLIRTarget

    return MLIRTarget


def _llvm_target() -> type[Target]:
    from nasir.lowering.loops_to_llvm.llvm_ir import LLVMIRTarget

    return LLVMIRTarget


def _tvm_target() -> type[Target]:
    from nasir.lowering.nest_to_tvm.program import TVMScriptTarget

    return TVMScriptTarget


TARGETS: dict[str, Callable[[], type[Target]]] = {"mlir": _mlir_target, "llvm": _llvm_target, "tvm": _tvm_target}
"""Output targets of `-t` by name: a factory returning an xDSL `Target` class (printing the module
to a text stream). Backends that emit text (LLVM IR) add themselves here."""


class NasirOptMain(xDSLOptMain):
    """xDSLOptMain with nasir's dialects, passes (after xDSL's: a nasir name wins), frontends, targets."""

    version_format = "nasir-opt on xDSL {xdsl_version}"

    def register_all_dialects(self):
        """xDSL's dialects, with nasir's versions where it has its own (llvm: vector comparisons)."""
        from xdsl.universe import Universe

        from nasir.dialects.context import dialects

        ours = {dialect.name: (lambda d=dialect: d) for dialect in dialects()}
        for name, factory in {**Universe.get_multiverse().all_dialects, **ours}.items():
            self.ctx.register_dialect(name, ours.get(name, factory))

    def register_all_passes(self):
        super().register_all_passes()
        from nasir.lowering.passes import available_passes

        for name, cls in available_passes().items():
            self.register_pass(name, lambda cls=cls: cls)

    def register_all_targets(self):
        self.available_targets.update(TARGETS)

    def register_all_frontends(self):
        self.available_frontends["mlir"] = self._parse_mlir
        self.available_frontends["onnx"] = self._import_onnx

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument("--weights", metavar="FILE.npz",
                                help="weight store for a .mlir input (as written by Model.save)")
        arg_parser.add_argument("--print-weights", action="store_true",
                                help="print nn.weight values as dense_resource blobs")
        from nasir.lowering.passes import available_passes

        passes = next(a for a in arg_parser._actions if a.dest == "passes")
        passes.help = (f"pass pipeline, the spelling Model.transform takes; nasir's passes: "
                       f"{', '.join(sorted(available_passes()))} (xDSL's own, such as cse and dce, work too)")
        arg_parser.add_argument("--cpu", metavar="NAME",
                                help="compile for this CPU (an LLVM CPU name: znver3, x86-64-v3, skylake-avx512, ..., "
                                     "or 'host'); default: the module's nasir.target, else NASIR_CPU, else the host")
        arg_parser.add_argument("--capacity-check", metavar="DATA",
                                help="reject the pipeline's result if its Fisher Potential at initialisation "
                                     "is below the input's (DATA: CIFAR-10 directory, .npz, or 'synthetic')")

    # Input ------------------------------------------------------------------------------------
    def get_input_stream(self) -> tuple[IO[bytes], str]:
        path = self.args.input_file
        if path is not None and not os.path.isfile(path):
            raise FrontendError(f"{path}: no such file")
        return super().get_input_stream()

    def prepare_input(self):
        try:
            return super().prepare_input()
        except ValueError as e:  # xDSL's "Unrecognized file extension"
            raise FrontendError(f"{self.get_input_name()}: {e} (nasir-opt reads .mlir and .onnx)") from None

    def _parse_mlir(self, chunk: IO[bytes]) -> ModuleOp:
        """Parse nasir IR; verification follows in the pass pipeline (so --verify-diagnostics works)."""
        from nasir.dialects.context import resource_blobs
        from nasir.dialects.module import attach_weights
        from nasir.model import collect_weights

        module = Parser(self.ctx, chunk.read(), self.get_input_name()).parse_module(
            not self.args.no_implicit_module)
        npz = self.args.weights
        if npz is not None and not os.path.isfile(npz):
            raise FrontendError(f"{npz}: no such weights file")
        try:
            store = collect_weights(module, resource_blobs(module), npz)
        except (OSError, ValueError) as e:
            raise FrontendError(f"{npz}: not a weights .npz file ({e})") from None
        attach_weights(module, store)
        return module

    def _import_onnx(self, chunk: IO[bytes]) -> ModuleOp:
        from nasir.frontend.onnx_import import import_onnx

        chunk.close()
        if self.args.input_file is None:
            raise FrontendError("the onnx frontend reads a file: pass its path")
        if self.args.weights is not None:
            raise FrontendError("--weights is for .mlir inputs; an ONNX file carries its own weights")
        return import_onnx(self.args.input_file).module  # the Model attached its store to the module

    # Passes and output ------------------------------------------------------------------------
    def setup_pipeline(self):
        try:
            super().setup_pipeline()
        except (Exception, ArgSpecParseError) as e:  # xDSL's pipeline errors (lexer ones are BaseException)
            raise PassError(f"bad pass pipeline '{self.args.passes}': {e}") from None

    def apply_passes(self, prog: ModuleOp):
        if self.args.cpu is not None:
            from nasir.lowering.target import set_target

            set_target(prog, self.args.cpu)
        if self.args.capacity_check is None:
            return super().apply_passes(prog)
        from nasir.dialects.module import WeightStore, weights_of
        from nasir.fisher import require_capacity
        from nasir.model import Model

        original = Model(prog.clone(), WeightStore(weights_of(prog)))
        super().apply_passes(prog)
        data = None if self.args.capacity_check == "synthetic" else self.args.capacity_check
        result = require_capacity(Model(prog), original, self.args.passes, data)
        print(f"nasir-opt: capacity check passed: {result.reason}", file=sys.stderr)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        if not self.args.print_weights:
            return super().output_resulting_program(prog)
        from nasir.model import Model

        return Model(prog).text(weights=True) + "\n"


def main(args: list[str] | None = None) -> None:
    try:
        NasirOptMain(description="nasir optimizer driver: nasir IR or ONNX in, transformed IR out",
                     args=args).run()
    except BrokenPipeError:  # `nasir-opt model.onnx | head`: the reader is gone, so is the rest
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except NasirError as e:
        fail("nasir-opt", e)
    except ParseError as e:
        sys.exit(str(e))  # keeps the caret diagnostic
    except DiagnosticException as e:  # verifier failures outside --verify-diagnostics
        fail("nasir-opt", str(e).strip().splitlines()[0])


if __name__ == "__main__":
    main()
