"""Random whole CNN graphs as ONNX files, always valid, for differential testing.

`random_case(draw, cpus)` builds a chain or DAG of 2-12 layers from the choices `draw` makes: convs
(1-256 channels, kernels 1-7, strides 1-3, dense, grouped and depthwise), batch norms, ReLU / Clip /
Sigmoid / HardSwish, max and average pools (ceil mode, padding), global pools, residual adds (with
a 1x1 projection where the channels differ), concats, branches from earlier tensors and a gemm head,
on one NCHW input of 1-64 pixels a side; and the compile it is checked with (a CPU of `cpus`, 1 or
2 threads). A layer is drawn only where it is valid (no 2x2 pool on a 1x1 image), and channels are
drawn small enough that a conv stays within `MAX_MACS`. Two kinds of `Draw` make the choices:
`SeededDraw` (the fuzzer, `python -m nasir.fuzz`) and hypothesis's (tests/test_graphs.py, which
shrinks a failure to a small graph).

    case = random_case(SeededDraw(7), ["x86-64-v3", "x86-64-v4"])
    case.model                # onnx.ModelProto (opset 14), input 'x', outputs 'y' [, 'z']
    case.input.shape          # (1, 24, 17, 17)
    case.cpu, case.threads    # ('x86-64-v4', 2)
    case.layers               # ['Conv 24->64 k3 s1 g1', 'Relu', 'MaxPool k2 s2 ceil', ...]
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

T = TypeVar("T")
OPSET = 14
CHANNELS = (1, 2, 3, 4, 6, 8, 12, 16, 16, 24, 32, 32, 40, 48, 64, 64, 72, 96, 100, 128, 128, 192, 256)
"""Channel counts a conv draws from: whole vectors at both widths (16, 32, ...), at AVX2's only
(24, 40, 72), at neither (100, and the small ones); the repeated ones twice as often."""
SIDES = (1, 2, 3, 4, 5, 7, 8, 9, 12, 14, 16, 17, 23, 28, 32, 33, 48, 64)
MAX_MACS = 12_000_000
"""Multiply-accumulates at most of one drawn conv (a checked build runs every access checked)."""
LAYERS = ("conv", "conv", "conv", "depthwise", "grouped", "bn", "act", "act", "maxpool", "maxpool", "avgpool",
          "global", "add", "add", "concat", "branch")
ACTIVATIONS = ("Relu", "Relu", "Clip", "Sigmoid", "HardSwish")


class Draw(Protocol):
    """The choices a graph is made of: hypothesis's draws or a seeded generator's."""

    def integer(self, lo: int, hi: int) -> int: ...

    def pick(self, options: Sequence[T]) -> T: ...


class SeededDraw:
    """Choices from `random.Random(seed)`: the same seed, the same graph."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]


@dataclass
class Tensor:
    """A value of the graph: NCHW (batch 1) or, after a flatten, (1, c) with h = w = 0."""

    name: str
    c: int
    h: int = 0
    w: int = 0


@dataclass
class Case:
    """A drawn graph, its input and the compile it is checked with."""

    model: onnx.ModelProto
    input: np.ndarray
    cpu: str
    threads: int
    layers: list[str]

    @staticmethod
    def of_file(path: str | Path, cpu: str, threads: int) -> Case:
        """The case of a saved graph (a regression), with the input `random_case` gives one."""
        model = onnx.load(str(path))
        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        return Case(model, case_input(dims), cpu, threads, [n.op_type for n in model.graph.node])

    def __repr__(self) -> str:  # what hypothesis prints of a failing case
        return f"Case({' | '.join(self.layers)}; input {list(self.input.shape)}, {self.cpu}, {self.threads} threads)"


def case_input(shape) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


@dataclass
class GraphBuilder:
    """ONNX nodes and initializers as the layers are drawn; weights scaled by 1/sqrt(fan-in) so
    that values stay near 1 through 12 layers."""

    draw: Draw
    nodes: list = field(default_factory=list)
    inits: dict = field(default_factory=dict)
    seen: list[Tensor] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def node(self, op: str, inputs: list[str], c: int, h: int, w: int, label: str = "", **attrs) -> Tensor:
        out = Tensor(f"t{len(self.nodes)}", c, h, w)
        self.nodes.append(helper.make_node(op, inputs, [out.name], name=f"{op.lower()}{len(self.nodes)}", **attrs))
        self.layers.append(label or op)
        if h:
            self.seen.append(out)
        return out

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits[name] = array.astype(np.float32)
        return name

    def conv(self, x: Tensor, o: int, k: int, stride: int = 1, groups: int = 1, pad: int | None = None) -> Tensor:
        pad = k // 2 if pad is None else pad
        pad = max(pad, -(-(k - min(x.h, x.w)) // 2))  # at least one output
        fan_in = x.c // groups * k * k
        name = f"w{len(self.nodes)}"
        w = self.init(name, self.rng.standard_normal((o, x.c // groups, k, k)) / np.sqrt(fan_in))
        b = self.init(name + "b", self.rng.standard_normal(o) * 0.1)
        h, wd = ((s + 2 * pad - k) // stride + 1 for s in (x.h, x.w))
        return self.node("Conv", [x.name, w, b], o, h, wd, f"Conv {x.c}->{o} k{k} s{stride} g{groups} p{pad}",
                         kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4, group=groups)

    def channels(self, x: Tensor, k: int, stride: int, per_group: int = 1) -> list[int]:
        """The counts of CHANNELS a conv of `x` can have within MAX_MACS (at least the smallest)."""
        pixels = max(1, (x.h // stride) * (x.w // stride))
        fit = [o for o in CHANNELS if o * per_group * k * k * pixels <= MAX_MACS]
        return fit or [1]


def _conv(g: GraphBuilder, x: Tensor) -> Tensor:
    k = g.draw.integer(1, 7)
    stride = g.draw.pick((1, 1, 1, 2, 2, 3))
    pad = g.draw.pick((k // 2, k // 2, 0))
    return g.conv(x, g.draw.pick(g.channels(x, k, stride, x.c)), k, stride, pad=pad)


def _grouped(g: GraphBuilder, x: Tensor, depthwise: bool) -> Tensor:
    k, stride = g.draw.pick((1, 3, 3, 5)), g.draw.pick((1, 1, 2))
    if depthwise:
        return g.conv(x, x.c, k, stride, groups=x.c)
    groups = g.draw.pick([d for d in (2, 3, 4, 8, 16, 32) if x.c % d == 0] or [1])
    per_group = g.draw.pick((1, 1, 2, 4))
    return g.conv(x, groups * per_group, k, stride, groups=groups)


def _batch_norm(g: GraphBuilder, x: Tensor) -> Tensor:
    n = f"bn{len(g.nodes)}"
    params = [g.init(n + "s", g.rng.uniform(0.5, 1.5, x.c)), g.init(n + "b", g.rng.standard_normal(x.c) * 0.1),
              g.init(n + "m", g.rng.standard_normal(x.c) * 0.1), g.init(n + "v", g.rng.uniform(0.5, 1.5, x.c))]
    return g.node("BatchNormalization", [x.name, *params], x.c, x.h, x.w)


def _activation(g: GraphBuilder, x: Tensor) -> Tensor:
    op = g.draw.pick(ACTIVATIONS)
    inputs = [x.name]
    if op == "Clip":
        n = f"clip{len(g.nodes)}"
        inputs += [g.init(n + "lo", np.array(-0.5)), g.init(n + "hi", np.array(g.draw.pick((0.5, 6.0))))]
    return g.node(op, inputs, x.c, x.h, x.w)


def _pool(g: GraphBuilder, x: Tensor, op: str) -> Tensor:
    side = min(x.h, x.w)
    k = g.draw.integer(1, min(3, side)) if side > 1 else 1
    stride = g.draw.integer(1, 2)
    pad = g.draw.integer(0, k // 2)
    ceil = g.draw.integer(0, 1)
    h, w = (-(-(s + 2 * pad - k) // stride) + 1 if ceil else (s + 2 * pad - k) // stride + 1 for s in (x.h, x.w))
    if ceil and (h - 1) * stride >= x.h + pad:
        # ONNX Runtime (as torch) drops a last window that would start in the right padding, ONNX's
        # shape inference does not: such a file states a shape its oracle does not compute
        ceil, h, w = 0, (x.h + 2 * pad - k) // stride + 1, (x.w + 2 * pad - k) // stride + 1
    return g.node(op, [x.name], x.c, h, w, f"{op} k{k} s{stride} p{pad}" + (" ceil" if ceil else ""),
                  kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4, ceil_mode=ceil)


def _residual(g: GraphBuilder, x: Tensor) -> Tensor:
    """x + an earlier tensor of its shape, or of its image size through a 1x1 conv to its channels."""
    same = [t for t in g.seen[:-1] if (t.c, t.h, t.w) == (x.c, x.h, x.w) and t is not x]
    other = g.draw.pick(same) if same else None
    if other is None:
        sized = [t for t in g.seen if (t.h, t.w) == (x.h, x.w) and t is not x]
        if not sized:
            return _activation(g, x)
        other = g.conv(g.draw.pick(sized), x.c, 1)
    pair = [x.name, other.name] if g.draw.integer(0, 1) else [other.name, x.name]
    return g.node("Add", pair, x.c, x.h, x.w)


def _concat(g: GraphBuilder, x: Tensor) -> Tensor:
    other = g.draw.pick([t for t in g.seen if (t.h, t.w) == (x.h, x.w)])
    pair = [x, other] if g.draw.integer(0, 1) else [other, x]
    return g.node("Concat", [t.name for t in pair], x.c + other.c, x.h, x.w, axis=1)


def _head(g: GraphBuilder, x: Tensor) -> Tensor:
    """A classifier: a global average pool (or a flatten of a small tensor), then a gemm."""
    if x.c * x.h * x.w > 4096 or g.draw.integer(0, 1):
        x = g.node("GlobalAveragePool", [x.name], x.c, 1, 1)
    flat = g.node("Flatten", [x.name], x.c * x.h * x.w, 0, 0)
    n = g.draw.pick((1, 10, 16, 100))
    w = g.init(f"fc{len(g.nodes)}", g.rng.standard_normal((n, flat.c)) / np.sqrt(flat.c))
    b = g.init(f"fc{len(g.nodes)}b", g.rng.standard_normal(n) * 0.1)
    return g.node("Gemm", [flat.name, w, b], n, 0, 0, transB=1)


def _layer(g: GraphBuilder, x: Tensor, kind: str) -> Tensor:
    if kind == "conv":
        return _conv(g, x)
    if kind in ("depthwise", "grouped"):
        return _grouped(g, x, kind == "depthwise")
    if kind == "bn":
        return _batch_norm(g, x)
    if kind in ("maxpool", "avgpool"):
        return _pool(g, x, "MaxPool" if kind == "maxpool" else "AveragePool")
    if kind == "global":
        return g.node(g.draw.pick(("GlobalAveragePool", "GlobalMaxPool")), [x.name], x.c, 1, 1)
    if kind == "add":
        return _residual(g, x)
    if kind == "concat":
        return _concat(g, x)
    return _activation(g, x)


def random_case(draw: Draw, cpus: Sequence[str], max_layers: int = 12) -> Case:
    """A valid graph of 2-`max_layers` layers (see the module docstring; a head and the projection
    of a residual add are layers of their own too) and its compile settings."""
    c, side = draw.pick(CHANNELS[:14]), draw.pick(SIDES)
    g = GraphBuilder(draw)
    x = Tensor("x", c, side, side)
    g.seen.append(x)
    x = _conv(g, x)
    for _ in range(draw.integer(1, max_layers - 1)):
        kind = draw.pick(LAYERS)
        if kind == "branch":  # the next layer reads an earlier tensor: a DAG
            x, kind = draw.pick(g.seen), draw.pick(LAYERS[:5])
        x = _layer(g, x, kind)
    outputs = [_head(g, x) if draw.integer(0, 3) == 0 else x]
    if draw.integer(0, 4) == 0:  # a second output: an intermediate tensor the function returns
        second = draw.pick(g.seen[1:])
        outputs += [second] if second is not outputs[0] else []
    cpu, threads = draw.pick(list(cpus)), draw.integer(1, 2)
    names = ["y", "z"]
    for out, name in zip(outputs, names):
        if out.name in names:
            continue
        for node in g.nodes:
            node.input[:] = [name if i == out.name else i for i in node.input]
            node.output[:] = [name if o == out.name else o for o in node.output]
        out.name = name
    return Case(onnx_model(g.nodes, g.inits, (1, c, side, side), [t.name for t in outputs]),
                case_input((1, c, side, side)), cpu, threads, g.layers)


def onnx_model(nodes, inits: dict[str, np.ndarray], x_shape, outputs: Sequence[str] = ("y",),
               opset: int = OPSET, name: str = "graph") -> onnx.ModelProto:
    """A checked ONNX model of `nodes` on one float input 'x' of `x_shape`, with shapes inferred."""
    graph = helper.make_graph(list(nodes), name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model
