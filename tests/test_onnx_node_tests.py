"""The node tests shipped with the onnx package (pytorch-converted, pytorch-operator, simple), run
through the ONNX frontend on the torch backend and on llvm at both vector widths (conftest's `cpu`),
against the outputs stored beside them.

One honest scheme for all of them: every case passes (rtol = atol = 1e-4) or is refused with the
typed error and reason `REFUSED` lists for it, at import or, for inputs float32 cannot hold, at
run time. `python tests/test_onnx_node_tests.py` prints the counts per suite and backend.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from nasir.errors import FrontendError, NasirError, RuntimeInputError, UnsupportedOpError
from nasir.frontend.onnx_import import import_onnx
from nasir.runtime.llvm_executable import compile_llvm
from nasir.runtime.torch_executable import compile_torch

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
SUITES = ("pytorch-converted", "pytorch-operator", "simple")

WINDOW_3D = (UnsupportedOpError, "3-D window")
INTEGER_INPUT = (FrontendError, "has element type INT64")
FLOAT64_RANGE = (RuntimeInputError, "beyond float32's range")
SEQUENCE = (UnsupportedOpError, r"unsupported ONNX op '\w*Sequence\w*'")

REFUSED: dict[str, tuple[type[NasirError], str]] = {
    # 3-D convolutions and pools: nasir's window ops are 1-D and 2-D.
    **dict.fromkeys(["test_AvgPool3d", "test_AvgPool3d_stride", "test_AvgPool3d_stride1_pad0_gpu_input",
                     "test_Conv3d", "test_Conv3d_dilated", "test_Conv3d_dilated_strided", "test_Conv3d_groups",
                     "test_Conv3d_no_bias", "test_Conv3d_stride", "test_Conv3d_stride_padding",
                     "test_MaxPool3d", "test_MaxPool3d_stride", "test_MaxPool3d_stride_padding"], WINDOW_3D),
    # Integer model inputs (embedding indices, int64 arithmetic): nasir computes in float32.
    **dict.fromkeys(["test_Embedding", "test_Embedding_sparse", "test_operator_non_float_params"], INTEGER_INPUT),
    # Expand's target shape is an int64 model input, known only at run time: nasir compiles static
    # shapes (`test_expand_with_its_shape_frozen_*` run these cases with the shape as a constant).
    **dict.fromkeys([f"test_expand_shape_model{k}" for k in range(1, 5)],
                    (FrontendError, "input 'shape' has element type INT64")),
    # float64 inputs compute in float32; these cases' stored inputs are uninitialised memory with
    # values up to 1e228, which float32 cannot hold (test_operator_add_size1_broadcast's fit: it passes).
    **dict.fromkeys(["test_operator_add_broadcast", "test_operator_add_size1_right_broadcast",
                     "test_operator_add_size1_singleton_broadcast", "test_operator_addconstant"], FLOAT64_RANGE),
    # Training graphs (ai.onnx.preview.training Gradient): nasir compiles inference.
    "test_gradient_of_add": (UnsupportedOpError, "unsupported ONNX op '.*Gradient'"),
    "test_gradient_of_add_and_mul": (UnsupportedOpError, "unsupported ONNX op '.*Gradient'"),
    # Sequences and strings: nasir's values are float tensors.
    **dict.fromkeys([f"test_sequence_model{k}" for k in range(1, 9)], SEQUENCE),
    **dict.fromkeys([n for n in os.listdir(os.path.join(DATA, "simple")) if n.startswith("test_strnorm")],
                    (UnsupportedOpError, "unsupported ONNX op 'StringNormalizer'")),
}
"""Case -> (error, regex its message matches): why nasir refuses it."""


def _cases() -> list[tuple[str, str]]:
    return [(suite, name) for suite in SUITES for name in sorted(os.listdir(os.path.join(DATA, suite)))]


CASES = _cases()
PASSING = [(s, n) for s, n in CASES if n not in REFUSED]


def _load_set(directory: str, prefix: str) -> list[np.ndarray]:
    files = sorted(glob.glob(os.path.join(directory, f"{prefix}_*.pb")),
                   key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]))
    arrays = []
    for f in files:
        t = onnx.TensorProto()
        with open(f, "rb") as fh:
            t.ParseFromString(fh.read())
        arrays.append(numpy_helper.to_array(t))
    return arrays


def run_case(case: str, compile_fn, model: str | None = None) -> None:
    """Compile the case's model and compare every data set's outputs with the stored ones."""
    exe = compile_fn(import_onnx(model or os.path.join(case, "model.onnx")).module)
    for data_set in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        inputs = _load_set(data_set, "input")[: len(exe.input_names)]
        expected = _load_set(data_set, "output")
        got = exe(*inputs)
        got = got if isinstance(got, list) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def check_case(suite: str, name: str, compile_fn) -> None:
    """The case passes, or is refused as REFUSED says."""
    case = os.path.join(DATA, suite, name)
    if name not in REFUSED:
        run_case(case, compile_fn)
        return
    error, reason = REFUSED[name]
    with pytest.raises(error, match=reason):
        run_case(case, compile_fn)


def _llvm(module):
    return compile_llvm(module, threads=2)


@pytest.mark.parametrize("suite,name", CASES, ids=[n for _, n in CASES])
def test_node_case_on_torch(suite: str, name: str):
    check_case(suite, name, compile_torch)


@pytest.mark.parametrize("suite,name", CASES, ids=[n for _, n in CASES])
def test_node_case_on_llvm(suite: str, name: str, cpu: str):
    check_case(suite, name, _llvm)


def _frozen(case: str, folder) -> str:
    """The case's model with its int64 inputs turned into initializers of the stored values."""
    model = onnx.load(os.path.join(case, "model.onnx"))
    stored = _load_set(os.path.join(case, "test_data_set_0"), "input")
    for info, value in list(zip(model.graph.input, stored)):
        if info.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            model.graph.initializer.append(numpy_helper.from_array(value, info.name))
            model.graph.input.remove(info)
    path = str(folder / "frozen.onnx")
    onnx.save(model, path)
    return path


EXPAND = [n for s, n in CASES if n.startswith("test_expand_shape_model")]


def _run_frozen(name: str, compile_fn, folder) -> None:
    case = os.path.join(DATA, "simple", name)
    assert len(glob.glob(os.path.join(case, "test_data_set_*"))) == 1  # the frozen shape is its only one
    run_case(case, compile_fn, _frozen(case, folder))


@pytest.mark.parametrize("name", EXPAND)
def test_expand_with_its_shape_frozen_on_torch(name: str, tmp_path):
    _run_frozen(name, compile_torch, tmp_path)


@pytest.mark.parametrize("name", EXPAND)
def test_expand_with_its_shape_frozen_on_llvm(name: str, tmp_path, cpu: str):
    _run_frozen(name, _llvm, tmp_path)


def test_refused_list_names_real_cases():
    assert set(REFUSED) <= {n for _, n in CASES}


def _outcome(suite: str, name: str, compile_fn) -> str:
    try:
        run_case(os.path.join(DATA, suite, name), compile_fn)
        return "pass"
    except NasirError as e:
        return "refused" if name in REFUSED and re.search(REFUSED[name][1], str(e)) else f"error: {e}"
    except AssertionError:
        return "wrong"


if __name__ == "__main__":
    backends = {"torch": compile_torch, "llvm": _llvm}
    for suite in SUITES:
        for backend, fn in backends.items():
            outcomes = Counter(_outcome(s, n, fn) for s, n in CASES if s == suite)
            print(f"{suite:18} {backend:6} " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
