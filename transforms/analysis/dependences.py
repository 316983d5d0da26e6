"""Dependence analysis of `nest.compute` loops: what a schedule transform may reorder.

Sits beside the schedule rewrites (`nasir.transforms.schedule`), which ask it before they edit a
nest's `schedule`. A nest is a value-semantics op: its inputs are read-only tensors and its output is
a fresh tensor, so no dependence crosses nests and no input is ever written. The only dependence
inside a nest is the **accumulation** of the combiner: every iteration of a reduction dim reads and
writes the same output element (`O[n, co, oh, ow] += W[...] * I[...]`). Parallel dims write
distinct elements (`out_map` is a bijection onto the output), so they carry nothing.

nasir treats `mac`, `max` and `avg` reductions as **reorderable**: it applies the reassociation
and commutation of float sums that every DL compiler applies (TVM, XLA, oneDNN reorder reductions
freely), so results may differ from domain order by float rounding (tests use rtol 1e-4), never by
more. Hence:

- interchange / strip-mine / tile / unroll / fuse of adjacent loops never break a dependence;
- `parallel` on a loop that carries the accumulation is illegal (threads would race on `O[...]`);
- `vectorize` of a loop that carries the accumulation is illegal: nasir's vector lanes each own one
  output element (lowering keeps one vector accumulator per output vector), while lanes of a
  reduction loop would all update the same element. Reassociation would allow privatised
  partial sums plus a horizontal reduction, but no backend implements that, so it is refused
  rather than mis-compiled; a fused loop is refused too (its lanes do not map to one output axis);
- `fuse` of a parallel with a reduction loop is illegal for the same reason: the fused loop's
  iterations would both write distinct outputs and accumulate into shared ones.

Loop names follow `Schedule`: a split makes `co.o` / `co.i`, a fusion `co*ci`; `Loop.dims`
recovers the domain dims behind a loop name.

    %y = nest.compute ... {domain = #nest.domain<[n = 1, co = 8, oh = 4, ow = 4], [ci = 3, kh = 3, kw = 3]>,
                           schedule = {splits = [["ci", 2]]}, ...}
    carried_loops(op) == ["ci.o", "ci.i", "kh", "kw"]
"""

from __future__ import annotations

from nasir.dialects import nest
from nasir.dialects.schedule import Loop
from nasir.errors import LegalityError


def reduction_dims(op: nest.ComputeOp) -> set[str]:
    """Domain dims that carry the combiner's accumulation (none for `copy`)."""
    return set() if op.kind == "copy" else {name for name, _ in op.domain.reduction}


def carries(op: nest.ComputeOp, loop: str) -> bool:
    """Whether iterations of `loop` accumulate into the same output elements."""
    return bool(Loop(loop).dims & reduction_dims(op))


def carried_loops(op: nest.ComputeOp) -> list[str]:
    """The loops of the nest's current schedule that carry the accumulation, outermost first."""
    return [name for name, _ in op.get_schedule().loops(op.domain) if carries(op, name)]


def check_parallel(op: nest.ComputeOp, loop: str) -> None:
    """LegalityError unless `loop`'s iterations may run on different threads."""
    if carries(op, loop):
        dims = sorted(Loop(loop).dims & reduction_dims(op))
        raise LegalityError(
            f"parallel: loop '{loop}' of nest '{op.layer_name}' carries the '{op.kind}' accumulation over "
            f"reduction dim(s) {', '.join(dims)} (its iterations update the same output element); "
            f"parallelise a loop over parallel dims ({', '.join(n for n, _ in op.domain.parallel)})")


def check_vector(op: nest.ComputeOp, loop: str) -> None:
    """LegalityError unless `loop` can run as vector lanes (see the module docstring)."""
    if carries(op, loop):
        raise LegalityError(
            f"vectorize: loop '{loop}' of nest '{op.layer_name}' carries the '{op.kind}' accumulation: its lanes "
            f"would update the same output element; vectorize a loop over parallel dims "
            f"({', '.join(n for n, _ in op.domain.parallel)})")
    if "*" in loop:
        raise LegalityError(f"vectorize: loop '{loop}' of nest '{op.layer_name}' is fused; its lanes must walk one "
                            f"output axis: vectorize an unfused (possibly split) loop")


def check_fusable(op: nest.ComputeOp, outer: str, inner: str) -> None:
    """LegalityError when fusing would merge a parallel loop with an accumulating one."""
    if carries(op, outer) != carries(op, inner):
        raise LegalityError(
            f"fuse: loops '{outer}' and '{inner}' of nest '{op.layer_name}' mix parallel and reduction dims: the "
            f"fused loop would both write distinct outputs and accumulate into shared ones")


def check_adjacent(order: list[str], outer: str, inner: str, layer: str) -> None:
    """LegalityError unless `inner` is the loop immediately inside `outer` (a fusable pair)."""
    i, j = order.index(outer), order.index(inner)
    if j != i + 1:
        raise LegalityError(
            f"fuse: loops '{outer}' and '{inner}' of nest '{layer}' are not adjacent with '{outer}' outside "
            f"(order is {', '.join(order)}); fusing them would reorder the loops between: interchange first")
