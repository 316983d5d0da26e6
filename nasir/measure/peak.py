"""Measured single-thread float32 peak of the host CPU: a register-only FMA kernel through llvmlite.

The benchmark suite (`nasir.measure.benchmark`) reports every model's GFLOP/s as a percentage of this
number, measured in the same run, so "percent of peak" reflects the machine as it is now (turbo,
other load) rather than a datasheet. The kernel is LLVM IR for the host target, or for a named CPU
whose code runs here (`cpu="znver3"`: the 8-lane AVX2 peak of an AVX-512 machine; vector width from
`nasir.lowering.target`, never hard-coded): `accumulators` independent chains of
`<W x float>` FMAs, enough to cover the FMA latency times the number of FMA ports, so the loop is
throughput-bound:

    loop:
      %a0 = phi <16 x float> [ %init, %entry ], [ %a0.next, %loop ]
      ...
      %a0.next = call <16 x float> @llvm.fma.v16f32(<16 x float> %a0, <16 x float> %m, <16 x float> %c)
      ...
      br i1 %done, label %exit, label %loop

One iteration is accumulators * W * 2 FLOPs. Nothing is loaded or stored inside the loop; the sums
are stored once at the end so the chains are not dead code.
"""

from __future__ import annotations

import ctypes
import time
from functools import cache

import numpy as np


def fma_kernel_ir(width: int, accumulators: int) -> str:
    """LLVM IR of `void peak(i64 iterations, float* m, float* c, float* out)` (see module docstring)."""
    vec = f"<{width} x float>"
    fma = f"@llvm.fma.v{width}f32"
    lines = [
        f"declare {vec} {fma}({vec}, {vec}, {vec})",
        "define void @peak(i64 %n, ptr %mp, ptr %cp, ptr %out) {",
        "entry:",
        f"  %m = load {vec}, ptr %mp, align 4",
        f"  %c = load {vec}, ptr %cp, align 4",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]",
    ]
    lines += [f"  %a{k} = phi {vec} [ %c, %entry ], [ %a{k}.next, %loop ]" for k in range(accumulators)]
    lines += [f"  %a{k}.next = call {vec} {fma}({vec} %a{k}, {vec} %m, {vec} %c)" for k in range(accumulators)]
    lines += [
        "  %i.next = add i64 %i, 1",
        "  %done = icmp uge i64 %i.next, %n",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    for k in range(accumulators):
        lines.append(f"  %p{k} = getelementptr {vec}, ptr %out, i64 {k}")
        lines.append(f"  store {vec} %a{k}.next, ptr %p{k}, align 4")
    lines += ["  ret void", "}"]
    return "\n".join(lines) + "\n"


class _PeakKernel:
    """The JIT-compiled kernel; keeps the MCJIT engine alive while it is called."""

    def __init__(self, target, accumulators: int):
        import llvmlite.binding as llvm

        from nasir.lowering.loops_to_llvm.llvm_ir import optimize

        self.width, self.accumulators = target.lanes, accumulators
        self.engine = llvm.create_mcjit_compiler(optimize(fma_kernel_ir(self.width, accumulators), target),
                                                 target.target_machine(jit=True))
        self.engine.finalize_object()
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, *[ctypes.c_void_p] * 3)(
            self.engine.get_function_address("peak"))
        # m slightly below 1 and c small keep the sums finite (no denormals, no infinities).
        self.m = np.full(self.width, 0.999, np.float32)
        self.c = np.full(self.width, 1e-3, np.float32)
        self.out = np.zeros(self.width * accumulators, np.float32)

    def flops(self, iterations: int) -> int:
        return 2 * self.width * self.accumulators * iterations

    def __call__(self, iterations: int) -> None:
        self.fn(iterations, self.m.ctypes.data, self.c.ctypes.data, self.out.ctypes.data)


@cache
def _kernel(target, accumulators: int) -> _PeakKernel:
    return _PeakKernel(target, accumulators)


def measure_peak_gflops(repeat: int = 50, seconds: float = 0.002, accumulators: int = 12,
                        cpu: str | None = None) -> dict[str, float]:
    """GFLOP/s of the FMA kernel on the calling thread: `repeat` runs of about `seconds` each, the
    kernel compiled for `cpu` (None: the host; a named CPU's code must run here, else NasirError).

    Returns {"peak_gflops": best run, "median_gflops": median run, ...}. Runs are short and the best
    one is the peak: on a shared machine a long run measures the other processes' time slices too.
    12 accumulators cover 4-cycle FMA latency on 2 ports with registers to spare (and fit the 16
    registers of AVX2).
    """
    from nasir.lowering.target import host_target, runnable_target

    target = host_target() if cpu is None else runnable_target(cpu, "measure the peak", "the measurement")
    kernel = _kernel(target, accumulators)
    iterations = 1 << 10
    while True:  # calibrate: grow until one run takes about `seconds`
        start = time.perf_counter()
        kernel(iterations)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 2:
            break
        iterations *= 2
    iterations = max(1, int(iterations * seconds / elapsed))
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        kernel(iterations)
        rates.append(kernel.flops(iterations) / (time.perf_counter() - start) / 1e9)
    return {"peak_gflops": float(np.max(rates)), "median_gflops": float(np.median(rates)),
            "vector_width": kernel.width, "accumulators": accumulators, "repeat": repeat,
            "cpu": target.cpu}
