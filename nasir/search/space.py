"""The search space: for each convolution of a model, the architecture transforms that apply to it.

A candidate network is one choice per convolution; its identity is a pipeline string, the one
spelling `nasir-opt -p` and `Model.transform` take. Choices of one kind are applied together by a
single pass (or composition) over the layers that chose it:

    space = SearchSpace.of(model)             # model at nest level (after convert-nn-to-nest)
    space.layers[3].choices                   # ('identity', 'group2', 'group4', 'depthwise', ...)
    space.pipeline({"layer1_layer1.0_conv1_Conv": "group2", "layer2_layer2.0_conv1_Conv": "group2",
                    "layer3_layer3.0_conv2_Conv": "seq2"})
    # 'group{factor=2 layers="layer1_layer1[.]0_conv1_Conv|layer2_layer2[.]0_conv1_Conv"},
    #  index-split{dim=co at=16 layers="layer3_layer3[.]0_conv2_Conv"},group{...part1"}'

The transformed convs' weights follow `init` (every architecture pass's option): "inherit" derives
them from the model's (a user's trained model: the search's default for a file), "kaiming" draws
them fresh (a zoo model, whose weights are untrained); `pipeline` writes it into every step, so a
candidate's pipeline applied to the same model gives the same network.

Every (layer, choice) is tried once on the model when the space is built; a choice its pass refuses
there (a channel count a factor does not divide, a residual add that a changed channel count would
reach) is left out and its reason kept in `LayerChoices.excluded`, so the search never samples it.
Choices that are legal alone can still clash in a candidate; the evaluation records that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from nasir.dialects import nest
from nasir.dialects.shapes import shape_of
from nasir.errors import NasirError
from nasir.lowering.passes import with_init
from nasir.model import Model
from nasir.transforms import compositions as C
from nasir.transforms.nest_spec import is_conv

IDENTITY = "identity"


def _pass(name: str, **options: object) -> Callable[[str], str]:
    """The pipeline of one pass with `options` on the nests `layers`."""
    spelled = " ".join(f"{k}={v}" for k, v in options.items())
    return lambda layers: f'{name}{{{spelled} layers="{layers}"}}'


TEMPLATES: dict[str, Callable[[str], str]] = {
    IDENTITY: lambda layers: "",
    **{f"bottleneck-{d}{b}": _pass("bottleneck", dim=d, factor=b) for d in ("co", "ci") for b in (2, 4)},
    **{f"bottleneck-hw{b}": partial(C.spatial_bottleneck, b=b) for b in (2, 4)},
    **{f"group{g}": partial(C.grouped, g=g) for g in (2, 4, 8, 16)},
    "depthwise": C.depthwise,
    "seq1": C.seq1,
    "seq2": C.seq2,
    "seq3": C.seq3,
    "fold-kh": _pass("fold", dim="kh"),
    "fold-kw": _pass("fold", dim="kw"),
    "fold-pieces": C.fold_pieces,
    "unfold-oh3": _pass("unfold", dim="oh", size=3),
    "unfold-ow3": _pass("unfold", dim="ow", size=3),
    "shift-oh": _pass("shift", dim="oh", offset=1),
    "shift-ow": _pass("shift", dim="ow", offset=1),
    "unshare-oh2": partial(C.seq3_bands, parts=2),
}
"""Every choice a layer can make, in the order their passes run, with the pipeline it gives for a
`layers` pattern. Channel bottlenecks run first: a changed channel count passes into the next conv
while it is still ungrouped, then grouping applies to the new count. Parameters: group G;
bottleneck of co or ci (factor B) or of the spatial domain (`hw`: the paper's
interchange/bottleneck(h)/bottleneck(w) composition); Seq 1-3 as in
`nasir.transforms.compositions`; a k x k window folded to its centre row or column, or split into
1 x k and k x 1 pieces; a 1-wide window unfolded to 3; the input read one pixel further; output
rows in two bands with their own weights (index-split + unshare)."""


def conv_nests(model: Model) -> list[nest.ComputeOp]:
    """The convolutions a search may change: nests contracting data with a weight into a 4-D output."""
    return [op for op in model.module.walk()
            if isinstance(op, nest.ComputeOp) and is_conv(op) and len(shape_of(op.result)) == 4]


def layer_pattern(name: str) -> str:
    """A regex matching exactly the nest name `name` in a pipeline option: `a.b` -> `a[.]b`."""
    bad = [c for c in name if c in '"\\]^']
    if bad:
        raise NasirError(f"layer '{name}': a name with '{bad[0]}' cannot be named in a pipeline option")
    return "".join(c if c.isalnum() or c == "_" else f"[{c}]" for c in name)


@dataclass(frozen=True)
class LayerChoices:
    """One convolution of the model: the choices the search may make for it, and those it may not
    with the pass's reason."""

    layer: str
    macs: int
    choices: tuple[str, ...]
    excluded: Mapping[str, str] = field(default_factory=dict)


SYNTH_LAYER = "nest"
"""The layer name synthesised operators' steps carry: the name `standalone` gives a lone nest."""


def synthesized_template(pipeline: str) -> Callable[[str], str]:
    """The template of a synthesised operator: its steps (`layers=nest`, as synthesis writes them)
    on the layers of a pattern."""
    return lambda layers: pipeline.replace(f"layers={SYNTH_LAYER}", f'layers="{layers}"')


@dataclass(frozen=True)
class SearchSpace:
    """The layers and their choices, in model order, and how transformed convs get their weights;
    `synthesized`: choices beyond `TEMPLATES`, operators synthesised for the model's convs (name ->
    the steps that make one, on the layer `nest`; `nasir.search.synthesis.search_choices`)."""

    layers: tuple[LayerChoices, ...]
    init: str = "kaiming"
    synthesized: Mapping[str, str] = field(default_factory=dict)

    def template(self, choice: str) -> Callable[[str], str]:
        return TEMPLATES[choice] if choice in TEMPLATES else synthesized_template(self.synthesized[choice])

    @staticmethod
    def of(model: Model, choices: tuple[str, ...] = tuple(TEMPLATES), init: str = "kaiming",
           synthesized: Mapping[str, str] | None = None) -> SearchSpace:
        """Try every choice (and synthesised operator) on every conv of `model` (nest level) alone;
        keep those that apply."""
        unknown = [c for c in choices if c not in TEMPLATES]
        if unknown:
            raise NasirError(f"unknown choice(s) {', '.join(unknown)} (known: {', '.join(TEMPLATES)})")
        convs = conv_nests(model)
        if not convs:
            raise NasirError("the model has no convolution for an architecture transform to change")
        space = SearchSpace((), init, dict(synthesized or {}))
        layers = []
        for op in convs:
            kept, excluded = [IDENTITY], {}
            for choice in (*choices, *space.synthesized):
                if choice == IDENTITY:
                    continue
                reason = _refusal(model, _with_init(space.template(choice)(layer_pattern(op.layer_name)), init))
                if reason is None:
                    kept.append(choice)
                else:
                    excluded[choice] = reason
            layers.append(LayerChoices(op.layer_name, nest.macs(op), tuple(kept), excluded))
        if all(len(lc.choices) == 1 for lc in layers):
            raise NasirError("no architecture transform applies to any layer of the model")
        return SearchSpace(tuple(layers), init, space.synthesized)

    @property
    def order(self) -> list[str]:
        """Every choice in the order their passes run: `TEMPLATES`, then the synthesised ones."""
        return [*TEMPLATES, *self.synthesized]

    def pipeline(self, picks: Mapping[str, str]) -> str:
        """The pipeline of a candidate: `picks` maps layer -> choice (missing layers: identity)."""
        by_choice: dict[str, list[str]] = {}
        for lc in self.layers:
            choice = picks.get(lc.layer, IDENTITY)
            if choice not in lc.choices:
                raise NasirError(f"layer '{lc.layer}' cannot take '{choice}' (it takes {', '.join(lc.choices)})")
            if choice != IDENTITY:
                by_choice.setdefault(choice, []).append(layer_pattern(lc.layer))
        steps = [self.template(c)("|".join(by_choice[c])) for c in self.order if c in by_choice]
        return _with_init(",".join(steps), self.init)

    def uniform(self) -> list[dict[str, str]]:
        """The whole-network variants: for each choice but identity, in `order`, the picks
        that give it to every layer that takes it (the others keep their conv), e.g. group8 on
        every conv where 8 divides the channels. NAS-PTE's own experiments apply a transform
        network-wide like this; a search's strategies start from them (`Search.run`)."""
        out = []
        for choice in self.order:
            picks = {lc.layer: choice if choice in lc.choices else IDENTITY for lc in self.layers
                     if len(lc.choices) > 1}
            if choice != IDENTITY and any(v == choice for v in picks.values()):
                out.append(picks)
        return out

    def random_pipeline(self, rng) -> str:
        """A random candidate (`rng`: a numpy Generator): each layer keeps its conv or takes a
        uniformly drawn choice, the share of changed layers itself drawn uniformly per candidate."""
        keep = rng.random()
        return self.pipeline({lc.layer: (str(rng.choice(lc.choices[1:])) if len(lc.choices) > 1
                                         and rng.random() > keep else IDENTITY) for lc in self.layers})

    def to_json(self) -> list[dict]:
        return [{"layer": lc.layer, "macs": lc.macs, "choices": list(lc.choices), "excluded": dict(lc.excluded)}
                for lc in self.layers]

    @staticmethod
    def from_json(rows: list[dict], init: str = "kaiming", synthesized: Mapping[str, str] | None = None) -> SearchSpace:
        return SearchSpace(tuple(LayerChoices(r["layer"], r["macs"], tuple(r["choices"]), r["excluded"]) for r in rows),
                           init, dict(synthesized or {}))


def _with_init(pipeline: str, init: str) -> str:
    """`pipeline` with `init` written into its steps (kaiming, the passes' default, left unsaid)."""
    return with_init(pipeline, init) if pipeline and init != "kaiming" else pipeline


def _refusal(model: Model, pipeline: str) -> str | None:
    """Why `pipeline` cannot run on `model` (the pass's message), or None when it runs."""
    try:
        model.transform(pipeline)
    except NasirError as e:
        return str(e)
    return None
