"""The TVM backend (lowering/nest_to_tvm, runtime/tvm_executable.py): target "tvm" (TVM's CPU code,
run here) against ONNX Runtime and the torch backend, target "cuda" compiled without a GPU.

Cases: the onnx package's node tests nasir supports (every combiner, padding, the nn ops Relax
runs), zoo models, the architecture-transform variants of `make bench` and every search choice on
ResNet-18, nest schedules as s_tir primitives (CPU and GPU), save / load / the deployment recipe,
profile and bench on target tvm, and the errors a user can meet (no TVM, no GPU, no nvcc, a nest
or schedule TVM cannot express). Distinct PrimFuncs are few: equal nests share one.
"""

from __future__ import annotations

import glob
import json
import math
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import tvm
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper
from tvm import relax
from test_onnx_node_tests import DATA, _load_set
from test_onnx_node_tests import PASSING
from zoo_cases import EACH_ONCE
from test_schedule_transforms import IR as SCHEDULE_IR
from test_schedule_transforms import conv_of, conv_oracle
from test_tools import opt_in_process, run_main
from xdsl.dialects.builtin import AffineMapAttr
from xdsl.ir.affine import AffineExpr, AffineMap

import nasir
import nasir.zoo as zoo
from nasir.dialects import nest
from nasir.dialects.context import parse_module
from nasir.dialects.module import WeightStore
from nasir.dialects.schedule import Schedule
from nasir.errors import BackendUnavailableError, LoweringError, NasirError
from nasir.frontend.onnx_import import import_onnx
from nasir.lowering.nest_to_tvm import build as tvm_build
from nasir.lowering.nest_to_tvm import schedule
from nasir.lowering.nest_to_tvm import tuning as tvm_tuning
from nasir.lowering.nest_to_tvm.program import lower_to_nest, to_relax
from nasir.lowering.target import CPU_ENV
from nasir.measure import benchmark, gpu_benchmark
from nasir.measure.variants import ALL_VARIANTS, PREFIX
from nasir.model import Model

H100 = tvm_build.tvm_target_of("cuda", "sm_90")
from nasir.cli import main as cli
from nasir.search.space import TEMPLATES, LayerChoices, SearchSpace

TOL = dict(rtol=1e-4, atol=1e-4)

ZOO = EACH_ONCE
"""Each zoo architecture once (zoo_cases: its kernels differ between datasets in shape only)."""

NODE_CASES = PASSING
"""TVM's backend is held to every ONNX node case nasir passes on llvm (test_onnx_node_tests.PASSING)."""

VARIANTS = [v for v in ALL_VARIANTS if v not in ("base", "nest")]
"""Every architecture variant of `make bench` (nasir.measure.variants.ALL_VARIANTS) on ResNet-18: one
transform on every block conv."""

EVERY_CHOICE = {
    "conv1_Conv": "fold-pieces", "layer1_layer1.0_conv1_Conv": "bottleneck-co2",
    "layer1_layer1.0_conv2_Conv": "group4", "layer1_layer1.1_conv1_Conv": "seq1",
    "layer1_layer1.1_conv2_Conv": "depthwise", "layer2_layer2.0_downsample_downsample.0_Conv": "unfold-oh3",
    "layer2_layer2.0_conv1_Conv": "bottleneck-hw2", "layer2_layer2.0_conv2_Conv": "seq2",
    "layer2_layer2.1_conv1_Conv": "bottleneck-ci2", "layer2_layer2.1_conv2_Conv": "shift-ow",
    "layer3_layer3.0_downsample_downsample.0_Conv": "unfold-ow3", "layer3_layer3.0_conv1_Conv": "seq3",
    "layer3_layer3.0_conv2_Conv": "fold-kh", "layer3_layer3.1_conv1_Conv": "unshare-oh2",
    "layer3_layer3.1_conv2_Conv": "group16", "layer4_layer4.0_conv1_Conv": "fold-kw",
    "layer4_layer4.0_conv2_Conv": "shift-oh", "layer4_layer4.1_conv1_Conv": "bottleneck-co4",
    "layer4_layer4.1_conv2_Conv": "bottleneck-hw4",
}
"""One ResNet-18 candidate making a different search-space choice (nasir/search/space.py) at each conv:
every architecture transform and composition of the search in one model."""


@pytest.mark.parametrize("suite,name", NODE_CASES, ids=[n for _, n in NODE_CASES])
def test_node_case_on_tvm(suite: str, name: str):
    case = os.path.join(DATA, suite, name)
    exe = nasir.compile(import_onnx(os.path.join(case, "model.onnx")), target="tvm")
    for data_set in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        inputs = _load_set(data_set, "input")[: len(exe.input_names)]
        got = exe(*inputs)
        for g, e in zip(got if isinstance(got, list) else [got], _load_set(data_set, "output")):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, **TOL)


@pytest.mark.parametrize("name,dataset", ZOO, ids=[f"{n}-{d}" for n, d in ZOO])
def test_zoo_model_matches_onnxruntime(name, dataset, tmp_path):
    path = zoo.export_onnx(name, tmp_path / f"{name}.onnx", dataset=dataset)
    model = nasir.load(path)
    x = np.random.default_rng(0).standard_normal(model.input_shapes[0]).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(nasir.compile(model, target="tvm")(x), expected, **TOL)


@pytest.fixture(scope="module")
def resnet18(tmp_path_factory):
    return nasir.load(zoo.export_onnx("resnet18", tmp_path_factory.mktemp("zoo") / "r18.onnx"))


def _agrees_with_torch_backend(model) -> None:
    x = np.random.default_rng(1).standard_normal(model.input_shapes[0]).astype(np.float32)
    np.testing.assert_allclose(nasir.compile(model, target="tvm")(x), nasir.compile(model, target="torch")(x), **TOL)


@pytest.mark.parametrize("variant", VARIANTS)
def test_transformed_model_matches_torch_backend(resnet18, variant):
    """Transforms only change nests: every variant runs on TVM as computed by the reference."""
    _agrees_with_torch_backend(resnet18.transform(ALL_VARIANTS[variant]))


def test_every_search_choice_matches_torch_backend(resnet18):
    space = SearchSpace(tuple(LayerChoices(layer, 0, tuple(TEMPLATES)) for layer in EVERY_CHOICE))
    _agrees_with_torch_backend(resnet18.transform(f"{PREFIX},{space.pipeline(EVERY_CHOICE)}"))


def test_repeated_nests_share_one_primfunc(resnet18):
    """Structurally equal nests (ResNet's repeated blocks) are one PrimFunc, built once."""
    module = lower_to_nest(resnet18.module)
    nests = [op for op in module.walk() if isinstance(op, nest.ComputeOp)]
    primfuncs = [gv for gv, f in to_relax(module).functions.items() if gv.name_hint != "main"]
    assert len(primfuncs) < len(nests)


def test_several_outputs(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Sigmoid", ["x"], ["b"], name="s")]
    info = [helper.make_tensor_value_info(n, 1, (1, 2, 3, 3)) for n in "xab"]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", info[:1], info[1:]),
                                opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "two.onnx")
    model = nasir.load(tmp_path / "two.onnx")
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)
    got, expected = nasir.compile(model, target="tvm")(x), nasir.compile(model, target="torch")(x)
    assert len(got) == 2
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, **TOL)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn_matches_torch_backend(tmp_path, size):
    """LRN's window as ONNX places it, also for an even size (TVM's topi centres it otherwise; ONNX
    Runtime refuses even sizes, the torch backend computes ONNX's formula)."""
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.02, beta=0.75, bias=1.5, name="lrn")
    info = [helper.make_tensor_value_info(n, 1, (1, 6, 3, 3)) for n in "xy"]
    path = tmp_path / "lrn.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "g", info[:1], info[1:]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    x = np.random.default_rng(0).standard_normal((1, 6, 3, 3)).astype(np.float32)
    model = nasir.load(path)
    np.testing.assert_allclose(nasir.compile(model, target="tvm")(x), nasir.compile(model, target="torch")(x), **TOL)


def test_save_and_load(small_conv, tmp_path):
    x = np.random.default_rng(2).standard_normal(small_conv.input_shapes[0]).astype(np.float32)
    exe = nasir.compile(small_conv, target="tvm")
    loaded = nasir.runtime.load(exe.save(tmp_path / "exe"))
    assert loaded.target == "tvm"
    np.testing.assert_array_equal(loaded(x), exe(x))
    assert loaded.benchmark(x, repeat=2)["median_ms"] > 0
    # docs/deploy-cuda.md's recipe without nasir: TVM's runtime alone runs the saved library, given
    # the inputs and then the weights
    meta = json.loads((tmp_path / "exe" / "meta.json").read_text())
    weights = tvm.runtime.load_param_dict_from_file(str(tmp_path / "exe" / "weights.params"))
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "exe" / "model.so")), tvm.cpu(0))
    y = vm["main"](tvm.runtime.tensor(x.reshape(meta["input_shapes"][0]), tvm.cpu(0)),
                   *(tvm.runtime.tensor(weights[w["name"]].numpy(), tvm.cpu(0)) for w in meta["weights"])).numpy()
    np.testing.assert_array_equal(y, exe(x))


def test_cuda_executable_without_gpu_names_it(small_conv, tmp_path):
    """CUDA code compiles on a machine without a GPU (tests/test_cuda_build.py builds every zoo model);
    running it, or loading it with nasir, names the missing GPU."""
    exe = nasir.compile(small_conv, target="cuda", arch="sm_90")
    assert exe.target == "cuda" and exe.meta["arch"] == "sm_90"
    saved = exe.save(tmp_path / "exe")
    if tvm_build.gpu_arch() is None:
        x = np.zeros(small_conv.input_shapes[0], np.float32)
        with pytest.raises(BackendUnavailableError, match=r"compiled for a CUDA GPU \(sm_90\) and this machine has none"):
            exe(x)
        with pytest.raises(BackendUnavailableError, match="has none"):
            nasir.runtime.load(saved)(x)


@pytest.mark.parametrize("target", ["tvm", "cuda"])
def test_target_without_tvm_names_it(small_conv, monkeypatch, target):
    monkeypatch.setitem(sys.modules, "nasir.runtime.tvm_compile", None)  # as if apache-tvm were not installed
    monkeypatch.delattr(nasir.runtime, "tvm_compile", raising=False)
    with pytest.raises(BackendUnavailableError, match=f"target '{target}' needs apache-tvm"):
        nasir.compile(small_conv, target=target)


def test_cuda_without_nvcc_names_it(small_conv, monkeypatch):
    monkeypatch.setattr(tvm_build, "nvcc_path", lambda: None)
    with pytest.raises(BackendUnavailableError, match="target 'cuda' needs nvcc"):
        nasir.compile(small_conv, target="cuda")


def test_cuda_without_tvm_cuda_codegen_names_it(small_conv, monkeypatch):
    monkeypatch.setattr(tvm_build.tvm, "get_global_func", lambda name, allow_missing=False: None)
    with pytest.raises(BackendUnavailableError, match="target 'cuda' needs TVM built with CUDA"):
        nasir.compile(small_conv, target="cuda")


def test_unexpressible_nest_names_the_op():
    """An out_map that is no mixed radix of the parallel dims (two reads of one dim) is refused by name."""
    module = lower_to_nest(import_onnx(os.path.join(DATA, "pytorch-converted", "test_ReLU", "model.onnx")).module)
    op = next(o for o in module.walk() if isinstance(o, nest.ComputeOp))
    d = [AffineExpr.dimension(i) for i in range(op.output_map.num_dims)]
    op.properties["out_map"] = AffineMapAttr(AffineMap(len(d), 0, (*d[:-1], d[-2])))
    with pytest.raises(LoweringError, match=f"nest '{op.layer_name}' cannot be converted: its out_map"):
        to_relax(module)


def test_nasir_opt_prints_tvmscript(capsys):
    code, out, _ = opt_in_process(capsys, os.path.join(DATA, "pytorch-converted", "test_Conv2d_groups", "model.onnx"),
                                  "-t", "tvm")
    assert code == 0
    assert "@I.ir_module" in out and "@T.prim_func" in out and "R.call_tir" in out


def test_cli_runs_on_tvm(capsys):
    code, out, _ = run_main(cli.main, capsys, "run", os.path.join(DATA, "pytorch-converted",
                                                                              "test_Conv2d_groups", "model.onnx"),
                            "--target", "tvm")
    assert code == 0 and "shape" in out


SCHEDULED = {
    "interchange{order=ow,oh,co,n},unroll{dim=kw}": ["T.unroll"],
    'strip-mine{dim=co factor=3},interchange{order="co.i",ow},parallel{dim="co.o"}': ["T.parallel"],
    'tile{dims=oh,ow factors=4,4},unroll{dim=kw},interchange{order=kw,"ow.i"},vectorize{dim="ow.i"}':
        ["T.unroll", "T.vectorized"],
    'fuse{dims=oh,ow},interchange{order="oh*ow",co},interchange{order=ci,kh,kw,co},vectorize{dim=co}': ["T.vectorized"],
    'strip-mine{dim=co factor=3},parallel{dim="co.o"},unroll{dim=kh factor=2}': ["T.parallel", "T.unroll"],
}
"""Schedule pipelines (test_schedule_transforms.py's and a partial unroll) and the loop kinds each
must leave in the CPU PrimFunc."""


@pytest.fixture(scope="module")
def small_conv():
    module, _ = parse_module(SCHEDULE_IR)
    return Model(module, WeightStore(w=np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32)))


@pytest.mark.parametrize("pipeline", SCHEDULED)
def test_schedule_maps_onto_tir(small_conv, pipeline):
    """The nest's schedule becomes s_tir primitives: the same values, the loop kinds it names on a CPU,
    and on a GPU the parallel loops bound to blockIdx/threadIdx (built for CUDA, not run)."""
    model = small_conv.transform(pipeline)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(nasir.compile(model, target="tvm")(x), conv_oracle(x, small_conv.weights["w"]), **TOL)
    cpu = to_relax(lower_to_nest(model.module)).script()
    assert all(kind in cpu for kind in SCHEDULED[pipeline])
    gpu = to_relax(lower_to_nest(model.module), H100)
    assert 'T.thread_binding(256, thread="threadIdx.x")' in gpu.script()
    tvm_build.build(gpu, "cuda", "sm_90")


def test_gpu_schedules_take_threads_and_registers_from_the_target(small_conv):
    """A target's thread and register limits shape nasir's GPU schedules: blocks of 256 threads and
    4 accumulated channels where 1024 threads and 64K registers a block are allowed (every
    architecture's limits, `build.CUDA_LIMITS`); blocks of 128 threads where a target allows 128;
    1 channel where a thread's share of the block's registers is 32."""
    h100 = schedule.GPU.of(H100)
    assert (h100.threads, h100.registers, h100.channels) == (256, 255, 4)
    narrow = tvm.target.Target({"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 128,
                                "registers_per_block": 4096, "max_shared_memory_per_block": 49152})
    assert schedule.GPU.of(narrow) == schedule.GPU(threads=128, block_registers=4096)
    assert (schedule.GPU.of(narrow).registers, schedule.GPU.of(narrow).channels) == (32, 1)
    model = small_conv.transform(next(iter(SCHEDULED)))
    assert 'T.thread_binding(128, thread="threadIdx.x")' in to_relax(lower_to_nest(model.module), narrow).script()


def test_unscheduled_contractions_get_vector_lanes_on_a_cpu(small_conv, monkeypatch):
    """On a CPU an unscheduled conv runs its output channels as the target's vector lanes (`co.i`,
    innermost); on a GPU it is left to TVM's default GPU rules."""
    assert schedule.default_cpu(conv_of(small_conv), 8) == Schedule(
        splits=[("co", 8)], order=["n", "co.o", "oh", "ow", "ci", "kh", "kw", "co.i"], vector="co.i")
    assert schedule.default_cpu(conv_of(small_conv), 16) is None  # 8 channels: no 16 lanes
    monkeypatch.setenv(CPU_ENV, "x86-64-v3")  # AVX2: 8 lanes
    assert "T.vectorized" in to_relax(lower_to_nest(small_conv.module)).script()
    assert "T.vectorized" not in to_relax(lower_to_nest(small_conv.module), H100).script()


def test_gpu_schedule_without_a_parallel_loop_outside_the_reduction_names_the_nest(small_conv):
    model = small_conv.transform("interchange{order=ci,n}")
    with pytest.raises(LoweringError, match="nest 'conv': on a GPU a scheduled nest needs a parallel loop outside"):
        to_relax(lower_to_nest(model.module), H100)


def test_scheduled_zoo_model_matches_torch_backend(resnet18):
    """Schedules on every conv of a network (with fused epilogues and strided, padded reads)."""
    convs = "layer.*_Conv|conv1_Conv"
    model = resnet18.transform(f'{PREFIX},strip-mine{{dim=co factor=16 layers="{convs}"}},'
                               f'parallel{{dim="co.o" layers="{convs}"}},unroll{{dim=kw layers="{convs}"}}')
    _agrees_with_torch_backend(model)
    nasir.compile(model, target="cuda", arch="sm_90")


def test_profile_times_each_layer(resnet18):
    """profile=True keeps one kernel call per layer (no fusion) and times each with a VM instrument."""
    exe = nasir.compile(resnet18, target="tvm", profile=True)
    x = np.random.default_rng(3).standard_normal(resnet18.input_shapes[0]).astype(np.float32)
    profile = exe.profile(x, repeat=2, warmup=1)
    assert [r.layer for r in profile.rows][:2] == ["conv1_Conv", "layer1_layer1.0_conv1_Conv"]
    assert profile.total_macs == resnet18.summary().total_macs and all(r.ms > 0 for r in profile.rows)
    assert profile.rows[3].kernel == profile.rows[1].kernel  # equal nests run one shared PrimFunc
    with pytest.raises(NasirError, match="compiled without profiling"):
        nasir.compile(resnet18, target="tvm").profile(x)


def test_cli_profiles_on_tvm(capsys):
    model = os.path.join(DATA, "pytorch-converted", "test_Conv2d", "model.onnx")
    code, out, _ = run_main(cli.main, capsys, "profile", model, "--target", "tvm", "--repeat", "2")
    assert code == 0 and "total (1 thread)" in out


def test_bench_measures_tvm(tmp_path):
    result = benchmark.main(["--models", "resnet18", "--datasets", "cifar10", "--threads", "1", "--repeat", "1",
                              "--variants", "--no-plot", "--target", "tvm", "--out", str(tmp_path)])
    (row,) = result["models"]
    assert result["config"]["target"] == "tvm" and row["nasir_ms"] > 0 and row["max_abs_err_vs_ort"] < 1e-4


def _two_convs(path, ci: int, co: int, size: int) -> Model:
    """conv 3x3 + ReLU, conv 3x3: two distinct nests, two tuning tasks."""
    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (co, ci, 3, 3)), ("w2", (co, co, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y"], pads=[1] * 4, name="conv1"),
             helper.make_node("Relu", ["y"], ["z"], name="relu"),
             helper.make_node("Conv", ["z", "w2"], ["out"], pads=[1] * 4, name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, (1, ci, size, size))],
                              [helper.make_tensor_value_info("out", 1, (1, co, size, size))], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return nasir.load(path)


def _records(folder) -> int:
    return len((folder / tvm_tuning.target_key(tvm_build.tvm_target_of("tvm")) / "database_tuning_record.json")
               .read_text().splitlines())


def test_meta_schedule_tuning_and_transfer_tuning(tmp_path):
    """meta_schedule tunes the unscheduled nests (2 trials: one per nest) into records that later
    compiles use; nests of another model with the same kinds but other channels and image size
    take those records' schedules (tiles refitted), timed here and stored, so the next compile
    finds records of their own. One test: tuning costs a minute or more."""
    folder = tmp_path / "tuning"
    model = _two_convs(tmp_path / "a.onnx", 8, 16, 16)
    exe = nasir.compile(model, target="tvm", tune_trials=2, tuning_dir=str(folder))
    x = np.random.default_rng(0).standard_normal(model.input_shapes[0]).astype(np.float32)
    np.testing.assert_allclose(exe(x), nasir.compile(model, target="torch")(x), **TOL)
    assert exe.meta["tuning"]["tuned"] == 2
    records = _records(folder)
    again = nasir.compile(model, target="tvm", tuning_dir=str(folder))
    assert again.meta["tuning"] == exe.meta["tuning"] and _records(folder) == records
    np.testing.assert_allclose(again(x), exe(x), **TOL)
    assert nasir.compile(model, target="tvm", tuning_dir="none").meta["tuning"] is None

    other = _two_convs(tmp_path / "b.onnx", 8, 24, 12)
    y = np.random.default_rng(1).standard_normal(other.input_shapes[0]).astype(np.float32)
    assert nasir.compile(other, target="tvm", tuning_dir=str(folder), transfer=False).meta["tuning"]["default"] == 2
    transferred = nasir.compile(other, target="tvm", tuning_dir=str(folder))
    assert transferred.meta["tuning"]["transferred"] == 2
    np.testing.assert_allclose(transferred(y), nasir.compile(other, target="torch")(y), **TOL)
    assert _records(folder) == records + 2
    assert nasir.compile(other, target="tvm", tuning_dir=str(folder), transfer=False).meta["tuning"]["tuned"] == 2


def test_builder_initializer_imports_the_intrinsics_without_nasir():
    """The tuning builder's initializer travels by value: the builder process imports the tensor
    intrinsics and restores `inspect.getmodule`, without importing nasir."""
    import subprocess

    import cloudpickle

    from nasir.lowering.nest_to_tvm.intrinsics import import_tensor_intrinsics

    script = ("import inspect, pickle, sys; scan = inspect.getmodule; "
              "pickle.loads(sys.stdin.buffer.read())(); "
              "print('tvm.s_tir.tensor_intrin' in sys.modules, inspect.getmodule is scan, "
              "any(m.split('.')[0] == 'nasir' for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], input=cloudpickle.dumps(import_tensor_intrinsics),
                          capture_output=True, timeout=300)
    assert done.stdout.decode().split() == ["True", "True", "False"], done.stderr.decode()[-2000:]


@given(st.integers(1, 512), st.lists(st.integers(1, 64), min_size=1, max_size=4))
def test_refit_tiles_multiplies_to_the_extent(extent, factors):
    fitted = tvm_tuning.refit_tiles(extent, factors)
    assert math.prod(fitted) == extent and len(fitted) == len(factors)
    assert all(f <= old for f, old in zip(fitted[1:], factors[1:]))


def test_refit_tiles_examples():
    assert tvm_tuning.refit_tiles(64, [2, 8, 2, 2]) == [2, 8, 2, 2]
    assert tvm_tuning.refit_tiles(48, [2, 8, 2, 2]) == [2, 6, 2, 2]
    assert tvm_tuning.refit_tiles(7, [1, 4]) == [7, 1]


def test_tuning_errors_are_clear(small_conv, tmp_path):
    if tvm_build.gpu_arch() is None:
        with pytest.raises(BackendUnavailableError, match="times schedules on its device and there is none here"):
            nasir.compile(small_conv, target="cuda", tune_trials=4, tuning_dir=str(tmp_path))
    with pytest.raises(NasirError, match="tune_trials needs a tuning_dir"):
        nasir.compile(small_conv, target="tvm", tune_trials=4, tuning_dir="none")
    with pytest.raises(NasirError, match="tune_trials must be a positive number"):
        nasir.compile(small_conv, target="tvm", tune_trials=-1, tuning_dir=str(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(NasirError, match="is a file, not a folder"):
        nasir.compile(small_conv, target="tvm", tune_trials=4, tuning_dir=str(tmp_path / "file"))


def test_no_tuning_folder_is_made_without_tuning(small_conv, user_cache):
    exe = nasir.compile(small_conv, target="tvm")
    assert exe.meta["tuning"] is None and not (user_cache / "tvm").exists()


def test_gpu_bench_table_on_a_cpu(tmp_path):
    """The GPU benchmark's code (nasir/measure/gpu_benchmark.py) run with TVM's CPU code against PyTorch on the
    CPU: every row agrees with PyTorch and its realisation is the formula's."""
    result = gpu_benchmark.run("resnet18", ["cifar10"], ["group4", "depthwise"], repeat=3, out=tmp_path,
                           target="tvm", device="cpu")
    base, *variants = result["variants"]
    assert [r["variant"] for r in result["variants"]] == ["base", "group4", "depthwise"]
    for row in result["variants"]:
        assert row["max_abs_err_vs_torch"] < 1e-3 and row["nasir_ms"] > 0 and row["torch_ms"] > 0
        speedup = base["nasir_ms"] / row["nasir_ms"]
        assert row["nasir_realisation"] == pytest.approx(speedup * row["macs"] / base["macs"])
    assert json.loads((tmp_path / "bench-gpu.json").read_text())["config"]["target"] == "tvm"


def test_gpu_bench_without_a_gpu_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without one
    with pytest.raises(SystemExit) as exit_:
        benchmark.main(["--target", "cuda"])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "needs a CUDA GPU and this machine has none" in err and "PyTorch none" in err
    with pytest.raises(SystemExit):
        benchmark.main(["--target", "tvm", "--tune-trials", "8"])
