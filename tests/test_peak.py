"""The FMA peak probe (nasir/measure/peak.py) at the host's width and at a named CPU's narrower one."""

from __future__ import annotations

import pytest

from nasir.errors import NasirError
from nasir.lowering.loops_to_llvm.llvm_ir import optimize
from nasir.lowering.target import HOST_ENV, cpu_target
from nasir.measure.peak import fma_kernel_ir, measure_peak_gflops


def test_the_avx2_peak_runs_8_lane_fmas_on_any_x86_machine():
    got = measure_peak_gflops(repeat=3, seconds=0.0005, cpu="x86-64-v3")
    assert (got["vector_width"], got["cpu"]) == (8, "x86-64-v3")
    assert got["peak_gflops"] >= got["median_gflops"] > 0
    target = cpu_target("x86-64-v3")  # what the probe compiles, read back as machine code
    asm = target.target_machine().emit_assembly(optimize(fma_kernel_ir(8, 12), target))
    fmas = [line for line in asm.splitlines() if "vfmadd" in line]
    assert len(fmas) >= 12 and all("%ymm" in line and "%zmm" not in line for line in fmas)


def test_a_peak_wider_than_the_machine_is_refused(monkeypatch):
    monkeypatch.setenv(HOST_ENV, "x86-64-v3")  # this machine treated as an AVX2 CPU
    with pytest.raises(NasirError, match="^cannot measure the peak for x86-64-v4 on this CPU .* 16-lane code"):
        measure_peak_gflops(repeat=1, cpu="x86-64-v4")
