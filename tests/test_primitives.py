"""Syno's coordinate primitives (split-dim, merge-dims, dilate, expand, share, tie): each against an
independent PyTorch reference written from its definition (BACKGROUND.md section 3), and the
nests they make compiled by llvm and TVM against the torch backend.

References: plain torch.nn.functional convs (grouped, depthwise, dilated) on weights sliced by hand,
or per-row convs for a weight shared by rows. The torch backend runs such nests as F.conv2d on a
gathered weight (`conv_like`); its generic gather/contract path, which knows nothing of convs,
must give the same numbers.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_arch_transforms import TOL, Net, macs, nest_op, one_conv, run, w

import nasir
from nasir.dialects import nest
from nasir.errors import LegalityError, PassError
from nasir.lowering.nest_to_torch.conv_like import plan_of
from nasir.lowering.nest_to_torch.nest_ops import run_compute
from nasir.transforms.nest_spec import Form
from nasir.transforms.primitives import carry


def x_of(net: Net) -> torch.Tensor:
    return torch.from_numpy(net.x)


def maps_text(op: nest.ComputeOp) -> list[str]:
    return [str(m) for m in (*op.access_maps, op.output_map)]


# --- views: meaning kept -----------------------------------------------------------------------

@pytest.mark.parametrize("dim,factor", [("co", 4), ("ci", 2), ("oh", 4), ("ow", 2), ("kh", 3)])
def test_split_dim_keeps_the_conv_and_merge_dims_undoes_it(dim, factor):
    k, pad = (6, 2) if dim == "kh" else (3, 1)  # kh = 6 splits into 2 x 3
    net, m = one_conv(co=8, ci=8, k=k, pad=pad)
    s = m.transform(f"split-dim{{dim={dim} factor={factor} layers=conv}}")
    op = nest_op(s, "conv")
    assert {f"{dim}_o", f"{dim}_i"} <= set(op.domain.dim_names) and dim not in op.domain.dim_names
    assert op.inputs[1].owner.key == "conv.weight"  # the trained weight, as it was
    ref = F.conv2d(x_of(net), net.t("conv.weight"), net.t("conv.bias"), padding=pad)
    torch.testing.assert_close(run(s, net.x), ref, **TOL)
    back = s.transform(f"merge-dims{{outer={dim}_o inner={dim}_i layers=conv}}")
    assert nest_op(back, "conv").domain == nest_op(m, "conv").domain
    assert maps_text(nest_op(back, "conv")) == maps_text(nest_op(m, "conv"))


def test_dilate_spreads_the_taps_about_the_centre():
    net, m = one_conv()
    d = m.transform("dilate{dim=kh factor=2 layers=conv init=inherit},dilate{dim=kw factor=3 layers=conv init=inherit}")
    ref = F.conv2d(x_of(net), net.t("conv.weight"), net.t("conv.bias"), padding=(2, 3), dilation=(2, 3))
    torch.testing.assert_close(run(d, net.x), ref, **TOL)
    assert macs(d, "conv") == macs(m, "conv")


# --- contractions ------------------------------------------------------------------------------

def test_split_split_tie_is_a_grouped_conv():
    """Syno's grouped conv: the input channel's group coordinate is the output's (tie), not summed."""
    net, m = one_conv(co=8, ci=8)
    pipe = "split-dim{dim=co factor=4},split-dim{dim=ci factor=4},tie{dim=ci_o to=co_o init=inherit}"
    g = m.transform(pipe.replace("}", " layers=conv}"))
    full = net.t("conv.weight")
    block_diagonal = torch.cat([full[:4, :4], full[4:, 4:]], 0)
    ref = F.conv2d(x_of(net), block_diagonal, net.t("conv.bias"), padding=1, groups=2)
    torch.testing.assert_close(run(g, net.x), ref, **TOL)
    assert tuple(w(g, "conv").shape) == (8, 4, 3, 3) and macs(g, "conv") * 2 == macs(m, "conv")
    grouped = m.transform("group{factor=2 layers=conv init=inherit}")
    assert maps_text(nest_op(g, "conv")) == maps_text(nest_op(grouped, "conv"))  # the same nest, dims named apart
    fresh = m.transform(pipe.replace("init=inherit", "seed=3").replace("}", " layers=conv}"))
    ref = F.conv2d(x_of(net), w(fresh, "conv"), w(fresh, "conv", 2), padding=1, groups=2)
    torch.testing.assert_close(run(fresh, net.x), ref, **TOL)


def test_tie_ci_to_co_is_a_depthwise_conv():
    net, m = one_conv(co=8, ci=8)
    d = m.transform("tie{dim=ci to=co layers=conv init=inherit}")
    diagonal = net.t("conv.weight")[torch.arange(8), torch.arange(8)].unsqueeze(1)
    assert tuple(w(d, "conv").shape) == (8, 1, 3, 3)
    ref = F.conv2d(x_of(net), diagonal, net.t("conv.bias"), padding=1, groups=8)
    torch.testing.assert_close(run(d, net.x), ref, **TOL)


def test_expand_gives_every_tap_of_a_window_one_weight():
    net, m = one_conv()
    e = m.transform("expand{dim=kh layers=conv init=inherit}")
    assert tuple(w(e, "conv").shape) == (8, 8, 1, 3)
    mean = net.t("conv.weight").mean(2, keepdim=True)
    ref = F.conv2d(x_of(net), mean.expand(-1, -1, 3, -1), net.t("conv.bias"), padding=1)
    torch.testing.assert_close(run(e, net.x), ref, **TOL)


def test_share_gives_every_row_its_own_weights():
    net, m = one_conv()
    kept = m.transform("share{dim=oh layers=conv init=inherit}")  # copies: the function stays
    ref = F.conv2d(x_of(net), net.t("conv.weight"), net.t("conv.bias"), padding=1)
    torch.testing.assert_close(run(kept, net.x), ref, **TOL)
    s = m.transform("share{dim=oh layers=conv seed=1}")
    rows = w(s, "conv")
    assert tuple(rows.shape) == (8, 8, 3, 3, 8)
    per_row = [F.conv2d(x_of(net), rows[..., r], w(s, "conv", 2), padding=1)[:, :, r:r + 1] for r in range(8)]
    torch.testing.assert_close(run(s, net.x), torch.cat(per_row, 2), **TOL)


def test_carry_reads_the_old_entries_through_the_new_access():
    value = np.arange(16, dtype=np.float32).reshape(4, 4)
    extents = {"co": 4, "ci": 4}
    diagonal = carry(value, [Form.dim("co"), Form.dim("co")], [Form.dim("co"), Form({}, 0)], extents, [4, 1])
    np.testing.assert_array_equal(diagonal[:, 0], [0, 5, 10, 15])
    mean = carry(value, [Form.dim("co"), Form.dim("ci")], [Form.dim("co"), Form({}, 0)], extents, [4, 1])
    np.testing.assert_array_equal(mean[:, 0], value.mean(1))


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("pipeline,error,words", [
    ("split-dim{dim=co factor=3 layers=conv}", LegalityError, "co = 8 is not a multiple of factor 3"),
    ("split-dim{dim=co factor=1}", PassError, "factor must be an integer of at least 2"),
    ("split-dim{dim=zz factor=2 layers=conv}", PassError, "has no dimension zz"),
    ("merge-dims{outer=co inner=ci layers=conv}", LegalityError, "co and ci are not both parallel"),
    ("merge-dims{outer=oh inner=ow layers=conv}", LegalityError, "does not read oh and ow as oh * 8 + ow"),
    ("dilate{dim=oh factor=2 layers=conv}", LegalityError, "oh is a parallel dim"),
    ("expand{dim=oh layers=conv}", LegalityError, "the weight does not read oh"),
    ("share{dim=co layers=conv}", LegalityError, "the weight already reads co"),
    ("tie{dim=co to=ci layers=conv}", LegalityError, "co must be a reduction dim and ci a parallel one"),
    ("tie{dim=kh to=oh layers=conv}", LegalityError, "kh = 3 and oh = 8 differ in extent"),
])
def test_illegal_primitives_name_layer_dim_and_values(pipeline, error, words):
    _, m = one_conv()
    with pytest.raises(error, match=re.escape(words)):
        m.transform(pipeline)


# --- the nests on the backends -----------------------------------------------------------------

PIPELINES = [
    "split-dim{dim=co factor=16},split-dim{dim=ci factor=16},tie{dim=ci_o to=co_o}",  # 4 groups
    "split-dim{dim=co factor=8},split-dim{dim=ci factor=8},tie{dim=ci_o to=co_o},dilate{dim=kw factor=2}",
    "tie{dim=ci to=co},expand{dim=kw}",  # depthwise, one weight per row of taps
    "expand{dim=kh},dilate{dim=kw factor=2}",
    "share{dim=ow}",
    "split-dim{dim=oh factor=2},share{dim=oh_i}",  # even and odd rows with their own weights
]


@pytest.fixture(scope="module")
def wide():
    net = Net((1, 64, 16, 16), 0)
    return net, net.model(net.conv("conv", net.block.args[0], 64))


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_primitive_nests_compile_to_what_torch_computes(pipeline, wide):
    """64 channels on 16 x 16: llvm and TVM against the torch backend, whose conv path (F.conv2d on
    a gathered weight) must equal its generic path."""
    net, m = wide
    t = m.transform(",".join(p.replace("}", " layers=conv}") for p in pipeline.split(",")))
    op = nest_op(t, "conv")
    inputs = [x_of(net)] + [torch.tensor(t.weights[v.owner.key]) for v in op.inputs[1:]]
    fast, generic = run_compute(op, inputs), run_compute(op, inputs, fast=False)
    torch.testing.assert_close(fast, generic, **TOL)
    expected = run(t, net.x).numpy()
    for target in ("llvm", "tvm"):
        np.testing.assert_allclose(np.asarray(nasir.compile(t, target=target)(net.x)), expected, **TOL)


def test_grouped_and_dilated_primitive_convs_run_as_one_conv(wide):
    net, m = wide
    t = m.transform(",".join(p.replace("}", " layers=conv}") for p in PIPELINES[1].split(",")))
    op = nest_op(t, "conv")
    plan = plan_of(op, [x_of(net), torch.tensor(t.weights[op.inputs[1].owner.key])], batched=True)
    assert plan.groups == 8 and plan.geo.dilations == (1, 2) and plan.per is None and len(plan.take) == 1
