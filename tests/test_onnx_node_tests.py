"""The node tests shipped with the onnx package (pytorch-converted, pytorch-operator), run through the
ONNX frontend and the torch backend against the outputs stored beside them.

`SUPPORTED` lists every case nasir must run correctly; every other case must be refused with a typed
error (`EXPECTED_ERRORS` says which), so the list stays honest in both directions.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from nasir.errors import FrontendError, UnsupportedOpError
from nasir.frontend.onnx_import import import_onnx
from nasir.runtime.torch_executable import compile_torch

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
SUITES = ("pytorch-converted", "pytorch-operator")

SUPPORTED = {
    "test_AvgPool1d", "test_AvgPool1d_stride", "test_AvgPool2d", "test_AvgPool2d_stride",
    "test_BatchNorm1d_3d_input_eval", "test_BatchNorm2d_eval", "test_BatchNorm2d_momentum_eval",
    "test_BatchNorm3d_eval", "test_BatchNorm3d_momentum_eval",
    "test_ConstantPad2d", "test_ZeroPad2d",
    "test_Conv1d", "test_Conv1d_dilated", "test_Conv1d_groups", "test_Conv1d_pad1",
    "test_Conv1d_pad1size1", "test_Conv1d_pad2", "test_Conv1d_pad2size1", "test_Conv1d_stride",
    "test_Conv2d", "test_Conv2d_depthwise", "test_Conv2d_depthwise_padded", "test_Conv2d_depthwise_strided",
    "test_Conv2d_depthwise_with_multiplier", "test_Conv2d_dilated", "test_Conv2d_groups",
    "test_Conv2d_groups_thnn", "test_Conv2d_no_bias", "test_Conv2d_padding", "test_Conv2d_strided",
    "test_LeakyReLU", "test_LeakyReLU_with_negval", "test_Linear", "test_Linear_no_bias",
    "test_MaxPool1d", "test_MaxPool1d_stride", "test_MaxPool1d_stride_padding_dilation",
    "test_MaxPool2d", "test_MaxPool2d_stride_padding_dilation",
    "test_PixelShuffle", "test_ReLU", "test_Sigmoid",
    "test_Softmax", "test_softmax_functional_dim3", "test_softmax_lastdim",
    "test_operator_addmm", "test_operator_clip", "test_operator_concat2",
    "test_operator_conv", "test_operator_flatten", "test_operator_maxpool", "test_operator_mm",
    "test_operator_permute2", "test_operator_view",
}

# Cases outside SUPPORTED fail with UnsupportedOpError, except these (other FrontendErrors).
EXPECTED_ERRORS = {
    # Model inputs that are not float32 (integers; float64 with uninitialised test data).
    "test_Embedding": FrontendError,
    "test_Embedding_sparse": FrontendError,
    "test_operator_non_float_params": FrontendError,
    "test_operator_add_broadcast": FrontendError,
    "test_operator_add_size1_broadcast": FrontendError,
    "test_operator_add_size1_right_broadcast": FrontendError,
    "test_operator_add_size1_singleton_broadcast": FrontendError,
    "test_operator_addconstant": FrontendError,
}


def _cases() -> list[tuple[str, str]]:
    return [(suite, name) for suite in SUITES for name in sorted(os.listdir(os.path.join(DATA, suite)))]


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


@pytest.mark.parametrize("suite,name", _cases(), ids=[n for _, n in _cases()])
def test_node_case(suite: str, name: str):
    case = os.path.join(DATA, suite, name)
    model_path = os.path.join(case, "model.onnx")
    if name not in SUPPORTED:
        with pytest.raises(EXPECTED_ERRORS.get(name, UnsupportedOpError)):
            import_onnx(model_path)
        return
    exe = compile_torch(import_onnx(model_path).module)
    for data_set in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        inputs = _load_set(data_set, "input")[: len(exe.input_names)]
        expected = _load_set(data_set, "output")
        got = exe(*inputs)
        got = got if isinstance(got, list) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_supported_list_names_real_cases():
    names = {n for _, n in _cases()}
    assert SUPPORTED <= names
    assert set(EXPECTED_ERRORS) <= names - SUPPORTED
