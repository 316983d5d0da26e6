"""Synthesis for one conv, bottom-up: operators grown from the output's coordinates (issue 55).

`synthesize_bottom_up(model, layer, flops=0.5)` walks `nasir.transforms.coordinates` expressions
breadth first from the layer's output coordinates [n, co, oh, ow], up to `depth` steps, and keeps
those whose frontier reaches the input's shape (`Expression.finish`) as operators, installed by
`bottom-up{steps="..."}` in the lone layer. The steps it tries on a frontier:

- channel coordinates: `split I G` (G in 2, 4, 8, 16 parts), `broadcast I`, `merge I J` (J a
  channel coordinate too);
- row and column coordinates, before their window: `stride I 2` (while the input's axis has room),
  `shift I` and a window, `unfold I 3` or `unfold-sum I 3`;
- any but the batch: `share I`; once: `reduce c/F` (F in 1, 2, 4, 8, 16);
- channel steps before row and column steps only (`moves(ordered=True)`): the two kinds commute,
  so every other order reaches an operator this one reaches.

The batch is left alone, and channels, rows and columns are never mixed (`Expression.finish`).

- **Canonicalisation.** Steps applied in another order that reach one expression meet it again
  (`Expression.key`, dims unnamed), and finished operators count once by their nest's structure
  (`structure_key`, as top-down); `Synthesis.redundancy` is steps applied per distinct operator.
- **Shape distance.** `Expression.distance` is at least the steps left before the frontier has the
  input's shape; an expression further than the steps left is not expanded (`Synthesis.pruned`
  counts the steps it cut).
- **Caps.** MACs and weights only grow along a walk, so an expression past `flops` x the layer's
  MACs (its unweighted windows summed first, as `presum` compiles them) or `params` x its weights
  is dropped with everything after it.

Operators are ranked as top-down synthesis ranks them (`rank`) and time the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from nasir.errors import LegalityError
from nasir.model import Model
from nasir.search import synthesis
from nasir.search.synthesis import (
    FACTORS,
    NEST,
    Operator,
    Synthesis,
    cost,
    layer_alone,
    layer_nest,
    rank,
    structure_key,
    wasteful,
)
from nasir.transforms.arch import in_place
from nasir.transforms.coordinates import Expression, family, install
from nasir.transforms.nest_spec import NestSpec
from nasir.transforms.presum import computed_macs

WINDOW = 3
DEPTH = 5
"""Steps at most by default (`nasir synth --bottom-up`; 6 takes about a minute)."""
SEARCH_DEPTH = 4
"""Steps at most for the search's operators (`nasir search --synth K --synth-bottom-up`)."""


def spatial_started(expr: Expression) -> bool:
    """Whether a row or column step was taken: a window, a stride, a shift or a shared row."""
    return (any(family(d) in "hw" for d, _ in expr.reduction) or any(family(d) in "hw" for d in expr.weight)
            or any(const or any(c != 1 for _, c in terms) for (terms, const), _ in expr.frontier
                   if {family(d) for d, _ in terms} & {"h", "w"}))


def moves(expr: Expression, ordered: bool = True) -> list[str]:
    """The steps the walk tries on `expr` (module doc). `ordered`: channel steps only before row
    and column steps (they commute: each order reaches the same operator, so one is enough)."""
    out = []
    channels = not (ordered and spatial_started(expr))
    reduced = not channels or any(family(d) == "c" for d, _ in expr.reduction)
    summed_dims = dict(expr.reduction)
    for i, ((terms, const), extent) in enumerate(expr.frontier):
        dims = [d for d, _ in terms]
        fam = {family(d) for d in dims}
        summed = [d for d in dims if d in summed_dims]
        if fam == {"c"} and channels:
            if len(terms) == 1 and not summed:
                out += [f"split {i} {g}" for g in FACTORS if extent % g == 0 and extent > g]
            if extent > 1 and not summed:
                out.append(f"broadcast {i}")
            out += [f"merge {i} {j}" for j, ((other, _), e) in enumerate(expr.frontier)
                    if j != i and extent > 1 and e > 1 and {family(d) for d, _ in other} == {"c"}]
        if fam and fam <= {"h", "w"} and not summed:
            if extent * 2 <= max(expr.target[2:], default=0):
                out.append(f"stride {i} 2")
            if const == 0:
                out.append(f"shift {i}")
            out += [f"unfold {i} {WINDOW}", f"unfold-sum {i} {WINDOW}"]
        if fam != {"n"} and (channels or fam != {"c"}) and any(d not in expr.weight and d not in summed_dims
                                                               for d in dims):
            out.append(f"share {i}")
    if not reduced and len(expr.target) > 1:
        out += [f"reduce c/{f}" if f > 1 else "reduce c" for f in (1, *FACTORS) if expr.target[1] % f == 0]
    return out


def synthesize_bottom_up(model: Model, layer: str, flops: float = 0.5, params: float = 1.0, depth: int = DEPTH,
                         progress: Callable[[int, int], None] | None = None) -> Synthesis:
    """Operators for conv `layer` of `model` grown bottom-up (module doc) within `flops` x its
    MACs and `params` x its weights, from up to `depth` steps; `progress(level, states)` is called
    at each level of the walk."""
    alone = layer_alone(model, layer, flops, params, depth)
    macs0, params0 = cost(alone)
    original = Operator((), alone, macs0, params0)
    base = NestSpec.of(layer_nest(alone))
    out_dims = [(d, base.extent(d)) for f in base.out for d in f.terms]
    others = params0 - math.prod(base.inputs[1].type.get_shape())
    start = Expression.start(out_dims, tuple(layer_nest(alone).inputs[0].type.get_shape()))
    seen, operators = {start.key()}, set()
    level: list[tuple[tuple[str, ...], Expression]] = [((), start)]
    found, rejected = [], {}
    generated = pruned = 0
    for step_no in range(1, depth + 1):
        if progress:
            progress(step_no, len(level))
        following = []
        for steps, expr in level:
            for step in moves(expr):
                try:
                    made = expr.apply(step)
                except LegalityError:
                    continue
                generated += 1
                if made.macs() > flops * macs0 * made.summed_alone() or made.params() > params * params0:
                    continue  # past a cap, and every step after only grows
                if made.distance() > depth - step_no:
                    pruned += 1
                    continue
                key = made.key()
                if key in seen:
                    continue
                seen.add(key)
                following.append(((*steps, step), made))
                operator = _operator(alone, base, others, (*steps, step), made, operators, rejected)
                if operator is not None and operator.macs <= flops * macs0 and operator.params <= params * params0:
                    found.append(operator)
        level = following
    found.sort(key=rank)
    return Synthesis(original, found, generated, len(operators), pruned, rejected)


def _operator(alone: Model, base: NestSpec, others: int, steps: tuple[str, ...], expr: Expression,
              seen: set[tuple], rejected: dict[str, int]) -> Operator | None:
    """The operator `expr` makes in the lone layer (`base`, its spec; `others`: its weights but the
    one replaced), None if its frontier is not the input's shape, it is one already `seen`
    (structure keys) or it wastes what it computes (counted in `rejected`). Its model is built when
    asked for."""
    spec = replace(base)
    try:
        install(spec, expr)
    except LegalityError:
        return None
    key = structure_key(_forms_copied(spec))
    if key in seen:
        return None
    seen.add(key)
    why = wasteful(spec)
    if why:
        rejected[why] = rejected.get(why, 0) + 1
        return None
    pipeline = f'bottom-up{{steps="{"; ".join(steps)}" layers={NEST}}}'
    op = spec.build()
    weights = math.prod(spec.input_shape(1)) + others

    def make() -> Model:
        with in_place():
            return alone.transform(pipeline)

    return Operator((pipeline,), None, computed_macs(op), weights, make=make, shape=op)


def _forms_copied(spec: NestSpec) -> NestSpec:
    """`spec` with its own dims and forms (what `structure_key` changes), the rest shared."""
    return replace(spec, parallel=[list(d) for d in spec.parallel], reduction=[list(d) for d in spec.reduction],
                   forms=[[f.copy() for f in forms] for forms in spec.forms], out=[f.copy() for f in spec.out])


def synthesizer(bottom_up: bool, depth: int | None = None) -> tuple[Callable[..., Synthesis], int]:
    """The walk `nasir synth` runs and the depth it runs to: bottom-up (`synthesize_bottom_up`) or
    top-down (`nasir.search.synthesis.synthesize`); `depth`, else the walk's default."""
    walk, default = (synthesize_bottom_up, DEPTH) if bottom_up else (synthesis.synthesize, synthesis.DEPTH)
    return walk, default if depth is None else depth


def search_walk(bottom_up: bool) -> dict:
    """The options of `search_choices` for the search's synthesised operators: bottom-up at
    `SEARCH_DEPTH`, or its own (top-down)."""
    return {"depth": SEARCH_DEPTH, "walk": synthesize_bottom_up} if bottom_up else {}
