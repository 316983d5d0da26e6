"""CUDA libraries built without a GPU: kernels compiled by nvcc at build time (a fatbin inside the
library), weights apart from the code, and each library loaded by TVM's runtime alone (no compiler
library, nvcc or NVRTC) in a process of its own, up to the missing GPU; the GPU check's folder.

Each zoo architecture once (zoo_cases.EACH_ONCE: both stems among them, densenet161 left to
densenet121) and every variant of `nasir.measure.variants` (ResNet-34 imagenet; of the group factors
the two ends, `GROUP_FACTORS_LEFT_OUT`) is built for sm_80 and sm_90 (one library whose fatbin
holds both).
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nasir
import nasir.zoo as zoo
from nasir import gpu_check
from nasir.dialects.module import WeightStore
from nasir.errors import LoweringError, NasirError
from nasir.gpu_check import runner
from nasir.lowering.nest_to_tvm import build as tvm_build
from nasir.lowering.nest_to_tvm.cuda import _stand_in_driver, compile_kernels
from nasir.lowering.nest_to_tvm.program import lower_to_nest, weight_keys
from nasir.measure.variants import ALL_VARIANTS, VARIANTS
from nasir.model import Model
from zoo_cases import EACH_ONCE

ARCHS = "sm_80,sm_90"
ZOO = [(name, dataset, "base") for name, dataset in EACH_ONCE]
GROUP_FACTORS_LEFT_OUT = {"group4", "group8"}
"""The group factors between group2 and group16: grouped convs built as theirs, of group sizes
between theirs (20 s of CI)."""
VARIANT_CASES = [("resnet34", "imagenet", v) for v in VARIANTS if v != "base" and v not in GROUP_FACTORS_LEFT_OUT]
CASES = ZOO + VARIANT_CASES


def runtime_only_load(folder: Path) -> subprocess.CompletedProcess:
    """The GPU check's runner on `folder` in a new process: TVM's runtime alone
    (TVM_USE_RUNTIME_LIB=1) with its CUDA library, over the stand-in driver where none is installed."""
    env = {**os.environ, "LD_LIBRARY_PATH": f"{_stand_in_driver().parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    return subprocess.run([sys.executable, runner.__file__, "--case", str(folder), "--once"],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("name,dataset,variant", CASES, ids=["-".join(c) for c in CASES])
def test_library_holds_compiled_kernels_and_loads_with_the_runtime_alone(name, dataset, variant, tmp_path):
    model = zoo.load(name, dataset)
    if variant != "base":
        model = model.transform(ALL_VARIANTS[variant])
    exe = nasir.compile(model, target="cuda", arch=ARCHS, tuning_dir="none")
    assert exe.meta["arch"] == ARCHS
    saved = exe.save(tmp_path / "exe")
    assert sorted(os.listdir(saved)) == ["meta.json", "model.so", "weights.params"]
    library = (saved / "model.so").read_bytes()
    assert b"__global__" not in library, "the library carries CUDA source, to be compiled when loaded"
    weights = sum(math.prod(w["shape"]) for w in exe.meta["weights"]) * 4
    assert (saved / "weights.params").stat().st_size >= weights > len(library)
    loaded = runtime_only_load(saved)
    if tvm_build.gpu_arch() is None:
        assert "loaded; no CUDA GPU here" in loaded.stdout + loaded.stderr, loaded.stderr[-3000:]


def test_rejected_kernel_is_a_build_error_naming_it(tmp_path):
    source = ('extern "C" __global__ void layer1_conv_kernel(float* a) {\n'
              "  __shared__ float s[60000];\n"
              "  s[threadIdx.x] = a[threadIdx.x]; __syncthreads(); a[threadIdx.x] = s[threadIdx.x + 7];\n}\n")
    with pytest.raises(LoweringError, match=r"kernel layer1_conv_kernel for sm_90: .*too much shared data"):
        compile_kernels(source, ["sm_90"], tvm_build.nvcc_path())


def test_one_fatbin_holds_a_cubin_per_architecture():
    source = 'extern "C" __global__ void scale(float* a) { a[threadIdx.x] *= 2.0f; }\n'
    for archs in (["sm_90"], ["sm_80", "sm_90"]):
        assert compile_kernels(source, archs, tvm_build.nvcc_path()).count(b"\x7fELF") == len(archs)
    assert tvm_build.cuda_archs("sm_90,sm_80") == ["sm_80", "sm_90"]
    with pytest.raises(NasirError, match="expected a GPU architecture sm_XY"):
        tvm_build.cuda_archs("ampere")


def test_dlight_schedule_over_the_shared_memory_is_declined():
    """dlight's GeneralReduction keeps the whole output of a grouped conv in shared memory (800 KB
    at 56 x 56); the rule is declined and the next one schedules the function."""
    from tvm.s_tir import dlight as dl

    from nasir.dialects import nest
    from nasir.dialects.module import main_func
    from nasir.lowering.nest_to_tvm.bounds import shared_bytes
    from nasir.lowering.nest_to_tvm.program import prim_func

    model = zoo.load("resnet34", "imagenet").transform(ALL_VARIANTS["group2"])
    op = next(op for op in main_func(lower_to_nest(model.module)).body.block.ops
              if isinstance(op, nest.ComputeOp) and op.layer_name == "layer1_layer1.0_conv1_Conv")
    func = prim_func(op).with_attr("global_symbol", "main")
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    with target:
        raw = dl.gpu.GeneralReduction().apply(func, target, False)
        assert shared_bytes(raw.mod["main"]) == 2 * 32 * 56 * 56 * 4
        assert tvm_build.DeclineOnError(dl.gpu.GeneralReduction()).apply(func, target, False) is None


def test_weights_travel_apart_and_can_be_swapped(tmp_path):
    """The saved library takes the weights as arguments: the same library computes another
    network's function with that network's weights (same architecture, other seed)."""
    a, b = zoo.load("resnet18", "cifar10", seed=0), zoo.load("resnet18", "cifar10", seed=1)
    x = np.random.default_rng(0).standard_normal(a.input_shapes[0]).astype(np.float32)
    exe_a, exe_b = nasir.compile(a, target="tvm"), nasir.compile(b, target="tvm")
    assert exe_a.meta["weights"] == exe_b.meta["weights"]
    loaded = nasir.runtime.load(exe_a.save(tmp_path / "a"))
    np.testing.assert_array_equal(loaded(x), exe_a(x))
    loaded.weights = exe_b.weights  # after a call: the device copy of the first weights is replaced
    np.testing.assert_allclose(loaded(x), nasir.compile(b, target="torch")(x), rtol=1e-4, atol=1e-4)
    assert (tmp_path / "a" / "model.so").stat().st_size * 20 < (tmp_path / "a" / "weights.params").stat().st_size


def _splitmix64(x: int) -> int:
    """splitmix64's output function, as in its reference C code."""
    mask = (1 << 64) - 1
    z = (x * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_check_weights_are_splitmix64_and_scaled_to_the_fan_in():
    meta = {"weights": [{"name": "w", "shape": [64, 32, 3, 3]}, {"name": "b", "shape": [64]}],
            "input_shapes": [[1, 3, 8, 8]]}
    w, b = runner.check_weights(meta)
    expected = [(_splitmix64((1 << 40) + k) >> 40) / (1 << 23) - 1.0 for k in range(5)]
    np.testing.assert_allclose(w.reshape(-1)[:5], np.float32(expected) * np.float32(math.sqrt(3 / 288)), rtol=1e-6)
    assert abs(float(w.var()) - 1 / 288) < 0.1 / 288 and np.abs(b).max() <= 0.1
    x = runner.check_input(meta)
    assert x.shape == (1, 3, 8, 8) and x.reshape(-1)[0] == np.float32((_splitmix64(0) >> 40) / (1 << 23) - 1.0)


def test_gpu_check_folder(tmp_path):
    """`nasir gpu-check`: runner, plain-torch models, TVM's runtime without its compiler, and per
    case a library that loads with the runtime alone and the output TVM's CPU code gives."""
    out = gpu_check.write(tmp_path / "check", "sm_90", [("resnet18", "cifar10", "base")], progress=lambda _: None,
                          batches=(1, 2))
    case = out / "cases" / "resnet18-cifar10-base"
    assert {p.name for p in out.iterdir()} == {"run.py", "models.py", "runtime", "cases"}
    assert not (out / "runtime" / "tvm" / "lib" / "libtvm_compiler.so").exists()
    assert (out / "runtime" / "tvm" / "lib" / "libtvm_runtime_cuda.so").exists()
    assert list((out / "runtime" / "tvm_ffi").glob("core.cpython-312-*.so"))
    assert sorted(p.name for p in case.iterdir()) == ["expected.npy", "meta.json", "model.so"]
    assert gpu_check.folder_bytes(out) < 64 * 2**20
    meta = json.loads((case / "meta.json").read_text())
    assert meta["check"] == {"model": "resnet18", "dataset": "cifar10", "variant": "base", "batch": 1,
                             "torch_builder": "resnet18"}
    # the expected output is the torch backend's, given the check's weights in place of the model's
    nests = lower_to_nest(zoo.load("resnet18", "cifar10").module)
    store = dict(zip(weight_keys(nests), runner.check_weights(meta)))
    reference = nasir.compile(Model(nests, WeightStore(store)), target="torch")
    for name in ("resnet18-cifar10-base", "resnet18-cifar10-base-b2"):
        meta = json.loads((out / "cases" / name / "meta.json").read_text())
        x = runner.check_input(meta)
        assert x.shape[0] == meta["check"]["batch"]
        np.testing.assert_allclose(np.load(out / "cases" / name / "expected.npy"), reference(x), rtol=1e-4, atol=1e-4)
    if tvm_build.gpu_arch() is None:
        loaded = runtime_only_load(case)
        assert "loaded; no CUDA GPU here" in loaded.stdout + loaded.stderr, loaded.stderr[-3000:]


GPU_SCHEDULE_CASES = [("resnet18", "cifar10", "base"), ("mobilenet_v2", "imagenet", "base"),
                      ("resnet34", "imagenet", "group4"),
                      ("resnet34", "cifar10", "depthwise"), ("resnext29_2x64d", "cifar10", "base")]


def _distinct_contractions(name: str, dataset: str, variant: str) -> list:
    """One contraction nest of each domain of the model."""
    from nasir.dialects import nest
    from nasir.dialects.module import main_func

    model = zoo.load(name, dataset)
    if variant != "base":
        model = model.transform(ALL_VARIANTS[variant])
    nests = [op for op in main_func(lower_to_nest(model.module)).body.block.ops
             if isinstance(op, nest.ComputeOp) and op.kind == "mac"]
    return list({str(op.domain): op for op in nests}.values())


def _assert_computes_the_nest(op, scheduled) -> None:
    """`scheduled` (a PrimFunc of `op`, its loops unbound) run on the CPU equals `op`'s unscheduled
    PrimFunc (TVM's llvm target) on the same random inputs."""
    import tvm

    from nasir.dialects.shapes import shape_of
    from nasir.lowering.nest_to_tvm.program import prim_func

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape_of(v)).astype(np.float32) for v in [*op.inputs, op.result]]
    outputs = []
    for f in (prim_func(op), scheduled):
        built = tvm.compile(f.with_attr("global_symbol", "main"), target="llvm")
        tensors = [tvm.runtime.tensor(a) for a in args]
        built(*tensors)
        outputs.append(tensors[-1].numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-5, err_msg=op.layer_name)


@pytest.mark.parametrize("name,dataset,variant", GPU_SCHEDULE_CASES, ids=["-".join(c) for c in GPU_SCHEDULE_CASES])
def test_default_gpu_schedule_computes_the_nest(name, dataset, variant):
    """Every contraction gets nasir's GPU schedule (register tile, epilogue in the write-back);
    with its loops left unbound it runs on the CPU and equals the unscheduled nest."""
    from nasir.lowering.nest_to_tvm import schedule
    from nasir.lowering.nest_to_tvm.program import prim_func

    gpu = schedule.GPU.of(tvm_build.tvm_target_of("cuda", "sm_90"))
    for op in _distinct_contractions(name, dataset, variant):
        bound = schedule.default_gpu(prim_func(op), op, gpu)
        assert bound is not None and "threadIdx.x" in bound.script(), op.layer_name
        _assert_computes_the_nest(op, schedule.default_gpu(prim_func(op), op, gpu, bind=False))


@pytest.mark.parametrize("name,dataset,variant", GPU_SCHEDULE_CASES, ids=["-".join(c) for c in GPU_SCHEDULE_CASES])
def test_staged_gpu_schedule_computes_the_nest_inside_its_buffers(name, dataset, variant):
    """nasir's shared-memory schedule (staged.py) applies to every contraction of these models, at
    every tile of `Staged.variants`: its copies fit the target's shared memory, every access of the
    bound kernel is proven inside its buffer (the padded window's copy too), and with its loops
    left unbound it equals the unscheduled nest."""
    from nasir.lowering.nest_to_tvm.bounds import out_of_bounds, shared_bytes
    from nasir.lowering.nest_to_tvm.program import prim_func
    from nasir.lowering.nest_to_tvm.staged import Staged, staged_schedule

    target = tvm_build.tvm_target_of("cuda", "sm_90")
    limit = int(target.attrs["max_shared_memory_per_block"])
    for op in _distinct_contractions(name, dataset, variant):
        for tile in Staged.variants(1024)[:2]:
            bound = staged_schedule(prim_func(op), op, tile, limit)
            assert bound is not None, op.layer_name
            func = bound.mod["main"]
            assert 0 < shared_bytes(func) <= limit and 'scope="shared"' in func.script(), op.layer_name
            assert out_of_bounds(func) == [], op.layer_name
            _assert_computes_the_nest(op, staged_schedule(prim_func(op), op, tile, limit, bind=False).mod["main"])


def test_staged_schedule_shrinks_its_chunk_to_the_shared_memory_and_builds():
    """ResNet-34's 7x7 stem staged 3 input channels a step needs 56 KB of shared memory a block:
    under CUDA's 48 KB it stages 1 (18 KB); under 1 KB nothing fits and there is no staged
    schedule. The staged kernels of every distinct ResNet-34 nest pass ptxas for sm_90."""
    from nasir.tuning import remote
    from nasir.lowering.nest_to_tvm.program import prim_func
    from nasir.lowering.nest_to_tvm.bounds import shared_bytes
    from nasir.lowering.nest_to_tvm.staged import Staged, staged_schedule
    from nasir.lowering.nest_to_tvm.tuning import workload

    nests = _distinct_contractions("resnet34", "imagenet", "base")
    stem = nests[0]
    assert stem.layer_name == "conv1_Conv"
    assert shared_bytes(staged_schedule(prim_func(stem), stem, Staged(), 1 << 20).mod["main"]) == 56448
    assert shared_bytes(staged_schedule(prim_func(stem), stem, Staged(), 49152).mod["main"]) == 18816
    assert staged_schedule(prim_func(stem), stem, Staged(), 1024) is None
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    candidates = {f"c{k}": staged_schedule(workload(prim_func(op))["main"], op, Staged(), 49152)
                  for k, op in enumerate(nests)}
    _, built = remote._build(candidates, target, ["sm_90"])
    assert built == list(candidates)


def test_run_py_says_first_what_the_machine_lacks(tmp_path):
    """The GPU check's run.py names, in one line and before any case, what this machine lacks: the
    Python its runtime was built for (a folder carrying a 3.12 runtime, run here with another
    Python), packages, the CUDA driver; and exits non-zero."""
    folder = tmp_path / "check"
    (folder / "runtime" / "tvm_ffi").mkdir(parents=True)
    (folder / "cases").mkdir()
    other = 12 if sys.version_info[1] != 12 else 13
    (folder / "runtime" / "tvm_ffi" / f"core.cpython-3{other}-x86_64-linux-gnu.so").write_bytes(b"")
    shutil.copy(runner.__file__, folder / "run.py")
    done = subprocess.run([sys.executable, str(folder / "run.py")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"run.py: this folder's TVM runtime is built for Python 3.{other}, this is Python {platform.python_version()}: "
        f"run it with python3.{other}"]
    assert runner.preflight(driver="libno-such-driver.so.1") == (
        "no CUDA driver here (libno-such-driver.so.1 cannot be loaded): run.py needs an NVIDIA GPU and its driver")


def test_run_py_exits_non_zero_when_a_case_fails(tmp_path, monkeypatch, capsys):
    """Every case failing (here: a case whose library is missing) is exit status 1, not 0."""
    folder = tmp_path / "check"
    (folder / "cases" / "broken").mkdir(parents=True)
    (folder / "cases" / "broken" / "meta.json").write_text("{}")
    monkeypatch.setattr(runner, "HERE", folder)
    monkeypatch.setattr(runner, "preflight", lambda: None)
    with pytest.raises(SystemExit) as stopped:
        runner.main(["--out", str(tmp_path / "out")])
    assert stopped.value.code == 1
    assert "0 passed, 1 failed: broken" in capsys.readouterr().out
