"""End to end: every zoo model compiled for llvm matches ONNX Runtime, with 1 and 2 threads, at
both vector widths (AVX2 and AVX-512, conftest's `cpu`). In `make pytest-avx2`'s pass
(`conftest.narrowed`) the AVX-512 code of the FAST models alone is compiled and checked, not run:
every model's was compiled and run on this machine by `make pytest` (CI: 150 s of compiles)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import nasir
import nasir.zoo as zoo
from conftest import narrowed
from nasir.runtime.llvm_executable import compile_llvm

FAST = {("resnet18", "cifar10"), ("mobilenet_v2", "cifar10")}
CASES = [pytest.param(name, ds, marks=() if (name, ds) in FAST else pytest.mark.slow, id=f"{name}-{ds}")
         for name in zoo.names() for ds in zoo.datasets(name) if (name, ds) in FAST or not narrowed()]


@pytest.mark.parametrize("name,dataset", CASES)
def test_zoo_model_matches_onnxruntime(name, dataset, cpu, tmp_path):
    path = zoo.export_onnx(name, tmp_path / f"{name}.onnx", dataset=dataset)
    model = nasir.load(path)
    x = np.random.default_rng(0).standard_normal(model.input_shapes[0]).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    exe = compile_llvm(model.module, threads=1)
    one = exe(x)
    np.testing.assert_allclose(one, expected, rtol=1e-4, atol=1e-4)
    exe.threads = 2
    np.testing.assert_array_equal(exe(x), one)
