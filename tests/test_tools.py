"""Tests of the command-line tools: `nasir-opt` (xDSL driver with nasir's frontend and passes) and
the `nasir` CLI. Oracles: the ONNX graph itself (node types, initializer values), ONNX Runtime
outputs, and the contract that user mistakes give one error line, exit status 1 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nasir import zoo
from nasir.cli import main as cli
from nasir.cli import nasir_opt as opt_tool
from nasir.dialects import nest, nn
from nasir.dialects.context import parse_module
from nasir.dialects.shapes import shape_of
from nasir.model import load_text

BIN = Path(sys.executable).parent
import onnxruntime as ort  # noqa: E402  (the oracle)


@pytest.fixture(scope="module")
def small_onnx(tmp_path_factory) -> Path:
    """Conv(3x3, pad 1, bias) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(transB)."""
    rng = np.random.default_rng(1)
    inits = {"W": rng.standard_normal((4, 3, 3, 3)), "B": rng.standard_normal(4),
             "FW": rng.standard_normal((5, 4)), "FB": rng.standard_normal(5)}
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "FW", "FB"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path_factory.mktemp("onnx") / "small.onnx"
    onnx.save(model, path)
    return path


def initializers(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def nasir_opt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "nasir-opt"), *map(str, args)], capture_output=True, text=True, timeout=300)


def run_main(main, capsys, *args: str) -> tuple[int, str, str]:
    """Run a tool's main() in process: (exit code, stdout, stderr)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def opt_in_process(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(opt_tool.main, capsys, *args)


def assert_one_line_error(code: int, err: str, tool: str = "nasir-opt", contains: str = "") -> None:
    assert code == 1
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("✓")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{tool}: error: ")
    assert contains in lines[0]


# --- nasir-opt ---------------------------------------------------------------------------------

def test_onnx_import_prints_nn_ir_that_parses_back(small_onnx):
    proc = nasir_opt(small_onnx)
    assert proc.returncode == 0, proc.stderr
    module, _ = parse_module(proc.stdout)
    ops = [op.name for op in module.walk() if op.dialect_name() == "nn" and op.name != "nn.weight"]
    assert ops == ["nn.conv2d", "nn.relu", "nn.global_avg_pool", "nn.reshape", "nn.gemm"]
    weights = {op.key: shape_of(op.result) for op in module.walk() if isinstance(op, nn.WeightOp)}
    assert weights == {k: v.shape for k, v in initializers(small_onnx).items()}


def test_convert_nn_to_nest_prints_nest_ir(small_onnx, capsys):
    code, out, err = opt_in_process(capsys, small_onnx, "-p", "convert-nn-to-nest")
    assert code == 0, err
    module, _ = parse_module(out)
    computes = [op for op in module.walk() if isinstance(op, nest.ComputeOp)]
    assert {op.layer_name for op in computes} >= {"conv", "fc"}
    conv = next(op for op in computes if op.layer_name == "conv")
    assert conv.kind == "mac" and conv.domain.size == 1 * 4 * 8 * 8 * 3 * 3 * 3


def test_print_weights_carries_the_initializer_values(small_onnx, capsys, tmp_path):
    code, out, err = opt_in_process(capsys, small_onnx, "--print-weights")
    assert code == 0, err
    assert "dense_resource" in out
    path = tmp_path / "with_weights.mlir"
    path.write_text(out)
    model = load_text(path)
    expected = initializers(small_onnx)
    assert set(model.weights) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(model.weights[name], value)


def test_weights_option_loads_a_store_for_mlir_input(small_onnx, capsys, tmp_path):
    code, out, _ = opt_in_process(capsys, small_onnx)
    assert code == 0
    (tmp_path / "m.mlir").write_text(out)
    np.savez(tmp_path / "store.npz", **initializers(small_onnx))
    code, out, err = opt_in_process(capsys, tmp_path / "m.mlir", "--weights", tmp_path / "store.npz",
                                    "--print-weights")
    assert code == 0, err
    (tmp_path / "back.mlir").write_text(out)
    back = load_text(tmp_path / "back.mlir")
    np.testing.assert_array_equal(back.weights["W"], initializers(small_onnx)["W"])
    code, _, err = opt_in_process(capsys, tmp_path / "m.mlir", "--print-weights")
    assert_one_line_error(code, err, contains="not in the weight store")
    code, _, err = opt_in_process(capsys, tmp_path / "m.mlir", "--weights", tmp_path / "missing.npz")
    assert_one_line_error(code, err, contains="missing.npz")


def test_unknown_pass_is_one_error_line():
    proc = nasir_opt("/dev/null", "-f", "mlir", "-p", "no-such-pass")
    assert_one_line_error(proc.returncode, proc.stderr, contains="no-such-pass")


def test_bad_pass_option_is_one_error_line(small_onnx, capsys):
    code, _, err = opt_in_process(capsys, small_onnx, "-p", "convert-nn-to-nest{bogus=1}")
    assert_one_line_error(code, err, contains="bogus")


def test_bad_files_are_one_error_line(tmp_path, capsys):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01 this is not a protobuf")
    proc = nasir_opt(garbage)
    assert_one_line_error(proc.returncode, proc.stderr, contains="garbage.onnx")
    code, _, err = opt_in_process(capsys, tmp_path / "missing.onnx")
    assert_one_line_error(code, err, contains="no such file")
    (tmp_path / "m.txt").write_text("")
    code, _, err = opt_in_process(capsys, tmp_path / "m.txt")
    assert_one_line_error(code, err, contains="txt")


def test_verify_failure_is_one_line_and_parse_error_keeps_caret(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main(%x: tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32> {\n"
                   "  %0 = nn.relu %x : (tensor<1x3x8x8xf32>) -> tensor<1x4x8x8xf32>\n"
                   "  func.return %0 : tensor<1x4x8x8xf32>\n}\n")
    code, _, err = opt_in_process(capsys, bad)
    assert_one_line_error(code, err, contains="result shape [1, 4, 8, 8] but operands give [1, 3, 8, 8]")
    broken = tmp_path / "broken.mlir"
    broken.write_text("func.func @main( {\n")
    proc = nasir_opt(broken)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "broken.mlir:1:" in proc.stderr and "^" in proc.stderr


# --- nasir CLI -----------------------------------------------------------------------------------

def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    return run_main(cli.main, capsys, *args)


def test_cli_zoo_lists_models_and_datasets():
    proc = subprocess.run([str(BIN / "nasir"), "zoo"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in zoo.names():
        line = next(line for line in proc.stdout.splitlines() if f" {name} " in line)
        for dataset in zoo.datasets(name):
            assert dataset in line


def test_cli_summary_counts_the_onnx_parameters(small_onnx, capsys):
    code, out, err = run_cli(capsys, "summary", small_onnx)
    assert code == 0, err
    total = out.strip().splitlines()[-1].split()
    n_params = sum(v.size for v in initializers(small_onnx).values())
    assert total[0] == "total" and total[-1] == f"{n_params:,}"
    assert total[-2] == f"{4 * 8 * 8 * 27 + 5 * 4:,}"  # conv + gemm MACs


def test_cli_run_prints_shape_and_checksum_of_the_onnxruntime_result(small_onnx, capsys, tmp_path):
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, err = run_cli(capsys, "run", small_onnx, "--target", "torch", "--input", tmp_path / "x.npy")
    assert code == 0, err
    (want,) = ort.InferenceSession(str(small_onnx)).run(None, {"x": x})
    line = out.strip().splitlines()[-1]
    assert "shape [1, 5]" in line
    printed_sum = float(line.split("sum")[1].split()[0])
    assert printed_sum == pytest.approx(float(want.sum()), abs=1e-4)


def test_cli_check_passes_on_a_zoo_model(capsys):
    code, out, err = run_cli(capsys, "check", "resnet18", "--target", "torch")
    assert code == 0, err
    assert "PASS" in out and "max abs diff" in out


def test_cli_check_fails_when_outputs_disagree(small_onnx, capsys, monkeypatch):
    real = cli.onnxruntime_outputs
    monkeypatch.setattr(cli, "onnxruntime_outputs", lambda path, xs: [y + 1e-2 for y in real(path, xs)])
    code, out, _ = run_cli(capsys, "check", small_onnx, "--target", "torch")
    assert code == 1
    assert "FAIL" in out


def test_cli_check_without_onnxruntime_says_so_in_one_line_before_compiling(small_onnx):
    """An install where ONNX Runtime cannot be imported (it is blocked in sys.modules here): `nasir
    check` names what to install, in one line, and compiles nothing first."""
    script = ("import sys; sys.modules['onnxruntime'] = None\n"
              "import nasir\n"
              "def no_compile(*a, **k): raise SystemExit('compiled before the check')\n"
              "nasir.compile = no_compile\n"
              "from nasir.cli.main import main\n"
              f"main(['check', {str(small_onnx)!r}])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "nasir: error: nasir check compares with ONNX Runtime, which is not installed here: pip install onnxruntime"]


def test_cli_errors_are_one_line(tmp_path, capsys):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not onnx")
    code, _, err = run_cli(capsys, "summary", garbage)
    assert_one_line_error(code, err, tool="nasir", contains="garbage.onnx")
    code, _, err = run_cli(capsys, "summary", "no_such_model")
    assert_one_line_error(code, err, tool="nasir", contains="resnet18")
    code, _, err = run_cli(capsys, "summary", "resnet18", "--dataset", "mnist")
    assert_one_line_error(code, err, tool="nasir", contains="mnist")
    proc = subprocess.run([str(BIN / "nasir"), "run", str(tmp_path / "missing.onnx")],
                          capture_output=True, text=True, timeout=300)
    assert_one_line_error(proc.returncode, proc.stderr, tool="nasir", contains="no such file")


def test_help_lists_nasirs_passes_not_xdsls():
    done = subprocess.run([sys.executable, "-m", "nasir.cli.nasir_opt", "--help"], capture_output=True, text=True)
    text = " ".join(done.stdout.split()).replace("- ", "-")
    assert "nasir's passes: bottleneck, bottom-up, convert-loops-to-llvm" in text and "riscv" not in text
