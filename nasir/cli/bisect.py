"""`nasir check MODEL --bisect`: the first node whose output differs from ONNX Runtime's.

Node by node in graph order, the prefix graph that computes the node's outputs (the nodes they
depend on, with those outputs as the graph's) is compiled as the whole model was and compared with
ONNX Runtime on the same inputs. The first node whose prefix differs is named with the shapes of
its inputs and outputs and the lowering choices made for the nest that computes it
(`nasir.fuzz.choices`): as the prefix's output and, under the same layer name, in the whole
model. A prefix nasir refuses (a node whose output it cannot return alone) is passed over.

    first = first_difference("vgg_block.onnx", inputs, cpu="x86-64-v4")
    first.node, first.op_type          # ('/5/Conv', 'Conv')
    first.describe()
    # node '/5/Conv' (Conv): inputs [1, 64, 8, 8], [128, 64, 3, 3], [128] -> outputs [1, 128, 8, 8];
    # max abs diff 0.144; lowered as channel (mac), plain -> plain, bias; in the whole model: ...
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx.utils import Extractor

import nasir
from nasir.errors import FrontendError, LoweringError
from nasir.fuzz.choices import NestChoice, lowering_choices
from nasir.reference import compare, onnxruntime_outputs


@dataclass(frozen=True)
class Difference:
    """The first node whose prefix graph disagrees with ONNX Runtime."""

    node: str
    op_type: str
    input_shapes: list[list[int]]
    output_shapes: list[list[int]]
    max_abs_diff: float
    choice: NestChoice | None
    whole_model_choice: NestChoice | None

    def describe(self) -> str:
        shapes = lambda ss: ", ".join(str(s) for s in ss)  # noqa: E731
        text = (f"node '{self.node}' ({self.op_type}): inputs {shapes(self.input_shapes)} -> outputs "
                f"{shapes(self.output_shapes)}; max abs diff {self.max_abs_diff:.3g}")
        if self.choice is not None:
            text += f"; lowered as {self.choice}"
        if self.whole_model_choice is not None:
            text += f"; in the whole model: {self.whole_model_choice}"
        return text


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    graph = onnx.shape_inference.infer_shapes(model).graph
    infos = [*graph.input, *graph.value_info, *graph.output]
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in infos}
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    return shapes


def first_difference(path: str | Path, inputs: Sequence[np.ndarray], cpu: str | None = None,
                     compile_options: dict | None = None,
                     on_node: Callable[[int, int, str], None] | None = None) -> Difference | None:
    """The first node of the ONNX file at `path` whose output nasir's llvm code (for `cpu`, with
    `compile_options`) computes differently from ONNX Runtime on `inputs`; None when every node
    agrees. `on_node(k, n, name)` is told of each node before it is checked."""
    model = onnx.load(str(path))
    shapes = _shapes(model)
    extractor = Extractor(onnx.shape_inference.infer_shapes(model))
    initializers = {t.name for t in model.graph.initializer}
    input_names = [i.name for i in model.graph.input if i.name not in initializers]
    whole = lowering_choices(nasir.load(path).module, cpu)
    options = {**(compile_options or {}), **({"cpu": cpu} if cpu else {})}
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    with tempfile.TemporaryDirectory(prefix="nasir-bisect-") as tmp:
        for k, node in enumerate(nodes):
            if on_node is not None:
                on_node(k, len(nodes), node.name or node.op_type)
            outputs = [o for o in node.output if o]
            prefix = extractor.extract_model(input_names, outputs)
            prefix_path = Path(tmp) / f"prefix{k}.onnx"
            onnx.save(prefix, prefix_path)
            try:
                sub = nasir.load(prefix_path)
                used = [x for name, x in zip(input_names, inputs) if name in sub.input_names]
                got = nasir.compile(sub, **options)(*used)
            except (FrontendError, LoweringError):
                continue
            result = compare(got, onnxruntime_outputs(prefix_path, used))
            if result.ok:
                continue
            prefix_choices = lowering_choices(sub.module, cpu)
            choice = prefix_choices.nests.get(prefix_choices.outputs[0]) if prefix_choices.outputs else None
            return Difference(node.name or node.op_type, node.op_type,
                              [shapes.get(i, []) for i in node.input if i], [shapes.get(o, []) for o in outputs],
                              result.max_abs_diff, choice, whole.nests.get(choice.layer) if choice else None)
    return None
