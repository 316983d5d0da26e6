"""What a nasir module carries besides its ops: the weight store, `@main`, names.

The IR is a `builtin.module` holding `func.func @main`; weights are `nn.weight` ops naming entries of
a `WeightStore` (name -> numpy array). The store lives outside the IR, as MLIR keeps
`dense_resource` blobs outside it, and is looked up by module (`weights_of`), so passes running on a
bare module (from `nasir-opt`, say) find it too. Arrays in a store are never mutated in place: a
pass that changes a weight stores a new array, so clones can share arrays.

    %w = nn.weight {name = "conv1.weight"} : tensor<64x3x7x7xf32>   // weights_of(module)["conv1.weight"]
"""

from __future__ import annotations

import re
import weakref

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from nasir.dialects.attributes import INPUTS, OUTPUTS
from nasir.dialects.shapes import shape_of
from nasir.errors import NasirError


class WeightStore(dict[str, np.ndarray]):
    """Weights of a model by name: float32 (or int64 for index tensors) numpy arrays."""

    def add(self, name: str, value: np.ndarray) -> str:
        """Store `value` under a unique, printable name derived from `name`; returns the name used."""
        base = sanitize(name) or "w"
        key, n = base, 1
        while key in self:
            key, n = f"{base}_{n}", n + 1
        self[key] = np.require(value, requirements="C")  # not ascontiguousarray: a scalar stays rank 0
        return key


def sanitize(name: str) -> str:
    """A name that is safe in IR and on the command line: [A-Za-z0-9_.] only, not starting with '.'."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name).strip("_.")


_STORES: "weakref.WeakKeyDictionary[ModuleOp, WeightStore]" = weakref.WeakKeyDictionary()


def weights_of(module: ModuleOp) -> WeightStore:
    """The weight store attached to `module` (an empty one is attached if there is none)."""
    store = _STORES.get(module)
    if store is None:
        store = _STORES[module] = WeightStore()
    return store


def attach_weights(module: ModuleOp, store: WeightStore) -> None:
    _STORES[module] = store


def main_func(module: ModuleOp) -> func.FuncOp:
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == "main":
            return op
    raise NasirError("the module has no func.func @main")


def io_names(module: ModuleOp) -> tuple[list[str], list[str]]:
    """Names of @main's inputs and outputs: the module's `nasir.inputs` / `nasir.outputs`, else
    `input` / `output` (numbered when there are several)."""
    fn_type = main_func(module).function_type
    names = []
    for key, base, n in ((INPUTS, "input", len(fn_type.inputs)), (OUTPUTS, "output", len(fn_type.outputs))):
        names.append(key.get(module, None) or [f"{base}{i}" if n > 1 else base for i in range(n)])
    return names[0], names[1]


def set_io_names(module: ModuleOp, inputs: list[str], outputs: list[str]) -> None:
    INPUTS.set(module, inputs)
    OUTPUTS.set(module, outputs)


def io_shapes(module: ModuleOp) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Shapes of @main's inputs and outputs."""
    fn_type = main_func(module).function_type
    return [shape_of(t) for t in fn_type.inputs], [shape_of(t) for t in fn_type.outputs]
