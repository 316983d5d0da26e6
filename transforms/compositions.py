"""The papers' winning transform sequences as pipeline strings (BACKGROUND.md sections 1 and 2).

Each function returns the pipeline users would type into `nasir-opt -p` or `Model.transform`, for
the convs selected by `layers` (a name or a regex matched against whole nest names). Parts made by
index-split are addressed as `(?:LAYERS)[.]partK`. Schedule-only steps of the published sequences
(interchange, fuse) do not change what is computed; they are kept where the sequence is defined by
them (the spatial bottleneck) and left to the schedule search elsewhere.

    >>> seq2("conv1", u=16, g=2)
    'index-split{dim=co at=16 layers="conv1"},group{factor=2 layers="(?:conv1)[.]part1"}'
"""

from __future__ import annotations

from collections.abc import Sequence


def _sel(layers: str) -> str:
    if '"' in layers or "\\" in layers:
        raise ValueError(f"layer pattern {layers!r}: pipeline options cannot hold '\"' or '\\\\' (write '[.]' for a dot)")
    return f'layers="{layers}"'


def part(layers: str, k: int) -> str:
    """The regex selecting part k of the nests `layers` after an index-split."""
    return f"(?:{layers})[.]part{k}"


def grouped(layers: str, g: int = 2) -> str:
    """Grouped convolution: G groups."""
    return f"group{{factor={g} {_sel(layers)}}}"


def depthwise(layers: str) -> str:
    """Depthwise convolution: group with G = C_in."""
    return f"depthwise{{{_sel(layers)}}}"


def spatial_bottleneck(layers: str, b: int = 2) -> str:
    """interchange -> bottleneck(h) -> interchange -> bottleneck(w) -> interchange (NAS-PTE).

    The interchanges move the loop being bottlenecked outward and restore the order at the end.
    The steps select the convs alone, not the `<layer>.expand` copies the bottlenecks add (a
    pattern such as `.*conv1.*` would match those too).
    """
    sel = _sel(f"(?!.*[.]expand$)(?:{layers})")
    return ",".join([
        f"interchange{{order=oh,co {sel}}}",
        f"bottleneck{{dim=oh factor={b} {sel}}}",
        f"interchange{{order=ow,co {sel}}}",
        f"bottleneck{{dim=ow factor={b} {sel}}}",
        f"interchange{{order=co,oh,ow {sel}}}",
    ])


def split_groups(layers: str, groups: Sequence[int], at: int | None = None) -> str:
    """Split the output channels into len(groups) parts (equal, or [0, at) and [at, Co)); part k is
    grouped by groups[k] (1: a full convolution); the parts' outputs are concatenated."""
    if at is not None and len(groups) != 2:
        raise ValueError("split_groups: at= makes exactly two parts")
    split = f"at={at}" if at is not None else f"parts={len(groups)}"
    steps = [f"index-split{{dim=co {split} {_sel(layers)}}}"]
    steps += [grouped(part(layers, k), g) for k, g in enumerate(groups) if g != 1]
    return ",".join(steps)


def fold_pieces(layers: str) -> str:
    """A k x k window as 1 x k and k x 1 pieces: half the output channels keep the window's centre
    row, the other half its centre column."""
    return ",".join([f"index-split{{dim=co parts=2 {_sel(layers)}}}", f"fold{{dim=kh {_sel(part(layers, 0))}}}",
                     f"fold{{dim=kw {_sel(part(layers, 1))}}}"])


def seq1(layers: str, groups: Sequence[int] = (1, 2, 4, 8)) -> str:
    """Seq 1 (split -> interchange -> group -> interchange -> fuse): S channel parts, each a conv of
    the whole input with its own group count, concatenated."""
    return split_groups(layers, groups)


def seq2(layers: str, u: int = 16, g: int = 2) -> str:
    """Seq 2 (unroll -> group -> interchange): the first U output channels are a full conv, the
    rest a grouped conv with G groups."""
    return split_groups(layers, (1, g), at=u)


def seq3(layers: str, groups: Sequence[int] = (2, 4)) -> str:
    """Seq 3 (split -> group -> interchange -> group): halves of the output channels with different
    group factors."""
    return split_groups(layers, groups)


def seq3_bands(layers: str, parts: int = 2) -> str:
    """Seq 3's published variant: H split into bands, each with its own weights."""
    return f"unshare{{dim=oh parts={parts} {_sel(layers)}}}"
