"""A mac nest that is a convolution however its dims are named, split or shared, as F.conv2d.

The coordinate primitives (`nasir.transforms.primitives`) and the architecture transforms leave
convs whose dims are not convert-nn-to-nest's: `co` split into `co_o * 4 + co_i`, an input channel
read as `co_o * 4 + ci_i` (a grouped conv made by `tie`), a weight that no longer reads `kh`
(`expand`) or that reads `oh` too (`share`). Each still is a conv of its input by a weight that
can be gathered into PyTorch's layout [Co, Ci / G, KH, KW]. `conv_plan` reads that off the maps:

- parallel dims `n`, channel dims..., `ph`, `pw` (in that order), the output read as
  (n, the channel dims row-major, ph, pw);
- input 0 read as (n, a form of the channel dims, s * ph + d * kh - p, s' * pw + d' * kw - p'),
  `kh`/`kw` reduction dims (or none: a 1-wide window); every other reduction dim is a channel dim;
- input 1, the weight, read through any linear map of the channel dims, `kh`, `kw`, and at most
  one of `ph`, `pw` (then each row, or column, has its own weight: a conv per row).

The plan holds, for every entry of the conv weight, which weight entries sum into it (`take`; a
channel the nest never reads gets none, a zero), and the largest group count G whose blocks hold
every read: a grouped conv runs as one. `run_conv` gathers the weight (Gather/Mul/Add on an
initializer, which an exported file folds back into a constant) and calls F.conv2d.

    [n = 1, co_o = 2, co_i = 4, oh = 8, ow = 8], [ci_i = 4, kh = 3, kw = 3]
      x (n, co_o * 4 + ci_i, oh + kh - 1, ow + kw - 1)  w (co_o * 4 + co_i, ci_i, kh, kw)
    -> F.conv2d(x, w.reshape(-1)[take], padding=1, groups=2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.ir.affine import AffineMap

from nasir.dialects import affine, nest
from nasir.dialects.nest_maps import Window
from nasir.dialects.shapes import shape_of

PLANS = 512
"""Conv plans remembered (by domain, maps and shapes): a model's forward passes reuse them."""


def static_shape(x: torch.Tensor) -> tuple[int, ...]:
    """Static sizes of `x` as ints (under ONNX tracing `x.shape` holds tensors; nest shapes are static)."""
    return tuple(int(s) for s in x.shape)


def window_pads(x: torch.Tensor, out_hw: tuple[int, int], kernel: tuple[int, int], geo: Window) -> list[int]:
    """F.pad amounts (w begin, w end, h begin, h end) so a padding-free window op yields `out_hw`."""
    pads = []
    for axis in (1, 0):
        size = static_shape(x)[2 + axis]
        need = (out_hw[axis] - 1) * geo.strides[axis] + (kernel[axis] - 1) * geo.dilations[axis] + 1
        pads += [geo.pads[axis], need - size - geo.pads[axis]]
    return pads


def conv2d(x: torch.Tensor, w: torch.Tensor, out_hw: tuple[int, int], geo: Window, groups: int) -> torch.Tensor:
    """F.conv2d of `x` by `w` ([Co, Ci / groups, KH, KW]) giving exactly `out_hw` positions."""
    pw0, pw1, ph0, ph1 = window_pads(x, out_hw, tuple(static_shape(w)[2:]), geo)
    # The conv pads both ends by the begin amount (exports as one Conv) when that adds at most
    # stride - 1 rows at the end (or cuts some off), which no window reaches: e.g. a stride-2 3x3 or
    # 1x1 conv of an even size.
    if all(0 <= p0 - p1 < s and p0 >= 0 for p0, p1, s in ((ph0, ph1, geo.strides[0]), (pw0, pw1, geo.strides[1]))):
        return F.conv2d(x, w, stride=geo.strides, padding=(ph0, pw0), dilation=geo.dilations, groups=groups)
    return F.conv2d(F.pad(x, [pw0, pw1, ph0, ph1]), w, stride=geo.strides, dilation=geo.dilations, groups=groups)


@dataclass(frozen=True)
class ConvPlan:
    """How a conv-like nest runs as F.conv2d: geometry, groups, and the weight's gather.

    `take[k]` (int64, [R, Co, Ci / G, KH, KW]) indexes the flat weight, `keep[k]` (0/1, same shape,
    None: all 1) says which of them count; the conv weight is the sum over k. R is 1, or the rows
    (`per` = 2) or columns (`per` = 3) of the output when the weight reads ph or pw."""

    out_hw: tuple[int, int]
    geo: Window
    groups: int
    take: tuple[np.ndarray, ...]
    keep: tuple[np.ndarray | None, ...]
    per: int | None


def _plain(form) -> int | None:
    coeffs, const = form
    if const == 0 and len(coeffs) == 1 and next(iter(coeffs.values())) == 1:
        return next(iter(coeffs))
    return None


def _spatial(form, out: int, parallel: set[int]) -> tuple[int, int | None, int, int] | None:
    """(stride, window dim or None, dilation, pad) of a data access `s * out + d * k - p`."""
    coeffs, const = dict(form[0]), form[1]
    stride = coeffs.pop(out, 0)
    if stride < 1 or len(coeffs) > 1:
        return None
    if not coeffs:
        return stride, None, 1, -const
    (k, d), = coeffs.items()
    return (stride, k, d, -const) if d >= 1 and k not in parallel else None


@lru_cache(maxsize=PLANS)
def conv_plan(domain: nest.DomainAttr, xmap: AffineMap, wmap: AffineMap, omap: AffineMap,
              x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> ConvPlan | None:
    """The plan of a mac nest reading x through `xmap` and w through `wmap` (module doc), None if
    it is not a conv in this sense."""
    extents = [e for _, e in domain.dims]
    npar = domain.num_parallel.data
    if len(x_shape) != 4 or len(out_shape) != 4 or npar < 3:
        return None
    forms = [affine.linear_form(e) for e in (*xmap.results, *omap.results, *wmap.results)]
    if any(f is None for f in forms):
        return None
    xf, of, wf = forms[:4], forms[4:8], forms[8:]
    ph, pw = npar - 2, npar - 1
    if [_plain(f) for f in (xf[0], of[0], of[2], of[3])] != [0, 0, ph, pw]:
        return None
    parallel = set(range(npar))
    rows, cols = _spatial(xf[2], ph, parallel), _spatial(xf[3], pw, parallel)
    if rows is None or cols is None or (rows[1] is not None and rows[1] == cols[1]):
        return None
    window = [k for k in (rows[1], cols[1]) if k is not None]
    channels = [d for d in range(1, len(extents)) if d not in (ph, pw, *window)]
    pc = [d for d in channels if d < npar]
    # the output channel: the channel parallel dims row-major; the input channel: only channel dims
    stride, expected = 1, {}
    for d in reversed(pc):
        expected[d] = stride
        stride *= extents[d]
    if of[1] != (expected, 0) and not (not pc and of[1] == ({}, 0)):
        return None
    if any(d not in channels for d in xf[1][0]):
        return None
    shared = {d for f in wf for d in f[0]} & {ph, pw}
    if 0 in {d for f in wf for d in f[0]} or len(shared) > 1:
        return None
    read = {d for f in (*xf, *wf) for d in f[0]}
    if any(d not in read for d in range(npar, len(extents))):
        return None
    per = None if not shared else (2 if shared == {ph} else 3)
    names = [*channels, *window, *sorted(shared)]
    if not names:
        return None
    grid = np.meshgrid(*[np.arange(extents[d]) for d in names], indexing="ij")

    def at(form) -> np.ndarray:
        coeffs, const = form
        return sum((c * grid[names.index(d)] for d, c in coeffs.items()), np.zeros_like(grid[0])) + const

    co, ci = at(of[1]), at(xf[1])
    w_flat = np.ravel_multi_index(tuple(at(f) for f in wf), w_shape)
    kh = grid[names.index(rows[1])] if rows[1] is not None else np.zeros_like(co)
    kw = grid[names.index(cols[1])] if cols[1] is not None else np.zeros_like(co)
    r = grid[-1] if shared else np.zeros_like(co)
    inside = (ci >= 0) & (ci < x_shape[1])
    if not inside.any():
        return None  # reads no input channel: the generic path gives its zeros
    big_co, big_ci = out_shape[1], x_shape[1]
    pairs = np.unique(np.stack([co[inside], ci[inside]]), axis=1)  # the (output, input) channels read
    common = math.gcd(big_co, big_ci)
    groups = next(g for g in range(common, 0, -1)
                  if common % g == 0 and np.all(pairs[1] // (big_ci // g) == pairs[0] // (big_co // g)))
    kernel = (extents[rows[1]] if rows[1] is not None else 1, extents[cols[1]] if cols[1] is not None else 1)
    per_extent = out_shape[per] if per else 1
    shape = (per_extent, big_co, big_ci // groups, *kernel)
    cell = np.ravel_multi_index((r[inside], co[inside], ci[inside] % (big_ci // groups), kh[inside], kw[inside]),
                                shape)
    source = w_flat[inside]
    order = np.argsort(cell, kind="stable")
    cell, source = cell[order], source[order]
    first = np.searchsorted(cell, cell, side="left")
    rank = np.arange(cell.size) - first  # the k-th weight entry summing into its cell
    take, keep = [], []
    for k in range(int(rank.max()) + 1):
        table = np.zeros(math.prod(shape), np.int64)
        hit = np.zeros(math.prod(shape), bool)
        table[cell[rank == k]] = source[rank == k]
        hit[cell[rank == k]] = True
        take.append(table.reshape(shape))
        keep.append(None if hit.all() else hit.reshape(shape).astype(np.float32))
    geo = Window((rows[0], cols[0]), (rows[2], cols[2]), (rows[3], cols[3]))
    return ConvPlan((out_shape[2], out_shape[3]), geo, groups, tuple(take), tuple(keep), per)


def plan_of(op: nest.ComputeOp, inputs: list[torch.Tensor], batched: bool) -> ConvPlan | None:
    """`conv_plan` of `op` on its operands `inputs` (a nest that keeps the batch: of any batch)."""
    if op.kind != "mac" or len(inputs) < 2:
        return None
    x, w = inputs[0], inputs[1]
    out_shape = tuple(shape_of(op.result))
    x_shape = static_shape(x)
    if batched:
        out_shape, x_shape = (1, *out_shape[1:]), (1, *x_shape[1:])
    maps = op.access_maps
    return conv_plan(op.domain, maps[0], maps[1], op.output_map, x_shape, static_shape(w), out_shape)


def run_conv(plan: ConvPlan, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The nest's output [N, Co, Ho, Wo] on `x` (any batch) and its weight `w`."""
    flat = w.reshape(-1)
    weight = None
    for take, keep in zip(plan.take, plan.keep):
        part = flat[torch.from_numpy(take)]
        part = part if keep is None else part * torch.from_numpy(keep)
        weight = part if weight is None else weight + part
    if plan.per is None:
        return conv2d(x, weight[0], plan.out_hw, plan.geo, plan.groups)
    pieces = []
    for k in range(static_shape(weight)[0]):
        y = conv2d(x, weight[k], plan.out_hw, plan.geo, plan.groups)
        start = [0, 0] * 2
        cut = 2 * (3 - plan.per)
        start[cut:cut + 2] = [-k, k + 1 - plan.out_hw[plan.per - 2]]
        pieces.append(F.pad(y, start))  # row (column) k alone: a Pad with negative pads, not a Slice
    return torch.cat(pieces, plan.per)
