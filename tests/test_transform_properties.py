"""Property test: random transform sequences on a small conv net either compile on torch and llvm with
agreeing outputs, or are rejected with a NasirError that says why.

The llvm backend lowers nests with a register-tiling model (parallel loops inside reduction loops
must be vectorised or fully unrolled; the parallel loop outside all reductions). Those limits are
not dependences, so the schedule passes accept such schedules and the backend refuses them with a
LoweringError: that counts as a rejection with a reason here.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fisher import SmallNet, export

import nasir
from nasir.errors import NasirError

CONV = '"conv[23].*"'
TRANSFORMS = [
    f"interchange{{order=ci,co layers={CONV}}}",
    f"interchange{{order=kw,ow layers={CONV}}}",
    f"strip-mine{{dim=co factor=4 layers={CONV}}}",
    f"strip-mine{{dim=ow factor=3 layers={CONV}}}",
    f"tile{{dims=oh,ow factors=2,4 layers={CONV}}}",
    f"unroll{{dim=kw layers={CONV}}}",
    f"fuse{{dims=oh,ow layers={CONV}}}",
    f"fuse{{dims=co,ow layers={CONV}}}",
    "parallel{dim=co}",
    "parallel{dim=ci}",
    "vectorize{dim=kw}",
    "vectorize{dim=ow}",
    f"pack{{operand=1 layout=OIHW4i4o layers={CONV}}}",
    f"group{{factor=2 layers={CONV}}}",
    f"group{{factor=3 layers={CONV}}}",
    f"bottleneck{{dim=co factor=2 layers={CONV}}}",
    f"index-split{{dim=co parts=2 layers={CONV}}}",
    f"shift{{dim=oh offset=1 layers={CONV}}}",
    "depthwise",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = export(SmallNet(), tmp_path_factory.mktemp("prop") / "small.onnx", batch=1)
    return model.transform("convert-nn-to-nest")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(TRANSFORMS), min_size=1, max_size=3))
def test_random_sequences_compile_or_say_why(base, sequence):
    pipeline = ",".join(sequence)
    x = np.random.default_rng(0).standard_normal(base.input_shapes[0]).astype(np.float32)
    try:
        candidate = base.transform(pipeline)
        expected = nasir.compile(candidate, target="torch")(x)
        got = nasir.compile(candidate, target="llvm")(x)
    except NasirError as e:
        assert str(e).strip(), f"'{pipeline}' was rejected without a reason"
        return
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=pipeline)
