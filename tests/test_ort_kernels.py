"""ONNX Runtime's kernel width here, and its copy held to AVX2 (`nasir.measure.ort_kernels`).

The width is checked against /proc/cpuinfo's flags, the copy's convolution against torch's; the
byte patch against hand-written instruction bytes.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nasir.errors import NasirError
from nasir.measure import ort_kernels


def host_has_avx512f() -> bool:
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    return "avx512f" in flags.split()


def test_block_is_the_hosts_vector_width():
    assert ort_kernels.block_floats() == (16 if host_has_avx512f() else 8)


TEST_R10D = bytes.fromhex("41f7c200000100")  # test $0x10000, %r10d
TEST_EAX = bytes.fromhex("a900000100")  # test $0x10000, %eax
XCR0 = bytes.fromhex("4c89c048f7d0a8e0")  # mov %r8, %rax; not %rax; test $0xe0, %al


def test_patch_turns_the_avx512f_branch_into_a_jump():
    head, tail = b"\x90" * 5, bytes.fromhex("0f8454010000c3")
    short = head + TEST_R10D + bytes.fromhex("740e") + XCR0 + tail
    assert ort_kernels.patch_avx512f_test(short) == head + TEST_R10D + bytes.fromhex("eb0e") + XCR0 + tail
    near = TEST_EAX + bytes.fromhex("0f8412345678") + XCR0
    assert ort_kernels.patch_avx512f_test(near) == TEST_EAX + bytes.fromhex("90e912345678") + XCR0


@pytest.mark.parametrize("library", [b"\x90" * 64,  # no test at all
                                     (TEST_R10D + bytes.fromhex("740e") + XCR0) * 2,  # two: which one?
                                     TEST_R10D + bytes.fromhex("740e") + b"\x90" * 20 + XCR0])  # XCR0 too far
def test_patch_refuses_unless_the_test_occurs_once(library):
    with pytest.raises(NasirError, match="AVX512F test found"):
        ort_kernels.patch_avx512f_test(library)


CONV_IN_THE_COPY = """
import json, sys
from pathlib import Path
import numpy as np, torch
from onnx import TensorProto, helper
from nasir.measure import ort_kernels
ort_kernels.use(ort_kernels.avx2_copy(Path(sys.argv[1])))
import onnxruntime as ort
rng = np.random.default_rng(0)
x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ([1, 24, 14, 14], [40, 24, 3, 3], [40]))
graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
    "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 14, 14])],
    [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()), helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=1))
print(json.dumps({"file": ort.__file__, "block": ort_kernels.block_floats(),
                  "err": float(np.abs(y - ref.numpy()).max()), "scale": float(np.abs(ref.numpy()).max())}))
"""


def test_the_copy_runs_8_float_blocks_and_computes_the_conv(tmp_path):
    """In a process of its own (this one may hold the installed onnxruntime): the copy is made,
    imported, runs AVX2 blocks on any x86 host, and its conv + ReLU matches torch's."""
    run = subprocess.run([sys.executable, "-c", CONV_IN_THE_COPY, str(tmp_path)], capture_output=True, text=True,
                         check=True)
    got = json.loads(run.stdout.splitlines()[-1])
    assert Path(got["file"]).is_relative_to(tmp_path)
    assert got["block"] == 8
    assert got["scale"] > 1 and got["err"] < 1e-4


def test_use_refuses_once_another_onnxruntime_is_imported(tmp_path):
    import onnxruntime  # noqa: F401  (the installed one)

    home = ort_kernels.avx2_copy(tmp_path)
    assert ort_kernels.avx2_copy(tmp_path) == home  # made once, then kept
    with pytest.raises(NasirError, match="already imported"):
        ort_kernels.use(home)
