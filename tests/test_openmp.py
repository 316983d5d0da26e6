"""nasir's threads (libgomp) beside a caller's: a model called from inside the caller's own OpenMP team."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest

CALLER = r"""
#include <omp.h>
typedef void (*entry_t)(void *, void *, void *, void *);
/* Each thread of the caller's own team of `n` runs the model on its own buffers. */
void run_in_team(void *entry, void **x, void **y, void *weights, void **workspace, int n) {
  #pragma omp parallel num_threads(n)
  {
    int t = omp_get_thread_num();
    ((entry_t)entry)(x[t], y[t], weights, workspace[t]);
  }
}
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_a_model_called_inside_the_callers_openmp_team_runs_whole_on_each_thread(threads, tmp_path):
    """Native code calling a model from its own `#pragma omp parallel` (a server's worker threads):
    each call runs the whole model on its thread, in a team of one (kernels' chunks of the caller's
    team would each run a share of the loops, their barriers the caller's). A conv, a relu, a
    pool and a gemm (a kernel the first thread runs alone), different inputs on two threads, 10
    rounds, against torch."""
    import ctypes

    import torch
    import torch.nn.functional as F
    from onnx import TensorProto, helper, numpy_helper

    from nasir.frontend.onnx_import import import_onnx
    from nasir.runtime.llvm_executable import aligned_empty, compile_llvm

    rng = np.random.default_rng(0)
    w, fc = rng.standard_normal((16, 8, 3, 3), dtype=np.float32) * 0.3, rng.standard_normal((10, 16), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 12, 12))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10))],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")])
    onnx.save(helper.make_model(graph), str(tmp_path / "net.onnx"))
    exe = compile_llvm(import_onnx(tmp_path / "net.onnx").module, threads=threads)
    subprocess.run(["cc", "-O2", "-fopenmp", "-shared", "-fPIC", "-x", "c", "-", "-o", str(tmp_path / "caller.so")],
                   input=CALLER, text=True, check=True)
    caller = ctypes.CDLL(str(tmp_path / "caller.so"))
    entry = ctypes.cast(exe._entry, ctypes.c_void_p).value
    pointers = ctypes.c_void_p * 2
    for _ in range(10):
        xs = [rng.standard_normal((1, 8, 12, 12), dtype=np.float32) for _ in range(2)]
        ys = [np.zeros((1, 10), np.float32) for _ in range(2)]
        spaces = [aligned_empty(exe.workspace.size) for _ in range(2)]
        caller.run_in_team(ctypes.c_void_p(entry), pointers(*[x.ctypes.data for x in xs]),
                           pointers(*[y.ctypes.data for y in ys]), ctypes.c_void_p(exe.weights.ctypes.data),
                           pointers(*[s.ctypes.data for s in spaces]), 2)
        for x, y in zip(xs, ys):
            pooled = F.relu(F.conv2d(torch.tensor(x), torch.tensor(w), padding=1)).mean((2, 3))
            np.testing.assert_allclose(y, (pooled @ torch.tensor(fc).T).numpy(), rtol=1e-4, atol=1e-4)
