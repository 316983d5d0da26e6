"""fold-scale: a batch norm left unfolded at the nest level (a model converted to nests before
fold-batch-norm) has its scale folded into the conv's weight once fuse-epilogue fused it.

Oracle: the torch backend, which runs the nests as the transforms left them (it lowers nests
itself, with no graph passes)."""

from __future__ import annotations

import numpy as np
import pytest
from test_arch_transforms import TOL, Net, run

import nasir
from nasir.dialects import nest
from nasir.lowering.pipeline import GRAPH


def conv_bn(transform: str, bias: bool = False):
    net = Net((1, 16, 8, 8), 3)
    x = net.conv("conv", net.block.args[0], 16, bias=bias)
    m = net.model(net.bn("bn", x))
    return net, m.transform(transform) if transform else m


@pytest.mark.parametrize("transform", ["", "depthwise{layers=conv init=inherit}", "group{layers=conv factor=4 init=inherit}"])
def test_fold_scale_folds_the_batch_norm_and_computes_the_same(transform):
    net, m = conv_bn(transform)
    (conv,) = [op for op in m.transform(str(GRAPH)).ops() if isinstance(op, nest.ComputeOp)]
    assert [kind for kind, _, _ in conv.steps] == ["add"]  # the scale's `mul` went into the weight
    assert conv.inputs[1].owner.key.endswith(".scaled")
    expected = run(m, net.x).numpy()
    np.testing.assert_allclose(np.asarray(nasir.compile(m, target="llvm")(net.x)), expected, **TOL)


def test_fold_scale_scales_the_bias_added_before_the_batch_norm():
    """(acc + b) * s + t: the conv's bias is scaled beside its weight, and added first as before."""
    net, m = conv_bn("", bias=True)
    (conv,) = [op for op in m.transform(str(GRAPH)).ops() if isinstance(op, nest.ComputeOp)]
    assert [kind for kind, _, _ in conv.steps] == ["add", "add"]
    assert [conv.inputs[k].owner.key for k in (1, 2)] == ["conv.weight.scaled", "conv.bias.scaled"]
    expected = run(m, net.x).numpy()
    np.testing.assert_allclose(np.asarray(nasir.compile(m, target="llvm")(net.x)), expected, **TOL)
