"""nasir's threads (libgomp): the spin count they wait with, and a model called from inside the caller's own
OpenMP team."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper
from onnx_graphs import Initializers, save_graph

from nasir import SPIN_COUNT

RELU_SHAPE = (1, 64, 32, 32)

SPIN_PROBE = f"""
import os, sys, time
import nasir
import torch  # its libgomp.so.1 is the one nasir's code then runs on
import numpy as np
from nasir.frontend.onnx_import import import_onnx
from nasir.runtime.llvm_executable import compile_llvm

exe = compile_llvm(import_onnx(sys.argv[1]).module, threads=2)
x = np.random.default_rng(0).standard_normal({RELU_SHAPE}, dtype=np.float32)
assert np.array_equal(exe(x), np.maximum(x, 0))
spent = []
for _ in range(3):
    exe(x)
    start = time.process_time()
    time.sleep(0.4)
    spent.append(time.process_time() - start)
print(min(spent), os.environ.get("GOMP_SPINCOUNT"))
"""


def test_the_team_spins_a_while_after_a_call_unless_the_user_sets_libgomps_spin_count(tmp_path):
    """`import nasir` sets GOMP_SPINCOUNT = nasir.SPIN_COUNT before libgomp loads (torch's, here), so
    after a 2-thread call the other thread spins tens of ms before it sleeps (the process's CPU time
    while its Python thread sleeps); a user's GOMP_SPINCOUNT is kept: 1000 spins, microseconds."""
    save_graph(tmp_path / "relu.onnx", "relu", [helper.make_node("Relu", ["x"], ["y"])], Initializers(),
               RELU_SHAPE, RELU_SHAPE)

    def idle_cpu(**env) -> tuple[float, str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
        done = subprocess.run([sys.executable, "-c", SPIN_PROBE, str(tmp_path / "relu.onnx")], env={**clean, **env},
                              capture_output=True, text=True, check=True, timeout=300)
        seconds, variable = done.stdout.split()
        return float(seconds), variable

    ours, left = idle_cpu()
    users, kept = idle_cpu(GOMP_SPINCOUNT="1000")
    assert (left, kept) == (str(SPIN_COUNT), "1000")
    assert ours > 0.02 and users < ours / 4, (ours, users)


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

    from nasir.frontend.onnx_import import import_onnx
    from nasir.runtime.llvm_executable import aligned_empty, compile_llvm

    rng, inits = np.random.default_rng(0), Initializers()
    w, fc = rng.standard_normal((16, 8, 3, 3), dtype=np.float32) * 0.3, rng.standard_normal((10, 16), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", inits.const("w", w)], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", inits.const("fc", fc)], ["y"], transB=1)]
    save_graph(tmp_path / "net.onnx", "net", nodes, inits, (1, 8, 12, 12), (1, 10))
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
