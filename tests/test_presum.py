"""presum: a contraction whose weight does not read some summed dims sums its input over them first.

Oracles: the torch backend, which runs the nests as the architecture transforms left them (no
presum: it lowers nests itself), and F.conv2d on the expanded weight written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_arch_transforms import TOL, Net, nest_op, run

import nasir
from nasir.dialects import nest
from nasir.dialects.nest import macs
from nasir.lowering.pipeline import GRAPH
from nasir.transforms.presum import computed_macs

CASES = {
    "expand{dim=kw}": ["kw"],
    "expand{dim=kh},expand{dim=kw}": ["kh", "kw"],
    "fold{dim=kh},expand{dim=kw}": ["kw"],
    "expand{dim=ci}": ["ci"],  # one weight for every input channel: the channels summed first
}


def conv64(stride=1, co=64):
    net = Net((1, 64, 16, 16), 0)
    return net, net.model(net.conv("conv", net.block.args[0], co, stride=stride))


def on_conv(pipeline: str) -> str:
    return ",".join(p.replace("}", " layers=conv init=inherit}") for p in pipeline.split(","))


def nests(model) -> dict[str, nest.ComputeOp]:
    return {op.layer_name: op for op in model.ops() if isinstance(op, nest.ComputeOp)}


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pipeline", list(CASES))
def test_presum_sums_first_and_computes_the_same(pipeline, stride):
    net, m = conv64(stride)
    t = m.transform(on_conv(pipeline))
    lowered = nests(t.transform(str(GRAPH)))
    assert set(lowered) == {"conv", "conv.presum"}
    summed = math.prod(dict(nest_op(t, "conv").domain.dims)[d] for d in CASES[pipeline])
    assert macs(lowered["conv"]) * summed == macs(nest_op(t, "conv"))
    expected = run(t, net.x).numpy()
    for target in ("llvm", "tvm"):
        np.testing.assert_allclose(np.asarray(nasir.compile(t, target=target)(net.x)), expected, **TOL)


def test_presum_of_a_window_with_one_weight_is_the_conv_of_the_mean_weight():
    """expand kh and kw: one weight per (co, ci) for the whole 3 x 3 window, padded at the edges."""
    net, m = conv64()
    t = m.transform(on_conv("expand{dim=kh},expand{dim=kw}"))
    mean = net.t("conv.weight").mean((2, 3), keepdim=True)
    ref = F.conv2d(torch.from_numpy(net.x), mean.expand(-1, -1, 3, 3), net.t("conv.bias"), padding=1)
    torch.testing.assert_close(torch.from_numpy(np.asarray(nasir.compile(t, target="llvm")(net.x))), ref, **TOL)


def test_presum_leaves_convs_whose_weight_reads_every_summed_dim_or_that_would_not_pay():
    net, m = conv64()
    assert set(nests(m.transform(str(GRAPH)))) == {"conv"}
    net, m = conv64(co=1)  # one output channel: the sums would cost as much as they save
    assert set(nests(m.transform(on_conv("expand{dim=kw}")).transform(str(GRAPH)))) == {"conv"}


def test_presum_leaves_a_nest_with_a_schedule():
    net, m = conv64()
    t = m.transform(on_conv("expand{dim=kw}") + ",interchange{order=ci,co layers=conv}")
    assert nest_op(t, "conv").schedule is not None
    assert set(nests(t.transform("presum"))) == {"conv"}


def test_computed_macs_count_the_sums_and_the_contraction_left():
    """fold kh, expand kw on 64 -> 64 channels at 16 x 16: the 1 x 3 sums of each input point
    (64 x 16 x 16 x 3) and a 1x1 conv (64 x 64 x 16 x 16), written out by hand; what the lowered
    nests count; and a conv presum leaves counts its own."""
    net, m = conv64()
    t = m.transform(on_conv("fold{dim=kh},expand{dim=kw}"))
    op = nest_op(t, "conv")
    assert macs(op) == 64 * 64 * 16 * 16 * 3
    assert computed_macs(op) == 64 * 16 * 16 * 3 + 64 * 64 * 16 * 16
    assert computed_macs(op) == sum(macs(o) for o in nests(t.transform(str(GRAPH))).values())
    assert computed_macs(nest_op(m, "conv")) == macs(nest_op(m, "conv")) == 64 * 64 * 16 * 16 * 9


def test_a_kernel_is_timed_as_a_compile_runs_it(tmp_path):
    """The search's and synthesis's kernel times (`KernelTimes.nest_ms`) time a layer split by
    presum as a compile splits it, not the unsummed nest (a schedule given first would keep presum
    off): the timed module holds the sums and the 1x1 contraction, and computes the torch
    backend's numbers on the layer."""
    from nasir.measure.kernels import KernelTimes

    net, m = conv64()
    t = m.transform(on_conv("fold{dim=kh},expand{dim=kw}"))
    timed = KernelTimes(tmp_path / "kernels.db", None, 1).as_compiled(t, nest_op(t, "conv"))
    found = nests(timed)
    assert set(found) == {"nest", "nest.presum"} and all(op.schedule is not None for op in found.values())
    assert macs(found["nest"]) == 64 * 64 * 16 * 16  # the 1x1 contraction left, not the fold's 3 taps
    x = np.zeros(timed.module.body.blocks[0].ops.first.function_type.inputs.data[0].get_shape(), np.float32)
    x[..., :16, :] = net.x  # the timed argument has the padding rows a compile gives its planes
    got = np.asarray(nasir.compile(timed)(x))[..., :16, :]
    np.testing.assert_allclose(got, run(t, net.x).numpy(), rtol=1e-4, atol=1e-4)
