"""pack-weights: store the weights a schedule packs in their blocked layout, once, at compile time.

Runs on nest IR after the schedule passes (default-schedule) and before nest-bufferize. For every
`nest.compute` whose schedule packs an input that is an `nn.weight` (`pack = {1 = "OIHW16o"}`),
the weight store gets the packed array (numpy reshape + transpose), the nest reads it through a new
`nn.weight` of the packed shape, and its access map becomes the old one composed with the layout:

    %w = nn.weight {name = "conv.w"} : tensor<64x64x3x3xf32>
    %y = nest.compute %x, %w {maps = [..., (n, co, oh, ow, ci, kh, kw) -> (co, ci, kh, kw)],
                              schedule = {..., vector = "co.i", pack = {"1" = "OIHW16o"}}}
    ->
    %w = nn.weight {name = "conv.w.OIHW16o"} : tensor<4x64x3x3x16xf32>
    %y = nest.compute %x, %w {maps = [..., (...) -> (co floordiv 16, ci, kh, kw, co mod 16)],
                              schedule = {..., vector = "co.i"}}

With the vector loop splitting `co` by the block, convert-nest-to-loops resolves the floordiv/mod
without division (`Lin.align`): each weight vector is one contiguous load. A depthwise conv's
weight with a channel multiplier m ([m G, 1, KH, KW] read at output channel `m * g + co`) is first
read as the same array of shape [G, m, KH, KW] at (g, co) (`multiplier_rows`), so that lanes over g
load whole blocks of one co:

    %w = nn.weight {name = "w"} : tensor<128x1x3x3xf32>        (g = 64, co = 2, lanes over g)
    -> %w = nn.weight {name = "w.by2.OIHW8o"} : tensor<8x2x3x3x8xf32>
       maps = [..., (n, g, co, oh, ow, kh, kw) -> (g floordiv 8, co, kh, kw, g mod 8)]

Activations are not packed here: pack-activations picks their layouts from the schedules of the nests that write
and read them, and the llvm lowering refuses a schedule's `pack` of an activation.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr, ModuleOp
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineExpr, AffineMap
from xdsl.passes import ModulePass

from nasir.dialects import affine, nest, nn
from nasir.dialects.attributes import WINOGRAD
from nasir.dialects.module import weights_of
from nasir.dialects.nest import NestView
from nasir.dialects.schedule import Loop
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError
from nasir.lowering.schedule.winograd import winograd_plan
from nasir.lowering.target import target_of
from nasir.transforms.schedule import layout_mismatch, operand_axes, parse_layout


def layout_exprs(axes: str, layout: str, index: list[AffineExpr]) -> list[AffineExpr]:
    """Indices into the packed array of the element at `index` (one expr per logical axis)."""
    parts = parse_layout(layout)
    blocks = {axis: [k for a, k in parts if a == axis and k] for axis in axes}
    out = []
    seen: dict[str, int] = {}
    for axis, block in parts:
        e = index[axes.index(axis)]
        inner = blocks[axis][seen.get(axis, 0):]
        if not block:  # the outer index: divide by every block of the axis
            out.append(e // math.prod(inner) if inner else e)
            continue
        seen[axis] = seen.get(axis, 0) + 1
        below = math.prod(blocks[axis][seen[axis]:])
        out.append((e // below if below > 1 else e) % block)
    return out


def pack_array(array: np.ndarray, axes: str, layout: str) -> np.ndarray:
    """`array` (axes named by `axes`, e.g. "OIHW") stored in `layout` (e.g. "OIHW16o")."""
    parts = parse_layout(layout)
    split_shape, names = [], []
    for a, axis in enumerate(axes):
        blocks = [k for x, k in parts if x == axis and k]
        split_shape += [array.shape[a] // math.prod(blocks), *blocks]
        names += [(axis, 0)] + [(axis, i + 1) for i in range(len(blocks))]
    order, count = [], {}
    for axis, block in parts:
        count[axis] = count.get(axis, 0) + (1 if block else 0)
        order.append(names.index((axis, count[axis] if block else 0)))
    return np.ascontiguousarray(array.reshape(split_shape).transpose(order))


def multiplier_rows(compute: nest.ComputeOp, k: int) -> tuple[int, int, int] | None:
    """(g, co, m) when input `k` of `compute` is a depthwise conv's weight with a channel
    multiplier m: [m G, 1, KH, KW] read at output channel `m * g + co` (co of extent m) by lanes
    over g (`depthwise_channel_schedule`), which pack-weights reads as the same array of shape
    [G, m, KH, KW] at (g, co), so that a block of its first axis holds consecutive g of one co.
    None otherwise (other schedules pack the weight as it is)."""
    results, shape = compute.access_maps[k].results, shape_of(compute.inputs[k])
    if len(results) != 4 or shape[1] != 1 or not isinstance(results[1], AffineConstantExpr) or results[1].value:
        return None
    form = affine.linear_form(results[0])
    extents = [e for _, e in compute.domain.dims]
    if form is None or form[1] != 0:
        return None
    terms = {d: c for d, c in form[0].items() if c}
    co = next((d for d, c in terms.items() if c == 1 and extents[d] > 1), None)
    if co is None or len(terms) != 2:
        return None
    (g,) = set(terms) - {co}
    m = extents[co]
    if compute.get_schedule().vector != Loop.inner(compute.domain.dim_names[g]):
        return None
    return (g, co, m) if terms[g] == m and shape[0] == m * extents[g] else None


def winograd_weights(compute: nest.ComputeOp, lanes: int, store) -> nn.WeightOp | None:
    """Give a conv run as Winograd (`WINOGRAD`) its transformed weights U, made once here
    (`WinogradPlan.weights`), and read them: from then on the nest is its kernel's alone, which
    reads every product of U (the map names where in U the nest reads, within U's bounds).
    Returns the weight it read before (None where it reads U already).

        %w = nn.weight {name = "w"} : tensor<64x64x3x3xf32>      (a 3x3 stride-1 conv, by point)
        -> %w = nn.weight {name = "w.winograd4"} : tensor<6x3x64x64xf32>
           maps = [..., (n, co, oh, ow, ci, kh, kw) -> (0, kh, ci, co)]
    """
    source = compute.inputs[1].owner
    plan = winograd_plan(NestView.of(compute), lanes)
    if plan is None or not isinstance(source, nn.WeightOp):
        raise LoweringError(f"pack-weights: nest '{compute.layer_name}' is marked nasir.winograd but is not a "
                            f"batch-1 conv with a wide row window over a weight")
    if source.key.endswith(f".winograd{plan.m}"):
        return None
    array = store.get(source.key, np.zeros(shape_of(source.result), np.float32))  # IR without weights: zeros
    u = plan.weights(array)
    name = f"{source.key}.winograd{plan.m}"
    new = nn.WeightOp.make(store.add(name, u) if source.key in store else name, u.shape)
    source.parent.insert_op_after(new, source)
    compute.operands[1] = new.result
    maps = compute.access_maps
    dims = {d: AffineDimExpr(i) for i, d in enumerate(compute.domain.dim_names)}
    co, product = maps[1].results[0], AffineConstantExpr(0)  # co: the conv's output channel, all groups
    results = (product, dims["kh"], dims["ci"], co) if plan.by_point else (dims["ci"], dims["kh"], product, co)
    maps[1] = AffineMap(maps[1].num_dims, 0, results)
    compute.properties["maps"] = ArrayAttr([AffineMapAttr(m) for m in maps])
    return source


class PackWeightsPass(ModulePass):
    """Pack every weight a nest's schedule asks for (`pack`) into its layout in the weight store,
    and the weights of a conv run as Winograd into their transformed form (`winograd_weights`)."""

    name = "pack-weights"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        store = weights_of(op)
        lanes = target_of(op).lanes
        packed: dict[tuple[str, str, tuple[int, ...]], nn.WeightOp] = {}
        replaced: dict[str, nn.WeightOp] = {}  # weights read packed, dropped once nothing reads them
        for compute in list(op.walk()):
            if not isinstance(compute, nest.ComputeOp) or compute.schedule is None:
                continue
            sched = compute.get_schedule()
            if WINOGRAD.on(compute):
                source = winograd_weights(compute, lanes, store)
                if source is not None:
                    replaced[source.key] = source
                sched.pack.pop(1, None)
                compute.properties["schedule"] = sched.to_attr()
            maps = compute.access_maps
            for k, layout in sorted(sched.pack.items()):
                source = compute.inputs[k].owner
                axes = operand_axes(compute, k)
                if not isinstance(source, nn.WeightOp) or axes is None:
                    continue  # activations: refused by convert-nest-to-loops
                shape, amap = tuple(shape_of(source.result)), maps[k]
                rows = multiplier_rows(compute, k)
                if rows is not None:  # read as [G, m, KH, KW]: the same array
                    g, co, per = rows
                    shape = (shape[0] // per, per, *shape[2:])
                    amap = AffineMap(amap.num_dims, amap.num_symbols,
                                     (AffineDimExpr(g), AffineDimExpr(co), *amap.results[2:]))
                problem = layout_mismatch(axes, shape, layout)
                if problem:  # e.g. an architecture transform reshaped the weight after `pack`
                    raise LoweringError(f"pack-weights: nest '{compute.layer_name}': {problem} of its "
                                        f"weight '{source.key}' {list(shape)}")
                key = (source.key, layout, shape)
                if key not in packed:
                    # IR without weights (nasir-opt on a text file) is rewritten all the same
                    array = store.get(source.key, np.empty(shape_of(source.result), np.float32)).reshape(shape)
                    data = pack_array(array, axes, layout)
                    name = f"{source.key}.{layout}" if rows is None else f"{source.key}.by{rows[2]}.{layout}"
                    new = nn.WeightOp.make(store.add(name, data) if source.key in store else name, data.shape)
                    source.parent.insert_op_after(new, source)
                    packed[key] = new
                    replaced[source.key] = source
                compute.operands[k] = packed[key].result
                maps[k] = AffineMap(amap.num_dims, amap.num_symbols, tuple(layout_exprs(axes, layout, list(amap.results))))
                del sched.pack[k]
            if maps != compute.access_maps:
                compute.properties["maps"] = ArrayAttr([AffineMapAttr(m) for m in maps])
                compute.properties["schedule"] = sched.to_attr()
        for source in replaced.values():
            if not source.result.uses:
                source.detach()
                source.erase()
