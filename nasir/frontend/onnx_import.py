"""ONNX frontend: an .onnx file -> `nasir.Model` (nn dialect + weight store).

First stage of the data flow (ONNX -> nn -> nest -> ...). The graph is walked in order; each value
is either an SSA value of `func.func @main` or a numpy array (initializers, `Constant` nodes and
anything folded from constants by `folding`). Nodes whose inputs are all constants are folded;
the rest go through `onnx_ops.CONVERTERS`, which emit nn ops. A constant becomes an `nn.weight` op
(and a weight store entry) only when a real op reads it as a tensor, so integer shape tensors never
reach the IR. Shapes are nasir's own: nn op builders infer every result type.

    graph (x: 1x3x8x8) { y = Conv(x, W, B); z = Relu(y) }     W, B initializers
    ->
    func.func @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32> {
      %0 = nn.weight {name = "W"} : tensor<4x3x3x3xf32>
      %1 = nn.weight {name = "B"} : tensor<4xf32>
      %2 = nn.conv2d %x, %0, %1 {name = "conv", ...}
      %3 = nn.relu %2 {name = "relu"}
      func.return %3
    }

Every failure is a `FrontendError` (unsupported op: `UnsupportedOpError`; dynamic dims without
`input_shapes`: `ShapeError`) raised before anything is returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from nasir.dialects import nn
from nasir.dialects.module import WeightStore, sanitize
from nasir.dialects.shapes import shape_of, tensor
from nasir.errors import FrontendError, ShapeError, UnsupportedOpError
from nasir.frontend.folding import FOLDERS, StaticShape, attributes, fold
from nasir.frontend.onnx_ops import CONVERTERS
from nasir.model import Model

InputShapes = dict[str, Sequence[int]] | Sequence[Sequence[int]] | None

MIN_OPSET = 6


def import_onnx(path: str | Path, input_shapes: InputShapes = None) -> Model:
    """Import the ONNX model at `path` (opsets 6-21); `input_shapes` fixes dynamic input dims
    (`{"input": (1, 3, 224, 224)}`, or a list of shapes in input order)."""
    proto = _load(Path(path))
    return Importer(proto, str(path)).run(input_shapes)


def supported_ops() -> list[str]:
    return sorted(set(CONVERTERS) | set(FOLDERS))


def _load(path: Path):
    import onnx
    from google.protobuf.message import DecodeError

    if not path.exists():
        raise FrontendError(f"{path}: no such file")
    try:
        proto = onnx.load(str(path), load_external_data=True)
    except (DecodeError, ValueError, OSError) as e:
        raise FrontendError(f"{path}: not a valid ONNX model (truncated or not ONNX?): {_first_line(e)}") from None
    if not proto.graph.node and not proto.graph.output:
        raise FrontendError(f"{path}: not a valid ONNX model (the graph is empty)")
    try:  # ONNX's own verdict, as ONNX Runtime's: the graph, then types and shapes inferred strictly
        onnx.checker.check_model(str(path), full_check=True)  # by path: also works for models over 2 GB
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as e:
        raise FrontendError(f"{path}: ONNX's checker rejects it: {_first_line(e)}") from None
    return proto


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class Importer:
    """State of one import: the value environment, the block being built, names in use."""

    def __init__(self, proto, source: str):
        self.proto = proto
        self.graph = proto.graph
        self.source = source
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.env: dict[str, SSAValue | np.ndarray] = {}
        self.materialized: dict[str, SSAValue] = {}
        self.store = WeightStore()
        self.ops: list[Operation] = []
        self.layer_names: set[str] = set()
        self.read_names = {name for node in self.graph.node for name in node.input} | \
            {o.name for o in self.graph.output}
        """Values some node or the graph's outputs read (an output no one reads may be left undefined)."""

    # Driver -----------------------------------------------------------------------------------
    def run(self, input_shapes: InputShapes) -> Model:
        if self.opset < MIN_OPSET:
            raise FrontendError(f"{self.source}: opset {self.opset} is too old; nasir reads opsets "
                                f"{MIN_OPSET} and newer (re-export with opset >= 9)")
        self._check_supported()
        block = Block(arg_types=[])
        self._bind_inputs(block, input_shapes)
        for node in self.graph.node:
            self._convert(node)
        results = [self._output(o.name) for o in self.graph.output]
        for op in self.ops:
            block.add_op(op)
        block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp("main", ([a.type for a in block.args], [r.type for r in results]), Region(block))
        module = ModuleOp([fn])
        try:
            module.verify()
        except VerifyException as e:
            raise FrontendError(f"{self.source}: imported IR does not verify: {e}") from None
        inputs = [i.name for i in self._graph_inputs()]
        return Model(module, self.store, inputs, [o.name for o in self.graph.output])

    def _check_supported(self) -> None:
        known = set(CONVERTERS) | set(FOLDERS)
        for node in self.graph.node:
            if node.domain not in ("", "ai.onnx") or node.op_type not in known:
                kind = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
                raise UnsupportedOpError(
                    f"{self.source}: unsupported ONNX op '{kind}' (node '{node.name or '<unnamed>'}'); "
                    f"supported op types: {', '.join(supported_ops())}")

    def _graph_inputs(self):
        initializers = {t.name for t in self.graph.initializer}
        # Older exporters list weights as graph inputs too: those are weights, not model inputs.
        return [i for i in self.graph.input if i.name not in initializers]

    def _bind_inputs(self, block: Block, input_shapes: InputShapes) -> None:
        from onnx import TensorProto, numpy_helper

        for t in self.graph.initializer:
            self.env[t.name] = numpy_helper.to_array(t)
        inputs = self._graph_inputs()
        shapes = _requested_shapes(inputs, input_shapes)
        for info in inputs:
            ttype = info.type.tensor_type
            if not info.type.HasField("tensor_type"):
                raise FrontendError(f"input '{info.name}' is not a tensor")
            if ttype.elem_type not in (TensorProto.FLOAT, TensorProto.DOUBLE):
                raise FrontendError(f"input '{info.name}' has element type "
                                    f"{TensorProto.DataType.Name(ttype.elem_type)}; nasir computes in float32 "
                                    f"(float64 inputs are read as float32): export the model with float inputs")
            shape = _static_shape(info, shapes.get(info.name))
            check_size(shape, f"input '{info.name}'")
            self.env[info.name] = block.insert_arg(tensor(shape), len(block.args))

    def _convert(self, node) -> None:
        name = node.name or node.op_type
        attrs = attributes(node)
        inputs = [self.env.get(i) if i else None for i in node.input]
        missing = [i for i, v in zip(node.input, inputs) if i and v is None]
        if missing:
            raise FrontendError(f"node '{name}' ({node.op_type}) reads '{missing[0]}', which no earlier node defines")
        try:
            if node.op_type in FOLDERS and self._foldable(node.op_type, inputs):
                args = [StaticShape(shape_of(v)) if isinstance(v, SSAValue) else v for v in inputs]
                outputs = fold(node, attrs, args, self.opset)
            elif node.op_type in CONVERTERS:
                outputs = CONVERTERS[node.op_type](self, node, attrs, inputs)
            else:
                raise UnsupportedOpError(
                    f"{node.op_type} node '{name}' computes on a runtime tensor; nasir supports "
                    f"{node.op_type} only on constants (shape arithmetic)")
        except UnsupportedOpError:
            raise
        except (FrontendError, VerifyException, ValueError, IndexError, KeyError, TypeError) as e:
            raise FrontendError(f"node '{name}' ({node.op_type}): {e}") from None
        for out, value in zip(node.output, outputs):
            if out:
                self.env[out] = value

    @staticmethod
    def _foldable(op_type: str, inputs: list) -> bool:
        present = [v for v in inputs if v is not None]
        if op_type == "Shape":
            return True
        return all(isinstance(v, np.ndarray) for v in present)

    def _output(self, name: str) -> SSAValue:
        if name not in self.env:
            raise FrontendError(f"graph output '{name}' is never computed")
        return self.value(name)

    # Services for the converters --------------------------------------------------------------
    def value(self, name: str) -> SSAValue:
        """The SSA value of ONNX value `name`; a constant becomes an nn.weight (once per name)."""
        v = self.env[name]
        if isinstance(v, SSAValue):
            return v
        if name not in self.materialized:
            self.materialized[name] = self.weight(v, name)
        return self.materialized[name]

    def const(self, name: str) -> np.ndarray | None:
        """The array of ONNX value `name` if it is a constant, else None ('' -> None)."""
        v = self.env.get(name) if name else None
        return v if isinstance(v, np.ndarray) else None

    def require_const(self, node, name: str, what: str) -> np.ndarray:
        v = self.const(name)
        if v is None:
            raise UnsupportedOpError(f"{node.op_type} node '{node.name or node.op_type}': {what} must be "
                                     f"a constant, but '{name}' is computed at run time")
        return v

    def weight(self, array: np.ndarray, name: str) -> SSAValue:
        """A new nn.weight op holding `array` (as float32) under a unique name derived from `name`."""
        if array.dtype.kind != "f":
            raise FrontendError(f"constant '{name}' of dtype {array.dtype} is read as a float tensor")
        key = self.store.add(name, np.asarray(array, dtype=np.float32))
        op = nn.WeightOp.make(key, array.shape)
        self.ops.append(op)
        return op.result

    def emit(self, op: Operation, node, suffix: str = "") -> SSAValue:
        """Append an nn op named after `node` (unique; op type when the node has no name)."""
        base = sanitize(node.name) or node.op_type.lower()
        base = f"{base}.{suffix}" if suffix else base
        name, n = base, 1
        while name in self.layer_names:
            name, n = f"{base}_{n}", n + 1
        self.layer_names.add(name)
        for result in op.results:
            check_size(shape_of(result), f"{node.op_type} node '{node.name or node.op_type}'")
        self.ops.append(op.named(name))
        return op.result


MAX_ELEMENTS = 2**31 - 1
"""Elements a tensor may hold: kernels index with 32-bit lanes."""


def check_size(shape: tuple[int, ...], what: str) -> None:
    """A ShapeError naming `what` if a tensor of `shape` holds more than MAX_ELEMENTS."""
    if math.prod(shape) > MAX_ELEMENTS:
        raise ShapeError(f"{what}: a tensor of shape {list(shape)} has more than 2^31 - 1 elements")


def _requested_shapes(inputs, input_shapes: InputShapes) -> dict[str, tuple[int, ...]]:
    names = [i.name for i in inputs]
    if input_shapes is None:
        return {}
    if isinstance(input_shapes, dict):
        unknown = [n for n in input_shapes if n not in names]
        if unknown:
            raise ShapeError(f"input_shapes names {unknown}, but the model's inputs are {names}")
        return {n: tuple(int(d) for d in s) for n, s in input_shapes.items()}
    shapes = list(input_shapes)
    if shapes and all(isinstance(d, (int, np.integer)) for d in shapes):
        shapes = [shapes]  # one shape for a one-input model
    if len(shapes) != len(names):
        raise ShapeError(f"input_shapes has {len(shapes)} shape(s) but the model has {len(names)} input(s) {names}")
    return {n: tuple(int(d) for d in s) for n, s in zip(names, shapes)}


def _static_shape(info, requested: tuple[int, ...] | None) -> tuple[int, ...]:
    dims = info.type.tensor_type.shape.dim
    declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
    has_shape = info.type.tensor_type.HasField("shape")
    if requested is not None:
        if has_shape and len(requested) != len(declared):
            raise ShapeError(f"input '{info.name}' has rank {len(declared)}, but input_shapes gives {list(requested)}")
        for i, (want, have) in enumerate(zip(requested, declared)):
            if have is not None and want != have:
                raise ShapeError(f"input '{info.name}' dim {i} is {have} in the model, but input_shapes gives {want}")
        if any(d <= 0 for d in requested):
            raise ShapeError(f"input_shapes for '{info.name}' must be positive, got {list(requested)}")
        return tuple(requested)
    if not has_shape:
        raise ShapeError(f"input '{info.name}' has no shape in the model; pass "
                         f"input_shapes={{{info.name!r}: (...)}} to give it one")
    for i, (d, have) in enumerate(zip(dims, declared)):
        if have is None:
            label = f"'{d.dim_param}'" if d.dim_param else "unknown"
            example = tuple(1 if x is None else x for x in declared)
            raise ShapeError(f"input '{info.name}' has a dynamic dim {i} ({label}); nasir needs static shapes: "
                             f"pass input_shapes={{{info.name!r}: {example}}} (with the sizes you want)")
    return tuple(declared)
