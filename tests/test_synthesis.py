"""Operator synthesis for one conv (issue 55, deliver 2): enumeration under the caps,
canonicalisation, the MAC distance, printable operators, `nasir synth` and `nasir.synthesize`.

Oracles: MACs and weights counted here from the domains and weight shapes; the grouped operator
synthesis finds computed by F.conv2d(groups=2) on input channels regrouped by hand; each listed
operator compiled by llvm against the torch backend.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from search_fixtures import tiny_resnet_onnx
from test_arch_transforms import TOL, one_conv, run
from test_tools import run_main

import nasir
from nasir.cli import main as cli
from nasir.dialects import nest
from nasir.errors import NasirError
from nasir.lowering.pipeline import GRAPH
from nasir.measure.kernels import standalone
from nasir.search.space import SearchSpace, layer_pattern
from nasir.search.synthesis import layer_nest, search_choices, structure_key, synthesize


@pytest.fixture(scope="module")
def found():
    net, m = one_conv(co=8, ci=8)
    return net, m, synthesize(m, "conv", flops=0.5, depth=3)


def test_operators_keep_to_the_caps_and_are_distinct(found):
    _, m, s = found
    macs0 = 2 * 8 * 8 * 8 * 8 * 3 * 3  # n, co, oh, ow, ci, kh, kw: the 8-channel 3x3 conv on 2 x 8 x 8
    assert s.original.macs == macs0 and s.original.params == 8 * 8 * 9 + 8
    for op in s.operators:
        # what the compiled operator does: its nest's domain, or presum's sums and the contraction left
        lowered = [o for o in op.model.transform(str(GRAPH)).ops() if isinstance(o, nest.ComputeOp)]
        assert op.macs == sum(math.prod(e for _, e in o.domain.dims) for o in lowered) <= 0.5 * macs0
        assert op.params == sum(w.size for w in op.model.weights.values()) <= s.original.params
    keys = [structure_key(op.op) for op in s.operators]
    assert len(set(keys)) == len(keys) and s.distinct >= len(keys)
    assert s.generated > 2 * s.distinct  # several compositions made each operator


def test_split_undone_by_merge_and_reordered_splits_are_one_operator(found):
    _, m, _ = found
    alone = [op for op in m.ops() if getattr(op, "layer_name", "") == "conv"][0]
    a = m.transform("split-dim{dim=co factor=4 layers=conv},split-dim{dim=ci factor=2 layers=conv}")
    b = m.transform("split-dim{dim=ci factor=2 layers=conv},split-dim{dim=co factor=4 layers=conv}")
    c = m.transform("split-dim{dim=co factor=2 layers=conv},merge-dims{outer=co_o inner=co_i layers=conv}")
    keys = {structure_key(layer_nest(x)) for x in (a, b, c)}
    assert keys == {structure_key(alone)}
    assert structure_key(layer_nest(a), canonical=False) != structure_key(alone, canonical=False)


def test_it_finds_grouped_depthwise_and_folded_operators(found):
    _, _, s = found
    by_mixing = {}
    for op in s.operators:
        by_mixing.setdefault(op.mixing, []).append(op)
    assert s.original.mixing == "c:a h:m w:m"
    grouped = [op for op in by_mixing["c:m h:m w:m"] if op.macs * 2 == s.original.macs]
    assert grouped and "tie{" in grouped[0].pipeline
    assert any(op.mixing.startswith("c:o") for op in s.operators)  # depthwise: tie ci to co
    assert "c:a h:o w:m" in by_mixing  # fold kh
    # the strongest mixing first: a window whose weight is one value over its rows (or columns)
    # mixes as the conv does, at a third of its multiply-adds and the input's 3 x 1 sums
    first = s.operators[0]
    assert first.mixing == s.original.mixing and first.pipeline.startswith("expand{dim=k")
    assert first.macs == 2 * 8 * 8 * 8 * 8 * 3 + 2 * 8 * 8 * 8 * 3


def test_the_grouped_operator_computes_a_grouped_conv(found):
    """tie{ci_i -> co_i}: output channel o reads the input channels of its parity, a grouped conv of
    the channels regrouped by parity."""
    net, _, s = found
    op = next(o for o in s.operators if o.pipeline.startswith("split-dim{dim=co factor=2") and "tie{dim=ci_i to=co_i" in o.pipeline)
    assert op.formula == ("y[n, co_o*2 + co_i, oh, ow] = sum(ci_o, kh, kw) x[n, co_i + ci_o*2, oh + kh + -1, "
                          "ow + kw + -1] * w[co_o*2 + co_i, ci_o, kh, kw]")
    w, b = (torch.tensor(op.model.weights[v.owner.key]) for v in layer_nest(op.model).inputs[1:])
    x = torch.from_numpy(net.x)
    parity = torch.cat([torch.arange(0, 8, 2), torch.arange(1, 8, 2)])  # even channels, then odd
    y = F.conv2d(x[:, parity], w[parity], b[parity], padding=1, groups=2)
    expected = torch.empty_like(y)
    expected[:, parity] = y
    torch.testing.assert_close(run(op.model, net.x), expected, **TOL)


def test_listed_operators_compile_to_what_torch_computes(found):
    net, _, s = found
    for op in s.operators[:4]:
        got = np.asarray(nasir.compile(op.model)(net.x))
        np.testing.assert_allclose(got, run(op.model, net.x).numpy(), **TOL)


def test_the_mac_distance_stops_walks_that_cannot_reach_the_cap():
    _, m = one_conv(co=8, ci=8)
    s = synthesize(m, "conv", flops=1 / 64, depth=1)  # one step cuts at most 8x (tie) or 3x (fold)
    assert s.operators == [] and s.pruned > 0


def test_bad_requests_are_clear_errors():
    _, m = one_conv()
    with pytest.raises(NasirError, match="has no layer 'nope' \\(its convs: conv\\)"):
        synthesize(m, "nope")
    with pytest.raises(NasirError, match="flops must be in \\(0, 1\\]"):
        synthesize(m, "conv", flops=2)


def test_nasir_synth_lists_operators_with_time_and_mixing(tmp_path, capsys):
    path = tiny_resnet_onnx(tmp_path / "tiny.onnx")
    code, out, err = run_main(cli.main, capsys, "synth", "layer1_conv1_Conv", "--model", path, "--depth", "2",
                              "--top", "3", "--time", "2")
    assert code == 0, err
    assert "operators for layer1_conv1_Conv: c:a h:m w:m" in out and "ms alone" in out
    assert "compositions applied" in out and "1. y[n, " in out
    rows = [line for line in out.splitlines() if line.startswith("│ 1 ") or line.startswith("│ 2 ")]
    assert len(rows) == 2 and all("x │" in row for row in rows)
    code, _, err = run_main(cli.main, capsys, "synth", "fc_Gemm", "--model", path)
    assert code == 1 and "layer 'fc_Gemm' is not a convolution" in err


def test_nasir_synthesize_api_times_what_it_lists():
    _, m = one_conv(co=16, ci=16)
    s = nasir.synthesize(m, "conv", flops=0.5, depth=2, time=2)
    assert s.original.ms > 0 and all(op.ms > 0 for op in s.operators[:2]) and s.operators[2].ms is None


# --- in the search (deliver 3) -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    return tiny_resnet_onnx(tmp_path_factory.mktemp("synth-search") / "tiny.onnx")


def test_the_space_draws_synthesised_operators_beside_the_fixed_choices(tiny_file):
    model = nasir.load(str(tiny_file)).transform("convert-nn-to-nest")
    chosen = search_choices(model, per_layer=1, depth=2)
    assert chosen and all(name.startswith("synth:") for name in chosen)
    space = SearchSpace.of(model, ("identity", "group2"), synthesized=chosen)
    name, steps = next(iter(chosen.items()))
    layer = next(lc for lc in space.layers if name in lc.choices)
    pipeline = space.pipeline({layer.layer: name, space.layers[1].layer: "group2"})
    assert steps.replace("layers=nest", f'layers="{layer_pattern(layer.layer)}"') in pipeline
    made = model.transform(pipeline)
    op = next(o for o in made.ops() if getattr(o, "layer_name", "") == layer.layer)
    lone = [o for o in model.ops() if getattr(o, "layer_name", "") == layer.layer][0]
    expected = standalone(model, lone, planes=False).transform(steps)
    assert structure_key(op) == structure_key(layer_nest(expected))
    again = SearchSpace.from_json(space.to_json(), space.init, space.synthesized)
    assert again.pipeline({layer.layer: name}) == space.pipeline({layer.layer: name})


def test_a_search_evaluates_synthesised_candidates_and_resumes_with_them(tiny_file, tmp_path):
    out = tmp_path / "run"
    options = dict(budget=6, out=out, seed=0, progress=False, choices=("identity",), synth=1, capacity="none")
    result = nasir.search(str(tiny_file), **options)
    steps = ("split-dim{", "tie{", "expand{", "dilate{", "share{", "fold{", "shift{")
    synthesised = [c for c in result.candidates if any(s in c.pipeline for s in steps)]
    assert synthesised and any(c.outcome.status == "accepted" and c.outcome.estimate_ms > 0 for c in synthesised)
    assert all(c.outcome.mac_ratio < 1 for c in synthesised if c.outcome.status == "accepted")
    again = nasir.search(str(tiny_file), **(options | {"budget": 8}))
    assert again.resumed and len(again.candidates) == 8
