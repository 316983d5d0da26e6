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
without division (`Lin.align`): each weight vector is one contiguous load. Activations are
not packed here: pack-activations picks their layouts from the schedules of the nests that write
and read them, and the llvm lowering refuses a schedule's `pack` of an activation.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr, ModuleOp
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.passes import ModulePass

from nasir.dialects import nest, nn
from nasir.dialects.module import weights_of
from nasir.dialects.shapes import shape_of
from nasir.errors import LoweringError
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


class PackWeightsPass(ModulePass):
    """Pack every weight a nest's schedule asks for (`pack`) into its layout in the weight store."""

    name = "pack-weights"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        store = weights_of(op)
        packed: dict[tuple[str, str], nn.WeightOp] = {}
        replaced: dict[str, nn.WeightOp] = {}  # weights read packed, dropped once nothing reads them
        for compute in list(op.walk()):
            if not isinstance(compute, nest.ComputeOp) or compute.schedule is None:
                continue
            sched = compute.get_schedule()
            maps = compute.access_maps
            for k, layout in sorted(sched.pack.items()):
                source = compute.inputs[k].owner
                axes = operand_axes(compute, k)
                if not isinstance(source, nn.WeightOp) or axes is None:
                    continue  # activations: refused by convert-nest-to-loops
                problem = layout_mismatch(axes, shape_of(source.result), layout)
                if problem:  # e.g. an architecture transform reshaped the weight after `pack`
                    raise LoweringError(f"pack-weights: nest '{compute.layer_name}': {problem} of its "
                                        f"weight '{source.key}' {list(shape_of(source.result))}")
                key = (source.key, layout)
                if key not in packed:
                    # IR without weights (nasir-opt on a text file) is rewritten all the same
                    array = store.get(source.key, np.empty(shape_of(source.result), np.float32))
                    data = pack_array(array, axes, layout)
                    name = f"{source.key}.{layout}"
                    new = nn.WeightOp.make(store.add(name, data) if source.key in store else name, data.shape)
                    source.parent.insert_op_after(new, source)
                    packed[key] = new
                    replaced[source.key] = source
                compute.operands[k] = packed[key].result
                m = maps[k]
                maps[k] = AffineMap(m.num_dims, m.num_symbols, tuple(layout_exprs(axes, layout, list(m.results))))
                del sched.pack[k]
            if maps != compute.access_maps:
                compute.properties["maps"] = ArrayAttr([AffineMapAttr(m) for m in maps])
                compute.properties["schedule"] = sched.to_attr()
        for source in replaced.values():
            if not source.result.uses:
                source.detach()
                source.erase()
