"""What the command-line tools write where (issue 30): stdout holds the output only; analyses,
timings and progress go to stderr (progress on a terminal only); a closed pipe ends a tool quietly;
`--help` lists nasir's passes, `--xdsl-passes` xDSL's; error texts name what the docs name."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest
from test_tools import BIN, small_onnx  # noqa: F401  (a fixture)

import nasir
from nasir.errors import NasirError
from nasir.lowering.passes import available_passes
from nasir.lowering.pipeline import LLVM, LLVM_PIPELINE

CLOSED_PIPE = 141  # a shell's status for `yes | head`: 128 + SIGPIPE


def tool(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=300,
                          **kwargs)


@pytest.mark.parametrize("command", [["nasir-opt", "{model}"], ["nasir", "summary", "{model}"], ["nasir", "zoo"]])
def test_a_closed_pipe_ends_a_tool_quietly(small_onnx, command):  # noqa: F811
    proc = subprocess.Popen([str(BIN / command[0]), *(a.format(model=small_onnx) for a in command[1:])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=300)
    assert "Traceback" not in err and "Error" not in err, err
    assert proc.returncode == CLOSED_PIPE


def test_help_lists_nasirs_passes_and_a_flag_lists_xdsls():
    help_text = tool("nasir-opt", "--help").stdout
    for ours in (*available_passes(), "--xdsl-passes"):  # each name whole: never wrapped at a hyphen
        assert ours in help_text.split() or f"{ours}," in help_text.split()
    xdsl = tool("nasir-opt", "--xdsl-passes")
    assert xdsl.returncode == 0
    listed = xdsl.stdout.split()
    assert {"cse", "dce", "canonicalize"} <= set(listed) and "convert-nn-to-nest" not in listed
    assert not set(listed) & set(re.findall(r"[a-z][a-z0-9-]+", help_text)) - {"cse", "dce"}  # help names none but these


def test_pass_timings_go_to_stderr(small_onnx):  # noqa: F811
    proc = tool("nasir-opt", small_onnx, "-p", "convert-nn-to-nest", "--time-passes")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"Pass convert-nn-to-nest took [0-9.e-]+ seconds", proc.stderr)
    assert "took" not in proc.stdout and proc.stdout.startswith("builtin.module")


def test_lowering_progress_shows_on_a_terminal_only(small_onnx, tmp_path):  # noqa: F811
    args = [small_onnx, "-p", LLVM_PIPELINE, "-t", "llvm", "-o", tmp_path / "out.ll"]
    piped = tool("nasir-opt", *args)
    assert piped.returncode == 0 and piped.stderr == ""
    leader, follower = pty.openpty()
    proc = subprocess.run([str(BIN / "nasir-opt"), *map(str, args)], stdout=subprocess.DEVNULL, stderr=follower,
                          timeout=300, env={**os.environ, "TERM": "xterm", "COLUMNS": "120"})
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.returncode == 0
    passes = len(LLVM.passes)
    assert re.search(rf"pass \d+/{passes}: [a-z-]+".encode(), shown)  # the spinner shows some of them
    assert b"writing the llvm output" in shown
    assert (tmp_path / "out.ll").read_text().lstrip().startswith(("; ModuleID", "target"))


def test_capacity_check_errors_name_synthetic_as_the_docs_do(small_onnx):  # noqa: F811
    proc = tool("nasir-opt", small_onnx, "-p", "convert-nn-to-nest", "--capacity-check", "bogus")
    assert proc.returncode == 1 and "'synthetic'" in proc.stderr and "None" not in proc.stderr
    with pytest.raises(NasirError, match="'synthetic'") as caught:
        nasir.transform(nasir.load(small_onnx), "convert-nn-to-nest", capacity_check="bogus")
    assert "None" not in str(caught.value)


def test_a_table_in_a_pipe_takes_the_columns_it_needs():
    """The tools' console (search's front table, profile's, tune's) writing to a pipe: a table 150
    columns wide keeps each header and cell on one line, as at a terminal of 200 columns (rich
    alone folds it at 80: "measur ed ms")."""
    script = ("from rich.table import Table\n"
              "from nasir.console import ToolConsole\n"
              "t = Table(title='front')\n"
              "for c in ('trial', 'est. ms', 'measured ms', 'speedup', 'MACs / orig.', 'passes'):\n"
              "    t.add_column(c, overflow='fold')\n"
              "t.add_row('12', '8.63', '12.56 [0.40]', '1.87x [0.05]', '0.25', 'group{factor=4 layers=\"' + 'x' * 60 + '\"}')\n"
              "ToolConsole().print(t)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) > 120
    assert any("measured ms" in line and "MACs / orig." in line for line in lines)
    assert any("x" * 60 in line for line in lines)
