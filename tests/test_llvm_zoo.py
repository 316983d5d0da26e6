"""End to end: every zoo model compiled for llvm matches ONNX Runtime, with 1 and 2 threads, at
both vector widths (AVX2 and AVX-512, conftest's `cpu`; DenseNet-161 imagenet at AVX-512 alone,
`ONE_WIDTH`), at each of its datasets but DenseNet-161's cifar10 (`LEFT_OUT`). In `make pytest-avx2`'s pass
(`conftest.narrowed`) the AVX-512 code of the FAST models alone is compiled and checked, not run:
every model's was compiled and run on this machine by `make pytest` (CI: 150 s of compiles)."""

from __future__ import annotations

import numpy as np
import pytest

import nasir
import nasir.zoo as zoo
from conftest import narrowed
from onnx_graphs import onnxruntime
from nasir.runtime.llvm_executable import compile_llvm

FAST = {("resnet18", "cifar10"), ("mobilenet_v2", "cifar10")}
LEFT_OUT = {("densenet161", "cifar10")}
"""DenseNet-161 at cifar10 has the layer kinds of DenseNet-121 at cifar10 (its 3x3 stem, the same
dense blocks and transitions on the same planes), wider and deeper; DenseNet-161 at imagenet keeps
its channel counts here (it took 70 s of CI at both widths)."""
ONE_WIDTH = {("densenet161", "imagenet"): "avx512"}
"""DenseNet-161 at imagenet is run at AVX-512 alone: its AVX2 code's layer kinds are DenseNet-121
imagenet's, which runs at both widths (its AVX2 compile took 60 s of CI, the longest test)."""
CASES = [pytest.param(name, ds, id=f"{name}-{ds}",
                      marks=(() if (name, ds) in FAST else (pytest.mark.slow,))
                      + ((pytest.mark.one_width(ONE_WIDTH[name, ds]),) if (name, ds) in ONE_WIDTH else ()))
         for name in zoo.names() for ds in zoo.datasets(name)
         if (name, ds) not in LEFT_OUT and ((name, ds) in FAST or not narrowed())]


@pytest.mark.parametrize("name,dataset", CASES)
def test_zoo_model_matches_onnxruntime(name, dataset, cpu, tmp_path):
    path = zoo.export_onnx(name, tmp_path / f"{name}.onnx", dataset=dataset)
    model = nasir.load(path)
    x = np.random.default_rng(0).standard_normal(model.input_shapes[0]).astype(np.float32)
    expected = onnxruntime(path, x)
    exe = compile_llvm(model.module, threads=1)
    one = exe(x)
    np.testing.assert_allclose(one, expected, rtol=1e-4, atol=1e-4)
    exe.threads = 2
    np.testing.assert_array_equal(exe(x), one)


def test_mobilenet_v2s_1x1_convs_on_14x14_keep_their_broadcasts_in_registers():
    """MobileNetV2 imagenet's expand conv of block 8 (64 -> 384 on 14 x 14, after the channel-lane
    projection of block 7) compiled for Zen 4 (znver4's scheduling model, whose code this compiles
    on any machine), in the JIT's code: its hottest FMA loop touches no vector on the stack. Its
    AVX-512 tile is 14 points x 2 channel vectors; reading its input channel-blocked it unrolled 16
    channels of it, 448 FMAs whose broadcasts LLVM loaded first and spilled (428 stack accesses an
    iteration, 46% of the 16-lane peak), so that block stays a loop (`split_channel_loop`:
    MAX_UNROLLED_BODY)."""
    from test_llvm_backend import hottest_loop

    from nasir.lowering.loops_to_llvm.llvm_ir import optimize, to_llvm_ir
    from nasir.lowering.target import resolve_target
    from nasir.runtime.llvm_executable import lower_to_llvm_dialect

    target = resolve_target("znver4")
    ir = to_llvm_ir(lower_to_llvm_dialect(zoo.load("mobilenet_v2", "imagenet").module, cpu=target, tuning="none"))
    asm = target.target_machine(jit=True).emit_assembly(optimize(ir, target))
    kernel = asm[asm.index("features_features.8_conv_conv.0_conv.0.0_Conv.par0:"):]
    loop = hottest_loop(kernel[: kernel.index(".Lfunc_end")])
    assert sum("vfmadd" in line for line in loop) >= 12
    spills = [line.strip() for line in loop if "mm" in line and "(%rsp)" in line]
    assert not spills, spills[:8]
