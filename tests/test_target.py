"""The target description: named CPUs, the module's `nasir.target`, overrides, `cpu=` everywhere."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import check_foreign_code
from test_llvm_backend import build, rand

import nasir
from nasir.dialects import nest, nn
from nasir.dialects.attributes import TARGET
from nasir.errors import ForeignCPUError, NasirError
from nasir.lowering import target
from nasir.lowering.target import (
    CPU_ENV,
    HOST_ENV,
    cpu_target,
    host_target,
    resolve_target,
    set_target,
    target_of,
)
from nasir.runtime.llvm_executable import compile_llvm


@pytest.mark.parametrize("cpu,lanes,registers", [("x86-64-v3", 8, 16), ("znver3", 8, 16), ("haswell", 8, 16),
                                                  ("x86-64-v4", 16, 32), ("skylake-avx512", 16, 32),
                                                  ("znver4", 16, 32), ("x86-64", 4, 16)])
def test_named_cpus_have_their_isas_vectors(cpu, lanes, registers):
    """SSE2 (x86-64): 4 lanes; AVX2 (Haswell, Zen 3, x86-64-v3): 8 lanes, 16 registers; AVX-512
    (Skylake-SP, Zen 4, x86-64-v4): 16 lanes, 32 registers."""
    target = cpu_target(cpu)
    assert (target.cpu, target.lanes, target.registers) == (cpu, lanes, registers)
    assert target.l1_bytes < target.l2_bytes < target.l3_bytes


def test_host_caches_come_from_the_os():
    sysfs = "/sys/devices/system/cpu/cpu0/cache/index0/size"
    host = host_target()
    assert cpu_target("host") is host
    with open(sysfs) as f:
        l1 = f.read().strip()
    assert host.l1_bytes == int(l1[:-1]) * 1024 and l1.endswith("K")


def test_unknown_cpu_is_a_clear_error():
    with pytest.raises(NasirError, match="unknown CPU 'pentium9000'.*LLVM knows"):
        cpu_target("pentium9000")


def conv_model():
    wt, x = rand(32, 16, 3, 3), rand(1, 16, 14, 14)
    model = build([x.shape], lambda a, W: [nn.Conv2DOp.new(a[0], W("w", wt), pads=(1,) * 4).named("conv")])
    return model, x, F.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding=1).numpy()


def test_the_module_carries_its_target_and_overrides():
    """`nasir.target` holds the CPU's name and the fields that differ from that CPU's own
    description; default-schedule reads it (an L2 of 20 KiB moves the channel blocks of a conv
    whose 12.25 KiB input no longer stays in half of it, and whose 18 KiB of weights stay in it,
    inside the image rows)."""
    model, _, _ = conv_model()
    module = model.transform("convert-nn-to-nest").module
    small_l2 = cpu_target("x86-64-v4").with_overrides(l2_bytes=20 * 1024)
    set_target(module, small_l2)
    assert str(TARGET.get(module)) == '{cpu = "x86-64-v4", l2_bytes = 20480 : i64}'
    assert target_of(module) == small_l2

    def order(target):
        m = model.transform("convert-nn-to-nest")
        set_target(m.module, target)
        scheduled = m.transform("default-schedule")
        [conv] = [op for op in scheduled.module.walk() if isinstance(op, nest.ComputeOp)]
        return [n for n in conv.get_schedule().order if n in ("oh", "co.o", "co.o.o")]

    assert order("x86-64-v4")[0].startswith("co.o")
    assert order(small_l2)[0] == "oh"
    with pytest.raises(NasirError, match="unknown target field"):
        small_l2.with_overrides(l4_bytes=1)


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
def test_compile_for_a_named_cpu(cpu):
    """`cpu=` picks the vector width of the code (AVX2 code runs on AVX-512 machines)."""
    model, x, ref = conv_model()
    exe = nasir.compile(model, cpu=cpu)
    lanes = cpu_target(cpu).lanes
    assert exe.compiled_for.cpu == cpu and exe.meta["lanes"] == lanes
    assert f"<{lanes} x float>" in str(exe._module)
    if lanes <= host_target().lanes:
        np.testing.assert_allclose(exe(x), ref, rtol=1e-4, atol=1e-4)


def test_code_for_wider_vectors_than_the_hosts_saves_but_does_not_run(tmp_path):
    """A target with twice the host's lanes (an override no CPU here has) compiles to vectors of
    that width, saves as a library for such a CPU, and refuses to run here."""
    model, x, _ = conv_model()
    wide = host_target().with_overrides(lanes=2 * host_target().lanes)
    exe = compile_llvm(model.module, cpu=wide)
    assert f"<{wide.lanes} x float>" in str(exe._module) and not exe.runs_here
    with pytest.raises(ForeignCPUError, match=f"compiled for {wide.cpu} \\({wide.lanes}-lane"):
        exe(x)
    assert (exe.save(tmp_path / "wide") / "model.so").exists()
    with pytest.raises(ForeignCPUError):
        nasir.runtime.load(tmp_path / "wide")(x)


def test_nasir_opt_and_the_cli_take_a_cpu(tmp_path):
    src = tmp_path / "conv.mlir"
    model, _, _ = conv_model()
    model.save(src)
    opt = [sys.executable, "-m", "nasir.cli.nasir_opt", str(src), "--weights", str(src.with_suffix(".npz")),
           "-p", "convert-nn-to-nest,default-schedule"]
    for cpu, lanes in (("x86-64-v3", 8), ("x86-64-v4", 16)):
        out = subprocess.run(opt + ["--cpu", cpu], capture_output=True, text=True, check=True).stdout
        assert f'nasir.target = {{cpu = "{cpu}"}}' in out and f'["co", {lanes} : i64]' in out
    bad = subprocess.run(opt + ["--cpu", "nope"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        f"nasir-opt: error: unknown CPU 'nope': give a CPU name LLVM knows (znver3, x86-64-v3, skylake-avx512, "
        f"...) or 'host' (this machine: {host_target().cpu})"]
    cli = subprocess.run([sys.executable, "-m", "nasir.cli.main", "run", str(src), "--cpu", "x86-64-v3"],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr


@pytest.fixture
def as_avx2(monkeypatch):
    """This machine treated as an AVX2 CPU (NASIR_HOST_CPU), whatever it is."""
    monkeypatch.setenv(HOST_ENV, "x86-64-v3")
    monkeypatch.delenv(CPU_ENV, raising=False)
    return host_target()


def test_the_host_can_be_treated_as_an_avx2_cpu(as_avx2):
    """NASIR_HOST_CPU=x86-64-v3: "host" is an 8-lane, 16-register CPU with this machine's caches;
    default compiles make 8-lane code that runs, 16-lane code refuses to, as on an AVX2 machine."""
    machine = target.machine_target()
    assert (as_avx2.cpu, as_avx2.lanes, as_avx2.registers) == ("x86-64-v3", 8, 16)
    assert cpu_target("host") is as_avx2 and resolve_target(None) is as_avx2
    assert (as_avx2.l1_bytes, as_avx2.l2_bytes, as_avx2.l3_bytes) == (machine.l1_bytes, machine.l2_bytes,
                                                                     machine.l3_bytes)
    model, x, ref = conv_model()
    exe = nasir.compile(model)
    assert exe.meta["lanes"] == 8 and exe.runs_here
    assert max(w for ws in exe.code_vectors.values() for w in ws) == 8
    np.testing.assert_allclose(exe(x), ref, rtol=1e-4, atol=1e-4)
    wide = nasir.compile(model, cpu="x86-64-v4")
    with pytest.raises(ForeignCPUError, match=r"compiled for x86-64-v4 \(16-lane vectors\) and cannot run on "
                                              r"this CPU \(x86-64-v3, 8 lanes\)"):
        wide(x)
    check_foreign_code(wide)
    cli = subprocess.run([sys.executable, "-m", "nasir.cli.main", "tune", "resnet18", "--cpu", "x86-64-v4"],
                         capture_output=True, text=True)
    assert cli.returncode == 1 and cli.stderr.strip().splitlines() == [
        "nasir: error: cannot tune for x86-64-v4 on this CPU (x86-64-v3, 8 lanes): its 16-lane code does not "
        "run here, so it cannot be timed; run nasir tune on a x86-64-v4 machine"]


def test_the_foreign_code_check_fails_where_a_kernel_lacks_its_schedules_vectors(as_avx2):
    """conftest's check of code that cannot run here: each vectorised nest's kernel computes with
    its schedule's width. A kernel said to be vectorised at a width it does not use fails it."""
    model, _, _ = conv_model()
    wide = nasir.compile(model, cpu="x86-64-v4")
    [conv] = wide.meta["vectors"]
    assert conv["layer"] == "conv" and conv["lanes"] == 16
    conv["lanes"] = 4
    with pytest.raises(AssertionError, match=r"conv: its schedule vectorises 4 lanes, kernel @conv computes with \[16\]"):
        check_foreign_code(wide)
    conv["lanes"] = 32
    with pytest.raises(AssertionError, match="a vector loop of 32 lanes for a 16-lane CPU"):
        check_foreign_code(wide)


def test_a_host_cpu_this_machine_cannot_run_is_a_clear_error(monkeypatch):
    """NASIR_HOST_CPU may only narrow the vectors (an AVX-512 name on an AVX2 machine is refused);
    an unknown name is the unknown-CPU error."""
    avx2 = cpu_target("x86-64-v3")
    monkeypatch.setattr(target, "machine_target", lambda: avx2)
    target._host_as.cache_clear()
    monkeypatch.setenv(HOST_ENV, "x86-64-v4")
    try:
        with pytest.raises(NasirError, match=r"^NASIR_HOST_CPU=x86-64-v4: this machine \(x86-64-v3, 8 lanes\) cannot "
                                             r"run 16-lane code; name a CPU with vectors no wider than its own"):
            host_target()
        monkeypatch.setenv(HOST_ENV, "pentium9000")
        with pytest.raises(NasirError, match="unknown CPU 'pentium9000'"):
            host_target()
    finally:
        target._host_as.cache_clear()
