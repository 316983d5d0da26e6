"""Schedule transforms: option parsing, dependence legality, atomicity, and unchanged numerics.

Numerics are compared with a numpy oracle (a direct convolution written here); llvm runs when the
backend is importable, because schedules only matter to backends that read them.
"""

from __future__ import annotations

import numpy as np
import pytest

from nasir.dialects.context import parse_module
from nasir.dialects.module import WeightStore
from nasir.dialects.nest import DomainAttr
from nasir.dialects.schedule import Loop, Schedule
from nasir.errors import LegalityError, LoweringError, PassError
from nasir.model import Model
from nasir.transforms.analysis.dependences import carried_loops

IR = """
func.func @main(%x: tensor<1x4x6x6xf32>) -> tensor<1x8x6x6xf32> {
  %w = nn.weight {name = "w"} : tensor<8x4x3x3xf32>
  %y = nest.compute %x, %w {name = "conv", domain = #nest.domain<[n = 1, co = 8, oh = 6, ow = 6], [ci = 4, kh = 3, kw = 3]>,
      maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5 - 1, d3 + d6 - 1)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>],
      out_map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, combiner = "mac", epilogue = []}
      : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return %y : tensor<1x8x6x6xf32>
}
"""


@pytest.fixture
def model():
    module, _ = parse_module(IR)
    rng = np.random.default_rng(0)
    return Model(module, WeightStore(w=rng.standard_normal((8, 4, 3, 3)).astype(np.float32)))


def conv_oracle(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 8, 6, 6), np.float32)
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("oc,nchw->nohw", w[:, :, kh, kw], xp[:, :, kh:kh + 6, kw:kw + 6])
    return out


def conv_of(model):
    return next(op for op in model.ops() if getattr(op, "layer_name", "") == "conv")


def test_loop_dims_and_carried_loops(model):
    assert Loop("co.o.i").dims == {"co"} and Loop("co.i*ci").dims == {"co", "ci"}
    t = model.transform('strip-mine{dim=ci factor=2},fuse{dims=oh,ow}')
    assert carried_loops(conv_of(t)) == ["ci.o", "ci.i", "kh", "kw"]


def test_a_register_tile_is_the_parallel_loops_inside_the_first_reduction_loop():
    """`Schedule.tile_start`, `outer_loops`, `tile_loops`, the one place lowering learns which
    loops are the register tile: a conv's from its first reduction loop (a fused kh*kw too); a
    copy nest's, without reductions, the loops unrolled whole before its vector loop."""
    conv = DomainAttr.make([("n", 1), ("co", 16), ("oh", 8), ("ow", 16)], [("ci", 4), ("kh", 3), ("kw", 3)])
    tiled = Schedule(splits=[("ow", 8), ("oh", 4), ("co", 4)],
                     order=["n", "co.o", "oh.o", "ow.o", "ci", "kh", "kw", "oh.i", "co.i", "ow.i"],
                     vector="ow.i", unroll={"oh.i": 4, "co.i": 4, "kh": 3, "kw": 3})
    assert tiled.tile_start(conv) == 4
    assert tiled.outer_loops(conv) == ["n", "co.o", "oh.o", "ow.o"] and tiled.tile_loops(conv) == ["oh.i", "co.i"]
    fused = Schedule(fusions=[("kh", "kw")], order=["n", "co", "oh", "kh*kw", "ci", "ow"], vector="ow")
    assert fused.tile_start(conv) == 3 and fused.tile_loops(conv) == []
    copy = DomainAttr.make([("n", 1), ("c", 16), ("h", 4), ("w", 8)])
    transposing = Schedule(splits=[("c", 8)], order=["n", "c.o", "h", "c.i", "w"], vector="w", unroll={"c.i": 8})
    assert transposing.tile_start(copy) == 3
    assert transposing.outer_loops(copy) == ["n", "c.o", "h"] and transposing.tile_loops(copy) == ["c.i"]
    rolled = Schedule(splits=[("c", 8)], order=["n", "c.o", "h", "c.i", "w"], vector="w", unroll={"c.i": 2})
    assert rolled.tile_start(copy) == 4 and rolled.tile_loops(copy) == []
    assert Schedule().tile_start(copy) == 4 and Schedule().outer_loops(copy) == ["n", "c", "h", "w"]


@pytest.mark.parametrize("pipeline, message", [
    ("parallel{dim=kh}", "carries the 'mac' accumulation over reduction dim(s) kh"),
    ("fuse{dims=n,oh}", "are not adjacent"),
    ("vectorize{dim=ow}", "is not innermost"),
    ("vectorize{dim=kw}", "carries the 'mac' accumulation"),
    ("interchange{order=ci,co},fuse{dims=co,kh}", "mix parallel and reduction dims"),
    ("strip-mine{dim=co factor=9}", "must be in 1..8"),
    ("tile{dims=co factors=2,2}", "1 dims but 2 factors"),
    ("unroll{dim=zz}", "none has loop(s) zz"),
    ("pack{operand=1 layout=OIHW3o}", "does not divide axis O"),
    ("pack{operand=1 layout=OIXW}", "applies to no nest"),
    ("parallel{dim=co},parallel{dim=oh}", "already runs loop 'co' in parallel"),
])
def test_illegal_requests_name_the_reason_and_leave_the_model(model, pipeline, message):
    before = model.text()
    with pytest.raises(PassError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model.transform(pipeline)
    assert model.text() == before


def test_parallel_on_a_reduction_is_a_legality_error(model):
    with pytest.raises(LegalityError):
        model.transform("parallel{dim=ci}")


SCHEDULES = [
    "interchange{order=ow,oh,co,n},unroll{dim=kw}",
    'strip-mine{dim=co factor=3},interchange{order="co.i",ow},parallel{dim="co.o"}',
    'tile{dims=oh,ow factors=4,4},unroll{dim=kw},interchange{order=kw,"ow.i"},vectorize{dim="ow.i"}',
    'fuse{dims=oh,ow},interchange{order="oh*ow",co},interchange{order=ci,kh,kw,co},vectorize{dim=co}',
    'pack{operand=1 layout=OIHW4i4o}',
    'pack{operand=1 layout=OIHW4i4o},pack{operand=0 layout=NCHW4c}',
]


@pytest.mark.parametrize("pipeline", SCHEDULES)
def test_schedules_keep_the_values(model, pipeline):
    import nasir

    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    expected = conv_oracle(x, model.weights["w"])
    t = model.transform(pipeline)
    assert "schedule" in t.text()
    np.testing.assert_allclose(nasir.compile(t, target="torch")(x), expected, rtol=1e-4, atol=1e-4)
    if "operand=0" in pipeline:  # packed activations are not lowered: refused, never ignored
        with pytest.raises(LoweringError, match="packed activations"):
            nasir.compile(t, target="llvm")
        return
    np.testing.assert_allclose(nasir.compile(t, target="llvm")(x), expected, rtol=1e-4, atol=1e-4)
