"""The torch backend and its exports take a batch of any size (issue 30).

A model is imported at batch 1; `to_torch()`, the torch executable and `to_onnx` files then run
batches of 1, 3 and 8. Oracles: ONNX Runtime on the zoo model exported from PyTorch at that batch,
and, for transformed models (which have no outside oracle), the same module's batch-1 runs, one
sample at a time.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx_graphs import onnxruntime

import nasir
from nasir.lowering.nest_to_torch import nest_ops, program
from nasir.measure.variants import MORE_VARIANTS, VARIANTS
from nasir.runtime.torch_executable import compile_torch

BATCHES = (1, 3, 8)
MODELS = ("resnet18", "mobilenet_v2", "densenet121")  # conv, pools, residual adds, clip, concat, gemm


def samples(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32)).astype(np.float32)


def run(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


@pytest.fixture(scope="module")
def zoo_files(tmp_path_factory):
    """name -> {batch: ONNX file exported from PyTorch at that batch}."""
    folder = tmp_path_factory.mktemp("any-batch")
    return {name: {b: nasir.zoo.export_onnx(name, folder / f"{name}_{b}.onnx", "cifar10", batch=b) for b in BATCHES}
            for name in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_to_torch_runs_every_batch_like_onnxruntime(zoo_files, name):
    model = nasir.load(zoo_files[name][1])
    assert model.input_shapes == [(1, 3, 32, 32)]
    for level, m in (("nn", model), ("nest", model.transform("convert-nn-to-nest"))):
        module = m.to_torch()
        for b in BATCHES:
            x = samples(b)
            got, want = run(module, x), onnxruntime(zoo_files[name][b], x)
            assert got.shape == want.shape, (level, b)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} {level} batch {b}")


def test_torch_executable_takes_any_batch(zoo_files):
    model = nasir.load(zoo_files["resnet18"][1])
    exe = compile_torch(model.module)
    x = samples(3)
    np.testing.assert_allclose(exe(x), onnxruntime(zoo_files["resnet18"][3], x), rtol=1e-4, atol=1e-4)
    with pytest.raises(nasir.NasirError, match="any batch size"):
        exe(np.zeros((3, 3, 16, 16), np.float32))


@pytest.fixture(scope="module")
def resnet18(zoo_files):
    return nasir.load(zoo_files["resnet18"][1])


@pytest.mark.parametrize("variant", [v for v in {**VARIANTS, **MORE_VARIANTS} if v != "base"])
def test_a_transformed_model_runs_a_batch_as_its_samples(resnet18, variant):
    model = resnet18.transform({**VARIANTS, **MORE_VARIANTS}[variant])
    module = model.to_torch()
    x = samples(8, seed=1)
    whole = run(module, x)
    one_by_one = np.concatenate([run(module, x[i:i + 1]) for i in range(len(x))])
    assert whole.shape == (8, 10)
    # float32 to the project's tolerance: torch picks its conv algorithm by batch (oneDNN), so the sums
    # run in another order (fold-kh on Zen 4: 1.3e-5 apart on logits of up to 27)
    np.testing.assert_allclose(whole, one_by_one, rtol=1e-4, atol=1e-4)
    assert np.abs(whole[1:] - whole[:1]).max() > 1e-3  # the samples differ, so their outputs do


@pytest.mark.parametrize("variant", ["group2", "unshare-oh2", "shift-oh", "bottleneck-ci2"])
def test_the_generic_path_runs_a_batch_as_its_samples(resnet18, variant, monkeypatch):
    """Gather + einsum (no torch.nn.functional fast path) at batch 3 against batch-1 runs."""
    monkeypatch.setattr(program, "run_compute", lambda op, xs: nest_ops.run_compute(op, xs, fast=False))
    model = resnet18.transform({**VARIANTS, **MORE_VARIANTS}[variant])
    module = model.to_torch()
    x = samples(3, seed=2)
    np.testing.assert_allclose(run(module, x), np.concatenate([run(module, x[i:i + 1]) for i in range(3)]),
                               rtol=1e-4, atol=1e-4)


def test_to_torch_is_in_eval_mode_unless_asked(resnet18):
    assert not resnet18.to_torch().training
    assert resnet18.to_torch(training=True).training


@pytest.mark.parametrize("variant", ["nest", "group4", "unshare-oh2"])
def test_to_onnx_has_a_dynamic_batch(resnet18, variant, tmp_path):
    model = resnet18.transform({**VARIANTS, **MORE_VARIANTS}[variant])
    path = model.to_onnx(tmp_path / f"{variant}.onnx", dynamic_batch=True)
    graph = onnx.load(str(path)).graph
    assert [v.type.tensor_type.shape.dim[0].dim_param for v in (*graph.input, *graph.output)] == ["batch", "batch"]
    module = model.to_torch()
    for b in BATCHES:
        x = samples(b, seed=b)
        np.testing.assert_allclose(onnxruntime(path, x), run(module, x), rtol=1e-4, atol=1e-4)
