"""Kernel bounds proven without a GPU (lowering/nest_to_tvm/bounds.py): a kernel that reads past
its buffer is a build error naming it; guarded reads (a conv's padding, a concat's branches, a
split's predicate) are not. Every CUDA build runs the check (tests/test_cuda_build.py builds every
zoo model and variant with it). (TVM's run-time bound checker, `tirx.instrument_bound_checkers`,
instruments nothing in 0.27's TIR pipeline: a read one past the end runs unchecked on the CPU.)
"""

from __future__ import annotations

import pytest
import tvm
from tvm import relax, s_tir, te, tirx

from nasir.errors import LoweringError
from nasir.lowering.nest_to_tvm import build as tvm_build
from nasir.lowering.nest_to_tvm.bounds import check_kernels, out_of_bounds, threads_per_block

N = 1000


def _kernel(read) -> tirx.PrimFunc:
    """B[i] = read(A, i) for i < N, over blocks of 256 threads (the last block partly idle)."""
    a = te.placeholder((N,), "float32", name="A")
    b = te.compute((N,), lambda i: read(a, i), name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    outer, inner = sch.split(i, [None, 256])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    return sch.mod["main"]


SHIFTED = {
    "plain": (lambda a, i: a[i], True),
    "one past the end": (lambda a, i: a[i + 1], False),
    "guarded shift": (lambda a, i: tirx.if_then_else(i < N - 1, a[i + 1], 0.0), True),
    "guard on the wrong side": (lambda a, i: tirx.if_then_else(i > 0, a[i + 1], 0.0), False),
    "padding": (lambda a, i: tirx.if_then_else(tirx.all(i >= 1, i - 1 < N), a[i - 1], 0.0), True),
    "concat branches": (lambda a, i: tirx.if_then_else(i >= 500, a[i - 500] * 2, a[i + 500]), True),
    "select": (lambda a, i: tirx.Select(i < 10, a[i + 990], a[i - 10]), True),
}


@pytest.mark.parametrize("name", list(SHIFTED))
def test_verdict_on_kernels_labelled_by_hand(name):
    read, inside = SHIFTED[name]
    found = out_of_bounds(_kernel(read))
    assert (found == []) == inside, found
    if not inside:
        assert found[0].startswith("A[...] dimension 0: index ") and "the buffer has 1000" in found[0]


def _bad_module() -> tvm.IRModule:
    """A Relax main calling the one-past-the-end kernel, scheduled (dlight leaves it alone)."""
    kernel = _kernel(lambda a, i: a[i + 1]).without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([N], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.add_func(kernel, "layer1_shifted")
            y = bb.emit_output(bb.emit(relax.call_tir(gv, [x], relax.TensorType([N], "float32"))))
        bb.emit_func_output(y)
    return bb.get()


def test_cuda_build_refuses_a_kernel_that_reads_past_its_buffer():
    mod = _bad_module()
    with pytest.raises(LoweringError, match=r"kernel 'layer1_shifted' may access memory outside its buffers: "
                                            r"A\[\.\.\.\] dimension 0"):
        check_kernels(mod)
    if tvm_build.nvcc_path() is not None:
        with pytest.raises(LoweringError, match="kernel 'layer1_shifted'"):
            tvm_build.build(mod, "cuda", "sm_90")


def test_dlight_matmul_stages_the_stem_outside_the_image_and_is_declined():
    """Issue 40's illegal address on ImageNet models (only they have a 7x7 stride-2 stem): dlight's
    Matmul rule loads a padded conv's input into shared memory before the padding's guard, rows and
    columns -3..225 of a 224 px image. The check finds it; DeclineOnError passes the conv on."""
    from tvm.s_tir import dlight as dl

    import nasir.zoo as zoo
    from nasir.dialects import nest
    from nasir.dialects.module import main_func
    from nasir.lowering.nest_to_tvm.program import lower_to_nest, prim_func

    stem = next(op for op in main_func(lower_to_nest(zoo.load("resnet18", "imagenet").module)).body.block.ops
                if isinstance(op, nest.ComputeOp))
    func = prim_func(stem).with_attr("global_symbol", "main")
    target = tvm_build.tvm_target_of("cuda", "sm_90")
    with target:
        staged = dl.gpu.Matmul().apply(func, target, False)
        found = out_of_bounds(staged.mod["main"])
        assert any("dimension 2" in f and "in [-3, 225], the buffer has 224" in f for f in found), found
        assert tvm_build.DeclineOnError(dl.gpu.Matmul()).apply(func, target, False) is None
        assert out_of_bounds(tvm_build.DeclineOnError(dl.gpu.Fallback()).apply(func, target, False).mod["main"]) == []


def test_a_block_of_more_threads_than_the_target_allows_is_a_build_error():
    """A launch of more threads a block than the GPU allows fails only when run; the check refuses it
    at build time (here a kernel of 256 threads a block for a target that allows 128)."""
    mod = _bad_module()
    mod["layer1_shifted"] = _kernel(lambda a, i: a[i]).with_attr("tirx.is_scheduled", True)
    assert threads_per_block(mod["layer1_shifted"]) == 256
    check_kernels(mod, 256)
    with pytest.raises(LoweringError, match=r"kernel 'layer1_shifted' runs 256 threads a block \(threadIdx.x 256\); "
                                            r"the target allows 128"):
        check_kernels(mod, 128)


def test_a_kernel_over_the_targets_shared_memory_is_a_build_error():
    """ResNet-34's stem staged through shared memory 3 input channels a step (staged.py, allowed
    1 MB) needs 56448 bytes a block, over CUDA's 48 KB: refused before nvcc, naming the kernel."""
    import nasir.zoo as zoo
    from nasir.dialects import nest
    from nasir.dialects.module import main_func
    from nasir.lowering.nest_to_tvm.bounds import shared_bytes
    from nasir.lowering.nest_to_tvm.program import lower_to_nest, prim_func
    from nasir.lowering.nest_to_tvm.staged import Staged, staged_schedule

    stem = next(op for op in main_func(lower_to_nest(zoo.load("resnet34", "imagenet").module)).body.block.ops
                if isinstance(op, nest.ComputeOp))
    kernel = staged_schedule(prim_func(stem), stem, Staged(), 1 << 20).mod["main"]
    assert shared_bytes(kernel) == 56448
    mod = tvm.IRModule({"conv1_Conv": kernel})
    check_kernels(mod, 1024, 56448)
    with pytest.raises(LoweringError, match=r"kernel 'conv1_Conv' needs 56448 bytes of shared memory a block; "
                                            r"the target allows 49152"):
        check_kernels(mod, 1024, 49152)
