"""The target registry (`nasir.runtime.backends`): one entry per backend for compile, its options and load."""

from __future__ import annotations

import json

import pytest

import nasir
from nasir.errors import NasirError
from nasir.runtime.backends import BACKENDS, TARGETS, backend


def test_each_target_takes_the_options_its_compile_function_declares():
    assert TARGETS == ("llvm", "torch", "tvm", "cuda")
    assert backend("llvm").options == ("threads", "profile", "cpu", "checked", "tuning")
    assert backend("torch").options == ()
    assert "arch" in backend("cuda").options and "arch" not in backend("tvm").options
    assert [name for name, b in BACKENDS.items() if b.tunes] == ["llvm"]


def test_an_unknown_target_names_the_known_ones(tmp_path):
    with pytest.raises(NasirError, match="unknown target 'gpu' \\(choose from llvm, torch, tvm, cuda\\)"):
        backend("gpu")
    (tmp_path / "meta.json").write_text(json.dumps({"backend": "onnx"}))
    with pytest.raises(NasirError, match="saved by a backend nasir does not know \\('onnx'\\)"):
        nasir.runtime.load(tmp_path)
