"""nasir re-imports everything it exports (issue 38, deliver 6): every architecture transform and
every composition of the papers, through `to_onnx` -> `nasir.load` -> llvm at both vector widths.

The model is the search tests' small residual network (16 and 32 channels, a strided block with a
1x1 downsample, a gemm head). Each case applies several transforms, to different layers, so that
five compiles per width cover them all. Oracles: ONNX Runtime on the exported file, which must
also equal the torch backend of the transformed model (the file keeps its numerics). The cases are
checked against the pass registry: an architecture pass that no case runs fails the suite.
"""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import pytest
from onnx_graphs import onnxruntime
from search_fixtures import tiny_resnet_onnx

import nasir
from nasir.lowering.passes import PASSES, parse_pipeline
from nasir.transforms import bottleneck, split, window
from nasir.transforms import compositions as C
from nasir.transforms.arch import ArchPass

TOL = dict(rtol=1e-4, atol=1e-4)
PREFIX = "convert-nn-to-nest"
L1C1, L1C2, L2C1, L2C2, DOWN = ("layer1_conv1_Conv", "layer1_conv2_Conv", "layer2_conv1_Conv",
                                "layer2_conv2_Conv", "layer2_downsample_downsample.0_Conv")
STEM = "conv1_Conv"


def bottleneck_(dim: str, layer: str) -> str:
    return f'bottleneck{{dim={dim} factor=2 layers="{layer}"}}'


COMPOSITIONS = {
    "grouped": C.grouped(L1C2, 2),
    "depthwise": C.depthwise(L2C2),
    "spatial_bottleneck": C.spatial_bottleneck(L2C2),
    "split_groups": C.split_groups(L1C1, (1, 4), at=8),
    "fold_pieces": C.fold_pieces(STEM),
    "seq1": C.seq1(L2C1, (1, 2, 4, 8)),
    "seq2": C.seq2(L1C2, u=8, g=2),
    "seq3": C.seq3(L2C2, (2, 4)),
    "seq3_bands": C.seq3_bands(DOWN, 2),
}
"""Each pipeline-building function of `compositions`, on one layer of the model."""

CASES = {
    "channels": [bottleneck_("co", L1C1), COMPOSITIONS["grouped"], bottleneck_("ci", L2C1),
                 COMPOSITIONS["depthwise"], COMPOSITIONS["seq3_bands"]],
    "windows": [f'fold{{dim=kh layers="{L1C1}"}}', f'fold{{dim=kw layers="{L1C2}"}}',
                f'unfold{{dim=ow size=3 layers="{L1C2}"}}', f'unfold{{dim=oh size=3 layers="{DOWN}"}}',
                f'shift{{dim=oh offset=1 layers="{L2C1}"}}', f'shift{{dim=ow offset=-1 layers="{L2C2}"}}',
                f'index-split{{dim=oh at=5 layers="{STEM}"}}'],
    "primitives": [f'split-dim{{dim=co factor=4 layers="{L1C1}"}}', f'split-dim{{dim=ci factor=4 layers="{L1C1}"}}',
                   f'tie{{dim=ci_o to=co_o layers="{L1C1}"}}', f'dilate{{dim=kw factor=2 layers="{L1C2}"}}',
                   f'expand{{dim=kh layers="{L2C1}"}}', f'share{{dim=oh layers="{L2C2}"}}',
                   f'split-dim{{dim=oh factor=2 layers="{STEM}"}}', f'merge-dims{{outer=oh_o inner=oh_i layers="{STEM}"}}',
                   # a grouped strided 1x1 conv grown from the output's coordinates
                   f'bottom-up{{steps="split 1 2; broadcast 2; share 1; reduce c/2; merge 1 4; stride 2 2; stride 3 2" '
                   f'layers="{DOWN}"}}'],
    "splits": [f'index-split{{dim=co parts=2 layers="{L1C1}"}}', f'unshare{{dim=ow parts=2 layers="{L1C2}"}}',
               f'unshare{{dim=oh parts=2 layers="{L2C1}"}}', bottleneck_("oh", DOWN), bottleneck_("ow", STEM),
               COMPOSITIONS["spatial_bottleneck"]],
    "sequences": [*(COMPOSITIONS[name] for name in ("split_groups", "fold_pieces", "seq1", "seq2", "seq3")),
                  C.grouped(DOWN, 2), bottleneck_("ci", DOWN)],
}
"""Case -> the transforms it applies in turn (one pipeline)."""

DIMS = {"bottleneck": bottleneck.DIMS, "unfold": tuple(window.WINDOW), "shift": tuple(window.WINDOW),
        "fold": tuple(window.WINDOW.values()), "unshare": split.SPATIAL, "index-split": ("co", "oh")}
"""The dims each pass with a `dim` option must be exercised on."""


def pipeline(case: str) -> str:
    return ",".join([PREFIX, *CASES[case]])


def test_every_architecture_transform_and_composition_is_a_case():
    ran = [p for case in CASES for p in parse_pipeline(pipeline(case)).passes]
    arch = {cls.name for cls in PASSES if issubclass(cls, ArchPass)}
    assert arch <= {p.name for p in ran}, f"architecture passes no case runs: {arch - {p.name for p in ran}}"
    for name, dims in DIMS.items():
        assert name in arch
        assert set(dims) <= {p.dim for p in ran if p.name == name}, name
    builders = {name for name, fn in inspect.getmembers(C, inspect.isfunction)
                if fn.__module__ == C.__name__ and not name.startswith("_") and name != "part"}
    assert builders == set(COMPOSITIONS)
    used = {p for steps in CASES.values() for p in steps}
    assert set(COMPOSITIONS.values()) <= used


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return nasir.load(str(tiny_resnet_onnx(tmp_path_factory.mktemp("round-trip") / "tiny.onnx")))


@pytest.mark.parametrize("case", CASES)
def test_export_reimports_and_compiles(case, base, cpu, tmp_path):
    transformed = base.transform(pipeline(case))
    path = transformed.to_onnx(tmp_path / f"{case}.onnx")
    onnx.checker.check_model(str(path))
    x = np.random.default_rng(0).standard_normal(base.input_shapes[0]).astype(np.float32)
    expected = onnxruntime(path, x)
    np.testing.assert_allclose(nasir.compile(transformed, target="torch")(x), expected, **TOL)
    back = nasir.load(str(path))
    np.testing.assert_allclose(nasir.compile(back, target="llvm", cpu=cpu)(x), expected, **TOL)



def layer_names(model) -> list[str]:
    """The names of the model's layers that compute (nn ops and nests), in order."""
    from nasir.dialects.module import main_func

    return [op.layer_name for op in main_func(model.module).body.block.ops if getattr(op, "layer_name", "")]


@pytest.mark.parametrize("case", ["channels", "splits"])
def test_an_exported_file_keeps_the_layer_names(case, base, tmp_path):
    """A file nasir writes names each node after its layer (the transformed layers' new names
    included), so nasir imports it with the names it had and a pipeline's `layers=` patterns
    apply to it as to the original: they select the same convs, which become the same layers."""
    original = base.transform(PREFIX)
    written = nasir.load(str(original.to_onnx(tmp_path / "original.onnx")))
    before, after = layer_names(original), layer_names(written)
    convs = [name for name in before if name.endswith("_Conv")]
    assert len(convs) == 6 and [name for name in after if name.endswith("_Conv")] == convs
    norms = [name for name in before if name.endswith("_BatchNormalization")]
    assert len(norms) == 6 and [name for name in after if name.endswith("_BatchNormalization")] == norms, \
        "batch norms are kept, not folded into their convs"
    assert all(name.split(".")[0] in before or name in before for name in after), \
        "every layer is named after one of the original's (helper ops: layer.OpType)"
    transformed = base.transform(pipeline(case))
    nodes = {n.name for n in onnx.load(str(transformed.to_onnx(tmp_path / "t.onnx"))).graph.node}
    assert {name for name in layer_names(transformed) if name.endswith("_Conv")} <= nodes
    again = written.transform(pipeline(case))  # the same patterns select the same layers
    assert ([name for name in layer_names(again) if name.endswith("_Conv") or "_Conv." in name]
            == [name for name in layer_names(transformed) if name.endswith("_Conv") or "_Conv." in name])
