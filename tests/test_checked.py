"""Checked builds: `compile(..., checked=True)` checks every load and store of the generated code.

The oracle for "out of bounds" is the IR itself: a kernel whose load is moved past its buffer by
hand (the kind of bug a lowering can make) must raise a `BoundsError` naming the kernel, the
buffer and the index, where the unchecked build reads memory it does not own; a correct model's
checked build gives the numbers of PyTorch (one conv, 1 and 2 threads) and of ONNX Runtime (a whole
network) at both vector widths.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx_graphs import onnxruntime
from test_llvm_backend import build, rand
from xdsl.dialects import arith, memref, vector
from xdsl.dialects.builtin import IndexType, IntegerAttr

import nasir
from nasir.dialects import nn
from nasir.errors import BoundsError
from nasir.lowering.pipeline import LLVM
from nasir.runtime.llvm_executable import executable_of

pytestmark = pytest.mark.usefixtures("cpu")


def conv_model():
    wt, b, x = rand(16, 3, 3, 3), rand(16), rand(1, 3, 9, 11)
    model = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), W("b", b), pads=(1,) * 4).named("conv"),
                                          ])
    return model, x, F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), padding=1).numpy()


@pytest.mark.parametrize("threads", [1, 2])
def test_checked_build_of_a_correct_model_gives_its_numbers(threads):
    model, x, ref = conv_model()
    exe = nasir.compile(model, checked=True, threads=threads)
    assert exe.meta["bounds_checks"] and all(c["kernel"] == "conv" for c in exe.meta["bounds_checks"])
    np.testing.assert_allclose(exe(x), ref, rtol=1e-4, atol=1e-4)


def test_checked_zoo_model_matches_onnxruntime(tmp_path):
    """The checked build of a whole network (MobileNetV2: depthwise, 1x1 and strided convs, its
    channel-lane layouts) gives ONNX Runtime's numbers, as test_llvm_zoo holds its unchecked build to."""
    path = nasir.zoo.export_onnx("mobilenet_v2", tmp_path / "mobilenet_v2.onnx", dataset="cifar10")
    model = nasir.load(path)
    x = np.random.default_rng(0).standard_normal(model.input_shapes[0]).astype(np.float32)
    np.testing.assert_allclose(nasir.compile(model, checked=True)(x), onnxruntime(path, x), rtol=1e-4, atol=1e-4)


def kernel_reading_past_its_row(model, shift: int):
    """`model` at the loop level with the first read of the conv kernel's input (argument 0)
    moved `shift` elements along its last axis: still inside the buffer (the next row), but
    outside the row."""
    loops = model.transform(str(LLVM.before("convert-loops-to-llvm")))
    kernel = next(f for f in loops.module.ops if getattr(f, "sym_name", None) and f.sym_name.data == "conv")
    arg = kernel.body.block.args[0]
    read = next(op for op in kernel.walk() if isinstance(op, (memref.LoadOp, vector.LoadOp, vector.MaskedLoadOp))
                and (op.memref if isinstance(op, memref.LoadOp) else op.base) is arg)
    step = arith.ConstantOp(IntegerAttr(shift, IndexType()))
    shifted = arith.AddiOp(read.indices[-1], step.result)
    read.parent_block().insert_ops_before([step, shifted], read)
    read.operands = [*read.operands[: len(read.indices)], shifted.result, *read.operands[len(read.indices) + 1:]]
    return loops


def test_a_read_past_its_row_raises_naming_kernel_buffer_and_index():
    """The unchecked build of the broken kernel returns other numbers without a word (it reads
    the next row); the checked one raises instead."""
    model, x, ref = conv_model()
    loops = kernel_reading_past_its_row(model, 11)
    unchecked = executable_of(model.module, loops.transform("convert-loops-to-llvm").module)
    assert not np.allclose(unchecked(x), ref, rtol=1e-4, atol=1e-4)
    checked = executable_of(model.module, loops.transform("convert-loops-to-llvm{checked=true}").module)
    with pytest.raises(BoundsError, match=r"kernel 'conv' would read argument 0 \(memref<1x3x9x11xf32>\) out of "
                                          r"bounds: index \d+ on axis 3"):
        checked(x)
    with pytest.raises(BoundsError):  # the record is reset: the next call raises again
        checked(x)
