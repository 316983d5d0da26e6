"""Run one `nest.compute` op on torch tensors: the reference semantics of the nest dialect.

The torch backend (`program.TorchProgram`) calls `run_compute` for every nest of a model; Fisher Potential
backpropagates through it, so everything here is differentiable torch code.

Generic path, correct for any nest (arbitrary affine maps, split parts, shifted accesses):
1. every input is gathered into a tensor aligned with the domain (axis i = domain dim i, size 1
   where the map does not use the dim), indices computed by evaluating the map on index grids;
   out-of-bounds reads are masked to the combiner's identity (0 for mac/copy, -inf for max,
   left out of the count for avg);
2. the combiner reduces over the reduction dims (for mac `contract`, a batched matrix product;
   amax, masked mean);
3. the epilogue steps run on the result, still laid out as the parallel dims;
4. the result is scattered into the output through out_map.

Any batch size: a nest whose domain dim 0 is the batch (`keeps_batch`) runs as its per-sample nest
(dim 0 of extent 1) on tensors that carry the batch on axis 0, gathered and scattered per sample, so
the batch stays a dimension of the computation (and of an exported ONNX graph), not a constant.

Fast path: inputs whose maps are plain (permuted) dims are viewed, not gathered, and convs and
pools built by convert-nn-to-nest (recognised by rebuilding their maps) go to
torch.nn.functional; so do the convs the architecture transforms make of them (grouped, depthwise,
index-split parts, shifted or unshared windows, and a conv reading the first channels of each
group, bottleneck{dim=ci}, as a conv of that channel slice). Both paths compute the same numbers; `fast=False` forces the generic one.

What the fast path emits is also what `to_onnx` traces, so it sticks to ops nasir's own frontend
imports (and ONNX Runtime runs well): a channel slice is a Pad with negative pads (`_narrow`), a
contraction Transpose/Reshape/MatMul (`contract`), a broadcast of a copy nest (the spatial
bottleneck's repeated rows) a Concat of copies (`_repeat`), and reshapes that change nothing are
left out: no Einsum, Expand, Where or Slice on activations.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable

import torch
import torch.nn.functional as F
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)

from nasir.dialects import affine, nest
from nasir.dialects.nest_maps import Window, conv_nest, pool_nest
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError
from nasir.lowering.nest_to_torch.conv_like import conv2d, plan_of, run_conv, static_shape, window_pads
from nasir.lowering.nest_to_torch.steps import apply_step



# --- the batch ---------------------------------------------------------------------------------

def _only_on_axis0(amap: AffineMap) -> bool:
    """Is dim 0 read as axis 0 of the operand and nowhere else?"""
    first = amap.results[0] if amap.results else None
    return (isinstance(first, AffineDimExpr) and first.position == 0
            and all(0 not in affine.used_dims(e) for e in amap.results[1:]))


def keeps_batch(op: nest.ComputeOp) -> bool:
    """Is domain dim 0 the batch: a parallel dim that is axis 0 of the output and of every operand
    reading it (one at least), and read nowhere else? Then samples are independent."""
    if op.domain.num_parallel.data == 0 or not _only_on_axis0(op.output_map):
        return False
    readers = [m for m in op.access_maps if 0 in affine.map_dims(m)]
    return bool(readers) and all(_only_on_axis0(m) for m in readers)


def _sizes(extents: list[int], batched: bool) -> list[int]:
    """`extents` as reshape sizes: a batched nest's dim 0 is whatever batch the tensors carry."""
    return [-1, *extents[1:]] if batched else list(extents)


def _reshape(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """`x.reshape(sizes)`, or `x` itself when it already has that shape (-1: any size), so an
    exported graph holds no Reshape that changes nothing."""
    shape = static_shape(x)
    if len(shape) == len(sizes) and all(s in (-1, d) for s, d in zip(sizes, shape)):
        return x
    return x.reshape(sizes)


def _permute(x: torch.Tensor, order: list[int]) -> torch.Tensor:
    """`x.permute(order)`, or `x` when the order keeps every axis in place (no Transpose exported)."""
    return x if list(order) == sorted(order) else x.permute(order)


def _repeat(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """`x.expand(sizes)` as copies concatenated along each axis of size 1 that grows (-1: keep):
    exports as Concat, which every importer runs, where expand exports as Expand (and Where/Equal
    for the -1).

        >>> _repeat(torch.tensor([[1.0], [2.0]]), [-1, 3]).tolist()
        [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
    """
    for axis, (have, want) in enumerate(zip(static_shape(x), sizes)):
        if want not in (-1, have):
            x = torch.cat([x] * want, axis)
    return x


# --- gathering ---------------------------------------------------------------------------------

def _grid(extents: list[int]) -> Callable[[int], torch.Tensor]:
    nd = len(extents)
    return lambda i: torch.arange(extents[i]).view([-1 if j == i else 1 for j in range(nd)])


def _view(x: torch.Tensor, sizes: tuple[int, ...], amap: AffineMap, extents: list[int],
          per_sample: bool) -> torch.Tensor | None:
    """`x` (of per-sample `sizes`) aligned with the domain without copying, when every map result
    is a dim spanning its axis exactly or an in-bounds constant; else None."""
    positions, selects = [], []
    for axis, e in enumerate(amap.results):
        if isinstance(e, AffineDimExpr) and extents[e.position] == sizes[axis]:
            positions.append(e.position)
        elif isinstance(e, AffineConstantExpr) and 0 <= e.value < sizes[axis]:
            selects.append((axis, e.value))
        else:
            return None
    if len(set(positions)) != len(positions):
        return None
    for axis, value in reversed(selects):
        x = x.select(axis, value)
    order = sorted(range(len(positions)), key=lambda a: positions[a])
    aligned = [extents[d] if d in positions else 1 for d in range(len(extents))]
    return _reshape(_permute(x, order), _sizes(aligned, per_sample))


def gather(x: torch.Tensor, amap: AffineMap, extents: list[int], fast: bool = True, batched: bool = False,
           fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Values of `x` read through `amap` at every point of the domain, aligned with the domain
    (size 1 along dims the map does not use), `fill` where a read falls outside `x`, and the
    in-bounds mask (None when all are in bounds). Outside reads come from `x` padded by `fill`
    (exports as Pad, not as Where).

    `batched`: the nest keeps the batch (`extents[0]` is 1, a sample); an `x` that reads dim 0 then
    carries the whole batch on axis 0, and so do the values."""
    per_sample = batched and 0 in affine.map_dims(amap)
    sizes = (1, *static_shape(x)[1:]) if per_sample else static_shape(x)
    if fast and (view := _view(x, sizes, amap, extents, per_sample)) is not None:
        return view, None
    used = affine.map_dims(amap)
    aligned = [extents[d] if d in used else 1 for d in range(len(extents))]
    dim = _grid(extents)
    mask = torch.ones(aligned, dtype=torch.bool)
    first = 1 if per_sample else 0
    reads, pads = [], [0, 0] * len(sizes)
    for axis in range(first, len(amap.results)):
        idx = torch.as_tensor(affine.evaluate(amap.results[axis], dim))
        mask = mask & (idx >= 0) & (idx < sizes[axis])
        before, after = max(0, -int(idx.min())), max(0, int(idx.max()) - sizes[axis] + 1)
        pads[2 * (len(sizes) - 1 - axis): 2 * (len(sizes) - axis)] = [before, after]
        reads.append(idx + before)
    if any(pads):
        x = F.pad(x, pads, value=fill)
    padded = static_shape(x)
    flat, stride = torch.zeros(aligned, dtype=torch.long), 1
    for axis, idx in zip(reversed(range(first, len(amap.results))), reversed(reads)):
        flat = flat + idx * stride
        stride *= padded[axis]
    if per_sample:
        values = _reshape(x.reshape(x.shape[0], -1)[:, flat.reshape(-1)], _sizes(aligned, True))
    else:
        values = x.reshape(-1)[flat]
    return values, (None if bool(mask.all()) else mask)


# --- combiners ---------------------------------------------------------------------------------

def _mac(op: nest.ComputeOp, inputs: list[torch.Tensor], extents: list[int], fast: bool,
         batched: bool) -> torch.Tensor:
    npar = op.domain.num_parallel.data
    sizes = _sizes(extents, batched)
    operands, used_any = [], set()
    for x, amap in zip(inputs[:2], op.access_maps[:2]):
        values, _ = gather(x, amap, extents, fast, batched)
        used = sorted(affine.map_dims(amap))
        operands.append((_reshape(values, [sizes[d] for d in used]), used))
        used_any |= set(used)
    kept = [d for d in range(npar) if d in used_any]
    core = contract(*operands[0], *operands[1], kept, sizes)
    unread = math.prod(extents[d] for d in range(npar, len(extents)) if d not in used_any)
    if unread != 1:
        core = core * unread
    aligned = [extents[d] if d in used_any else 1 for d in range(npar)]
    return _reshape(core, _sizes(aligned, batched and 0 in used_any))


def _sum_alone(x: torch.Tensor, dims: list[int], other: list[int], out_dims: list[int]
               ) -> tuple[torch.Tensor, list[int]]:
    """`x` summed over the dims no other operand and not the output has, and its remaining dims."""
    alone = [i for i, d in enumerate(dims) if d not in other and d not in out_dims]
    return (x.sum(alone), [d for i, d in enumerate(dims) if i not in alone]) if alone else (x, dims)


def contract(a: torch.Tensor, a_dims: list[int], b: torch.Tensor, b_dims: list[int], out_dims: list[int],
             sizes: list[int]) -> torch.Tensor:
    """`einsum(a_dims, b_dims -> out_dims)` as one batched matrix product (sizes[d]: extent of dim d,
    -1 for the batch): dims of both operands and the output are its batch, of one operand and the
    output its rows (a) or columns (b), of both operands only its reduction; a dim of one operand
    only is summed first. Exports as Transpose/Reshape/MatMul, which ONNX importers run, where
    einsum exports as Einsum.

        >>> a, b = torch.ones(2, 3), torch.ones(4, 3)        # gemm with a transposed weight
        >>> contract(a, [0, 2], b, [1, 2], [0, 1], [2, 4, 3]).shape
        torch.Size([2, 4])
    """
    a, a_dims = _sum_alone(a, a_dims, b_dims, out_dims)
    b, b_dims = _sum_alone(b, b_dims, a_dims, out_dims)
    both = [d for d in out_dims if d in a_dims and d in b_dims]
    rows = [d for d in out_dims if d in a_dims and d not in b_dims]
    cols = [d for d in out_dims if d in b_dims and d not in a_dims]
    red = [d for d in a_dims if d in b_dims and d not in out_dims]

    def size(dims: list[int]) -> int:
        return -1 if any(sizes[d] == -1 for d in dims) else math.prod(sizes[d] for d in dims)

    lead = [size(both)] if both else []
    a = _reshape(_permute(a, [a_dims.index(d) for d in both + rows + red]), lead + [size(rows), size(red)])
    b = _reshape(_permute(b, [b_dims.index(d) for d in both + red + cols]), lead + [size(red), size(cols)])
    y = _reshape(torch.matmul(a, b), [sizes[d] for d in both + rows + cols])
    order = both + rows + cols
    return _permute(y, [order.index(d) for d in out_dims])


def _window_op(op: nest.ComputeOp, inputs: list[torch.Tensor], extents: list[int], fast: bool,
               batched: bool) -> torch.Tensor:
    npar = op.domain.num_parallel.data
    values, mask = gather(inputs[0], op.access_maps[0], extents, fast, batched,
                          -math.inf if op.kind == "max" else 0.0)
    red = tuple(range(npar, len(extents)))
    if op.kind == "max":
        return values.amax(red) if red else values
    if op.kind == "avg" and red:
        count = math.prod(extents[d] for d in red) if mask is None else mask.sum(red).to(values.dtype)
        return values.sum(red) / count
    return values


# --- recognised convs and pools ----------------------------------------------------------------

def _window_geometry(op: nest.ComputeOp) -> Window | None:
    """Strides/dilations/pads read off input 0's spatial map results, if they are linear."""
    names = op.domain.dim_names
    forms = [affine.linear_form(e) for e in op.access_maps[0].results[2:]]
    if len(forms) != 2 or any(f is None for f in forms):
        return None
    geo = []
    for (coeffs, const), out, k in zip(forms, ("oh", "ow"), ("kh", "kw")):
        s, d = coeffs.get(names.index(out), 0), coeffs.get(names.index(k), 0)
        if s < 1 or d < 1:
            return None
        geo.append((s, d, -const))
    return Window((geo[0][0], geo[1][0]), (geo[0][1], geo[1][1]), (geo[0][2], geo[1][2]))


CONV_DOMAINS = {
    (("n", "co", "oh", "ow"), ("ci", "kh", "kw")),
    (("n", "g", "co", "oh", "ow"), ("ci", "kh", "kw")),
    (("n", "g", "co", "oh", "ow"), ("kh", "kw")),
}


def _padded(x: torch.Tensor, out_hw: tuple[int, int], kernel: tuple[int, int], geo: Window,
            value: float = 0.0) -> torch.Tensor:
    """`x` padded (or cropped) so a padding-free window op yields exactly `out_hw` positions."""
    return F.pad(x, window_pads(x, out_hw, kernel, geo), value=value)


def _read_channels(op: nest.ComputeOp, x: torch.Tensor, groups: int, ci: int) -> torch.Tensor | None:
    """The input channels a conv reads, in the order a conv of `groups` groups of `ci` channels
    takes them, or None. The channel access must be `g * S + ci + offset`: S = ci and offset 0 read
    the whole input (x as is); a larger S reads the first channels of each group (bottleneck{dim=ci}).
    A depthwise conv (no ci dim) must read channel `g`."""
    names = op.domain.dim_names
    form = affine.linear_form(op.access_maps[0].results[1])
    if form is None:
        return None
    coeffs, offset = dict(form[0]), form[1]
    stride = coeffs.pop(names.index("g"), 0) if "g" in names else 0
    if "ci" not in names:
        return x if (coeffs, offset, stride) == ({}, 0, 1) else None
    channels = static_shape(x)[1]
    if coeffs != {names.index("ci"): 1} or offset < 0 or (groups - 1) * stride + offset + ci > channels:
        return None
    if groups == 1:
        return x if (offset, ci) == (0, channels) else _narrow(x, 1, offset, ci)
    if (stride, offset, groups * ci) == (ci, 0, channels):
        return x
    if groups * stride == channels:  # channels [g*S + offset, g*S + offset + ci) of each group g
        n, _, *spatial = static_shape(x)
        per_group = _narrow(x.reshape([-1, groups, stride, *spatial]), 2, offset, ci)
        return per_group.reshape([-1, groups * ci, *spatial])
    index = (torch.arange(groups).view(-1, 1) * stride + offset + torch.arange(ci)).reshape(-1)
    return x.index_select(1, index)


def _narrow(x: torch.Tensor, axis: int, start: int, length: int) -> torch.Tensor:
    """`x.narrow(axis, start, length)` as a constant pad by minus the cut-off amounts: exports as
    Pad (with negative pads), which nasir's ONNX frontend imports, where narrow exports as Slice.

        >>> _narrow(torch.arange(6.0).view(1, 6), 1, 2, 3).tolist()
        [[2.0, 3.0, 4.0]]
    """
    spec = [0, 0] * (x.dim() - 1 - axis) + [-start, start + length - static_shape(x)[axis]]
    return F.pad(x, spec)


def _same_but_channel(a, b) -> bool:
    """Two input maps that agree on every result but the channel one (checked by `_read_channels`)."""
    return a.num_dims == b.num_dims and a.results[:1] + a.results[2:] == b.results[:1] + b.results[2:]


def _conv(op: nest.ComputeOp, inputs: list[torch.Tensor], extents: list[int], geo: Window,
          batched: bool) -> torch.Tensor | None:
    """F.conv2d for a conv nest as convert-nn-to-nest builds it, also one reading a channel slice."""
    dom = op.domain
    x, w = inputs[0], inputs[1]
    if x.dim() != 4 or w.dim() != 4:
        return None
    groups = dom.extent("g") if "g" in dom.dim_names else 1
    out_hw = (dom.extent("oh"), dom.extent("ow"))
    # the whole input's shape: a slice of one channel per group is still a conv with a ci dim
    domain, maps, _ = conv_nest(shape_of(op.operands[0]), tuple(static_shape(w)), out_hw, groups, geo)
    if domain != dom or maps[1] != op.access_maps[1] or not _same_but_channel(maps[0], op.access_maps[0]):
        return None
    x = _read_channels(op, x, groups, static_shape(w)[1])
    if x is None or static_shape(x)[1] != groups * static_shape(w)[1]:
        return None
    y = conv2d(x, w, out_hw, geo, groups)
    return _reshape(y, _sizes(extents[:dom.num_parallel.data], batched))


def _functional(op: nest.ComputeOp, inputs: list[torch.Tensor], extents: list[int],
                batched: bool) -> torch.Tensor | None:
    dom = op.domain
    key = (tuple(n for n, _ in dom.parallel), tuple(n for n, _ in dom.reduction))
    if op.kind == "mac" and key in CONV_DOMAINS and (geo := _window_geometry(op)) is not None:
        if (core := _conv(op, inputs, extents, geo, batched)) is not None:
            return core
    if (plan := plan_of(op, inputs, batched)) is not None:
        return _reshape(run_conv(plan, inputs[0], inputs[1]), _sizes(extents[:dom.num_parallel.data], batched))
    if op.kind in ("max", "avg") and key == (("n", "c", "oh", "ow"), ("kh", "kw")):
        geo = _window_geometry(op)
        x = inputs[0]
        if geo is None or x.dim() != 4 or (op.kind == "avg" and geo.dilations != (1, 1)):
            return None
        out_hw, kernel = (dom.extent("oh"), dom.extent("ow")), (dom.extent("kh"), dom.extent("kw"))
        domain, in_map, _ = pool_nest(shape_of(op.operands[0]), out_hw, kernel, geo)
        if domain != dom or in_map != op.access_maps[0]:
            return None
        if op.kind == "max":
            return F.max_pool2d(_padded(x, out_hw, kernel, geo, -math.inf), kernel, geo.strides, 0, geo.dilations)
        total = F.avg_pool2d(_padded(x, out_hw, kernel, geo), kernel, geo.strides, divisor_override=1)
        ones = torch.ones((1, 1) + tuple(static_shape(x)[2:]), dtype=x.dtype)
        count = F.avg_pool2d(_padded(ones, out_hw, kernel, geo), kernel, geo.strides, divisor_override=1)
        return total / count
    return None


# --- epilogue and output -----------------------------------------------------------------------

def _epilogue(op: nest.ComputeOp, inputs: list[torch.Tensor], core: torch.Tensor, extents: list[int],
              fast: bool, batched: bool) -> torch.Tensor:
    npar = op.domain.num_parallel.data
    for kind, refs, params in op.steps:
        other = None
        if refs:
            amap = op.access_maps[refs[0]]
            other, _ = gather(inputs[refs[0]], amap, extents, fast, batched)
            # without the reduction axes, all of size 1
            other = _reshape(other, _sizes(list(static_shape(other)[:npar]), batched and 0 in affine.map_dims(amap)))
        core = apply_step(kind, core, other, params)
    return core


def _row_major(op: nest.ComputeOp, shape: tuple[int, ...], extents: list[int]) -> bool:
    """Does `out_map` lay the parallel grid out in row-major order (so the scatter is a reshape)?

    True for identity maps and for merged dims such as a grouped conv's `g * (Co/G) + co`."""
    npar = op.domain.num_parallel.data
    flat = affine.flat_form(op.output_map, shape)
    if flat is None:
        return False
    coeffs, offset = flat
    expected, stride = {}, 1
    for d in reversed(range(npar)):
        if extents[d] > 1:
            expected[d] = stride
        stride *= extents[d]
    return offset == 0 and {d: c for d, c in coeffs.items() if extents[d] > 1 and c} == expected


def _scatter(op: nest.ComputeOp, core: torch.Tensor, extents: list[int], batched: bool) -> torch.Tensor:
    npar = op.domain.num_parallel.data
    shape = shape_of(op.result)
    if batched:
        shape = (1, *shape[1:])  # a sample's
    grid = extents[:npar]
    if static_shape(core)[batched:] != tuple(grid[batched:]):
        core = _repeat(core, _sizes(grid, batched))
    if _row_major(op, shape, extents):
        return _reshape(core, _sizes(list(shape), batched))
    omap = op.output_map
    dim = _grid(grid)
    flat = torch.zeros(grid, dtype=torch.long)
    stride = 1
    for axis in reversed(range(len(shape))):
        flat = flat + torch.as_tensor(affine.evaluate(omap.results[axis], dim)) * stride
        stride *= shape[axis]
    samples = core.shape[0] if batched else 1
    out = core.new_zeros((samples, math.prod(shape)))
    out = out.index_copy(1, flat.reshape(-1), core.reshape(samples, -1))
    return out.reshape(_sizes(list(shape), batched))


def run_compute(op: nest.ComputeOp, inputs: list[torch.Tensor], fast: bool = True) -> torch.Tensor:
    """The value of `op` on `inputs` (float32 tensors in operand order); differentiable.

    `fast=False` uses the generic gather/einsum path only (the fast path must agree with it).
    A nest that keeps the batch (`keeps_batch`) takes inputs of any batch size."""
    extents = [e for _, e in op.domain.dims]
    batched = keeps_batch(op)
    if batched:
        extents[0] = 1  # a sample: the tensors carry the batch
    else:
        _check_static(op, inputs)
    core = _functional(op, inputs, extents, batched) if fast else None
    if core is None:
        run = _mac if op.kind == "mac" else _window_op
        core = run(op, inputs, extents, fast, batched)
    return _scatter(op, _epilogue(op, inputs, core, extents, fast, batched), extents, batched)


def _check_static(op: nest.ComputeOp, inputs: list[torch.Tensor]) -> None:
    for value, x in zip(op.operands, inputs):
        if static_shape(x) != shape_of(value):
            raise LoweringError(f"nest '{op.layer_name}' mixes the batch with other "
                                f"dims: it runs on {list(shape_of(value))} only, got {list(static_shape(x))}")
