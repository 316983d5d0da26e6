"""The onnx package's PyTorch-converted node tests nasir supports, run on the llvm backend at both
vector widths (AVX2 and AVX-512, conftest's `cpu`)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from test_onnx_node_tests import DATA, SUITES, SUPPORTED, _load_set

from nasir.frontend.onnx_import import import_onnx
from nasir.runtime.llvm_executable import compile_llvm

CASES = [(s, n) for s in SUITES for n in sorted(os.listdir(os.path.join(DATA, s))) if n in SUPPORTED]


@pytest.mark.parametrize("suite,name", CASES, ids=[n for _, n in CASES])
def test_node_case_on_llvm(suite: str, name: str, cpu: str):
    case = os.path.join(DATA, suite, name)
    exe = compile_llvm(import_onnx(os.path.join(case, "model.onnx")).module, threads=2)
    for data_set in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        inputs = _load_set(data_set, "input")[: len(exe.input_names)]
        got = exe(*inputs)
        got = got if isinstance(got, list) else [got]
        for g, e in zip(got, _load_set(data_set, "output")):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
