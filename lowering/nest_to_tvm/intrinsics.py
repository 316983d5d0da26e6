"""TVM's tensor intrinsics imported at the cost of parsing them.

meta_schedule imports `tvm.s_tir.tensor_intrin` when it makes a tuning task and again in every
builder process (a new pool per round of candidates). That module parses 248 TVMScript functions,
and the parser calls `inspect.stack()` for each; `inspect.getmodule` then scans all of
`sys.modules` for every frame whose file is not on disk (`<frozen importlib._bootstrap>`, ...):
40 s per import on the machines measured, most of a 2-trial tuning's five minutes. Remembering
those lookups for the length of the import makes it about 10 s (the parse itself).

`import_tensor_intrinsics` is the builder pool's initializer too. cloudpickle ships it by value
(this module imports nothing of nasir), so a builder process does not import nasir to run it.
"""

from __future__ import annotations

import importlib
import inspect
import sys

import cloudpickle

TENSOR_INTRIN = "tvm.s_tir.tensor_intrin"


def import_tensor_intrinsics() -> None:
    """Import `tvm.s_tir.tensor_intrin` (once per process) with `inspect.getmodule` remembering,
    for a frame, what it found for the frame's file."""
    if TENSOR_INTRIN in sys.modules:
        return
    scan = inspect.getmodule
    found: dict[str, object] = {}

    def getmodule(obj, _filename=None):
        if _filename is None or not inspect.isframe(obj):
            return scan(obj, _filename)
        if _filename not in found:
            found[_filename] = scan(obj, _filename)
        return found[_filename]

    inspect.getmodule = getmodule
    try:
        importlib.import_module(TENSOR_INTRIN)
    finally:
        inspect.getmodule = scan


cloudpickle.register_pickle_by_value(sys.modules[__name__])
