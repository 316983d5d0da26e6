"""Kernel bounds checked without a GPU: every buffer access of a scheduled PrimFunc proven inside
its buffer, for every thread and block, before the kernel is compiled.

A GPU kernel that reads outside its buffers fails only on a GPU (`cudaErrorIllegalAddress`, and it
poisons the CUDA context) or reads garbage silently. The check proves instead, with TVM's
arithmetic analyzer (Z3 behind it): every loop variable, thread index included, ranges over its
loop; every block's iteration variables take their bindings; the conditions on the way hold (a
block's predicate, an `if`, the guarded branch of `if_then_else` / `select`). An access whose index
cannot be proven within `[0, extent)` in some dimension is out of bounds:

    for blockIdx.x in 0..4: for threadIdx.x in 0..256:           B[i] = A[i + 1]
        i = blockIdx.x * 256 + threadIdx.x                          -> A: index i + 1 in [1, 1024],
                                                                       dimension 0 has 1024

Two limits of the target are checked beside: the threads a block runs (a launch over the GPU's
limit is refused only when run) and the shared memory a block allocates, measured after TVM's
compaction of each buffer to a block's region, as ptxas will see it (`shared_bytes`).

A padded conv's read `if_then_else(0 <= oh + kh - 1 < 56, x[.., oh + kh - 1, ..], 0)` is inside:
the branch that reads is taken only where the condition holds. (A `select` evaluates both branches,
but TVM's pipeline turns one whose branches read memory into `if_then_else`, RewriteUnsafeSelect.)

    out_of_bounds(func)              # [] or the accesses that may leave their buffers, described
    check_kernels(mod, 1024, 49152)  # LoweringError naming the kernel and its first bad access, or
                                     # its threads a block where they exceed the target's (a refused
                                     # launch), or its shared memory (a kernel ptxas refuses)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import analysis
from tvm.ir import Call, TensorLoad
from tvm.ir.prim.expr import IntImm, Let, Not, Ramp, Select
from tvm.sym.analyzer import Analyzer, ProofStrength

from nasir.errors import LoweringError

_GUARDED = ("prim.if_then_else",)
"""Calls whose second argument is evaluated only where the first holds (the third where it does not)."""


class _Checker:
    """One PrimFunc's walk: the analyzer knows the ranges and conditions on the way to each access."""

    def __init__(self) -> None:
        self.analyzer = Analyzer()
        self.found: list[str] = []
        self.threads: dict[str, int] = {}  # threadIdx.x/y/z -> the largest extent bound to it

    @contextmanager
    def _assuming(self, condition) -> Iterator[None]:
        if isinstance(condition, IntImm) and condition.value:
            yield
            return
        with self.analyzer.constraint_scope(self.analyzer.rewrite_simplify(condition)):
            yield

    def _access(self, buffer, indices) -> None:
        for dim, (index, extent) in enumerate(zip(indices, buffer.shape)):
            lanes = [index.base, index.base + index.stride * (index.lanes - 1)] \
                if isinstance(index, Ramp) else [index]
            for at in lanes:
                bound = self.analyzer.const_int_bound(at)
                if 0 <= bound.min_value and bound.max_value < int(extent):
                    continue
                if not all(self.analyzer.can_prove(fact, ProofStrength.SYMBOLIC_BOUND) for fact in (at >= 0, at < extent)):
                    self.found.append(f"{buffer.name}[...] dimension {dim}: index {at} in "
                                      f"[{bound.min_value}, {bound.max_value}], the buffer has {int(extent)}")

    def expr(self, e) -> None:
        if isinstance(e, TensorLoad):
            self._access(e.source, e.indices)
            for index in e.indices:
                self.expr(index)
        elif isinstance(e, Call) and getattr(e.op, "name", "") in _GUARDED:
            condition, then, otherwise = e.args
            self.expr(condition)
            with self._assuming(condition):
                self.expr(then)
            with self._assuming(Not(condition)):
                self.expr(otherwise)
        elif isinstance(e, Select):
            self.expr(e.condition)
            with self._assuming(e.condition):
                self.expr(e.true_value)
            with self._assuming(Not(e.condition)):
                self.expr(e.false_value)
        elif isinstance(e, Call):
            for arg in e.args:
                self.expr(arg)
        elif isinstance(e, Let):
            self.expr(e.value)
            self.analyzer.bind(e.var, e.value, allow_override=True)
            self.expr(e.body)
        else:
            for part in ("a", "b", "value", "base", "stride", "condition", "true_value", "false_value"):
                child = getattr(e, part, None)
                if isinstance(child, tvm.ir.Expr):
                    self.expr(child)

    def stmt(self, s) -> None:
        if isinstance(s, s_tir.SBlockRealize):
            for iter_var, value in zip(s.block.iter_vars, s.iter_values):
                self.expr(value)
                self.analyzer.bind(iter_var.var, value, allow_override=True)
            with self._assuming(s.predicate):
                self.stmt(s.block)
        elif isinstance(s, s_tir.SBlock):
            if s.init is not None:
                self.stmt(s.init)
            self.stmt(s.body)
        elif isinstance(s, tirx.For):
            tag = s.thread_binding.thread_tag if s.thread_binding is not None else ""
            if tag.startswith("threadIdx"):
                self.threads[tag] = max(self.threads.get(tag, 1), int(s.extent))
            span = s.extent if s.step is None else s.extent * s.step  # a step's values lie within either reading
            self.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, span), allow_override=True)
            self.stmt(s.body)
        elif isinstance(s, tirx.SeqStmt):
            for part in s.seq:
                self.stmt(part)
        elif isinstance(s, tirx.IfThenElse):
            self.expr(s.condition)
            with self._assuming(s.condition):
                self.stmt(s.then_case)
            if s.else_case is not None:
                with self._assuming(Not(s.condition)):
                    self.stmt(s.else_case)
        elif isinstance(s, tirx.BufferStore):
            self._access(s.buffer, s.indices)
            for index in s.indices:
                self.expr(index)
            self.expr(s.value)
        elif isinstance(s, tirx.Evaluate):
            self.expr(s.value)
        elif isinstance(s, (tirx.LetStmt, tirx.Bind)):
            self.expr(s.value)
            self.analyzer.bind(s.var, s.value, allow_override=True)
            if getattr(s, "body", None) is not None:
                self.stmt(s.body)
        elif getattr(s, "body", None) is not None:  # AttrStmt, AllocBuffer, DeclBuffer, AssertStmt
            self.stmt(s.body)


def _walk(func: tirx.PrimFunc) -> _Checker:
    checker = _Checker()
    checker.stmt(func.body)
    return checker


def out_of_bounds(func: tirx.PrimFunc) -> list[str]:
    """The accesses of `func` (a scheduled PrimFunc) that cannot be proven inside their buffers."""
    return _walk(func).found


def threads_per_block(func: tirx.PrimFunc) -> int:
    """The threads a block of `func` (scheduled) runs: the product of its threadIdx extents."""
    return math.prod(_walk(func).threads.values())


def shared_bytes(func: tirx.PrimFunc) -> int:
    """The shared memory a block of `func` (scheduled) allocates, after TVM compacts each buffer to
    the region a block uses (its TIR pipeline's CompactBufferAllocation): what ptxas will see."""
    compacted = tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerOpaqueBlock(),
    ])(tvm.IRModule({"main": func}))["main"]
    return int(analysis.calculate_allocated_bytes(compacted)["main"].get("shared", 0))


@dataclass(frozen=True)
class BlockLimits:
    """What a thread block may have on a cuda target: threads, shared memory (bytes) and 32-bit
    registers, read from the attributes `build.tvm_target_of` gives it (`build.cuda_limits`)."""

    threads: int
    shared_bytes: int
    registers: int

    @classmethod
    def of(cls, target: tvm.target.Target) -> BlockLimits:
        attrs = target.attrs
        return cls(int(attrs["max_threads_per_block"]), int(attrs["max_shared_memory_per_block"]),
                   int(attrs["registers_per_block"]))


def target_limits(target: tvm.target.Target) -> tuple[int, int]:
    """The threads and the shared memory (bytes) a block may have on `target`, in `violations`'
    order."""
    limits = BlockLimits.of(target)
    return limits.threads, limits.shared_bytes


def violations(func: tirx.PrimFunc, max_threads: int | None = None, max_shared_bytes: int | None = None
               ) -> list[str]:
    """What keeps `func` (a scheduled kernel) from running as built: its accesses that may leave
    their buffers, more threads a block than `max_threads` (a launch the GPU refuses), more shared
    memory a block than `max_shared_bytes` (a kernel ptxas refuses)."""
    walked = _walk(func)
    found = [f"may access memory outside its buffers: {walked.found[0]}"
             + (f" (and {len(walked.found) - 1} more)" if len(walked.found) > 1 else "")] if walked.found else []
    threads = math.prod(walked.threads.values())
    if max_threads is not None and threads > max_threads:
        found.append(f"runs {threads} threads a block "
                     f"({', '.join(f'{t} {n}' for t, n in sorted(walked.threads.items()))}); "
                     f"the target allows {max_threads}")
    if max_shared_bytes is not None and (shared := shared_bytes(func)) > max_shared_bytes:
        found.append(f"needs {shared} bytes of shared memory a block; the target allows {max_shared_bytes}")
    return found


def check_kernels(mod: tvm.IRModule, max_threads: int | None = None, max_shared_bytes: int | None = None) -> None:
    """Raise a LoweringError naming the first PrimFunc of `mod` with a violation (`violations`)."""
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc) and (found := violations(func, max_threads, max_shared_bytes)):
            raise LoweringError(f"kernel '{gv.name_hint}' {found[0]}")


def checking_bounds(target: tvm.target.Target, failures: list | None = None) -> tvm.transform.Pass:
    """A module pass: `check_kernels` on the module at the limits of `target` (a cuda target), which
    it returns unchanged. Its LoweringError is also put in `failures` (TVM turns an exception raised
    in a pass into a RuntimeError of its own)."""
    max_threads, max_shared_bytes = target_limits(target)

    @tvm.transform.module_pass(opt_level=0, name="nasir.CheckKernelBounds")
    def check(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        try:
            check_kernels(mod, max_threads, max_shared_bytes)
        except LoweringError as e:
            if failures is not None:
                failures.append(e)
            raise
        return mod

    return check
