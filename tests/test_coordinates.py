"""Operators built bottom-up from the output's coordinates (issue 55, deliver 1 and 2): the
`bottom-up` pass and `nasir synth --bottom-up`.

Oracles: torch.nn.functional convs written from each expression's meaning (a conv, a grouped one, a
depthwise one, strided, shifted, with an unweighted window) on the weight the pass made, reshaped
by hand; the torch backend's generic path and llvm and TVM against it at 64 channels; the shape
distance checked against walks that finish, and the pruned synthesis against an unpruned one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from search_fixtures import tiny_resnet_onnx
from test_arch_transforms import TOL, Net, nest_op, one_conv, run, w
from test_tools import run_main

import nasir
from nasir.cli import main as cli
from nasir.dialects import nest
from nasir.errors import LegalityError, NasirError, PassError
from nasir.lowering.nest_to_torch.nest_ops import run_compute
from nasir.lowering.pipeline import GRAPH
from nasir.measure.kernels import standalone
from nasir.search import bottom_up
from nasir.search.bottom_up import synthesize_bottom_up
from nasir.search.space import SearchSpace
from nasir.search.synthesis import layer_nest, search_choices, structure_key
from nasir.transforms.coordinates import Expression

CONV = "broadcast 1; reduce c; unfold 1 3; unfold 2 3"
GROUPED = "split 1 2; broadcast 2; share 1; reduce c/2; merge 1 4; unfold 2 3; unfold 3 3"


def built(m, steps: str):
    t = m.transform(f'bottom-up{{steps="{steps}" layers=conv}}')
    return t, w(t, "conv"), torch.from_numpy(np.asarray(run(t, NET.x)))


NET, MODEL = one_conv(co=8, ci=8)  # x: 2 x 8 x 8 x 8, a 3x3 conv with a bias
X, BIAS = torch.from_numpy(NET.x), NET.t("conv.bias")


def test_the_conv_is_four_steps_from_its_output():
    t, wt, y = built(MODEL, CONV)
    assert nest_op(t, "conv").domain == nest_op(MODEL, "conv").domain
    assert [str(m) for m in nest_op(t, "conv").access_maps] == [str(m) for m in nest_op(MODEL, "conv").access_maps]
    assert tuple(wt.shape) == (8, 8, 3, 3) and "conv.weight" not in t.weights  # fresh
    torch.testing.assert_close(y, F.conv2d(X, wt, BIAS, padding=1), **TOL)


def test_split_share_reduce_merge_make_a_grouped_conv():
    _, wt, y = built(MODEL, GROUPED)
    assert tuple(wt.shape) == (8, 4, 3, 3)  # co_o * 4 + co_i read whole: one axis, as the output reads it
    torch.testing.assert_close(y, F.conv2d(X, wt, BIAS, padding=1, groups=2), **TOL)


def test_without_share_the_groups_share_their_weights():
    _, wt, y = built(MODEL, "split 1 2; broadcast 2; reduce c/2; merge 1 4; unfold 2 3; unfold 3 3")
    assert tuple(wt.shape) == (4, 4, 3, 3)  # co_i, ci, kh, kw: no co_o
    torch.testing.assert_close(y, F.conv2d(X, wt.repeat(2, 1, 1, 1), BIAS, padding=1, groups=2), **TOL)


def test_a_shared_channel_is_depthwise():
    _, wt, y = built(MODEL, "share 1; unfold 2 3; unfold 3 3")
    assert tuple(wt.shape) == (8, 1, 3, 3)  # a conv's layout, PyTorch's depthwise weight
    torch.testing.assert_close(y, F.conv2d(X, wt, BIAS, padding=1, groups=8), **TOL)


def test_an_unweighted_window_is_summed_with_one_weight():
    _, wt, y = built(MODEL, "broadcast 1; reduce c; unfold 1 3; unfold-sum 2 3")
    assert tuple(wt.shape) == (8, 8, 3, 1)
    torch.testing.assert_close(y, F.conv2d(X, wt.expand(8, 8, 3, 3), BIAS, padding=1), **TOL)


def test_shift_moves_the_rows_read():
    _, wt, y = built(MODEL, "broadcast 1; reduce c; shift 1")  # a 1x1 conv of row oh + 1
    shifted = F.pad(X[:, :, 1:], (0, 0, 0, 1))
    assert tuple(wt.shape) == (8, 8, 1, 1)
    torch.testing.assert_close(y, F.conv2d(shifted, wt, BIAS), **TOL)


def test_stride_then_unfold_is_a_strided_conv():
    net = Net((1, 8, 8, 8), 1)
    m = net.model(net.conv("conv", net.block.args[0], 8, 3, 1, True, stride=2))
    t = m.transform('bottom-up{steps="broadcast 1; reduce c; stride 1 2; unfold 1 3; stride 2 2; unfold 2 3" '
                    'layers=conv}')
    expected = F.conv2d(torch.from_numpy(net.x), w(t, "conv"), net.t("conv.bias"), padding=1, stride=2)
    torch.testing.assert_close(run(t, net.x), expected, **TOL)


@pytest.mark.parametrize("steps", [GROUPED, "split 1 8; broadcast 1; reduce c/8; merge 4 1; unfold 1 3; unfold-sum 2 3",
                                   "broadcast 1; share 1; reduce c; unfold 1 3; shift 2"])
def test_built_operators_compile_to_what_torch_computes(steps):
    """64 channels on 16 x 16: the torch backend's conv path against its generic path, llvm and TVM
    against the torch backend."""
    net = Net((1, 64, 16, 16), 0)
    m = net.model(net.conv("conv", net.block.args[0], 64))
    t = m.transform(f'bottom-up{{steps="{steps}" layers=conv}}')
    op = nest_op(t, "conv")
    inputs = [torch.from_numpy(net.x)] + [torch.tensor(t.weights[v.owner.key]) for v in op.inputs[1:]]
    torch.testing.assert_close(run_compute(op, inputs), run_compute(op, inputs, fast=False), **TOL)
    expected = run(t, net.x).numpy()
    for target in ("llvm", "tvm"):
        np.testing.assert_allclose(np.asarray(nasir.compile(t, target=target)(net.x)), expected, **TOL)


def test_steps_that_do_not_reach_the_input_are_clear_errors():
    with pytest.raises(LegalityError, match="no c coordinate for the input's axis 1 of 8"):
        MODEL.transform('bottom-up{steps="share 1; unfold 2 3; split 1 2" layers=conv}')
    with pytest.raises(LegalityError, match="the weight reads nothing"):
        MODEL.transform('bottom-up{steps="unfold-sum 2 3" layers=conv}')
    with pytest.raises(PassError, match="unknown step 'spin'"):
        MODEL.transform('bottom-up{steps="spin 1" layers=conv}')
    with pytest.raises(LegalityError, match="does not split into 3 parts"):
        MODEL.transform('bottom-up{steps="split 1 3" layers=conv}')
    with pytest.raises(PassError, match="give the steps"):
        MODEL.transform("bottom-up{layers=conv}")


# --- synthesis (deliver 2) ----------------------------------------------------------------------

@pytest.mark.parametrize("steps", [CONV, GROUPED, "share 1; unfold 2 3; unfold 3 3",
                                   "broadcast 1; reduce c; stride 1 2; unfold 1 3; stride 2 2; unfold 2 3"])
def test_the_shape_distance_never_exceeds_the_steps_left(steps):
    target = (1, 8, 16, 16) if "stride" in steps else (1, 8, 8, 8)
    expr = Expression.start([("n", 1), ("co", 8), ("oh", 8), ("ow", 8)], target)
    parts = steps.split("; ")
    for done, step in enumerate(parts):
        assert expr.distance() <= len(parts) - done, (step, expr.frontier)
        expr = expr.apply(step)
    assert expr.distance() == 0 and len(expr.finish()) == 4


@pytest.fixture(scope="module")
def found():
    return synthesize_bottom_up(MODEL, "conv", flops=1.0, depth=4)


def test_synthesis_reaches_the_conv_itself_and_keeps_to_the_caps(found):
    keys = [structure_key(op.op) for op in found.operators]
    assert structure_key(nest_op(MODEL, "conv")) in keys  # four steps from the output
    assert len(set(keys)) == len(keys) and found.generated > 2 * found.distinct
    for op in found.operators:
        lowered = [o for o in op.model.transform(str(GRAPH)).ops() if isinstance(o, nest.ComputeOp)]
        assert op.macs == sum(math.prod(e for _, e in o.domain.dims) for o in lowered) <= found.original.macs
        assert op.params == sum(v.size for v in op.model.weights.values()) <= found.original.params


def test_the_shape_distance_prunes_nothing_that_finishes(monkeypatch):
    pruned = synthesize_bottom_up(MODEL, "conv", flops=0.5, depth=4)
    monkeypatch.setattr(bottom_up.Expression, "distance", lambda self: 0)
    full = synthesize_bottom_up(MODEL, "conv", flops=0.5, depth=4)
    assert pruned.pruned > 0 and full.pruned == 0 and full.generated > pruned.generated
    assert [structure_key(o.op) for o in pruned.operators] == [structure_key(o.op) for o in full.operators]


def test_channel_steps_first_lose_no_operator(monkeypatch):
    """The walk takes channel steps before row and column steps only; every order of them makes
    the same operators."""
    ordered = synthesize_bottom_up(MODEL, "conv", flops=0.5, depth=4)
    moves = bottom_up.moves
    monkeypatch.setattr(bottom_up, "moves", lambda expr: moves(expr, ordered=False))
    every = synthesize_bottom_up(MODEL, "conv", flops=0.5, depth=4)
    assert every.generated > ordered.generated
    assert [structure_key(o.op) for o in ordered.operators] == [structure_key(o.op) for o in every.operators]


def test_nasir_synth_bottom_up_from_the_cli(tmp_path, capsys):
    path = tiny_resnet_onnx(tmp_path / "tiny.onnx")
    code, out, err = run_main(cli.main, capsys, "synth", "layer1_conv1_Conv", "--model", path, "--bottom-up",
                              "--depth", "4", "--top", "3", "--time", "1")
    assert code == 0, err
    assert "steps applied" in out and "shape distance" in out and "1. y[n, " in out and "ms alone" in out
    with pytest.raises(NasirError, match="depth at least 1"):
        nasir.synthesize(MODEL, "conv", depth=0, bottom_up=True)


# --- in the search (deliver 3) -----------------------------------------------------------------

def test_a_search_draws_operators_grown_bottom_up(tmp_path):
    """`synth_bottom_up`: the space's synthesised choices are `bottom-up` passes, installed on the
    layer they were grown for with the meaning they had alone (against the torch backend on the
    layer alone), and the search evaluates candidates holding them."""
    path = tiny_resnet_onnx(tmp_path / "tiny.onnx")
    model = nasir.load(str(path)).transform("convert-nn-to-nest")
    chosen = search_choices(model, per_layer=1, depth=4, walk=synthesize_bottom_up)
    assert chosen and all(name.startswith("synth:") and steps.startswith("bottom-up{")
                          for name, steps in chosen.items())
    space = SearchSpace.of(model, ("identity",), synthesized=chosen)
    name, steps = next(iter(chosen.items()))
    layer = next(lc for lc in space.layers if name in lc.choices)
    made = model.transform(space.pipeline({layer.layer: name}))
    lone = next(o for o in model.ops() if getattr(o, "layer_name", "") == layer.layer)
    expected = standalone(model, lone, planes=False).transform(steps)
    assert structure_key(nest_op(made, layer.layer)) == structure_key(layer_nest(expected))
    result = nasir.search(str(path), budget=4, out=tmp_path / "run", seed=0, progress=False, choices=("identity",),
                          synth=1, synth_bottom_up=True, capacity="none")
    grown = [c for c in result.candidates if "bottom-up{" in c.pipeline]
    assert grown and any(c.outcome.status == "accepted" and c.outcome.estimate_ms > 0 for c in grown)
    with pytest.raises(NasirError, match="give synth too"):
        nasir.search(str(path), budget=1, out=tmp_path / "bad", progress=False, synth_bottom_up=True)
