"""Operators built bottom-up, from the output's coordinates to the input's (Syno's direction, issue 55).

An `Expression` starts where the output is indexed, the coordinates [n, co, oh, ow] with nothing
summed and a weight that reads nothing, and each step rewrites its *frontier*: the coordinates the
input will be read at. It is an operator once the frontier has the input's shape [N, Ci, H, W].
Steps name a frontier coordinate by its position I (0-based):

| step            | Syno    | the frontier                                    | the weight          |
|-----------------|---------|-------------------------------------------------|---------------------|
| `split I G`     | MERGE   | I, one dim D, becomes D_o (G), D_i (extent / G)  | (as the output)     |
| `merge I J`     | SPLIT   | I and J become I * extent(J) + J, at I           |                     |
| `stride I S`    | STRIDE  | I becomes I * S (extent times S)                 |                     |
| `shift I`       | SHIFT   | I becomes I + 1                                  |                     |
| `unfold I K`    | UNFOLD  | I becomes I + k - (K-1)/2, k a new summed dim    | reads k             |
| `unfold-sum I K`| UNFOLD  | as `unfold`                                      | does not read k     |
| `reduce c/F`    | REDUCE  | a new summed dim of extent Ci / F, appended      | reads it            |
| `share I`       | SHARE   | (kept)                                           | reads I's dims      |
| `broadcast I`   | EXPAND  | I leaves: the input does not vary along it       | reads I's dims      |

Extents are relative (`split` makes G outer parts, `reduce` sums the input's channels over F), so an
expression is a template that fits any conv it reaches the input shape of. `finish` reads each input
axis at a frontier coordinate of its extent and kind: channels from channel dims (co, ci), rows from
oh and row windows, columns from ow and column windows (a coordinate's kind is its dim of largest
coefficient; an axis of extent 1 may read index 0). Channels read as rows (space-to-depth) are
outside what it builds. A 3x3 conv and a grouped one, from [n, co, oh, ow]:

    broadcast 1; reduce c; unfold 1 3; unfold 2 3
        x[n, ci, oh + kh - 1, ow + kw - 1] * w[co, ci, kh, kw]
    split 1 2; broadcast 2; share 1; reduce c/2; merge 1 4; unfold 2 3; unfold 3 3
        x[n, co_o * (Ci/2) + ci, oh + kh - 1, ow + kw - 1] * w[co_o * (Co/2) + co_i, ci, kh, kw]   (2 groups)

`BottomUpPass` (`bottom-up{steps="..." layers=REGEX}`) installs the operator an expression makes in
place of a conv. Its weight is fresh (Kaiming, whatever `init` says): an operator built from the
output has no trained counterpart to inherit from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nasir.dialects import nest
from nasir.errors import LegalityError, PassError
from nasir.transforms.arch import ArchPass, Edit
from nasir.transforms.nest_spec import Form, NestSpec
from nasir.transforms.window import conv_with

Lin = tuple[tuple[tuple[str, int], ...], int]
"""A linear form over named dims: ((dim, coefficient), ...) sorted by dim, and a constant."""

FAMILIES = ("n", "c", "h", "w")
"""The input axes' kinds, in NCHW order: a dim's family is what output axis it came from."""


def lin(terms: dict[str, int], const: int = 0) -> Lin:
    return tuple(sorted((d, c) for d, c in terms.items() if c)), const


def lin_str(form: Lin) -> str:
    parts = [d if c == 1 else f"{d} * {c}" for d, c in form[0]]
    if form[1] or not parts:
        parts.append(str(form[1]))
    return " + ".join(parts)


def family(dim: str) -> str:
    """`c` for channel dims (co, ci, co_o), `h` for rows (oh, kh2), `w` for columns, else `n`."""
    if dim.startswith("c"):
        return "c"
    return next((f for f in "hw" if dim[:2].endswith(f)), "n")


@dataclass(frozen=True)
class Expression:
    """A partial operator: its dims (`parallel` in the output's order, `reduction` summed), the
    output's forms, the frontier (forms and their extents), the dims the weight reads, and the
    input's shape (`target`) and channels it must reach."""

    parallel: tuple[tuple[str, int], ...]
    reduction: tuple[tuple[str, int], ...]
    out: tuple[Lin, ...]
    frontier: tuple[tuple[Lin, int], ...]
    weight: tuple[str, ...]
    target: tuple[int, ...]

    @staticmethod
    def start(out_dims: list[tuple[str, int]], target: tuple[int, ...]) -> Expression:
        """The output's coordinates, each a dim of `out_dims`, as the frontier."""
        return Expression(tuple(out_dims), (), tuple(lin({d: 1}) for d, _ in out_dims),
                          tuple((lin({d: 1}), e) for d, e in out_dims), (), tuple(target))

    # --- the steps ---------------------------------------------------------------------------
    def apply(self, step: str) -> Expression:
        """The expression after `step` (module doc), or a LegalityError saying why it cannot."""
        name, *args = step.split()
        method = STEPS.get(name)
        if method is None:
            raise PassError(f"bottom-up: unknown step '{name}' (known: {', '.join(STEPS)})")
        try:
            values = [a if name == "reduce" else int(a) for a in args]
            return method(self, *values)
        except (TypeError, ValueError):
            raise PassError(f"bottom-up: step '{step}': wrong arguments") from None

    def _coord(self, i: int) -> tuple[Lin, int]:
        if not 0 <= i < len(self.frontier):
            raise LegalityError(f"bottom-up: no coordinate {i} (the frontier has {len(self.frontier)})")
        return self.frontier[i]

    def _with(self, i: int, *coords: tuple[Lin, int], **changes) -> Expression:
        frontier = self.frontier[:i] + coords + self.frontier[i + 1:]
        return replace(self, frontier=frontier, **changes)

    def _unique(self, base: str) -> str:
        taken = {d for d, _ in self.parallel + self.reduction}
        name, k = base, 2
        while name in taken:
            name, k = f"{base}{k}", k + 1
        return name

    def split(self, i: int, parts: int) -> Expression:
        (terms, const), extent = self._coord(i)
        if len(terms) != 1 or terms[0][1] != 1 or const or terms[0][0] not in dict(self.parallel):
            raise LegalityError(f"bottom-up: split: coordinate {i} ({lin_str((terms, const))}) is not an output dim")
        d = terms[0][0]
        if parts < 2 or extent % parts or extent == parts:
            raise LegalityError(f"bottom-up: split: {d} = {extent} does not split into {parts} parts of 2 or more")
        outer, inner, width = self._unique(f"{d}_o"), self._unique(f"{d}_i"), extent // parts
        k = [p for p, _ in self.parallel].index(d)
        parallel = self.parallel[:k] + ((outer, parts), (inner, width)) + self.parallel[k + 1:]
        out = tuple(_substitute(f, d, {outer: width, inner: 1}) for f in self.out)
        frontier = tuple((_substitute(f, d, {outer: width, inner: 1}), e) for f, e in self.frontier)
        weight = tuple(w for v in self.weight for w in ((outer, inner) if v == d else (v,)))
        moved = replace(self, parallel=parallel, out=out, frontier=frontier, weight=weight)
        return moved._with(i, (lin({outer: 1}), parts), (lin({inner: 1}), width))

    def merge(self, i: int, j: int) -> Expression:
        (a, ea), (b, eb) = self._coord(i), self._coord(j)
        if i == j:
            raise LegalityError("bottom-up: merge: a coordinate with itself")
        terms = {d: c * eb for d, c in a[0]}
        for d, c in b[0]:
            terms[d] = terms.get(d, 0) + c
        merged = self._with(i, (lin(terms, a[1] * eb + b[1]), ea * eb))
        return replace(merged, frontier=merged.frontier[:j] + merged.frontier[j + 1:])

    def stride(self, i: int, factor: int) -> Expression:
        (terms, const), extent = self._coord(i)
        if factor < 2:
            raise LegalityError(f"bottom-up: stride: factor {factor} is below 2")
        return self._with(i, (lin({d: c * factor for d, c in terms}, const * factor), extent * factor))

    def shift(self, i: int) -> Expression:
        (terms, const), extent = self._coord(i)
        return self._with(i, ((terms, const + 1), extent))

    def unfold(self, i: int, size: int, weighted: bool = True) -> Expression:
        (terms, const), extent = self._coord(i)
        if size < 2:
            raise LegalityError(f"bottom-up: unfold: a window of {size}")
        fam = _family_of(terms)
        k = self._unique({"h": "kh", "w": "kw"}.get(fam, "k"))
        moved = dict(terms)
        moved[k] = 1
        weight = self.weight + (k,) if weighted else self.weight
        return self._with(i, (lin(moved, const - (size - 1) // 2), extent),
                          reduction=self.reduction + ((k, size),), weight=weight)

    def unfold_sum(self, i: int, size: int) -> Expression:
        return self.unfold(i, size, weighted=False)

    def reduce(self, channels: str) -> Expression:
        base, _, by = channels.partition("/")
        factor = int(by or 1)
        total = self.target[1] if len(self.target) > 1 else 0
        if base != "c" or factor < 1 or total % factor:
            raise LegalityError(f"bottom-up: reduce: '{channels}' is not c or c/F with F dividing the input's "
                                f"{total} channels")
        r = self._unique("ci")
        return replace(self, reduction=self.reduction + ((r, total // factor),),
                       frontier=self.frontier + ((lin({r: 1}), total // factor),), weight=self.weight + (r,))

    def share(self, i: int) -> Expression:
        (terms, _), _ = self._coord(i)
        new = tuple(d for d, _ in terms if d not in self.weight)
        if not new:
            raise LegalityError(f"bottom-up: share: the weight already reads coordinate {i}'s dims")
        return replace(self, weight=self.weight + new)

    def broadcast(self, i: int) -> Expression:
        (terms, _), _ = self._coord(i)
        if any(d in dict(self.reduction) for d, _ in terms):
            raise LegalityError(f"bottom-up: broadcast: coordinate {i} holds a summed dim (a sum of weights)")
        new = tuple(d for d, _ in terms if d not in self.weight)
        return replace(self, frontier=self.frontier[:i] + self.frontier[i + 1:], weight=self.weight + new)

    # --- where it stands ---------------------------------------------------------------------
    def macs(self) -> int:
        return math.prod(e for _, e in self.parallel + self.reduction)

    def summed_alone(self) -> int:
        """The extent of the summed dims the weight does not read (a presum folds them)."""
        return math.prod(e for d, e in self.reduction if d not in self.weight)

    def params(self) -> int:
        extents = dict(self.parallel + self.reduction)
        return math.prod(extents[d] for d in self.weight)

    def distance(self) -> int:
        """At least how many steps are left before the frontier has the input's shape (extents of 1
        left out): a step matches at most two more of the input's axes (a split) or retires at
        most two unmatched coordinates (a merge); an empty weight needs one more."""
        want = [e for e in self.target if e > 1]
        have = [e for _, e in self.frontier if e > 1]
        matched = sum(min(want.count(e), have.count(e)) for e in set(want))
        return max(-(-(len(want) - matched) // 2), -(-(len(have) - matched) // 2)) + (not self.weight)

    def key(self) -> tuple:
        """The expression without its dims' names (numbered as the output and frontier first read
        them), so that steps applied in another order that reach it meet it again."""
        order: dict[str, str] = {}
        for form in (*self.out, *(f for f, _ in self.frontier)):
            for d, _ in form[0]:
                order.setdefault(d, f"d{len(order)}")
        extents = dict(self.parallel + self.reduction)
        name = lambda form: (tuple(sorted((order[d], c) for d, c in form[0])), form[1])
        return (tuple(name(f) for f in self.out), tuple((name(f), e) for f, e in self.frontier),
                tuple(sorted((order[d], extents[d]) for d in self.weight)),
                tuple(sorted((order[d], e) for d, e in self.reduction)))

    def finish(self) -> list[Lin]:
        """The input's access: a frontier coordinate per input axis (module doc), or a
        LegalityError if the frontier does not have the input's shape."""
        if not self.weight:
            raise LegalityError("bottom-up: the weight reads nothing (share, broadcast or reduce a coordinate)")
        left = list(range(len(self.frontier)))
        forms: list[Lin] = []
        for axis, extent in enumerate(self.target):
            fits = [i for i in left if self.frontier[i][1] == extent]
            fam = FAMILIES[axis] if axis < len(FAMILIES) else "n"
            kin = [i for i in fits if _family_of(self.frontier[i][0][0]) == fam]
            if kin or (fits and extent == 1):
                pick = (kin or fits)[0]
                left.remove(pick)
                forms.append(self.frontier[pick][0])
            elif extent == 1:
                forms.append(lin({}))
            else:
                shape = " x ".join(str(e) for _, e in self.frontier)
                raise LegalityError(f"bottom-up: the frontier ({shape}) has no {fam} coordinate for the input's "
                                    f"axis {axis} of {extent}")
        if any(self.frontier[i][1] > 1 for i in left):
            raise LegalityError("bottom-up: the frontier has coordinates the input has no axis for")
        return forms


STEPS = {"split": Expression.split, "merge": Expression.merge, "stride": Expression.stride,
         "shift": Expression.shift, "unfold": Expression.unfold, "unfold-sum": Expression.unfold_sum,
         "reduce": Expression.reduce, "share": Expression.share, "broadcast": Expression.broadcast}


def _substitute(form: Lin, dim: str, terms: dict[str, int]) -> Lin:
    old = dict(form[0])
    a = old.pop(dim, 0)
    for d, c in terms.items():
        old[d] = old.get(d, 0) + a * c
    return lin(old, form[1])


def _family_of(terms) -> str:
    """The family of the dim with the largest coefficient in a form."""
    if not terms:
        return "n"
    return family(max(terms, key=lambda t: (abs(t[1]), t[0]))[0])


def parse_steps(steps: str) -> list[str]:
    return [s.strip() for s in steps.split(";") if s.strip()]


def replay(steps: str, out_dims: list[tuple[str, int]], target: tuple[int, ...]) -> Expression:
    expr = Expression.start(out_dims, target)
    for step in parse_steps(steps):
        expr = expr.apply(step)
    return expr


def _to_form(form: Lin) -> Form:
    return Form(dict(form[0]), form[1])


def weight_axes(expr: Expression, order: list[str]) -> list[Form]:
    """The weight's access, in a conv's layout (O, I, H, W): the output's channel dims it reads, the
    summed channels, the row taps, the column taps, an axis each (index 0 where it reads none, as
    PyTorch's depthwise weight [Co, 1, Kh, Kw]; several where it reads several), then the output's
    rows or columns it reads (`share`). An output axis's dims that it all reads are one axis, read
    as the output reads them (co_o * 4 + co_i, not co_o and co_i)."""
    read, axes = set(expr.weight), {"O": [], "I": [], "H": [], "W": [], "rest": []}
    summed = dict(expr.reduction)
    for d in sorted(expr.weight, key=order.index):
        whole = next((f for f in expr.out if d in dict(f[0]) and set(dict(f[0])) <= read), None)
        form = Form(dict(whole[0])) if whole is not None else Form.dim(d)
        fam = family(d)
        slot = ("I" if d in summed else "O") if fam == "c" else (fam.upper() if d in summed else "rest")
        if not any(a.terms == form.terms for a in axes[slot]):
            axes[slot].append(form)
    return [f for slot in ("O", "I", "H", "W") for f in axes[slot] or [Form({})]] + axes["rest"]


def install(spec: NestSpec, expr: Expression) -> None:
    """Make `spec` the operator `expr` describes: its dims (output dims in the output's order, summed
    ones channels first, then rows, then columns), accesses and weight (`weight_axes`)."""
    data = expr.finish()
    rank = {f: k for k, f in enumerate(FAMILIES)}
    reduction = sorted(expr.reduction, key=lambda d: rank[family(d[0])])
    spec.parallel = [list(d) for d in expr.parallel]
    spec.reduction = [list(d) for d in reduction]
    order = [d for d, _ in expr.parallel + tuple(reduction)]
    spec.forms[0] = [_to_form(f) for f in data]
    spec.forms[1] = weight_axes(expr, order)
    spec.out = [_to_form(f) for f in expr.out]
    for k in range(2, len(spec.forms)):  # a bias reads the output's channel dims as the output does
        spec.forms[k] = [_to_form(f) for f in expr.out[1:2]]


@dataclass(frozen=True)
class BottomUpPass(ArchPass):
    """`bottom-up{steps="S; S; ..." layers=REGEX seed=0}`: the conv becomes the operator its output's
    coordinates make under the steps (module doc of `nasir.transforms.coordinates`), with a fresh
    weight. A grouped conv of 2 groups, built from the output:

        x (n, ci, oh + kh - 1, ow + kw - 1)  w (co, ci, kh, kw)
        -- bottom-up{steps="split 1 2; broadcast 2; share 1; reduce c/2; merge 1 4; unfold 2 3; unfold 3 3"} -->
        [n, co_o = 2, co_i = 4, oh, ow], [ci = 4, kh = 3, kw = 3]
        x (n, co_o * 4 + ci, oh + kh - 1, ow + kw - 1)  w (co_o * 4 + co_i, ci, kh, kw): tensor<8x4x3x3>
    """

    name = "bottom-up"

    steps: str = ""

    def check_options(self) -> None:
        if not parse_steps(self.steps):
            raise PassError('bottom-up: give the steps, e.g. steps="broadcast 1; reduce c; unfold 1 3; unfold 2 3"')

    def applies(self, op: nest.ComputeOp) -> str | None:
        return conv_with(op, ())

    def rewrite(self, edit: Edit, op: nest.ComputeOp) -> None:
        spec = NestSpec.of(op)
        if not all(f.raw is None and len(f.terms) == 1 and not f.const and 1 in f.terms.values() for f in spec.out):
            raise LegalityError(f"bottom-up: layer '{spec.name}': the output is not indexed by one dim per axis")
        out_dims = [(d, spec.extent(d)) for f in spec.out for d in f.terms]
        try:
            expr = replay(self.steps, out_dims, tuple(op.inputs[0].type.get_shape()))
            install(spec, expr)
        except LegalityError as e:
            raise LegalityError(f"{e} (layer '{spec.name}')") from None
        shape = spec.input_shape(1)
        spec.inputs[1] = edit.weight(spec.inputs[1], lambda key: edit.kaiming(shape, key), op)
        spec.schedule = None
        edit.replace(op, spec.build())
