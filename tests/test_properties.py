"""alphaNAS mixing and depth: hand-derived expectations for convs, grouped and depthwise convs, pools."""

from __future__ import annotations

import pytest

from nasir.dialects.context import parse_module
from nasir.errors import PassError
from nasir.lowering.passes import run_pipeline
from nasir.transforms.analysis.properties import analyse, compose, product, properties_at_least

CONVS = """
func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %w = nn.weight {name = "w"} : tensor<4x%CI%x3x3xf32>
  %y = nn.conv2d %x, %w {dilations = array<i64: 1, 1>, groups = %G% : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, name = "conv"} : (tensor<1x4x8x8xf32>, tensor<4x%CI%x3x3xf32>) -> tensor<1x4x8x8xf32>
  %r = nn.relu %y : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  func.return %r : tensor<1x4x8x8xf32>
}
"""


def conv_module(groups: int, nests: bool = True):
    module = parse_module(CONVS.replace("%CI%", str(4 // groups)).replace("%G%", str(groups)))[0]
    if nests:
        run_pipeline(module, "convert-nn-to-nest")
    return module


def test_semiring():
    assert compose("o", "m") == "m" and compose("a", "x") == "x" and compose("o", "o") == "o"
    assert product([["o", "x"], ["x", "m"]], [["a", "x"], ["o", "o"]]) == [["a", "x"], ["m", "m"]]


def test_conv_grouped_depthwise_mixing_and_depth():
    dense, grouped, depthwise = (analyse(conv_module(g)) for g in (1, 2, 4))
    # rows: input axes N, C, H, W; columns: output axes N, C, H, W
    assert dense.mixing == [list("oxxx"), list("xaxx"), list("xxmx"), list("xxxm")]
    assert grouped.mixing[1] == list("xmxx")
    assert depthwise.mixing[1] == list("xoxx")
    assert dense.depth == 2  # linear conv, non-linear relu
    ok, reason = properties_at_least(conv_module(4), conv_module(1))
    assert not ok and reason == "mixing from input axis 1 to output axis 1 drops from 'a' to 'o'"
    assert properties_at_least(conv_module(1), conv_module(2))[0]


def test_analysis_needs_nests():
    with pytest.raises(PassError, match="run convert-nn-to-nest before it .'nn.conv2d' is left"):
        analyse(conv_module(1, nests=False))


def test_print_capacity_leaves_ir_unchanged(capsys):
    module = conv_module(1, nests=False)
    before = str(module)
    run_pipeline(module, "convert-nn-to-nest,print-capacity")
    printed = capsys.readouterr()
    assert "network mixing oxxx/xaxx/xxmx/xxxm  depth 2" in printed.err and not printed.out
    assert str(module) != before and "nest.compute" in str(module)
    after = str(module)
    run_pipeline(module, "print-capacity")
    assert str(module) == after
