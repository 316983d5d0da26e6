"""The same network at another batch size: the batch dimension of @main and of every op in it.

Weights do not depend on the batch, so a model at batch 1 (deployment, latency) and the same model
at batch N (Fisher Potential, training) share one weight store and every weight name: weights
trained at batch 128 go straight back into the batch-1 model (`Model.from_torch`).

The batch must be the first dimension of @main's inputs and of every value computed from them:
a `nest.compute` whose first domain dim (`n`, or `m` for a gemm) is read and written as the
first axis of its data and result (`NotBatched` otherwise), an nn op whose shape rule gives the
result from its operands, or an `nn.reshape` that keeps the first axis (Flatten).

    model.at_batch(128)          # nasir.Model; the module-level form is rebatch(module, 128)
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineDimExpr
from xdsl.rewriter import Rewriter

from nasir.dialects import nest, nn
from nasir.dialects.module import main_func
from nasir.dialects.shapes import shape_of, tensor
from nasir.errors import NasirError
from nasir.transforms.nest_spec import is_weight


class NotBatched(NasirError):
    """A nest or op whose batch is not its first dimension (the first axis of its data and result)."""


def nest_at_batch(op: nest.ComputeOp, batch: int) -> tuple[list[TensorType], TensorType, nest.DomainAttr]:
    """The types of `op`'s data inputs, its result type and its domain with batch `batch`."""
    data = [v for v in op.inputs if not is_weight(v)]
    name, extent = op.domain.dims[0]
    first = AffineDimExpr(0)
    maps = [m for v, m in zip(op.inputs, op.access_maps) if not is_weight(v)]
    if (any(shape_of(v)[0] != extent or m.results[0] != first for v, m in zip(data, maps))
            or shape_of(op.result)[0] != extent or op.output_map.results[0] != first):
        raise NotBatched(f"nest '{op.layer_name}': the batch is not its first dimension")
    domain = nest.DomainAttr.make([(name, batch), *op.domain.parallel[1:]], op.domain.reduction)
    return ([tensor((batch, *shape_of(v)[1:])) for v in data], tensor((batch, *shape_of(op.result)[1:])),
            domain)


def rebatch(module: ModuleOp, batch: int) -> None:
    """Change `module`'s @main, in place, to take and return `batch` examples (see the module
    docstring); nothing is changed when an op cannot be rebatched (`NotBatched`)."""
    if batch < 1:
        raise NasirError(f"batch must be at least 1, got {batch}")
    main = main_func(module)
    block = main.body.block
    if not block.args:
        raise NotBatched("@main takes no input to take the batch from")
    old = shape_of(block.args[0])[0]
    shapes: dict[SSAValue, tuple[int, ...]] = {}
    for arg in block.args:
        if shape_of(arg)[0] != old:
            raise NotBatched(f"@main's inputs disagree on the batch ({shape_of(arg)[0]} vs {old})")
        shapes[arg] = (batch, *shape_of(arg)[1:])
    domains: dict[nest.ComputeOp, nest.DomainAttr] = {}
    for op in block.ops:
        if isinstance(op, (nn.WeightOp, func.ReturnOp)):
            continue
        shapes[op.results[0]] = _result_shape(op, shapes, batch, old, domains)
    for op, domain in domains.items():
        op.properties["domain"] = domain
    for value, shape in shapes.items():
        if shape_of(value) != shape:
            Rewriter.replace_value_with_new_type(value, tensor(shape))
    main.properties["function_type"] = FunctionType.from_lists(
        [a.type for a in block.args], [o.type for o in block.last_op.operands])


def _result_shape(op, shapes: dict, batch: int, old: int, domains: dict) -> tuple[int, ...]:
    if isinstance(op, nest.ComputeOp):
        _, result, domains[op] = nest_at_batch(op, batch)
        return shape_of(result)
    if isinstance(op, nn.ReshapeOp):
        shape = shape_of(op.result)
        if shape[0] != old or shapes.get(op.operands[0], shape_of(op.operands[0]))[0] != batch:
            raise NotBatched(f"reshape '{op.layer_name}' does not keep the batch as its first axis")
        return (batch, *shape[1:])
    if isinstance(op, nn.NNOp):
        try:
            return tuple(type(op).infer_shape([shapes.get(o, shape_of(o)) for o in op.operands], op.props_dict()))
        except Exception as e:  # a shape rule that refuses the new batch
            raise NotBatched(f"'{op.name}' (layer '{op.layer_name}') cannot take batch {batch}: {e}") from None
    raise NotBatched(f"'{op.name}' cannot be rebatched")
