"""The nest each nn op is: domains and access maps, shared by convert-nn-to-nest (which builds
them) and the backends that recognise them (the torch backend's conv and pool fast paths).

Domain conventions (architecture transforms rely on these dim names):

- dense conv (groups = 1):  [n, co, oh, ow], [ci, kh, kw]
    x (n, ci, oh*sh + kh*dh - pt, ow*sw + kw*dw - pl), w (co, ci, kh, kw), out (n, co, oh, ow)
- grouped conv (G > 1):     [n, g, co, oh, ow], [ci, kh, kw]   (co, ci are per-group extents)
    x (n, g*CI + ci, ...), w (g*CO + co, ci, kh, kw), out (n, g*CO + co, oh, ow)
- depthwise (G = C_in, weight [G*M, 1, kh, kw]): [n, g, co, oh, ow], [kh, kw]  (co extent M, ci
    dropped) x (n, g, ...), w (g*M + co, 0, kh, kw), out (n, g*M + co, oh, ow)
  The bias is epilogue `add 2` read at the output channel.
- gemm: [m, n], [k]; matmul: [b0, b1, ..., m, n], [k] (m / n absent for 1-D operands).
- pools: [n, c, oh, ow], [kh, kw] with the conv window map; global pools: [n, c], [kh, kw].
- element-wise, expand, transpose, pad, slice (combiner copy): the output's dims, named [n, c, h, w]
  for 4-D outputs and [i0, i1, ...] otherwise; broadcast operands read size-1 axes at index 0.
- reduce_mean / reduce_sum (combiner avg): the output's dims (reduced axes of extent 1), then
  [r<axis>, ...] over the reduced axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.ir.affine import AffineExpr, AffineMap

from nasir.dialects import nest

Shape = tuple[int, ...]


def dims_of(names: Sequence[str]) -> dict[str, AffineExpr]:
    return {name: AffineExpr.dimension(i) for i, name in enumerate(names)}


def amap(ndims: int, results: Sequence[AffineExpr | int]) -> AffineMap:
    return AffineMap(ndims, 0, tuple(r if isinstance(r, AffineExpr) else AffineExpr.constant(r) for r in results))


def window(out: AffineExpr, k: AffineExpr, stride: int, dilation: int, pad: int) -> AffineExpr:
    """Input index of window position `k` of output position `out`: out*stride + k*dilation - pad."""
    return out * stride + k * dilation - pad


@dataclass(frozen=True)
class Window:
    """Geometry of a 2-D window op: strides, dilations and the top/left pads (reads before 0)."""

    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    pads: tuple[int, int] = (0, 0)

    def rows(self, d: dict[str, AffineExpr]) -> tuple[AffineExpr, AffineExpr]:
        return (window(d["oh"], d["kh"], self.strides[0], self.dilations[0], self.pads[0]),
                window(d["ow"], d["kw"], self.strides[1], self.dilations[1], self.pads[1]))


def conv_nest(x_shape: Shape, w_shape: Shape, out_hw: tuple[int, int], groups: int, geo: Window):
    """Domain and maps (x, w, bias, out) of a conv; the kind (dense/grouped/depthwise) from groups."""
    n, c, _, _ = x_shape
    o, i, kh, kw = w_shape
    oh, ow = out_hw
    if groups == 1:
        par = [("n", n), ("co", o), ("oh", oh), ("ow", ow)]
        red = [("ci", i), ("kh", kh), ("kw", kw)]
    elif i == 1 and groups == c:
        par = [("n", n), ("g", groups), ("co", o // groups), ("oh", oh), ("ow", ow)]
        red = [("kh", kh), ("kw", kw)]
    else:
        par = [("n", n), ("g", groups), ("co", o // groups), ("oh", oh), ("ow", ow)]
        red = [("ci", i), ("kh", kh), ("kw", kw)]
    domain = nest.DomainAttr.make(par, red)
    d = dims_of(domain.dim_names)
    rows = geo.rows(d)
    nd = len(domain.dim_names)
    cout = d["co"] if groups == 1 else d["g"] * (o // groups) + d["co"]
    if groups == 1:
        cin, wci = d["ci"], d["ci"]
    elif "ci" in d:
        cin, wci = d["g"] * i + d["ci"], d["ci"]
    else:
        cin, wci = d["g"], AffineExpr.constant(0)
    maps = [amap(nd, [d["n"], cin, *rows]), amap(nd, [cout, wci, d["kh"], d["kw"]]), amap(nd, [cout])]
    return domain, maps, amap(nd, [d["n"], cout, d["oh"], d["ow"]])


def pool_nest(x_shape: Shape, out_hw: tuple[int, int], kernel: tuple[int, int], geo: Window):
    """Domain, input map and out map of a windowed pool."""
    n, c, _, _ = x_shape
    domain = nest.DomainAttr.make([("n", n), ("c", c), ("oh", out_hw[0]), ("ow", out_hw[1])],
                                  [("kh", kernel[0]), ("kw", kernel[1])])
    d = dims_of(domain.dim_names)
    return domain, amap(6, [d["n"], d["c"], *geo.rows(d)]), amap(6, [d["n"], d["c"], d["oh"], d["ow"]])


def elementwise_domain(shape: Shape) -> nest.DomainAttr:
    names = ["n", "c", "h", "w"] if len(shape) == 4 else [f"i{k}" for k in range(len(shape))]
    return nest.DomainAttr.make(list(zip(names, shape)))


def broadcast_map(shape: Shape, out_dims: Sequence[AffineExpr], out_shape: Shape, ndims: int) -> AffineMap:
    """Read an operand of `shape` broadcast (numpy rules, right-aligned) to `out_shape`."""
    lead = len(out_shape) - len(shape)
    return amap(ndims, [0 if size == 1 and out_shape[lead + a] != 1 else out_dims[lead + a]
                        for a, size in enumerate(shape)])


def identity(ndims: int) -> AffineMap:
    return AffineMap.identity(ndims)
