"""convert-nn-to-nest, fuse-epilogue, fold/lower-batch-norm and the torch nest executor.

Graphs are built with the nn builders, converted, and executed nest by nest with `run_compute`
(generic path and fast path); the oracles are plain torch.nn.functional on the same weights, ONNX
Runtime (pools with ceil_mode / asymmetric pads) and hand-written numpy loops (index-split nests).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region
from xdsl.ir.affine import AffineExpr
from xdsl.utils.exceptions import VerifyException

from nasir.dialects import nest, nn
from nasir.dialects.module import WeightStore, attach_weights, weights_of
from nasir.dialects.nest_maps import amap, dims_of
from nasir.dialects.shapes import shape_of, tensor
from nasir.lowering.nest_to_torch import nest_ops as torch_nest
from nasir.lowering.nest_to_torch.nest_ops import run_compute
from nasir.lowering.passes import run_pipeline

TOL = dict(rtol=1e-4, atol=1e-4)


class Graph:
    """A tiny @main builder: inputs, seeded random weights, nn ops."""

    def __init__(self, *in_shapes, seed: int = 0):
        self.block = Block(arg_types=[tensor(s) for s in in_shapes])
        self.store = WeightStore()
        self.rng = np.random.default_rng(seed)
        self.inputs = [torch.tensor(self.rng.standard_normal(s), dtype=torch.float32) for s in in_shapes]

    @property
    def args(self):
        return self.block.args

    def weight(self, name, shape, positive=False):
        value = self.rng.standard_normal(shape).astype(np.float32)
        self.store[name] = np.abs(value) + 0.5 if positive else value
        return self.add(nn.WeightOp.make(name, shape))

    def w(self, name) -> torch.Tensor:
        return torch.from_numpy(self.store[name])

    def add(self, op):
        self.block.add_op(op)
        return op.result

    def module(self, result) -> ModuleOp:
        self.block.add_op(func.ReturnOp(result))
        fn = func.FuncOp("main", ([tensor(shape_of(a)) for a in self.args], [result.type]), Region(self.block))
        module = ModuleOp([fn])
        attach_weights(module, self.store)
        return module


def execute(module: ModuleOp, inputs, fast=True) -> torch.Tensor:
    """Run @main: nest ops through run_compute, nn.weight from the store; nothing else may remain."""
    fn = next(iter(module.ops))
    store = weights_of(module)
    env = dict(zip(fn.body.block.args, inputs))
    for op in fn.body.block.ops:
        if isinstance(op, func.ReturnOp):
            return env[op.operands[0]]
        args = [env[v] for v in op.operands]
        if isinstance(op, nn.WeightOp):
            env[op.result] = torch.from_numpy(store[op.key])
        elif isinstance(op, nest.ComputeOp):
            env[op.result] = run_compute(op, args, fast=fast)
        else:
            raise AssertionError(f"unexpected op {op.name} after conversion")
    raise AssertionError("no return")


def nests(module: ModuleOp) -> list[nest.ComputeOp]:
    return [op for op in module.walk() if isinstance(op, nest.ComputeOp)]


def check_both_paths(module: ModuleOp, inputs, expected: torch.Tensor) -> None:
    for fast in (True, False):
        got = execute(module, inputs, fast=fast)
        torch.testing.assert_close(got, expected, **TOL, equal_nan=True, msg=f"fast={fast}")


# --- conv --------------------------------------------------------------------------------------

CONVS = [
    # (C, O, groups, kernel, strides, pads [t, l, b, r], dilations, H, W, bias)
    (3, 8, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8, 8, True),
    (3, 5, 1, (3, 2), (2, 2), (1, 0, 2, 1), (1, 1), 9, 7, False),
    (2, 4, 1, (3, 3), (1, 2), (2, 2, 2, 2), (2, 2), 9, 9, True),
    (4, 6, 2, (3, 3), (2, 1), (1, 1, 0, 0), (1, 1), 7, 6, True),
    (6, 6, 6, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 9, 9, True),
    (4, 8, 4, (5, 3), (1, 1), (2, 1, 2, 1), (1, 2), 7, 8, False),
    (4, 4, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 5, 5, True),
]


@pytest.mark.parametrize("c,o,g,k,s,p,d,h,w,bias", CONVS)
def test_conv(c, o, g, k, s, p, d, h, w, bias):
    gr = Graph((2, c, h, w))
    wt = gr.weight("w", (o, c // g, *k))
    b = gr.weight("b", (o,)) if bias else None
    y = gr.add(nn.Conv2DOp.new(gr.args[0], wt, b, strides=s, pads=p, dilations=d, groups=g).named("conv"))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest")
    (op,) = nests(module)
    assert op.layer_name == "conv" and op.kind == "mac"
    names = op.domain.dim_names
    if g == 1:
        assert names == ["n", "co", "oh", "ow", "ci", "kh", "kw"]
    elif g == c and o // g >= 1 and c // g == 1:
        assert names == ["n", "g", "co", "oh", "ow", "kh", "kw"]
    else:
        assert names == ["n", "g", "co", "oh", "ow", "ci", "kh", "kw"]
    x = gr.inputs[0]
    extents = [e for _, e in op.domain.dims]
    args = [x, gr.w("w")] + ([gr.w("b")] if bias else [])
    assert torch_nest._functional(op, args, extents, batched=False) is not None, "conv fast path not recognised"
    xp = F.pad(x, (p[1], p[3], p[0], p[2]))
    expected = F.conv2d(xp, gr.w("w"), gr.w("b") if bias else None, stride=s, dilation=d, groups=g)
    check_both_paths(module, gr.inputs, expected)


def test_conv_gradient_matches_torch():
    gr = Graph((1, 4, 7, 7))
    wt = gr.weight("w", (6, 2, 3, 3))
    y = gr.add(nn.Conv2DOp.new(gr.args[0], wt, strides=(2, 2), pads=(1, 1, 1, 1), groups=2))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest")
    (op,) = nests(module)
    x = gr.inputs[0]
    ref_w = gr.w("w").clone().requires_grad_()
    F.conv2d(x, ref_w, stride=2, padding=1, groups=2).square().sum().backward()
    for fast in (True, False):
        wv = gr.w("w").clone().requires_grad_()
        run_compute(op, [x, wv], fast=fast).square().sum().backward()
        torch.testing.assert_close(wv.grad, ref_w.grad, **TOL)


@pytest.mark.parametrize("c,o,g,factor", [(8, 6, 1, 2), (8, 4, 2, 2), (12, 6, 3, 4)])
def test_conv_of_a_channel_slice_takes_the_fast_path(c, o, g, factor):
    """bottleneck{dim=ci} reads the first (C/G)/B channels of each group: F.conv2d of that slice,
    values and input gradient, on both paths."""
    gr = Graph((2, c, 7, 7))
    y = gr.add(nn.Conv2DOp.new(gr.args[0], gr.weight("w", (o, c // g, 3, 3)), gr.weight("b", (o,)),
                               pads=(1, 1, 1, 1), groups=g).named("conv"))
    module = gr.module(y)
    run_pipeline(module, f"convert-nn-to-nest,bottleneck{{dim=ci factor={factor}}}")
    (op,) = nests(module)
    w, b = (torch.tensor(weights_of(module)[o.owner.key]) for o in op.operands[1:])  # copies: read-only arrays
    assert w.shape[1] == c // g // factor
    x = gr.inputs[0].clone().requires_grad_()
    kept = x.view(2, g, c // g, 7, 7)[:, :, :c // g // factor].reshape(2, -1, 7, 7)
    expected = F.conv2d(kept, w, b, padding=1, groups=g)
    (ref_grad,) = torch.autograd.grad(expected.square().sum(), x)
    assert torch_nest._functional(op, [x, w, b], [e for _, e in op.domain.dims], batched=False) is not None
    for fast in (True, False):
        got = run_compute(op, [x, w, b], fast=fast)
        torch.testing.assert_close(got, expected, **TOL, msg=f"fast={fast}")
        (grad,) = torch.autograd.grad(got.square().sum(), x)
        torch.testing.assert_close(grad, ref_grad, **TOL, msg=f"fast={fast}")


def test_conv_reading_past_its_input_runs_as_a_conv_with_zero_weights_there():
    """A channel access the slice cannot express (here: channels 2..9 of 8) runs as the conv of
    the input by a weight (`conv_like`) whose entries for the channels past the input are zero;
    the generic path, which reads zeros there, agrees."""
    gr = Graph((1, 8, 5, 5))
    y = gr.add(nn.Conv2DOp.new(gr.args[0], gr.weight("w", (4, 8, 3, 3)), pads=(1, 1, 1, 1)).named("conv"))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest")
    (op,) = nests(module)
    d = dims_of(op.domain.dim_names)
    x_map = op.access_maps[0]
    shifted = amap(x_map.num_dims, [x_map.results[0], d["ci"] + 2, *x_map.results[2:]])
    op = nest.ComputeOp.make("conv", op.operands, op.domain, [shifted, *op.access_maps[1:]], op.output_map,
                             shape_of(op.result))
    args = [gr.inputs[0], gr.w("w")]
    assert torch_nest._functional(op, args, [e for _, e in op.domain.dims], batched=False) is not None
    xp = F.pad(gr.inputs[0][:, 2:], (1, 1, 1, 1, 0, 2))  # channels 8, 9 read as zeros
    for fast in (True, False):
        torch.testing.assert_close(run_compute(op, args, fast=fast), F.conv2d(xp, gr.w("w")), **TOL)


# --- gemm / matmul -----------------------------------------------------------------------------

@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,c_kind", [
    (False, False, 1.0, 1.0, "bias"),
    (False, True, 1.0, 1.0, "bias"),
    (True, True, 0.5, 2.0, "weight2d"),
    (True, False, 1.0, 0.5, "input"),
    (False, True, 2.0, 1.0, None),
    (False, False, 1.0, 0.0, "bias"),
    (False, False, 1.0, 3.0, "column"),
])
def test_gemm(trans_a, trans_b, alpha, beta, c_kind):
    m, k, n = 3, 5, 4
    shapes = [(k, m) if trans_a else (m, k)] + ([(m, n)] if c_kind == "input" else [])
    gr = Graph(*shapes)
    b = gr.weight("B", (n, k) if trans_b else (k, n))
    c = {"bias": lambda: gr.weight("C", (n,)), "weight2d": lambda: gr.weight("C", (m, n)),
         "column": lambda: gr.weight("C", (m, 1)), "input": lambda: gr.args[1], None: lambda: None}[c_kind]()
    y = gr.add(nn.GemmOp.new(gr.args[0], b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest")
    assert all(o.domain.dim_names == ["m", "n", "k"] for o in nests(module) if o.kind == "mac")
    a = gr.inputs[0].T if trans_a else gr.inputs[0]
    bt = gr.w("B").T if trans_b else gr.w("B")
    expected = alpha * a @ bt
    if c_kind is not None:
        expected = expected + beta * (gr.inputs[1] if c_kind == "input" else gr.w("C"))
    check_both_paths(module, gr.inputs, expected)
    assert gr.store.get("C") is None or np.array_equal(weights_of(module)["C"], gr.store["C"])


@pytest.mark.parametrize("a,b", [
    ((2, 3, 4, 5), (5, 6)),
    ((3, 1, 4, 5), (2, 5, 6)),
    ((5,), (2, 5, 3)),
    ((4, 5), (5,)),
    ((2, 4, 5), (2, 5, 1)),
])
def test_matmul(a, b):
    gr = Graph(a, b)
    module = gr.module(gr.add(nn.MatMulOp.new(*gr.args)))
    run_pipeline(module, "convert-nn-to-nest")
    (op,) = nests(module)
    assert op.domain.dim_names[-1] == "k"
    check_both_paths(module, gr.inputs, torch.matmul(*gr.inputs))


# --- pools -------------------------------------------------------------------------------------

def ort_pool(kind, x, kernel, strides, pads, ceil_mode, dilations=None, count_include_pad=0):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=int(ceil_mode))
    if kind == "MaxPool":
        attrs["dilations"] = dilations
    else:
        attrs["count_include_pad"] = count_include_pad
    node = helper.make_node(kind, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(sess.run(None, {"x": x.numpy()})[0])


POOLS = [
    # (kernel, strides, pads [t, l, b, r], dilations, ceil_mode, H, W)
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, 9, 9),
    ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True, 8, 8),
    ((3, 2), (2, 3), (1, 0, 2, 1), (1, 1), True, 9, 10),
    ((2, 2), (2, 2), (1, 1, 1, 1), (1, 1), True, 7, 6),
    ((3, 3), (1, 2), (1, 1, 1, 1), (2, 1), False, 8, 9),
]


@pytest.mark.parametrize("k,s,p,d,ceil,h,w", POOLS)
def test_max_pool(k, s, p, d, ceil, h, w):
    gr = Graph((2, 3, h, w))
    module = gr.module(gr.add(nn.MaxPoolOp.new(gr.args[0], k, s, p, d, ceil)))
    run_pipeline(module, "convert-nn-to-nest")
    (op,) = nests(module)
    assert op.kind == "max" and torch_nest._functional(op, gr.inputs, [e for _, e in op.domain.dims], batched=False) is not None
    check_both_paths(module, gr.inputs, ort_pool("MaxPool", gr.inputs[0], k, s, p, ceil, d))


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("k,s,p,d,ceil,h,w", [c for c in POOLS if c[3] == (1, 1)])
def test_avg_pool(k, s, p, d, ceil, h, w, include_pad):
    gr = Graph((2, 3, h, w))
    module = gr.module(gr.add(nn.AvgPoolOp.new(gr.args[0], k, s, p, ceil, bool(include_pad))))
    run_pipeline(module, "convert-nn-to-nest")
    assert [o.kind for o in nests(module)] == (["copy", "avg"] if include_pad and any(p) else ["avg"])
    check_both_paths(module, gr.inputs, ort_pool("AveragePool", gr.inputs[0], k, s, p, ceil,
                                                 count_include_pad=include_pad))


@pytest.mark.parametrize("cls,ref", [(nn.GlobalAvgPoolOp, lambda x: x.mean((2, 3), keepdim=True)),
                                     (nn.GlobalMaxPoolOp, lambda x: x.amax((2, 3), keepdim=True))])
def test_global_pool(cls, ref):
    gr = Graph((2, 5, 4, 3))
    module = gr.module(gr.add(cls.new(gr.args[0])))
    run_pipeline(module, "convert-nn-to-nest")
    check_both_paths(module, gr.inputs, ref(gr.inputs[0]))


# --- element-wise, transpose, pad --------------------------------------------------------------

def _f(v):
    from xdsl.dialects.builtin import FloatAttr, f32

    return FloatAttr(v, f32)


UNARY = [
    (lambda x: nn.ReluOp.new(x), torch.relu),
    (lambda x: nn.SigmoidOp.new(x), torch.sigmoid),
    (lambda x: nn.HardSwishOp.new(x), F.hardswish),
    (lambda x: nn.LeakyReluOp.new(x, alpha=_f(0.1)), lambda t: F.leaky_relu(t, 0.1)),
    (lambda x: nn.ClipOp.new(x, min=_f(-0.5), max=_f(0.75)), lambda t: t.clamp(-0.5, 0.75)),
    (lambda x: nn.HardSigmoidOp.new(x, alpha=_f(0.2), beta=_f(0.5)), lambda t: (0.2 * t + 0.5).clamp(0, 1)),
    (lambda x: nn.TanhOp.new(x), torch.tanh),
    (lambda x: nn.ExpOp.new(x), torch.exp),
    (lambda x: nn.LogOp.new(x), torch.log),
    (lambda x: nn.SqrtOp.new(x), torch.sqrt),
    (lambda x: nn.AbsOp.new(x), torch.abs),
    (lambda x: nn.NegOp.new(x), torch.neg),
    (lambda x: nn.SignOp.new(x), torch.sign),
    (lambda x: nn.SoftplusOp.new(x), F.softplus),
    (lambda x: nn.EluOp.new(x, alpha=_f(0.7)), lambda t: F.elu(t, 0.7)),
    (lambda x: nn.SeluOp.new(x, alpha=_f(1.6732632), gamma=_f(1.050701)), torch.selu),
    (lambda x: nn.ShrinkOp.new(x, lambd=_f(0.5), bias=_f(0.25)),
     lambda t: torch.where(t < -0.5, t + 0.25, torch.where(t > 0.5, t - 0.25, torch.zeros_like(t)))),
]


@pytest.mark.parametrize("build,ref", UNARY)
def test_unary(build, ref):
    gr = Graph((2, 3, 4, 5))
    module = gr.module(gr.add(build(gr.args[0])))
    run_pipeline(module, "convert-nn-to-nest")
    (op,) = nests(module)
    assert op.kind == "copy" and len(op.steps) == 1
    check_both_paths(module, gr.inputs, ref(gr.inputs[0]))


@pytest.mark.parametrize("cls,ref", [(nn.AddOp, torch.add), (nn.SubOp, torch.sub), (nn.MulOp, torch.mul),
                                     (nn.DivOp, torch.div), (nn.PowOp, torch.pow), (nn.MinOp, torch.minimum),
                                     (nn.MaxOp, torch.maximum)])
@pytest.mark.parametrize("a,b", [((2, 4, 3, 3), (1, 4, 1, 1)), ((4, 1, 1), (2, 4, 3, 3)), ((5,), (2, 3, 5)),
                                 ((2, 3), (2, 3))])
def test_binary_broadcast(cls, ref, a, b):
    gr = Graph(a, b)
    module = gr.module(gr.add(cls.new(*gr.args)))
    run_pipeline(module, "convert-nn-to-nest")
    check_both_paths(module, gr.inputs, ref(*gr.inputs))


def test_prelu_slice_expand_reduce():
    """PRelu with a per-channel slope, a strided slice, an expand and both reductions, each one nest."""
    gr = Graph((2, 4, 6, 5), (4, 1, 1))
    x, slope = gr.args
    p = gr.add(nn.PReluOp.new(x, slope))
    s = gr.add(nn.SliceOp.new(p, (0, 1, 0, 1), (2, 4, 6, 5), (1, 2, 3, 1)))
    e = gr.add(nn.ExpandOp.new(gr.add(nn.ReduceMeanOp.new(s, (1, 3))), (2, 2, 2, 4)))
    module = gr.module(gr.add(nn.ReduceSumOp.new(gr.add(nn.MulOp.new(s, e)), (0, 2))))
    run_pipeline(module, "convert-nn-to-nest")
    assert [o.kind for o in nests(module)] == ["copy", "copy", "avg", "copy", "copy", "avg"]
    xt, st = gr.inputs
    pt = torch.where(xt < 0, xt * st, xt)[:, 1:4:2, 0:6:3, 1:5]
    expected = (pt * pt.mean(dim=(1, 3), keepdim=True).expand(2, 2, 2, 4)).sum(dim=(0, 2), keepdim=True)
    check_both_paths(module, gr.inputs, expected)


def test_transpose_and_pad():
    gr = Graph((2, 3, 4, 5))
    t = gr.add(nn.TransposeOp.new(gr.args[0], (0, 2, 3, 1)))
    y = gr.add(nn.PadOp.new(t, (0, 1, 0, 2, 0, 2, -1, 0)))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest")
    assert [o.kind for o in nests(module)] == ["copy", "copy"]
    expected = F.pad(gr.inputs[0].permute(0, 2, 3, 1), (2, 0, 0, -1, 1, 2, 0, 0))
    check_both_paths(module, gr.inputs, expected)


def test_non_zero_pad_and_batch_norm_stay_nn():
    gr = Graph((1, 2, 3, 3))
    p = gr.add(nn.PadOp.new(gr.args[0], (0, 0, 1, 1, 0, 0, 1, 1), value=1.0))
    ws = [gr.weight(f"bn{i}", (2,), positive=True) for i in range(4)]
    y = gr.add(nn.BatchNormOp.new(p, *ws))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest")
    assert not nests(module)
    assert any(isinstance(o, nn.PadOp) for o in module.walk()) and any(
        isinstance(o, nn.BatchNormOp) for o in module.walk())


def test_generated_names_are_unique():
    gr = Graph((1, 2, 3, 3))
    y = gr.add(nn.ReluOp.new(gr.add(nn.ReluOp.new(gr.args[0]).named("relu_0"))))
    module = gr.module(gr.add(nn.SigmoidOp.new(y)))
    run_pipeline(module, "convert-nn-to-nest")
    names = [o.layer_name for o in nests(module)]
    assert names[0] == "relu_0" and len(set(names)) == 3


# --- generic path on nests transforms produce --------------------------------------------------

def test_index_split_conv_matches_torch():
    """co split into (co.o, co.i) = (3, 2) with a weight read at co.o*2 + co.i, stride 2, pad 1."""
    dom = nest.DomainAttr.make([("n", 1), ("co_o", 3), ("co_i", 2), ("oh", 3), ("ow", 3)],
                               [("ci", 2), ("kh", 3), ("kw", 3)])
    d = dims_of(dom.dim_names)
    co = d["co_o"] * 2 + d["co_i"]
    maps = [amap(8, [d["n"], d["ci"], d["oh"] * 2 + d["kh"] - 1, d["ow"] * 2 + d["kw"] - 1]),
            amap(8, [co, d["ci"], d["kh"], d["kw"]])]
    out_map = amap(8, [d["n"], co, d["oh"], d["ow"]])
    gr = Graph((1, 2, 5, 5))
    w = gr.weight("w", (6, 2, 3, 3))
    op = nest.ComputeOp.make("split", [gr.args[0], w], dom, maps, out_map, (1, 6, 3, 3))
    module = gr.module(gr.add(op))
    module.verify()
    expected = F.conv2d(gr.inputs[0], gr.w("w"), stride=2, padding=1)
    check_both_paths(module, gr.inputs, expected)


def test_floordiv_mod_maps_match_numpy():
    """out[i, j] = x[(i*4 + j) // 3, (i*4 + j) % 3] + x[j % 3 ceildiv-shifted] — a reshape-like gather."""
    dom = nest.DomainAttr.make([("i", 3), ("j", 4)])
    i, j = AffineExpr.dimension(0), AffineExpr.dimension(1)
    flat = i * 4 + j
    maps = [amap(2, [flat // 3, flat % 3]), amap(2, [j.ceil_div(2) + 1, i])]
    gr = Graph((4, 3), (4, 3))
    op = nest.ComputeOp.make("g", list(gr.args), dom, maps, amap(2, [i, j]), (3, 4), "copy", ["sub 1"])
    module = gr.module(gr.add(op))
    module.verify()
    x, y = (t.numpy() for t in gr.inputs)
    expected = np.zeros((3, 4), np.float32)
    for a in range(3):
        for b in range(4):
            f = a * 4 + b
            expected[a, b] = x[f // 3, f % 3] - y[-(-b // 2) + 1, a]
    check_both_paths(module, gr.inputs, torch.from_numpy(expected))


def test_shifted_access_reads_zero_out_of_bounds():
    """A 1-D 'shift' mac: out[o] = sum_k x[o + k - 2] * w[k], o in [0, 6), for x of length 5."""
    dom = nest.DomainAttr.make([("o", 6)], [("k", 3)])
    o, k = AffineExpr.dimension(0), AffineExpr.dimension(1)
    gr = Graph((5,))
    w = gr.weight("w", (3,))
    op = nest.ComputeOp.make("shift", [gr.args[0], w], dom, [amap(2, [o + k - 2]), amap(2, [k])], amap(2, [o]),
                             (6,))
    module = gr.module(gr.add(op))
    x, wv = gr.inputs[0].numpy(), gr.store["w"]
    expected = np.array([sum(x[a + b - 2] * wv[b] for b in range(3) if 0 <= a + b - 2 < 5) for a in range(6)],
                        np.float32)
    check_both_paths(module, gr.inputs, torch.from_numpy(expected))


# --- graph passes ------------------------------------------------------------------------------

def _bn_params(gr, c, prefix="bn"):
    return [gr.weight(f"{prefix}.{p}", (c,), positive=(p == "var")) for p in ("gamma", "beta", "mean", "var")]


def _torch_bn(gr, x, prefix="bn", eps=1e-5):
    g, b, m, v = (gr.w(f"{prefix}.{p}") for p in ("gamma", "beta", "mean", "var"))
    return F.batch_norm(x, m, v, g, b, training=False, eps=eps)


@pytest.mark.parametrize("bias,groups", [(False, 1), (True, 2)])
def test_fold_batch_norm(bias, groups):
    gr = Graph((2, 4, 6, 6))
    w = gr.weight("w", (6, 4 // groups, 3, 3))
    b = gr.weight("b", (6,)) if bias else None
    conv = gr.add(nn.Conv2DOp.new(gr.args[0], w, b, pads=(1, 1, 1, 1), groups=groups).named("conv"))
    y = gr.add(nn.BatchNormOp.new(conv, *_bn_params(gr, 6), epsilon=1e-3))
    module = gr.module(y)
    run_pipeline(module, "fold-batch-norm")
    assert not any(isinstance(o, nn.BatchNormOp) for o in module.walk())
    (c,) = [o for o in module.walk() if isinstance(o, nn.Conv2DOp)]
    assert c.layer_name == "conv" and len(c.operands) == 3
    assert {o.key for o in module.walk() if isinstance(o, nn.WeightOp)} == {"w.bn", "w.bn_bias"}
    assert np.array_equal(weights_of(module)["w"], gr.store["w"])  # the old array is untouched
    run_pipeline(module, "convert-nn-to-nest")
    ref = F.conv2d(gr.inputs[0], gr.w("w"), gr.w("b") if bias else None, padding=1, groups=groups)
    check_both_paths(module, gr.inputs, _torch_bn(gr, ref, eps=1e-3))


def test_fold_batch_norm_skips_multi_use_conv():
    gr = Graph((1, 2, 4, 4))
    conv = gr.add(nn.Conv2DOp.new(gr.args[0], gr.weight("w", (2, 2, 1, 1))))
    y = gr.add(nn.AddOp.new(gr.add(nn.BatchNormOp.new(conv, *_bn_params(gr, 2))), conv))
    module = gr.module(y)
    run_pipeline(module, "fold-batch-norm")
    assert any(isinstance(o, nn.BatchNormOp) for o in module.walk())


def test_lower_batch_norm():
    gr = Graph((2, 3, 4, 4))
    y = gr.add(nn.BatchNormOp.new(gr.args[0], *_bn_params(gr, 3)).named("bn1"))
    module = gr.module(y)
    run_pipeline(module, "fold-batch-norm,lower-batch-norm")
    (op,) = nests(module)
    assert op.layer_name == "bn1" and [s.data for s in op.epilogue.data] == ["mul 1", "add 2"]
    check_both_paths(module, gr.inputs, _torch_bn(gr, gr.inputs[0]))


def test_fuse_epilogue_conv_relu_residual():
    """relu(other + conv2(relu(conv1(x)))) with the residual written other-first: one nest per conv."""
    gr = Graph((1, 4, 6, 6), (1, 4, 6, 6))
    c1 = gr.add(nn.Conv2DOp.new(gr.args[0], gr.weight("w1", (4, 4, 3, 3)), gr.weight("b1", (4,)),
                                pads=(1, 1, 1, 1)).named("conv1"))
    r1 = gr.add(nn.ReluOp.new(c1))
    c2 = gr.add(nn.Conv2DOp.new(r1, gr.weight("w2", (4, 4, 3, 3)), pads=(1, 1, 1, 1)).named("conv2"))
    s = gr.add(nn.AddOp.new(gr.args[1], c2))
    y = gr.add(nn.ClipOp.new(gr.add(nn.ReluOp.new(s)), min=_f(0.0), max=_f(0.5)))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest,fuse-epilogue")
    ops = nests(module)
    assert [o.layer_name for o in ops] == ["conv1", "conv2"]
    assert [s.data for s in ops[0].epilogue.data] == ["add 2", "relu"]
    assert [s.data for s in ops[1].epilogue.data] == ["add 2", "relu", "clip 0.0 0.5"]
    x, other = gr.inputs
    h = torch.relu(F.conv2d(x, gr.w("w1"), gr.w("b1"), padding=1))
    expected = (other + F.conv2d(h, gr.w("w2"), padding=1)).relu().clamp(0.0, 0.5)
    check_both_paths(module, gr.inputs, expected)


def test_fuse_epilogue_pool_and_broadcast_operand():
    gr = Graph((1, 3, 6, 6))
    p = gr.add(nn.MaxPoolOp.new(gr.args[0], (2, 2), (2, 2)))
    y = gr.add(nn.SubOp.new(p, gr.weight("shift", (3, 1, 1))))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest,fuse-epilogue")
    (op,) = nests(module)
    assert op.kind == "max" and [s.data for s in op.epilogue.data] == ["sub 1"]
    check_both_paths(module, gr.inputs, F.max_pool2d(gr.inputs[0], 2) - gr.w("shift"))


def test_fuse_epilogue_keeps_multi_use_producer():
    gr = Graph((1, 2, 4, 4))
    c = gr.add(nn.Conv2DOp.new(gr.args[0], gr.weight("w", (2, 2, 1, 1))))
    y = gr.add(nn.AddOp.new(gr.add(nn.ReluOp.new(c)), c))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest,fuse-epilogue")
    # the conv (two uses) keeps its own nest; the add joins the single-use relu before it
    conv_nest, relu_add = nests(module)
    assert conv_nest.kind == "mac" and not conv_nest.epilogue.data
    assert relu_add.kind == "copy" and [s.data for s in relu_add.epilogue.data] == ["relu", "add 1"]
    conv = F.conv2d(gr.inputs[0], gr.w("w"))
    check_both_paths(module, gr.inputs, conv.relu() + conv)


# --- verifier ----------------------------------------------------------------------------------

def _conv_parts():
    dom = nest.DomainAttr.make([("n", 1), ("co", 2)], [("ci", 3)])
    d = dims_of(dom.dim_names)
    return dom, d


@pytest.mark.parametrize("case", ["rank", "num_dims", "out_reduction", "out_extent", "epilogue_ref"])
def test_verifier_rejects_bad_maps(case):
    dom, d = _conv_parts()
    gr = Graph((1, 3))
    w = gr.weight("w", (2, 3))
    maps = [amap(3, [d["n"], d["ci"]]), amap(3, [d["co"], d["ci"]])]
    out_map, steps = amap(3, [d["n"], d["co"]]), []
    if case == "rank":
        maps[0] = amap(3, [d["n"], d["ci"], 0])
    elif case == "num_dims":
        maps[1] = amap(2, [AffineExpr.dimension(1), AffineExpr.dimension(0)])
    elif case == "out_reduction":
        out_map = amap(3, [d["n"], d["ci"]])
    elif case == "out_extent":
        out_map = amap(3, [d["n"], d["co"] + 1])
    else:
        steps = ["add 1"]
    op = nest.ComputeOp.make("bad", [gr.args[0], w], dom, maps, out_map, (1, 2), "mac", steps)
    gr.add(op)
    with pytest.raises(VerifyException):
        op.verify()


def test_parse_rejects_map_not_fitting_domain():
    from nasir.dialects.context import IRError, parse_module

    text = """
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %y = nest.compute %x {name = "c", domain = #nest.domain<[i = 4]>,
             maps = [affine_map<(d0, d1) -> (d0)>], out_map = affine_map<(d0) -> (d0)>,
             combiner = "copy", epilogue = []} : (tensor<4xf32>) -> tensor<4xf32>
      func.return %y : tensor<4xf32>
    }"""
    with pytest.raises(IRError, match="map 0"):
        parse_module(text)


def test_fuse_epilogue_grouped_conv_residual():
    """The residual operand of a grouped conv is read through the conv's (g*CO + co) out_map."""
    gr = Graph((1, 4, 5, 5), (1, 6, 5, 5))
    c = gr.add(nn.Conv2DOp.new(gr.args[0], gr.weight("w", (6, 2, 3, 3)), pads=(1, 1, 1, 1), groups=2))
    y = gr.add(nn.ReluOp.new(gr.add(nn.AddOp.new(c, gr.args[1]))))
    module = gr.module(y)
    run_pipeline(module, "convert-nn-to-nest,fuse-epilogue")
    (op,) = nests(module)
    assert [s.data for s in op.epilogue.data] == ["add 2", "relu"]
    expected = (F.conv2d(gr.inputs[0], gr.w("w"), padding=1, groups=2) + gr.inputs[1]).relu()
    check_both_paths(module, gr.inputs, expected)


def test_weight_store_keeps_a_scalar_rank_0():
    """A scalar constant (ONNX's rank-0 Constant, tensor<f32> in the IR) is stored with the IR's
    shape, not as numpy's contiguous copy makes it (shape (1,)): TVM's program declares each weight
    with its stored shape and reads a scalar with no index (test_Softsign on TVM failed so)."""
    store = WeightStore()
    key = store.add("c", np.float32(2.0))
    assert store[key].shape == () and store[key].dtype == np.float32
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert store.add("s", strided) and store["s"].flags.c_contiguous
    np.testing.assert_array_equal(store["s"], strided)
