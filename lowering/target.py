"""The CPU the llvm backend compiles for: one description that every target-specific decision reads.

A `CPUTarget` holds what the schedules and their cost model need (float32 lanes of the widest
vector registers, their number, FMA latency and issue rate, cache sizes and line, the load and L3
rates the cost model was measured with) and what LLVM needs (triple, CPU name, features):

    cpu_target("host")       the CPU this process runs on: LLVM's name and features, caches from the OS
    cpu_target("znver3")     any CPU LLVM knows (AVX2: 8 lanes, 16 registers), for cross-compiling and
    cpu_target("x86-64-v4")  for testing both vector widths on one machine (AVX2 code runs on AVX-512)

A module carries the target it is compiled for as the attribute `nasir.target` (`TARGET`), a
dictionary with the CPU's name and any field to override:

    builtin.module attributes {nasir.target = {cpu = "znver3"}}
    builtin.module attributes {nasir.target = {cpu = "znver4", l2_bytes = 524288}}

`nasir.compile(..., cpu=...)` and `nasir-opt --cpu` set it; `target_of(module)` reads it (the
host, or the CPU named by the environment variable NASIR_CPU, where a module has none), so
default-schedule, convert-nest-to-loops, the LLVM IR and the JIT all see the same CPU.

The environment variable NASIR_HOST_CPU makes nasir treat this machine as another CPU with no
wider vectors (`NASIR_HOST_CPU=x86-64-v3` on an AVX-512 machine: an AVX2 CPU). "host" then means
that CPU everywhere: the default target, the schedules, the peak probe, and which code runs here
(AVX-512 code raises `ForeignCPUError`, as on an AVX2 machine). The test suite runs its
both-width tests this way too (`make test`), so a failure that only an AVX2 machine would show
shows on any x86 machine.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from xdsl.dialects.builtin import DictionaryAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr, f64, i64

from nasir.dialects.attributes import TARGET
from nasir.errors import NasirError

"""Module attribute: the CPU a module is compiled for (see the module docstring)."""
CPU_ENV = "NASIR_CPU"
"""Environment variable naming the CPU of modules that name none (default: the host)."""
HOST_ENV = "NASIR_HOST_CPU"
"""Environment variable naming the CPU this machine is treated as (see the module docstring)."""

KiB = 1024


@dataclass(frozen=True)
class CPUTarget:
    """A CPU as the llvm backend sees it. `features` is LLVM's feature string ("" for a named CPU:
    LLVM's own features of that CPU)."""

    cpu: str
    triple: str
    features: str
    lanes: int
    """float32 lanes of the widest vector registers (16 with AVX-512, 8 with AVX2)."""
    registers: int
    """Vector registers (32 with AVX-512, 16 with AVX2)."""
    fma_latency: int
    """Cycles from an FMA's inputs to its result."""
    fmas_per_cycle: float
    """Full-width vector FMAs issued per cycle (Zen 4 runs a 16-lane FMA as two halves: 1)."""
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    cache_line: int = 64
    loads_per_fma: float = 0.65
    """Vector loads and broadcasts per FMA that run beside the FMAs at full rate (measured on
    ResNet-34's layers on Zen 4 and Zen 5: a 2 x 7 channel tile, 0.64, ran as fast as a 4 x 4
    one, 0.5)."""
    l3_bytes_per_fma: float = 4.0
    """Bytes per vector FMA that L3 feeds at full FMA rate (about 20 GB/s per core on Zen 4)."""

    @property
    def embedded_broadcast(self) -> bool:
        """Whether an FMA takes a broadcast memory operand (AVX-512's `{1to16}`), so that a scalar
        feeding one FMA needs no register of its own."""
        return self.lanes == 16

    @property
    def mask_registers(self) -> bool:
        """Whether a store of some lanes of a vector is one instruction (AVX-512's `vmovups {k}`).
        Without mask registers LLVM stores with `vmaskmovps`, which Zen cores run as a long
        micro-op sequence; a store of a known prefix of lanes is then plain stores of its pieces."""
        return self.lanes == 16

    def with_overrides(self, **fields) -> CPUTarget:
        """This target with some fields replaced (unknown names are an error)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise NasirError(f"unknown target field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return dataclasses.replace(self, **fields)

    def to_attr(self) -> DictionaryAttr:
        """The `nasir.target` attribute: the CPU's name and the fields that differ from the
        description `cpu_target` makes of that name."""
        base = cpu_target(self.cpu)
        entries = {"cpu": StringAttr(self.cpu)}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "cpu" and value != getattr(base, f.name):
                entries[f.name] = (StringAttr(value) if isinstance(value, str) else
                                   FloatAttr(value, f64) if isinstance(value, float) else IntegerAttr(value, i64))
        return DictionaryAttr(entries)

    def target_machine(self, opt: int = 3, jit: bool = False):
        """For `jit`, LLVM's JIT code model: MCJIT places code anywhere in the address space, so
        32-bit relocations to libgomp/libm (the small model) can overflow once memory grows."""
        import llvmlite.binding as llvm

        _initialize_llvm()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                            reloc="pic", codemodel="jitdefault" if jit else "default")


# FMA latency (cycles) and full-width vector FMAs per cycle, by LLVM CPU name prefix (vendors'
# optimisation manuals); other CPUs take DEFAULT_FMA.
FMA_TIMINGS = {
    "znver1": (5, 1.0), "znver2": (5, 2.0), "znver3": (4, 2.0), "znver4": (4, 1.0), "znver5": (4, 2.0),
    "haswell": (5, 2.0), "broadwell": (5, 2.0), "skylake": (4, 2.0), "cascadelake": (4, 2.0),
    "icelake": (4, 1.0), "sapphirerapids": (4, 2.0), "alderlake": (4, 2.0),
}
DEFAULT_FMA = (4, 2.0)
# Per-core L1 data, L2 and shared L3 of CPUs named without running on them; others take DEFAULT_CACHES.
CACHES = {
    "znver2": (32 * KiB, 512 * KiB, 16384 * KiB), "znver3": (32 * KiB, 512 * KiB, 32768 * KiB),
    "znver4": (32 * KiB, 1024 * KiB, 32768 * KiB), "znver5": (48 * KiB, 1024 * KiB, 32768 * KiB),
    "skylake-avx512": (32 * KiB, 1024 * KiB, 16384 * KiB), "cascadelake": (32 * KiB, 1024 * KiB, 16384 * KiB),
    "icelake-server": (48 * KiB, 1280 * KiB, 16384 * KiB), "sapphirerapids": (48 * KiB, 2048 * KiB, 65536 * KiB),
    "haswell": (32 * KiB, 256 * KiB, 8192 * KiB), "skylake": (32 * KiB, 256 * KiB, 8192 * KiB),
}
DEFAULT_CACHES = (32 * KiB, 1024 * KiB, 16384 * KiB)


def _by_prefix(table: dict, cpu: str, default):
    best = max((k for k in table if cpu.startswith(k)), key=len, default=None)
    return table[best] if best is not None else default


@cache
def _initialize_llvm() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host_target() -> CPUTarget:
    """The CPU this process runs on, or the one NASIR_HOST_CPU names (see the module docstring)."""
    return _host_as(os.environ.get(HOST_ENV) or None)


@cache
def _host_as(name: str | None) -> CPUTarget:
    """The machine's own CPU (`name` None), or the CPU LLVM calls `name` with this machine's caches
    (the code runs here), which must have no wider vectors than this machine."""
    machine = machine_target()
    if name is None or name in ("host", machine.cpu):
        return machine
    named = _named(name, machine)
    named = dataclasses.replace(named, l1_bytes=machine.l1_bytes, l2_bytes=machine.l2_bytes, l3_bytes=machine.l3_bytes)
    if named.lanes > machine.lanes:
        raise NasirError(f"{HOST_ENV}={name}: this machine ({machine.cpu}, {machine.lanes} lanes) cannot run "
                         f"{named.lanes}-lane code; name a CPU with vectors no wider than its own (x86-64-v3: AVX2)")
    return named


@cache
def machine_target() -> CPUTarget:
    """The CPU this process runs on, as LLVM sees it, whatever NASIR_HOST_CPU says."""
    import llvmlite.binding as llvm

    _initialize_llvm()
    features = llvm.get_host_cpu_features().flatten()
    flags = features.split(",")
    lanes = 16 if "+avx512f" in flags else 8 if "+avx" in flags else 4
    return _describe(llvm.get_host_cpu_name(), llvm.get_process_triple(), features, lanes, host_caches())


def host_caches() -> tuple[int, int, int]:
    """L1 data, L2 and L3 bytes from the OS (Linux sysfs), else the defaults."""
    sizes = dict(zip((1, 2, 3), DEFAULT_CACHES))
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size[:-1].isdigit():
            sizes[level] = int(size[:-1]) * {"K": KiB, "M": KiB * KiB}.get(size[-1], 1)
    return sizes[1], sizes[2], sizes[3]


def _describe(cpu: str, triple: str, features: str, lanes: int, caches: tuple[int, int, int]) -> CPUTarget:
    latency, rate = _by_prefix(FMA_TIMINGS, cpu, DEFAULT_FMA)
    # x86: AVX-512 has 32 vector registers, AVX and SSE 16
    return CPUTarget(cpu=cpu, triple=triple, features=features, lanes=lanes, registers=32 if lanes == 16 else 16,
                     fma_latency=latency, fmas_per_cycle=rate, l1_bytes=caches[0], l2_bytes=caches[1],
                     l3_bytes=caches[2])


PROBE = """
import sys, llvmlite.binding as llvm
llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
ir = 'define <16 x float> @f(<16 x float> %a, <16 x float> %b) {\\n%c = fmul <16 x float> %a, %b\\nret <16 x float> %c\\n}'
tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(cpu=sys.argv[1], features='')
asm = tm.emit_assembly(llvm.parse_assembly(ir))
print(16 if 'zmm' in asm else 8 if 'ymm' in asm else 4)
"""
"""Asks LLVM how wide the vectors of a named CPU are (in a child process: LLVM aborts the process
on a CPU name it does not know)."""


def cpu_target(name: str = "host") -> CPUTarget:
    """The description of the CPU LLVM calls `name` ("host": this machine's)."""
    host = host_target()
    if name in ("host", host.cpu):
        return host
    return _named(name, host)


@cache
def _named(name: str, host: CPUTarget) -> CPUTarget:
    """The description of a CPU LLVM knows by `name`, for code made on `host`."""
    probe = subprocess.run([sys.executable, "-c", PROBE, name], capture_output=True, text=True)
    if probe.returncode != 0 or "not a recognized processor" in probe.stderr:
        raise NasirError(f"unknown CPU '{name}': give a CPU name LLVM knows (znver3, x86-64-v3, "
                         f"skylake-avx512, ...) or 'host' (this machine: {host.cpu})")
    return _describe(name, host.triple, "", int(probe.stdout), _by_prefix(CACHES, name, DEFAULT_CACHES))


def resolve_target(cpu: str | CPUTarget | None) -> CPUTarget:
    """A CPU name, a description, or None (NASIR_CPU, else the host) as a description."""
    if isinstance(cpu, CPUTarget):
        return cpu
    return cpu_target(cpu or os.environ.get(CPU_ENV) or "host")


def runnable_target(cpu: str | CPUTarget | None, what: str = "time code", run: str = "it") -> CPUTarget:
    """The target `cpu` names (`resolve_target`) if this machine can run, and so time, its code;
    else NasirError saying that it cannot `what` and where to `run` it instead."""
    target, host = resolve_target(cpu), host_target()
    if target.lanes > host.lanes:
        raise NasirError(f"cannot {what} for {target.cpu} on this CPU ({host.cpu}, {host.lanes} lanes): its "
                         f"{target.lanes}-lane code does not run here, so it cannot be timed; run {run} on a "
                         f"{target.cpu} machine")
    return target


def target_of(module: ModuleOp) -> CPUTarget:
    """The target `module` is compiled for: its `nasir.target`, else `resolve_target(None)`."""
    attr = TARGET.get(module, None)
    if not isinstance(attr, DictionaryAttr):
        return resolve_target(None)
    fields = {k: v.data if isinstance(v, StringAttr) else v.value.data for k, v in attr.data.items()}
    if "cpu" not in fields:
        raise NasirError(f"{TARGET.name} names no cpu: {attr}")
    return cpu_target(fields.pop("cpu")).with_overrides(**fields)


def set_target(module: ModuleOp, cpu: str | CPUTarget | None) -> CPUTarget:
    """Mark `module` as compiled for `cpu` (see `resolve_target`); returns its description."""
    target = resolve_target(cpu)
    TARGET.set(module, target.to_attr())
    return target
