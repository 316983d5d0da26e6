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

stdout carries the output (IR) only: analyses (print-capacity, --time-passes) write to stderr, and so
does the progress of the passes and of `-t llvm` (on a terminal only). `--help` lists nasir's passes;
`--xdsl-passes` lists xDSL's, which work too. A reader that closes the pipe (`| head`) ends
nasir-opt quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from collections.abc import Callable
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

from nasir.console import ToolConsole, end_on_closed_pipe, fail, status_on_terminal
from nasir.errors import FrontendError, NasirError, PassError


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


class WholeNames(argparse.HelpFormatter):
    """`--help` wrapped between words only: a pass name (`print-capacity`) is never split at a hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class ListXdslPasses(argparse.Action):
    """`--xdsl-passes`: print the names of xDSL's own passes, one a line, and exit."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from xdsl.universe import Universe

        from nasir.lowering.passes import available_passes

        ours = available_passes()
        print("\n".join(sorted(n for n in Universe.get_multiverse().all_passes if n not in ours)))
        parser.exit()


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
        arg_parser.formatter_class = WholeNames
        arg_parser.add_argument("--weights", metavar="FILE.npz",
                                help="weight store for a .mlir input (as written by Model.save)")
        arg_parser.add_argument("--print-weights", action="store_true",
                                help="print nn.weight values as dense_resource blobs")
        from nasir.lowering.passes import available_passes

        passes = next(a for a in arg_parser._actions if a.dest == "passes")
        passes.help = (f"pass pipeline, the spelling Model.transform takes; nasir's passes: "
                       f"{', '.join(sorted(available_passes()))} (xDSL's own, such as cse and dce, work too: "
                       f"see --xdsl-passes)")
        arg_parser.add_argument("--xdsl-passes", action=ListXdslPasses, help="list xDSL's passes and exit")
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
    def run(self):
        with status_on_terminal(STDERR, "nasir-opt: reading the input") as self.show_progress:
            super().run()

    def setup_pipeline(self):
        try:
            self.pipeline = PassPipeline.parse_spec(self.available_passes, self.args.passes, self._between_passes)
        except (Exception, ArgSpecParseError) as e:  # xDSL's pipeline errors (lexer ones are BaseException)
            raise PassError(f"bad pass pipeline '{self.args.passes}': {e}") from None
        self._pass_started, self._passes_done = time.perf_counter(), 0

    def _between_passes(self, done: ModulePass | None, module: Operation, next_pass: ModulePass | None) -> None:
        """xDSL's callback with its timing on stderr, and the pass to come shown on a terminal."""
        if self.args.time_passes and done is not None:
            print(f"Pass {done.name} took {time.perf_counter() - self._pass_started} seconds", file=sys.stderr)
        if not self.args.disable_verify:
            module.verify()
        if done and next_pass and self.args.print_between_passes:
            print(f"IR after {done.name}:")
            Printer(stream=sys.stdout).print_op(module)
            print("\n\n\n")
        if next_pass is not None:
            self._passes_done += done is not None
            self.show_progress(f"nasir-opt: pass {self._passes_done + 1}/{len(self.pipeline.passes)}: {next_pass.name}")
        self._pass_started = time.perf_counter()

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
        self.show_progress(f"nasir-opt: writing the {self.args.target} output")
        if not self.args.print_weights:
            return super().output_resulting_program(prog)
        from nasir.model import Model

        return Model(prog).text(weights=True) + "\n"


STDERR = ToolConsole(stderr=True, highlight=False)


def main(args: list[str] | None = None) -> None:
    try:
        NasirOptMain(description="nasir optimizer driver: nasir IR or ONNX in, transformed IR out",
                     args=args).run()
    except BrokenPipeError:  # `nasir-opt model.onnx | head`: the reader is gone, so is the rest
        end_on_closed_pipe()
    except NasirError as e:
        fail("nasir-opt", e)
    except ParseError as e:
        sys.exit(str(e))  # keeps the caret diagnostic
    except DiagnosticException as e:  # verifier failures outside --verify-diagnostics
        fail("nasir-opt", str(e).strip().splitlines()[0])


if __name__ == "__main__":
    main()
