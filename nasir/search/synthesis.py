"""Operators synthesised for one conv layer from the coordinate primitives (Syno, issue 55).

`synthesize(model, layer, flops=0.5)` takes the layer's nest alone (`standalone`) and enumerates
compositions of primitive steps on it, breadth first, up to `depth` steps: the coordinate
primitives of `nasir.transforms.primitives` (split-dim of a channel dim, tie, expand, dilate,
share) and Canvas's window steps (fold, shift). Every step keeps the layer's input and output
shapes, so every composition is an operator that fits in place of the conv.

- **Canonicalisation.** Compositions that make the same operator count once: the key
  (`structure_key`) is the nest's structure with its dims unnamed, dims of extent 1 left out and
  dims that every access reads together merged, so split-dim co then ci and ci then co, a split
  undone by its merge, or a dilate before a fold, are one operator. (The walk itself continues from
  every distinct nest, exactly keyed: a split alone is no new operator but leads to a tie.) Two
  rules drop operators that waste what they compute (Syno's "nearly equivalent" ones): a parallel
  dim that neither the input nor the weight reads (its outputs are copies), and a reduction dim
  the input does not read (a sum of weights, one weight). `Synthesis.redundancy` is the
  compositions applied per distinct operator.
- **MACs** are those the operator does once compiled (`presum.computed_macs`): an `expand`ed
  window is summed once before the contraction, so `fold kh, expand kw` costs a third of `fold
  kh`'s multiply-adds and the input's 1 x 3 sums, not the fold's.
- **MAC distance.** A step removes at most one reduction dim's extent from the MACs (tie, fold,
  expand), so a composition whose MACs need more steps than are left to reach the cap is not
  expanded.
- **Caps.** Operators with at most `flops` x the layer's MACs and `params` x its weights are kept.

Ranked by mixing strength (alphaNAS's levels from the input's channel, row and column to the
output's), then by MACs within the cap. Each operator prints as a nest (`Operator.nest_text`) and
as a formula:

    y[n, co_o*4 + co_i, oh, ow] = sum(ci_i, kh, kw) x[n, co_o*4 + ci_i, oh + kh + -1, ow + kw + -1]
                                  * w[co_o*4 + co_i, ci_i, kh, kw]

`time_operators` times them alone (the search's kernel cache) beside the layer itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from nasir.dialects import nest
from nasir.errors import LegalityError, NasirError, PassError
from nasir.measure.kernels import KernelTimes, default_kernel_cache, standalone
from nasir.model import Model
from nasir.search.space import SYNTH_LAYER
from nasir.transforms.analysis.properties import LEVELS, nest_mixing
from nasir.transforms.arch import in_place
from nasir.transforms.nest_spec import NestSpec, is_conv, is_weight
from nasir.transforms.presum import computed_macs

NEST = SYNTH_LAYER
"""The name `standalone` gives the layer's nest, which the steps name."""
FACTORS = (2, 4, 8, 16)
"""Inner extents split-dim tries on a channel dim."""
WINDOWS = {"kh": "oh", "kw": "ow"}
DEPTH = 3
"""Primitive steps at most by default (`nasir synth`; 4 takes minutes)."""


@dataclass
class Operator:
    """One synthesised operator: the steps that made it first, its one-nest model, its cost.
    `make`: the model built when first asked for (`shape`: its nest until then, for the formula,
    the mixing and the ranking), so that operators nobody times or lists cost no transform."""

    steps: tuple[str, ...]
    built: Model | None
    macs: int
    params: int
    ms: float | None = None
    make: Callable[[], Model] | None = None
    shape: nest.ComputeOp | None = None

    @property
    def model(self) -> Model:
        if self.built is None:
            self.built = self.make()
        return self.built

    @property
    def op(self) -> nest.ComputeOp:
        return self.shape if self.built is None and self.shape is not None else layer_nest(self.model)

    @property
    def pipeline(self) -> str:
        return ",".join(self.steps)

    @property
    def length(self) -> int:
        """Steps it took: passes, or a bottom-up pass's steps."""
        return len(self.steps) + self.pipeline.count(";")

    @property
    def nest_text(self) -> str:
        return str(layer_nest(self.model))

    @property
    def formula(self) -> str:
        return formula(self.op)

    @cached_property
    def mixing(self) -> str:
        return mixing(self.op)


@dataclass
class Synthesis:
    """What `synthesize` found: the layer itself (`original`), the operators within the caps
    (the strongest mixing first, then the most MACs: the most capacity within the cap), how many
    compositions it applied (`generated`), how many distinct operators they made (`distinct`),
    how many walks the MAC distance left unexpanded, and the wasteful ones dropped by rule."""

    original: Operator
    operators: list[Operator]
    generated: int
    distinct: int
    pruned: int
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def redundancy(self) -> float:
        """Compositions applied per distinct operator: what canonicalisation removed."""
        return self.generated / max(self.distinct, 1)


def layer_nest(model: Model) -> nest.ComputeOp:
    return next(op for op in model.ops() if isinstance(op, nest.ComputeOp))


def formula(op: nest.ComputeOp) -> str:
    """`y[out] = sum(reduction dims) x[data] * w[weight]`, the accesses over named dims."""
    spec = NestSpec.of(op)
    index = lambda forms: ", ".join(str(f) for f in forms)
    red = ", ".join(d for d, _ in spec.reduction)
    total = f"sum({red}) " if red else ""
    return f"y[{index(spec.out)}] = {total}x[{index(spec.forms[0])}] * w[{index(spec.forms[1])}]"


def without_unit_dims(spec: NestSpec) -> NestSpec:
    """`spec` without its dims of extent 1 (each reads index 0: a folded window, a batch of one)."""
    for d, extent in list(spec.dims):
        if extent == 1:
            for f in spec.all_forms():
                f.substitute(d, {})
            spec.drop_dim(d)
    return spec


def mixing(op: nest.ComputeOp) -> str:
    """alphaNAS's mixing from the input's channel, row and column axes to the output's same axes
    (`nest_mixing`, dims of extent 1 left out): `c:a h:m w:m` for a 3x3 conv, `c:m` grouped,
    `c:o` depthwise, `h:o w:o` a 1x1 conv."""
    matrix = nest_mixing(without_unit_dims(NestSpec.of(op)).build(), 0)
    return " ".join(f"{axis}:{matrix[i][i]}" for i, axis in ((1, "c"), (2, "h"), (3, "w")) if i < len(matrix))


def strength(mixing_text: str) -> int:
    """The mixing levels summed (x 0, o 1, m 2, a 3): more is more of the input each output sees."""
    return sum(LEVELS.index(part[-1]) for part in mixing_text.split())


def as_spec(op: nest.ComputeOp | NestSpec) -> NestSpec:
    """A nest as an editable spec (a spec given is used, and may be changed)."""
    return NestSpec.of(op) if isinstance(op, nest.ComputeOp) else op


def structure_key(op: nest.ComputeOp | NestSpec, canonical: bool = True) -> tuple:
    """The nest's structure without names: its dims numbered in domain order, their extents and
    the accesses over them. `canonical`: what equivalent compositions share, with dims of extent 1
    left out (a fold after a dilate is the fold) and dims that every access reads together as
    `a * extent(b) + b` merged (a split that nothing reads apart is no split)."""
    spec = without_unit_dims(as_spec(op)) if canonical else as_spec(op)
    merged = canonical
    while merged:
        merged = False
        for group in (spec.parallel, spec.reduction):
            for (a, ea), (b, eb) in zip(group, group[1:]):
                if all(f.coeff(a) == f.coeff(b) * eb for f in spec.all_forms()):
                    for f in spec.all_forms():
                        f.set(a, f.coeff(b))
                        f.set(b, 0)
                    spec.drop_dim(b)
                    spec.set_extent(a, ea * eb)
                    merged = True
                    break
            if merged:
                break
    names = {d: f"d{k}" for k, d in enumerate(spec.names)}
    for f in spec.all_forms():
        for d in list(f.terms):
            f.substitute(d, {names[d]: 1})
    return (tuple(e for _, e in spec.parallel), tuple(e for _, e in spec.reduction),
            tuple(tuple(str(f) for f in forms) for forms in spec.forms), tuple(str(f) for f in spec.out))


def wasteful(op: nest.ComputeOp | NestSpec) -> str | None:
    """Why an operator wastes what it computes (canonicalisation rules), or None."""
    spec = as_spec(op)
    data = {d for f in spec.forms[0] for d in f.terms}
    weight = {d for f in spec.forms[1] for d in f.terms}
    for d, extent in spec.parallel:
        if extent > 1 and d not in data | weight:
            return "copies"  # outputs along d are copies of one another
    for d, extent in spec.reduction:
        if extent > 1 and d not in data:
            return "weight sums"  # a sum of weights: one weight would do
    return None


def weight_count(model: Model, op: nest.ComputeOp) -> int:
    return sum(math.prod(model.weights[v.owner.key].shape) for v in op.inputs if is_weight(v))


def primitive_steps(op: nest.ComputeOp) -> list[str]:
    """The steps synthesis tries on `op` (the layer named `NEST`)."""
    spec = NestSpec.of(op)
    data_channel = {d for d in spec.forms[0][1].terms} if len(spec.forms[0]) > 1 else set()
    out_channel = {d for d in spec.out[1].terms} if len(spec.out) > 1 else set()
    steps = []
    for d, extent in spec.dims:
        if d in data_channel | out_channel:
            steps += [f"split-dim{{dim={d} factor={f}}}" for f in FACTORS if extent % f == 0 and extent > f]
    for r, re in spec.reduction:
        for p, pe in spec.parallel:
            if r in data_channel and p in out_channel and re == pe:
                steps.append(f"tie{{dim={r} to={p}}}")
    weight = {d for f in spec.forms[1] for d in f.terms}
    for k, extent in spec.reduction:
        if k in WINDOWS and extent > 1:
            steps += [f"fold{{dim={k}}}", f"dilate{{dim={k} factor=2}}"]
            if k in weight:
                steps.append(f"expand{{dim={k}}}")
    for o in WINDOWS.values():
        if spec.has(o):
            steps += [f"shift{{dim={o} offset=1}}", f"share{{dim={o}}}"]
    return [s.replace("}", f" layers={NEST}}}") for s in steps]


def cost(model: Model) -> tuple[int, int]:
    op = layer_nest(model)
    return computed_macs(op), weight_count(model, op)


def rank(o: Operator) -> tuple:
    """The order of `Synthesis.operators`: the strongest mixing, the most MACs, the fewest weights."""
    return -strength(o.mixing), -o.macs, o.params, o.length, o.pipeline


def layer_alone(model: Model, layer: str, flops: float, params: float, depth: int) -> Model:
    """Conv `layer` of `model` alone (`standalone`, its nest named `NEST`), after checking the caps."""
    if not 0 < flops <= 1 or params <= 0 or depth < 1:
        raise NasirError(f"synthesize: flops must be in (0, 1], params positive and depth at least 1 "
                         f"(got flops={flops}, params={params}, depth={depth})")
    nested = model if any(isinstance(op, nest.ComputeOp) for op in model.ops()) else model.transform(
        "convert-nn-to-nest")
    ops = [op for op in nested.ops() if isinstance(op, nest.ComputeOp) and op.layer_name == layer]
    if not ops:
        convs = [op.layer_name for op in nested.ops() if isinstance(op, nest.ComputeOp) and is_conv(op)]
        raise NasirError(f"synthesize: the model has no layer '{layer}' (its convs: {', '.join(convs[:12])}"
                         f"{' ...' if len(convs) > 12 else ''})")
    if not is_conv(ops[0]) or len(ops[0].access_maps[0].results) != 4:
        raise NasirError(f"synthesize: layer '{layer}' is not a convolution (a mac nest of a 4-D input and a "
                         f"weight)")
    return standalone(nested, ops[0], planes=False)


def synthesize(model: Model, layer: str, flops: float = 0.5, params: float = 1.0, depth: int = DEPTH,
               progress: Callable[[int, int], None] | None = None) -> Synthesis:
    """Operators for `layer` of `model` (a conv) within `flops` x its MACs and `params` x its
    weights, from compositions of up to `depth` primitive steps (module doc), ranked as in
    `Synthesis`.
    `progress(level, states)` is called at each level of the breadth-first walk."""
    alone = layer_alone(model, layer, flops, params, depth)
    macs0, params0 = cost(alone)
    original = Operator((), alone, macs0, params0)
    states = {structure_key(layer_nest(alone), canonical=False)}
    operators = {structure_key(layer_nest(alone))}
    level, found, rejected = [original], [], {}
    generated = pruned = 0
    max_cut = max(e for _, e in layer_nest(alone).domain.reduction)
    for step_no in range(1, depth + 1):
        if progress:
            progress(step_no, len(level))
        following = []
        for state in level:
            for step in primitive_steps(state.op):
                try:
                    with in_place():
                        made = state.model.transform(step)
                except (LegalityError, PassError):
                    continue
                generated += 1
                op = layer_nest(made)
                exact, key = structure_key(op, canonical=False), structure_key(op)
                if exact in states:
                    continue
                states.add(exact)
                why = wasteful(op)
                if why:
                    rejected[why] = rejected.get(why, 0) + 1
                    continue
                macs, weights = cost(made)
                cand = Operator((*state.steps, step), made, macs, weights)
                if key not in operators:
                    operators.add(key)
                    if macs <= flops * macs0 and weights <= params * params0:
                        found.append(cand)
                if macs > flops * macs0 * max_cut ** (depth - step_no):
                    pruned += 1  # more MAC cuts than steps left
                    continue
                following.append(cand)
        level = following
    found.sort(key=rank)
    return Synthesis(original, found, generated, len(operators), pruned, rejected)


SHORT = {"split-dim": "{dim}/{factor}", "tie": "{dim}={to}", "expand": "expand-{dim}", "share": "share-{dim}",
         "dilate": "dilate-{dim}{factor}", "fold": "fold-{dim}", "shift": "shift-{dim}{offset}"}


def choice_name(steps: tuple[str, ...]) -> str:
    """A synthesised operator as a search choice: `synth:co/2+ci/2+ci_i=co_i` (split co by 2,
    split ci by 2, tie ci_i to co_i); one built bottom-up: `synth:broadcast1+reducec+unfold13`."""
    parts = []
    for step in steps:
        name, _, rest = step.partition("{")
        if name == "bottom-up":  # one pass: its steps, from the output's coordinates
            parts += [s.replace(" ", "") for s in rest.split('"')[1].split("; ")]
            continue
        options = dict(kv.split("=", 1) for kv in rest.rstrip("}").split() if "=" in kv)
        parts.append(SHORT[name].format(**options))
    return "synth:" + "+".join(parts)


def distinct_convs(model: Model) -> list[nest.ComputeOp]:
    """The convs of `model` (nest level) synthesis works on, one of each structure, first seen first."""
    seen, out = set(), []
    for op in model.ops():
        if isinstance(op, nest.ComputeOp) and is_conv(op) and len(op.access_maps[0].results) == 4:
            key = structure_key(op, canonical=False)
            if key not in seen:
                seen.add(key)
                out.append(op)
    return out


def fixed_keys(alone: Model) -> set[tuple]:
    """The canonical keys (`structure_key`) of the operators the search's fixed choices
    (`TEMPLATES`) make of the lone layer `alone` (named `NEST`)."""
    from nasir.search.space import TEMPLATES

    keys = set()
    for template in TEMPLATES.values():
        try:
            keys.add(structure_key(layer_nest(alone.transform(template(NEST)))))
        except NasirError:
            continue
    return keys


def search_choices(model: Model, per_layer: int = 2, flops: float = 0.5, depth: int = 2,
                   walk: Callable[..., Synthesis] | None = None) -> dict[str, str]:
    """Synthesised operators for the search to draw beside its fixed choices (`SearchSpace.of`):
    for each distinct conv of `model` (nest level), the first `per_layer` operators of its
    synthesis (`walk`: `synthesize`, or `nasir.search.bottom_up.synthesize_bottom_up`) that none of
    `TEMPLATES` makes on it (`fixed_keys`), by `choice_name` -> their steps."""
    out: dict[str, str] = {}
    for op in distinct_convs(model):
        alone = standalone(model, op, planes=False)
        fixed = fixed_keys(alone)
        found = (walk or synthesize)(alone, NEST, flops=flops, depth=depth)
        for operator in [o for o in found.operators if structure_key(o.op) not in fixed][:per_layer]:
            out.setdefault(choice_name(operator.steps), operator.pipeline)
    return out


def time_operators(synthesis: Synthesis, limit: int | None = None, cpu: str | None = None,
                   threads: int = 1) -> None:
    """Time the original and the first `limit` operators alone (llvm, the user's kernel cache)."""
    times = KernelTimes(default_kernel_cache(), cpu, threads)
    for op in [synthesis.original, *synthesis.operators[:limit]]:
        op.ms = times.nest_ms(op.model, op.op)
