"""Tuning without a compiler on the target's machine (nasir/tuning/remote.py, issue 40 item 5):
candidates built here, timed by a separate process with TVM's runtime alone, times read back into the
tuning records that the next compile uses. On the CPU ("tvm") every step runs here; for CUDA the
export builds fatbins and the timer goes as far as the missing GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import s_tir
from test_schedule_transforms import IR, conv_oracle
from test_tools import run_main

import nasir
from nasir.cli import main as cli
from nasir.dialects.context import parse_module
from nasir.dialects.module import WeightStore
from nasir.errors import NasirError
from nasir.lowering.nest_to_tvm import build as tvm_build
from nasir.lowering.nest_to_tvm.cuda import _stand_in_driver
from nasir.lowering.nest_to_tvm.program import lower_to_nest, to_relax
from nasir.lowering.nest_to_tvm.tuning import TVMTuning
from nasir.model import Model
from nasir.tuning import remote


@pytest.fixture(scope="module")
def conv():
    module, _ = parse_module(IR)
    return Model(module, WeightStore(w=np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32)))


def _time(folder, env=None) -> subprocess.CompletedProcess:
    """The timer in a process of its own, as on the target's machine (it loads TVM's runtime alone)."""
    return subprocess.run([sys.executable, str(folder / remote.TIMER)], capture_output=True, text=True,
                          env=env, timeout=600)


def test_export_time_import_on_the_cpu_gives_the_next_compile_its_records(conv, tmp_path):
    out = remote.export_candidates(conv, tmp_path / "out", target="tvm", trials=4, progress=lambda _: None)
    manifest = json.loads((out / remote.MANIFEST).read_text())
    (task,) = manifest["tasks"]
    assert task["name"] == "conv" and 2 <= len(task["candidates"]) <= 4
    assert task["args"] == [[[1, 4, 6, 6], "float32"], [[8, 4, 3, 3], "float32"], [[1, 8, 6, 6], "float32"]]
    with pytest.raises(NasirError, match="times.json does not exist: run python3 .*time_candidates.py"):
        remote.import_times(out, tmp_path / "records")
    timed = _time(out)
    assert timed.returncode == 0, timed.stderr[-3000:]
    times = json.loads((out / remote.TIMES).read_text())["times"]["conv"]
    assert len(times) == len(task["candidates"]) and all(isinstance(t, float) and t > 0 for t in times.values())
    imported = remote.import_times(out, tmp_path / "records")
    assert imported.records == {"conv": len(times)}
    assert imported.best_ms["conv"] == pytest.approx(min(times.values()) * 1e3)
    exe = nasir.compile(conv, target="tvm", tuning_dir=str(tmp_path / "records"))
    assert exe.meta["tuning"]["tuned"] == 1
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(exe(x), conv_oracle(x, conv.weights["w"]), rtol=1e-4, atol=1e-4)


def test_the_timer_goes_on_after_a_candidate_that_fails(conv, tmp_path):
    """Each nest is timed in a process of its own (on a GPU one illegal address poisons the process's
    CUDA context): after a candidate that fails (here a function the library does not have) the
    nest's next candidates are timed in a fresh process; a library that does not load fails its
    candidates and not the other nests'."""
    out = remote.export_candidates(conv, tmp_path / "out", target="tvm", trials=4, progress=lambda _: None)
    manifest = json.loads((out / remote.MANIFEST).read_text())
    (task,) = manifest["tasks"]
    functions = [c["function"] for c in task["candidates"]]
    task["candidates"].insert(1, {"function": "missing", "family": "meta_schedule"})
    broken = {**task, "name": "broken", "library": "tasks/none.so"}
    manifest["tasks"].append(broken)
    (out / remote.MANIFEST).write_text(json.dumps(manifest))
    timed = _time(out)
    assert timed.returncode == 0, timed.stderr[-3000:]
    assert "conv: " in timed.stdout and "(1 failed)" in timed.stdout
    times = json.loads((out / remote.TIMES).read_text())["times"]
    assert list(times["conv"]) == [functions[0], "missing", *functions[1:]]
    assert times["conv"]["missing"].startswith("error: ") and "missing" in times["conv"]["missing"]
    assert all(isinstance(times["conv"][f], float) for f in functions)
    assert set(times["broken"]) == {"missing", *functions}
    assert all(t.startswith("error: its timing process ended with code 1") for t in times["broken"].values())


def test_cuda_export_holds_compiled_candidates_and_the_timer_reaches_the_missing_gpu(conv, tmp_path):
    out = remote.export_candidates(conv, tmp_path / "out", target="cuda", arch="sm_90", trials=2,
                                          progress=lambda _: None)
    manifest = json.loads((out / remote.MANIFEST).read_text())
    assert manifest["target_key"] == "cuda-sm_90" and manifest["device"] == "cuda"
    (task,) = manifest["tasks"]
    assert task["candidates"] and b"__global__" not in (out / task["library"]).read_bytes()
    assert (out / "runtime" / "tvm" / "lib" / "libtvm_runtime_cuda.so").exists()
    if tvm_build.gpu_arch() is None:
        env = {**os.environ, "LD_LIBRARY_PATH": f"{_stand_in_driver().parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
        timed = _time(out, env)
        assert "no cuda device here to time the candidates on" in timed.stdout + timed.stderr, timed.stderr[-3000:]


def _threads(script: str) -> set[int]:
    return {int(n) for n in re.findall(r'T\.thread_binding\((\d+), thread="threadIdx\.x"', script)}


def test_cuda_import_makes_the_fastest_candidate_the_compiled_kernel(conv, tmp_path):
    """nasir's own GPU schedules at several tiles (both families: registers, shared) are among the
    candidates; the times the GPU machine writes decide which one the next compile uses (here a
    times.json written as its timer would, naming a candidate with a thread count no other has the
    fastest), and the import reports each family's fastest."""
    out = remote.export_candidates(conv, tmp_path / "out", target="cuda", arch="sm_90", trials=1,
                                          progress=lambda _: None)
    (task,) = json.loads((out / remote.MANIFEST).read_text())["tasks"]
    families = Counter(candidate["family"] for candidate in task["candidates"])
    assert set(families) == {"registers", "shared", "meta_schedule"} and families["shared"] >= 2
    workload = tvm.ir.load_json((out / task["workload"]).read_text())
    threads = {}
    traces = remote.candidate_traces(out, task)
    for candidate in task["candidates"]:
        sch = s_tir.Schedule(workload)
        s_tir.Trace.apply_json_to_schedule(tvm.ir.load_json(traces[candidate["function"]]), sch)
        threads[candidate["function"]] = frozenset(_threads(sch.mod["main"].script()))
    counts = Counter(threads.values())
    chosen = next(function for function, t in threads.items() if counts[t] == 1 and t)
    assert len(threads) >= 4  # nasir's tiles: 64 to 512 threads by 1 to 8 channels, duplicates dropped
    times = {function: (1e-5 if function == chosen else 2e-5) for function in threads}
    (out / remote.TIMES).write_text(json.dumps({"device": "cuda", "times": {"conv": times}}))
    imported = remote.import_times(out, tmp_path / "records")
    family = next(c["family"] for c in task["candidates"] if c["function"] == chosen)
    assert imported.family_best_ms["conv"] == {kind: pytest.approx(1e-2 if kind == family else 2e-2)
                                               for kind in families}
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    tuning = TVMTuning(target, tmp_path / "records")
    kernel = to_relax(lower_to_nest(conv.module), target, tuning)["conv"].script()
    assert _threads(kernel) == threads[chosen] and tuning.counts["tuned"] == 1


def test_cli_tune_export_and_import(conv, tmp_path, capsys):
    model = conv.to_onnx(tmp_path / "conv.onnx")
    code, _, err = run_main(cli.main, capsys, "tune", model, "--target", "tvm", "--export", tmp_path / "out",
                            "--trials", 2)
    assert code == 0, err
    assert _time(tmp_path / "out").returncode == 0
    code, out, err = run_main(cli.main, capsys, "tune", "--import", tmp_path / "out", "--tuning-dir", tmp_path / "rec")
    assert code == 0, err
    assert "records of 1 nests" in out and "every later compile for this target uses them" in out
    assert "meta_schedule ms" in out  # each family's fastest (on a CPU, meta_schedule's alone)
    code, _, err = run_main(cli.main, capsys, "tune", model, "--target", "cuda")
    assert code == 1 and "give --export DIR" in err


def test_a_candidate_ptxas_refuses_is_left_out_and_the_rest_built():
    """dlight's GeneralReduction on ResNet-34's first grouped conv keeps the whole output in shared
    memory (800 KB a block): built beside nasir's schedule of the same conv, it is dropped."""
    from tvm.s_tir import dlight as dl

    import nasir.zoo as zoo
    from nasir.lowering.nest_to_tvm import schedule
    from nasir.lowering.nest_to_tvm.program import tunable_nests
    from nasir.lowering.nest_to_tvm.tuning import workload
    from nasir.measure.variants import ALL_VARIANTS

    nests = tunable_nests(lower_to_nest(zoo.load("resnet34", "imagenet").transform(ALL_VARIANTS["group2"]).module))
    func, op = nests["layer1_layer1_0_conv1_Conv"]
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    with target:
        too_big = dl.gpu.GeneralReduction().apply(workload(func)["main"], target, False)
    fits = schedule.gpu_schedule(workload(func)["main"], op, schedule.GPU.of(target))
    library, built = remote._build({"c0": too_big, "c1": fits}, target, ["sm_90"])
    assert built == ["c1"]


def test_a_candidate_tvm_cannot_lower_is_left_out():
    """Some of meta_schedule's samples of ResNet-34's average pool (a cross-thread reduction) meet an
    internal error of TVM's TIR pipeline; built with the others they would fail the nest's library."""
    import nasir.zoo as zoo
    from nasir.lowering.nest_to_tvm.program import tunable_nests

    func, op = tunable_nests(lower_to_nest(zoo.load("resnet34", "imagenet").module))["avgpool_GlobalAveragePool"]
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    lowered = [remote._lowers(sch, target) for _, sch in remote._candidates(func, op, target, 32, 0)]
    assert 0 < lowered.count(False) < len(lowered)


def test_a_record_whose_kernel_breaks_the_targets_limits_is_not_used(tmp_path):
    """A tuning record replayed for a GPU must fit the target (here ResNet-34's stem staged through
    56 KB of shared memory a block, over CUDA's 48 KB): such a record is passed over and the nest
    gets the default schedule, where one within the limit (18 KB) is used."""
    import nasir.zoo as zoo
    from nasir.lowering.nest_to_tvm.program import tunable_nests
    from nasir.lowering.nest_to_tvm.staged import Staged, staged_schedule
    from nasir.lowering.nest_to_tvm.tuning import workload

    func, op = tunable_nests(lower_to_nest(zoo.load("resnet34", "imagenet").module))["conv1_Conv"]
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    for limit, used in ((1 << 20, "default"), (49152, "tuned")):
        tuning = TVMTuning(target, tmp_path / str(limit))
        sch = staged_schedule(workload(func)["main"], op, Staged(), limit)
        entry = tuning.database.commit_workload(workload(func))
        tuning.database.commit_tuning_record(_measured_record(sch, entry, target, func))
        tuning.schedule(func)
        assert tuning.counts == {used: 1}, limit


def _measured_record(sch, entry, target, func):
    """A tuning record of `sch` for `entry`, measured at 10 us."""
    from tvm.s_tir import meta_schedule as ms

    return ms.database.TuningRecord(sch.trace, entry, [1e-5], target, ms.arg_info.ArgInfo.from_prim_func(func))
