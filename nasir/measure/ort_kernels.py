"""The width of ONNX Runtime's CPU kernels here, and a copy of ONNX Runtime held to its AVX2 kernels.

ONNX Runtime's convolutions run MLAS kernels that it picks once, at load, from cpuid: on an
AVX-512 host they compute 16-float NCHWc channel blocks, on an AVX2-only one 8 (`block_floats`).
Issue 52's baseline is the ORT of an AVX2-only machine. To set nasir's 8-lane (AVX2) code against
that ORT on an AVX-512 machine, `avx2_copy` copies the installed onnxruntime package and turns
MLAS's one AVX512F test into a jump past it, so the copy's MLAS takes its AVX2 kernels, as on a
machine without AVX-512; `use` puts it first on `sys.path` (`make bench ARGS="--ort-isa avx2"`).
Only MLAS's choice changes: the same build, graph optimizations and threading.

In the library that Python loads (onnxruntime_pybind11_state), MLAS's platform setup reads, after
the AVX2 and FMA bits:

    test $0x10000, %r10d        cpuid leaf 7 EBX bit 16: AVX512F
    je   <not AVX-512>          ->  jmp <not AVX-512>   (74 rel8 -> eb rel8; 0f 84 rel32 -> 90 e9 rel32)
    mov %r8, %rax; not %rax
    test $0xe0, %al             XCR0: the OS saves the ZMM state

The copy is checked before use: its convolutions must run 8-float blocks (`block_floats`). Copies
live in the user's cache (`$NASIR_CACHE_DIR/onnxruntime-avx2-<version>`; safe to delete).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import tempfile
from pathlib import Path

from nasir.errors import NasirError

#   test $0x10000, r32                           je rel8 | je rel32         <= 12 bytes     test $0xe0, %al
_AVX512F_TEST = re.compile(rb"(?:[\x40-\x4f]?\xf7[\xc0-\xc7]|\xa9)\x00\x00\x01\x00(\x74.|\x0f\x84.{4}).{0,12}?\xa8\xe0",
                           re.DOTALL)
_LIBRARY = "onnxruntime_pybind11_state*.so"
_PROBE_CHANNELS = 24  # a multiple of 8, not of 16: its weights pad to the block


def block_floats() -> int:
    """The channels of the NCHWc block that ORT's MLAS kernels take here (16: AVX-512, 8: AVX2): the
    channels that a 24-channel conv's weights have after ORT's NCHWc transform (the weights pad up
    to a multiple of the block).

        Conv 24 -> 24, 3x3   ->   com.microsoft.nchwc Conv, weights [24, 24, 3, 3] (8) or [32, 32, 3, 3] (16)
    """
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    c = _PROBE_CHANNELS
    weights = helper.make_tensor("w", TensorProto.FLOAT, [c, c, 3, 3], np.zeros(c * c * 9, np.float32))
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        opts.log_severity_level = 3  # its warning that the file holds host-specific kernels
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        optimized = onnx.load(opts.optimized_model_filepath)
    if not any(n.domain == "com.microsoft.nchwc" for n in optimized.graph.node):
        raise NasirError("ONNX Runtime ran no NCHWc convolution here: its kernels' block cannot be read")
    padded = optimized.graph.initializer[0].dims[0]
    block = {c: 8, 32: 16}.get(padded)
    if block is None:
        raise NasirError(f"ONNX Runtime padded a {c}-channel conv's weights to {padded} channels: "
                         "not an 8- or 16-float block")
    return block


def patch_avx512f_test(library: bytes) -> bytes:
    """`library` with MLAS's AVX512F test jumping past the AVX-512 setup (the module docstring);
    NasirError unless the test occurs exactly once."""
    found = list(_AVX512F_TEST.finditer(library))
    if len(found) != 1:
        raise NasirError(f"MLAS's AVX512F test found {len(found)} times in this onnxruntime build, not once: "
                         "it cannot be held to AVX2 here; run the benchmark on an AVX2-only machine")
    start = found[0].start(1)
    patched = bytearray(library)
    if patched[start] == 0x74:
        patched[start] = 0xEB
    else:  # je rel32 (0f 84) -> nop; jmp rel32 (90 e9): same end, same displacement
        patched[start:start + 2] = b"\x90\xe9"
    return bytes(patched)


def installed_package() -> Path:
    """The installed onnxruntime package's directory (not imported)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise NasirError("onnxruntime is not installed (pip install onnxruntime)")
    return Path(spec.origin).parent


def avx2_copy(root: Path | None = None) -> Path:
    """The directory to put on `sys.path` whose `onnxruntime` is the installed one with MLAS held to
    AVX2 (made once under `root`, default the user's cache, and kept)."""
    from importlib.metadata import version

    from nasir.lowering.schedule.tuned import cache_dir

    home = (root or cache_dir()) / f"onnxruntime-avx2-{version('onnxruntime')}"
    if (home / "onnxruntime").is_dir():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=home.parent, prefix=".staging-"))
    try:
        package = shutil.copytree(installed_package(), staging / "onnxruntime",
                                  ignore=shutil.ignore_patterns("__pycache__"))
        libraries = sorted((package / "capi").glob(_LIBRARY))
        if len(libraries) != 1:
            raise NasirError(f"onnxruntime's Python library ({_LIBRARY}) not found in {package / 'capi'}")
        libraries[0].write_bytes(patch_avx512f_test(libraries[0].read_bytes()))
        staging.rename(home)  # another process's copy, made meanwhile, wins: then this one goes
    except OSError:
        if not (home / "onnxruntime").is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return home


def use(home: Path) -> None:
    """Import onnxruntime from `home` (before anything imports it) and check that its convolutions
    run 8-float blocks."""
    loaded = sys.modules.get("onnxruntime")
    if loaded is not None and Path(loaded.__file__).parent != home / "onnxruntime":
        raise NasirError(f"onnxruntime is already imported from {Path(loaded.__file__).parent}: "
                         "the AVX2 copy must be imported first (in a process of its own)")
    sys.path.insert(0, str(home))
    import onnxruntime

    if Path(onnxruntime.__file__).parent != home / "onnxruntime":
        raise NasirError(f"imported onnxruntime from {onnxruntime.__file__}, not from {home}")
    if (block := block_floats()) != 8:
        raise NasirError(f"the AVX2 copy of onnxruntime in {home} runs {block}-float blocks, not 8 (delete it)")
