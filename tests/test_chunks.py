"""Which barriers of @main's team a kernel call goes without (nasir.lowering.loops_to_llvm.chunks):
kernels' chunks read off their loads and stores, and models whose kernels run without most of
their barriers computing what torch computes at 2 and 3 threads, calls spaced so that a thread
lags (the team's others asleep between calls)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from onnx_graphs import Initializers, save_graph
from xdsl.dialects import func, scf

from nasir.dialects.context import parse_module
from nasir.frontend.onnx_import import import_onnx
from nasir.lowering.loops_to_llvm.chunks import Buffer, ChunkAccess, Rechunk, Unsynced, chunk_accesses
from nasir.lowering.pipeline import llvm_pipeline
from nasir.lowering.target import CPU_ENV
from nasir.runtime.llvm_executable import compile_llvm


def kernel(loop_body: str, x: str = "memref<8x4x16xf32>", y: str = "memref<8x4x16xf32>", trips: int = 8) -> func.FuncOp:
    """@k(%x, %y) whose body is one scf.parallel (%i) from 0 to `trips` running `loop_body`."""
    module, _ = parse_module(f"""
builtin.module {{
  func.func private @k(%x: {x}, %y: {y}) {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %n = arith.constant {trips} : index
    "scf.parallel"(%c0, %n, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
    ^bb0(%i: index):
{loop_body}
      scf.reduce
    }}) : (index, index, index) -> ()
    func.return
  }}
}}""")
    return next(op for op in module.ops if isinstance(op, func.FuncOp))


COPY = """      %v = vector.load %x[%i, %c1, %c0] : memref<8x4x16xf32>, vector<16xf32>
      vector.store %v, %y[%i, %c2, %c0] : memref<8x4x16xf32>, vector<16xf32>"""


def test_a_kernel_indexing_each_buffer_by_its_loops_index_touches_its_own_chunk_of_that_axis():
    assert chunk_accesses(kernel(COPY)) == {0: ChunkAccess(0, False), 1: ChunkAccess(0, True)}
    # (%i * 8) floordiv 8 is %i (a depthwise conv's channel block), along an axis as long as the loop
    scaled = """      %a = arith.muli %i, %c8 : index
      %b = arith.floordivsi %a, %c8 : index
      %v = memref.load %x[%c0, %c1, %b] : memref<8x4x16xf32>
      memref.store %v, %y[%c0, %b, %c1] : memref<8x4x16xf32>"""
    assert chunk_accesses(kernel(scaled, trips=16)) == {0: ChunkAccess(2, False), 1: ChunkAccess(None, True)}
    assert chunk_accesses(kernel(scaled.replace("%x[%c0, %c1, %b]", "%x[%b, %c1, %c0]"), trips=8)) == {
        0: ChunkAccess(0, False), 1: ChunkAccess(None, True)}  # y's axis 1 is 4 long, not the loop's 8


def test_a_loop_inside_may_run_over_the_iterations_own_stretch_of_the_axis():
    """A grouped conv's loop over groups, the input channels of a group inside: iteration g reads
    blocks (g * 8 + ci) floordiv 8 = g (ci in [0, 8)), and at 4 blocks a group, 4 g + co."""
    grouped = """      scf.for %ci = %c0 to %c8 step %c1 {
        %a = arith.muli %i, %c8 : index
        %b = arith.addi %a, %ci : index
        %g = arith.floordivsi %b, %c8 : index
        %v = memref.load %x[%g, %c1, %ci] : memref<8x4x16xf32>
        memref.store %v, %y[%g, %c0, %c0] : memref<8x4x16xf32>
      }"""
    assert chunk_accesses(kernel(grouped)) == {0: ChunkAccess(0, False), 1: ChunkAccess(0, True)}
    four = """      scf.for %co = %c0 to %c4 step %c1 {
        %a = arith.muli %i, %c4 : index
        %b = arith.addi %a, %co : index
        %v = vector.load %x[%b, %c1, %c0] : memref<8x4x16xf32>, vector<4xf32>
        vector.store %v, %y[%c0, %c1, %b] : memref<8x4x16xf32>, vector<4xf32>
      }"""
    accesses = chunk_accesses(kernel(four, trips=2))
    assert accesses[0] == ChunkAccess(0, False, scale=4)  # blocks [4 g, 4 g + 4) of 8
    assert accesses[1] == ChunkAccess(None, True)  # 4 g + co + 3 lanes runs past 4 g + 3
    past = four.replace("%c0 to %c4 step", "%c0 to %c8 step")
    assert chunk_accesses(kernel(past, trips=2))[0] == ChunkAccess(None, False)  # co up to 7: the next group's


@pytest.mark.parametrize("body, why", [
    (COPY.replace("%y[%i, %c2, %c0]", "%y[%c0, %c2, %c0]"), "every thread writes row 0"),
    (COPY.replace("%y[%i, %c2, %c0]", "%y[%i, %c2, %c0]") + """
      %j = arith.addi %i, %c1 : index
      %w = vector.load %y[%j, %c0, %c0] : memref<8x4x16xf32>, vector<16xf32>""", "reads the next thread's first row"),
])
def test_a_kernel_touching_another_chunk_is_not_chunked_there(body, why):
    assert chunk_accesses(kernel(body))[1] == ChunkAccess(None, True), why


def test_a_vector_along_the_chunked_axis_or_a_loop_not_over_an_axis_is_not_chunked():
    along = """      %a = arith.muli %i, %c1 : index
      %v = vector.load %x[%c0, %c0, %a] : memref<8x4x16xf32>, vector<4xf32>
      vector.store %v, %y[%c0, %c0, %a] : memref<8x4x16xf32>, vector<4xf32>"""
    assert chunk_accesses(kernel(along, trips=16)) == {0: ChunkAccess(None, False), 1: ChunkAccess(None, True)}
    assert chunk_accesses(kernel(COPY, trips=4)) == {0: ChunkAccess(None, False), 1: ChunkAccess(None, True)}
    view = """      %f = memref.collapse_shape %y [[0, 1], [2]] : memref<8x4x16xf32> into memref<32x16xf32>
      %v = vector.load %x[%i, %c1, %c0] : memref<8x4x16xf32>, vector<16xf32>
      vector.store %v, %f[%i, %c0] : memref<32x16xf32>, vector<16xf32>"""
    assert chunk_accesses(kernel(view)) is None  # an access through a view of an argument: not followed


def test_a_call_waits_for_the_bytes_another_thread_may_still_be_at():
    module, _ = parse_module("""
builtin.module {
  func.func @main(%ws: memref<4096xi8>) {
    %c0 = arith.constant 0 : index
    %c1024 = arith.constant 1024 : index
    %c2048 = arith.constant 2048 : index
    %a = memref.view %ws[%c0][] : memref<4096xi8> to memref<8x4x8xf32>
    %b = memref.view %ws[%c1024][] : memref<4096xi8> to memref<8x4x8xf32>
    %a2 = memref.view %ws[%c0][] : memref<4096xi8> to memref<8x4x8xf32>
    %t = memref.view %ws[%c0][] : memref<4096xi8> to memref<4x8x8xf32>
    %far = memref.view %ws[%c2048][] : memref<4096xi8> to memref<8x4x8xf32>
    func.return
  }
}""")
    a, b, a2, t, far = [op.results[0] for op in next(iter(module.ops)).body.block.ops if op.name == "memref.view"]
    write0, read0, read1, anywhere = ChunkAccess(0, True), ChunkAccess(0, False), ChunkAccess(1, False), ChunkAccess(None, False)
    since = Unsynced([(Buffer.of(a), write0)])
    assert not since.conflicts([(Buffer.of(a2), read0)])  # the same view, the same axis: its own chunk
    assert since.conflicts([(Buffer.of(a2), read1)])  # another axis
    by_twos = [(Buffer.of(a2), ChunkAccess(0, False, scale=2))]  # another scale: other chunks, but at some
    assert not since.conflicts(by_twos) and since.rechunks(by_twos) == {Rechunk(8, (1, 2))}  # thread counts the same
    assert since.rechunks([(Buffer.of(a2), read0)]) == set()
    assert since.conflicts([(Buffer.of(t), read0)])  # the same bytes, another shape
    assert since.conflicts([(Buffer.of(a), anywhere)])
    assert not since.conflicts([(Buffer.of(b), ChunkAccess(None, True)), (Buffer.of(far), anywhere)])  # other bytes
    assert not Unsynced([(Buffer.of(a), read0)]).conflicts([(Buffer.of(t), anywhere)])  # two reads


def depthwise_chain(path, c: int, size: int) -> None:
    """Blocks of a depthwise 3x3 conv, relu, a depthwise conv and a residual add, c channels; one
    stride-2 depthwise conv with a channel multiplier of 2 and a dense 1x1 conv between them; a
    last block of two convs of 2 groups."""
    inits, nodes, x = Initializers(), [], "x"
    for k, (stride, mult, groups) in enumerate([(1, 1, c), (1, 1, c), (2, 2, c), (1, 1, 2 * c), (1, 1, 2)]):
        cin = c * (2 if k >= 3 else 1)
        w1 = inits.conv_weight(f"w{k}a", (cin * mult, cin // groups, 3, 3))
        w2 = inits.conv_weight(f"w{k}b", (cin * mult, cin * mult // min(groups * mult, cin * mult), 3, 3))
        nodes += [helper.make_node("Conv", [x, w1, inits.bias(f"b{k}", cin * mult)], [f"c{k}"], group=groups,
                                   pads=[1] * 4, strides=[stride] * 2),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"]),
                  helper.make_node("Conv", [f"r{k}", w2], [f"d{k}"], group=min(groups * mult, cin * mult), pads=[1] * 4)]
        if mult == 1:
            nodes.append(helper.make_node("Add", [f"d{k}", x], [f"s{k}"]))
            x = f"s{k}"
        else:
            wd = inits.conv_weight("wdense", (cin * mult, cin * mult, 1, 1))
            nodes.append(helper.make_node("Conv", [f"d{k}", wd], [f"s{k}"]))
            x = f"s{k}"
    nodes.append(helper.make_node("Relu", [x], ["y"]))
    save_graph(path, "chain", nodes, inits, (1, c, size, size), (1, 2 * c, size // 2, size // 2))


def torch_chain(path, x: np.ndarray) -> np.ndarray:
    """The same graph run by torch (its initializers read back from the file)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    w = {t.name: torch.tensor(numpy_helper.to_array(t)) for t in model.graph.initializer}
    v = {"x": torch.tensor(x)}
    for n in model.graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in n.attribute}
        ins = [v.get(i, w.get(i)) for i in n.input]
        if n.op_type == "Conv":
            v[n.output[0]] = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, stride=a.get("strides", [1])[0],
                                      padding=a.get("pads", [0])[0], groups=a.get("group", 1))
        elif n.op_type == "Relu":
            v[n.output[0]] = F.relu(ins[0])
        else:
            v[n.output[0]] = ins[0] + ins[1]
    return v["y"].numpy()


@pytest.mark.parametrize("threads", [2, 3])
def test_depthwise_blocks_run_without_most_barriers_and_compute_what_torch_does(threads, tmp_path, monkeypatch):
    """48 channels (6 blocks of 8: 3 threads take 2 each, 2 threads 3), 16 x 16 images: the
    depthwise convs and their residual adds go without barriers between them, as do the two
    grouped convs (a loop over the 2 groups, 48 channels each); the stride-2 one with its
    multiplier and the dense 1x1 conv wait. 20 calls 10 ms apart (a thread woken late): with no
    barriers at all 19-20 of 20 calls were wrong. AVX2 code (8 lanes) on any machine."""
    monkeypatch.setenv(CPU_ENV, "x86-64-v3")
    depthwise_chain(tmp_path / "chain.onnx", 48, 16)
    model = import_onnx(tmp_path / "chain.onnx")
    body = main_body(model)
    calls = sum(1 for op in body.walk() if op.name == "llvm.call" and op.callee.string_value() not in (
        "GOMP_barrier", "omp_get_thread_num"))
    assert str(body).count("@GOMP_barrier") <= calls // 2, str(body).count("@GOMP_barrier")
    x = np.random.default_rng(3).standard_normal((1, 48, 16, 16)).astype(np.float32)
    agrees_with_torch_when_spaced(model, tmp_path / "chain.onnx", x, threads)


def main_body(model):
    """@main.body of `model` lowered to the llvm dialect."""
    lowered = model.transform(str(llvm_pipeline().until("convert-loops-to-llvm"))).module
    return next(op for op in lowered.ops if getattr(op, "sym_name", None) is not None and op.sym_name.data == "main.body")


def agrees_with_torch_when_spaced(model, path, x: np.ndarray, threads: int) -> None:
    """20 calls 10 ms apart (the team's others asleep between them, one woken late) each compute
    what torch does (`torch_chain` of the ONNX file at `path`)."""
    want = torch_chain(path, x)
    exe = compile_llvm(model.module, threads=threads)
    for _ in range(20):
        time.sleep(0.01)
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)


def test_a_rechunk_is_the_same_exactly_when_each_thread_gets_the_same_elements():
    """`Rechunk.same_at` against each thread's elements as `parallel._chunk` deals them (equal
    contiguous chunks of the iterations, ceil(n / T) each, the last ones short or empty), listed."""

    def elements(length: int, scale: int, threads: int) -> list[range]:
        n = length // scale
        size = -(-n // threads)
        return [range(scale * min(n, t * size), scale * min(n, (t + 1) * size)) for t in range(threads)]

    for length, scales in [(16, (1, 2)), (18, (1, 2)), (24, (1, 3)), (32, (2, 4)), (96, (1, 4)), (8, (1, 8))]:
        for threads in range(1, 20):
            want = elements(length, scales[0], threads) == elements(length, scales[1], threads)
            assert Rechunk(length, scales).same_at(threads) == want, (length, scales, threads)
    assert Rechunk(16, (1, 2)).same_at(2) and not Rechunk(18, (1, 2)).same_at(2)  # 9 | 9 and 10 | 8


def expand_depthwise(path, c: int, size: int) -> None:
    """A dense 1x1 conv from 16 to `c` channels (it writes 2 channel blocks an iteration), relu, a
    depthwise 3x3 conv (one block an iteration), relu, twice."""
    inits, nodes, x = Initializers(), [], "x"
    for k, cin in enumerate([16, c]):
        nodes += [helper.make_node("Conv", [x, inits.conv_weight(f"we{k}", (c, cin, 1, 1))], [f"e{k}"]),
                  helper.make_node("Relu", [f"e{k}"], [f"r{k}"]),
                  helper.make_node("Conv", [f"r{k}", inits.conv_weight(f"wd{k}", (c, 1, 3, 3))], [f"d{k}"], group=c,
                                   pads=[1] * 4),
                  helper.make_node("Relu", [f"d{k}"], ["y" if k else f"s{k}"])]
        x = f"s{k}"
    save_graph(path, "expand", nodes, inits, (1, 16, size, size), (1, c, size, size))


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_a_depthwise_conv_after_an_expand_conv_waits_only_where_its_chunks_differ(threads, tmp_path, monkeypatch):
    """144 channels (18 blocks): the expand conv's 9 iterations of 2 blocks and the depthwise
    conv's 18 of 1 give each thread the same blocks at 3 threads (6 each), not at 2 (10 | 8 and 9
    | 9) or 4; @main checks at run time and waits only then. Compared with torch over 20 calls 10
    ms apart (a thread woken late); a team that never waits there was wrong at 2 and 4 threads."""
    monkeypatch.setenv(CPU_ENV, "x86-64-v3")
    expand_depthwise(tmp_path / "expand.onnx", 144, 12)
    model = import_onnx(tmp_path / "expand.onnx")
    assert "@omp_get_num_threads" in str(main_body(model))  # the run's team size decides
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype(np.float32)
    agrees_with_torch_when_spaced(model, tmp_path / "expand.onnx", x, threads)


def narrow_convs(path, size: int) -> None:
    """A 1x1 conv from 16 to 96 channels, relu, a 3x3 conv to 24 channels, relu, a 1x1 conv to 12:
    at 8 lanes the last two loop over their few channel tiles outside the loop the threads share."""
    inits = Initializers()
    nodes = [helper.make_node("Conv", ["x", inits.conv_weight("w0", (96, 16, 1, 1))], ["c0"]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", inits.conv_weight("w1", (24, 96, 3, 3))], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", inits.conv_weight("w2", (12, 24, 1, 1))], ["y"])]
    save_graph(path, "narrow", nodes, inits, (1, 16, size, size), (1, 12, size, size))


@pytest.mark.parametrize("threads", [2, 3])
def test_a_kernel_running_its_parallel_loop_in_a_serial_loop_runs_on_every_thread(threads, tmp_path, monkeypatch):
    """A kernel whose parallel loop sits in a serial loop (a loop over 3 channel tiles around the
    rows the threads share) is run by each thread of @main's team, a barrier after each serial
    iteration's chunk, not by the first thread alone; it computes what torch does, 20 calls 10 ms
    apart (a thread woken late)."""
    from nasir.lowering.loops_to_llvm.parallel import team_safe

    monkeypatch.setenv(CPU_ENV, "x86-64-v3")
    narrow_convs(tmp_path / "narrow.onnx", 16)
    model = import_onnx(tmp_path / "narrow.onnx")
    kernels = [op for op in model.transform(str(llvm_pipeline().before("convert-loops-to-llvm"))).module.ops
               if isinstance(op, func.FuncOp) and op.sym_name.data != "main"]
    nested = [k for k in kernels if any(isinstance(op, scf.ForOp) and any(isinstance(i, scf.ParallelOp)
                                                                          for i in op.body.block.ops) for op in k.body.block.ops)]
    assert nested and all(team_safe(k) for k in nested)
    assert "@omp_get_thread_num" not in str(main_body(model))  # no kernel left to the first thread
    x = np.random.default_rng(7).standard_normal((1, 16, 16, 16)).astype(np.float32)
    agrees_with_torch_when_spaced(model, tmp_path / "narrow.onnx", x, threads)
