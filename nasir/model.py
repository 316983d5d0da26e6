"""`Model`: a network as nasir IR plus its weight store.

The IR is a `builtin.module` holding `func.func @main`; weights are `nn.weight` ops naming entries of
a `WeightStore` (name -> float32 numpy array). The store is attached to the module (`weights_of`),
so passes running on a bare module (e.g. from `nasir-opt`) find it too. Arrays in a store are never
mutated in place: a pass that changes a weight stores a new array, so clones can share arrays.

On disk a model is `NAME.mlir` (IR, weights elided) beside `NAME.npz` (the store), or one `.mlir`
whose `nn.weight` ops carry `dense_resource` blobs (`text(weights=True)`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseResourceAttr, ModuleOp
from xdsl.ir import Operation

from nasir.dialects import nn
from nasir.dialects.module import (
    WeightStore,
    attach_weights,
    io_names,
    io_shapes,
    main_func,
    set_io_names,
    weights_of,
)
from nasir.dialects.shapes import shape_of
from nasir.errors import NasirError, ShapeError
from nasir.lowering.passes import run_pipeline
from nasir.transforms.arch import in_place


class Model:
    """A network: IR module + weight store + names of its inputs and outputs.

    `Model.transform(pipeline)` returns a new model; the original is never changed.
    """

    def __init__(self, module: ModuleOp, weights: WeightStore | None = None,
                 input_names: list[str] | None = None, output_names: list[str] | None = None):
        self.module = module
        if weights is not None:
            attach_weights(module, weights)
        given_in, given_out = io_names(module)
        self.input_names = input_names or given_in
        self.output_names = output_names or given_out
        set_io_names(module, self.input_names, self.output_names)

    # Structure --------------------------------------------------------------------------------
    @property
    def weights(self) -> WeightStore:
        return weights_of(self.module)

    @property
    def func(self) -> func.FuncOp:
        return main_func(self.module)

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return io_shapes(self.module)[0]

    @property
    def output_shapes(self) -> list[tuple[int, ...]]:
        return io_shapes(self.module)[1]

    def ops(self) -> Iterator[Operation]:
        """Ops of @main in program order (weights and the return excluded)."""
        for op in self.func.body.block.ops:
            if not isinstance(op, (nn.WeightOp, func.ReturnOp)):
                yield op

    def clone(self) -> Model:
        return Model(self.module.clone(), WeightStore(self.weights), list(self.input_names), list(self.output_names))

    # Views ------------------------------------------------------------------------------------
    def summary(self):
        """Per-layer table (name, op, output shape, MACs, params); printable, and iterable as rows."""
        from nasir.summary import summarize

        return summarize(self)

    def text(self, weights: bool = False) -> str:
        """The IR as text; with `weights=True` the values travel as `dense_resource` blobs."""
        if not weights:
            return str(self.module)
        return _text_with_blobs(self)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<nasir.Model {len(list(self.ops()))} ops, inputs {self.input_shapes}, outputs {self.output_shapes}>"

    # Transformations --------------------------------------------------------------------------
    def transform(self, pipeline: str) -> Model:
        """Apply a pass pipeline (`nasir-opt -p` spelling) to a copy of the model (with a capacity
        check after it: `nasir.transform`)."""
        out = self.clone()
        with in_place():  # `out` is dropped if a pass fails
            run_pipeline(out.module, pipeline)
        return out

    def at_batch(self, batch: int) -> Model:
        """A copy of the model taking `batch` examples per run, with the same weights (and weight
        names); `NotBatched` when an op does not keep the batch as its first dimension."""
        if self.input_shapes and self.input_shapes[0][0] == batch:
            return self.clone()
        from nasir.transforms.rebatch import rebatch

        out = self.clone()
        rebatch(out.module, batch)
        return out

    def to_torch(self, training: bool = False):
        """A trainable `torch.nn.Module` computing this model on a batch of any size (weights as
        Parameters); in eval mode unless `training` (then batch-norm uses batch statistics)."""
        from nasir.lowering.nest_to_torch.export import to_torch

        return to_torch(self.module, training)

    def to_onnx(self, path: str | Path, opset: int = 17, dynamic_batch: bool = False) -> Path:
        """Write the model as ONNX (via the torch backend); ONNX Runtime gives the same outputs.
        `dynamic_batch`: the file takes a batch of any size (axis 0 named "batch")."""
        from nasir.lowering.nest_to_torch.export import to_onnx

        return to_onnx(self.module, path, opset, dynamic_batch)

    def from_torch(self, program) -> Model:
        """A copy of this model whose weights are those of `program`, a `to_torch()` result that
        may have been trained since; this model is unchanged."""
        from nasir.lowering.nest_to_torch.export import from_torch

        return Model(from_torch(self.module, program), None, list(self.input_names), list(self.output_names))

    def save(self, path: str | Path) -> Path:
        """Write `path` (.mlir, weights elided) and the store beside it as .npz."""
        path = Path(path).with_suffix(".mlir")
        path.write_text(self.text() + "\n")
        np.savez(path.with_suffix(".npz"), **self.weights)
        return path


def _text_with_blobs(model: Model) -> str:
    import io

    from xdsl.dialect_interfaces.op_asm import OpAsmDialectInterface
    from xdsl.dialects.builtin import Builtin
    from xdsl.printer import Printer

    module = model.module.clone()
    store = model.weights
    interface = Builtin.get_interface(OpAsmDialectInterface)
    for op in module.walk():
        if isinstance(op, nn.WeightOp):
            if op.key not in store:
                raise NasirError(f"weight '{op.key}' is not in the weight store")
            handle = interface.declare_resource(op.key)
            interface._blob_storage[handle] = "0x04000000" + np.ascontiguousarray(store[op.key], "<f4").tobytes().hex()
            op.properties["value"] = DenseResourceAttr.from_params(handle, op.result.type)
    out = io.StringIO()
    printer = Printer(stream=out)
    printer.print_op(module)
    printer.print_metadata([Builtin])
    for key in list(interface._blob_storage):
        interface._blob_storage.pop(key)
    return out.getvalue()


def load_text(path: str | Path, weights: str | Path | None = None) -> Model:
    """Read a model written by `Model.save` or `Model.text(weights=True)`."""
    from nasir.dialects.context import parse_module

    path = Path(path)
    module, blobs = parse_module(path.read_text(), str(path))
    npz = Path(weights) if weights else path.with_suffix(".npz")
    return Model(module, collect_weights(module, blobs, npz if npz.exists() else None))


def collect_weights(module: ModuleOp, blobs: dict[str, np.ndarray], npz: str | Path | None = None) -> WeightStore:
    """The weight store of a parsed module: its `dense_resource` blobs (taken out of the IR) plus `npz`."""
    store = WeightStore(blobs)
    if npz is not None:
        with np.load(npz) as data:
            store.update({k: data[k] for k in data.files})
    for op in module.walk():
        if isinstance(op, nn.WeightOp):
            if op.value is not None:
                op.properties.pop("value")
            if op.key in store and tuple(store[op.key].shape) != shape_of(op.result):
                raise ShapeError(f"weight '{op.key}' has shape {store[op.key].shape}, IR says {shape_of(op.result)}")
    return store
