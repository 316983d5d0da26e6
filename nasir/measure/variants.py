"""The architecture variants `make bench` measures (ResNet-18/34 with one transform on every block
conv, as pass pipelines) and realisation, the share of a MAC reduction that becomes a time
reduction: shared by the CPU benchmark (nasir/measure/benchmark.py), the GPU one (nasir/measure/gpu_benchmark.py) and
`nasir profile --variant`.
"""

from __future__ import annotations

BLOCK_CONVS = "layer[0-9]_.*_conv[12]_Conv"
"""The 3x3 convs inside ResNet basic blocks (ONNX node names of the zoo export)."""
BLOCK_CONV1 = "layer[0-9]_.*_conv1_Conv"
"""The first conv of each block: its output meets no residual add, so it may be bottlenecked."""
PREFIX = "convert-nn-to-nest"
"""The transforms work on nests; "nest" is the untransformed model through this prefix alone."""

HALVED_BLOCK_CONVS = "layer[1-3]_.*_conv[12]_Conv"
"""The block convs whose rows split in two at both datasets (layer4's are 7x7 on imagenet)."""
HALVED_BLOCK_CONV1 = "layer[1-3]_.*_conv1_Conv"
"""The first conv of each of those blocks (see BLOCK_CONV1)."""

VARIANTS: dict[str, str] = {
    "base": "",
    "nest": PREFIX,
    **{f"group{g}": f'{PREFIX},group{{factor={g} layers="{BLOCK_CONVS}"}}' for g in (2, 4, 8, 16)},
    "depthwise": f'{PREFIX},depthwise{{layers="{BLOCK_CONVS}"}}',
    "bottleneck2": f'{PREFIX},bottleneck{{dim=co factor=2 layers="{BLOCK_CONV1}"}}',
}
"""The variants `make bench` measures by default: issue 5's realisation targets."""

MORE_VARIANTS: dict[str, str] = {
    "fold-kh": f'{PREFIX},fold{{dim=kh layers="{BLOCK_CONVS}"}}',
    "fold-kw": f'{PREFIX},fold{{dim=kw layers="{BLOCK_CONVS}"}}',
    "shift-oh": f'{PREFIX},shift{{dim=oh offset=1 layers="{BLOCK_CONVS}"}}',
    "split-co2": f'{PREFIX},index-split{{dim=co parts=2 layers="{BLOCK_CONVS}"}}',
    "unshare-oh2": f'{PREFIX},unshare{{dim=oh parts=2 layers="{HALVED_BLOCK_CONVS}"}}',
    "bottleneck-ci2": f'{PREFIX},bottleneck{{dim=ci factor=2 layers="{BLOCK_CONV1}"}}',
    "bottleneck-oh2": f'{PREFIX},bottleneck{{dim=oh factor=2 layers="{HALVED_BLOCK_CONV1}"}}',
}
"""Variants of the other architecture transforms, measured on request (`--variants base fold-kh
...`; `nasir profile --variant`): shift, index-split and unshare keep the MACs, so their
realisation is the base's time over theirs."""
ALL_VARIANTS = {**VARIANTS, **MORE_VARIANTS}


def realisation(base_ms: float, variant_ms: float, base_macs: int, variant_macs: int) -> float:
    """Speedup over the base divided by the MAC ratio."""
    return (base_ms / variant_ms) / (base_macs / variant_macs)
