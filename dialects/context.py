"""The xDSL context nasir parses and rewrites in: nasir's dialects plus the upstream ones it lowers to."""

from __future__ import annotations

import numpy as np
from xdsl.context import Context
from xdsl.dialect_interfaces.op_asm import OpAsmDialectInterface
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.dialects.math import Math
from xdsl.dialects.memref import MemRef
from xdsl.dialects.scf import Scf
from xdsl.dialects.vector import Vector
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from nasir.dialects import nn
from nasir.dialects.llvm import LLVM
from nasir.dialects.loops import LOOPS
from nasir.dialects.nest import NEST
from nasir.dialects.nn import NN
from nasir.dialects.shapes import shape_of
from nasir.errors import NasirError


class IRError(NasirError):
    """Textual IR that does not parse or verify."""


def dialects():
    """Every dialect a nasir module may hold, from the nn level down to llvm."""
    return [Builtin, Func, Arith, Math, MemRef, Scf, Vector, LLVM, NN, NEST, LOOPS]


def make_context() -> Context:
    ctx = Context()
    for d in dialects():
        ctx.load_dialect(d)
    return ctx


def parse_module(text: str, name: str = "<input>") -> tuple[ModuleOp, dict[str, np.ndarray]]:
    """Parse and verify IR text; returns the module and any `dense_resource` weight blobs in it."""
    ctx = make_context()
    try:
        module = Parser(ctx, text, name).parse_module()
        module.verify()
    except (ParseError, VerifyException) as e:
        raise IRError(f"{name}: {e}") from None
    return module, resource_blobs(module)


def resource_blobs(module: ModuleOp) -> dict[str, np.ndarray]:
    """Values of the `nn.weight` ops that carry a `dense_resource` blob, by weight name.

    The blobs are taken out of xDSL's process-wide resource table (so it does not grow with every
    parsed model, and printing the model again reuses the weight names as resource keys).
    """
    interface = Builtin.get_interface(OpAsmDialectInterface)
    blobs, handles = {}, set()
    for op in module.walk():
        if isinstance(op, nn.WeightOp) and op.value is not None:
            handles.add(op.value.resource_handle.data)
            hexdata = interface.lookup(op.value.resource_handle.data)
            if hexdata:
                raw = bytes.fromhex(hexdata[2 + 8:])  # skip "0x" and the 4-byte alignment header
                blobs[op.key] = np.frombuffer(raw, "<f4").reshape(shape_of(op.result)).copy()
    for handle in handles:
        interface._blob_storage.pop(handle, None)
    return blobs
