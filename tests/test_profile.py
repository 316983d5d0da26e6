"""Profile builds (`compile(model, profile=True)`, `exe.profile`, `nasir profile`).

Oracles: PyTorch for the outputs (timers must not change them), the convolution MAC formula
N*Co*OH*OW*(Ci/G)*KH*KW for the per-call MACs, and the calls' relative work: a conv with 36 times
the MACs of another must take the larger share of the time on one thread (the ratio is far beyond
the noise of a shared machine)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_llvm_backend import build, rand

from nasir import runtime
from nasir.cli import main as cli
from nasir.dialects import nn
from nasir.errors import NasirError
from nasir.runtime.llvm_executable import compile_llvm

C, H = 16, 32
W_SMALL, W_LARGE, B_LARGE = rand(C, C, 1, 1), rand(64, C, 3, 3), rand(64)
SMALL_MACS, LARGE_MACS = C * H * H * C, 64 * H * H * C * 9


def two_convs():
    """A 1x1 conv then a 3x3 conv with 36 times its MACs (ReLU between them)."""
    return build([(1, C, H, H)], lambda a, W: [
        small := nn.Conv2DOp.new(a[0], W("ws", W_SMALL), None, (1, 1), (0,) * 4, (1, 1), 1).named("small"),
        relu := nn.ReluOp.new(small.results[0]).named("relu"),
        nn.Conv2DOp.new(relu.results[0], W("wl", W_LARGE), W("bl", B_LARGE), (1, 1), (1,) * 4, (1, 1), 1).named("large"),
    ])


def reference(x):
    y = F.relu(F.conv2d(torch.tensor(x), torch.tensor(W_SMALL)))
    return F.conv2d(y, torch.tensor(W_LARGE), torch.tensor(B_LARGE), padding=1).numpy()


@pytest.mark.parametrize("threads", [1, 2])
def test_profile_times_each_kernel_call(threads):
    x = rand(1, C, H, H)
    exe = compile_llvm(two_convs().module, threads=threads, profile=True)
    np.testing.assert_allclose(exe(x), reference(x), rtol=1e-4, atol=1e-4)
    profile = exe.profile(x, repeat=30)
    small, large = profile.rows  # the relu is the small conv's epilogue: two kernel calls
    assert (small.layer, small.macs) == ("small", SMALL_MACS)
    assert (large.layer, large.macs) == ("large", LARGE_MACS)
    if threads == 1:  # two threads on a loaded 2-core machine may each wait a time slice per call
        assert large.ms > 4 * small.ms
    assert 0.5 < small.share + large.share <= 1.05  # medians per call: their sum may pass @main's
    assert profile.threads == threads
    text = str(profile)
    assert "small" in text and "large" in text and "total" in text


def test_profile_build_computes_what_the_plain_build_does():
    x = rand(1, C, H, H)
    model = two_convs()
    np.testing.assert_array_equal(compile_llvm(model.module, profile=True)(x), compile_llvm(model.module)(x))


def test_saved_profile_build_keeps_its_counters(tmp_path):
    x = rand(1, C, H, H)
    compile_llvm(two_convs().module, profile=True).save(tmp_path / "exe")
    loaded = runtime.load(tmp_path / "exe")
    np.testing.assert_allclose(loaded(x), reference(x), rtol=1e-4, atol=1e-4)
    assert [r.layer for r in loaded.profile(x, repeat=3).rows] == ["small", "large"]


def test_profile_needs_a_profile_build():
    x = rand(1, C, H, H)
    with pytest.raises(NasirError, match="without profiling"):
        compile_llvm(two_convs().module).profile(x)


def test_cli_profile_prints_layers_by_time(tmp_path, capsys):
    model = two_convs()
    path = model.to_onnx(tmp_path / "two.onnx")
    with pytest.raises(SystemExit) as done:
        cli.main(["profile", str(path), "--repeat", "3", "--sort", "time"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    macs = [f" {m / 1e6:.2f} " for m in (LARGE_MACS, SMALL_MACS)]
    rows = [line for line in out.splitlines() if any(m in line for m in macs)]
    assert len(rows) == 2 and macs[0] in rows[0]  # slowest first (the export renames the layers)
    assert "2 calls" in out


def test_cli_profile_gives_each_layer_its_share_of_the_same_width_peak(tmp_path, capsys):
    """% peak = GFLOP/s (2 MACs / ms, from the row itself) over the printed peak of the code's width:
    AVX2 code (x86-64-v3) against the 8-lane peak on any x86 machine."""
    path = two_convs().to_onnx(tmp_path / "two.onnx")
    with pytest.raises(SystemExit) as done:
        cli.main(["profile", str(path), "--repeat", "3", "--cpu", "x86-64-v3"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    peak = re.search(r"peak: ([\d.]+) GFLOP/s a thread \(8-lane FMAs, x86-64-v3\)", out)
    assert peak, out
    header = next(line for line in out.splitlines() if "GFLOP/s" in line and "% peak" in line)
    rows = [[c for c in line.split() if c not in "│┃|"] for line in out.splitlines() if f" {LARGE_MACS / 1e6:.2f} " in line]
    assert len(rows) == 1 and header
    mmacs, ms, gflops, share = float(rows[0][-6]), float(rows[0][-5]), float(rows[0][-2]), float(rows[0][-1])
    assert gflops == pytest.approx(2 * mmacs / ms, rel=0.03)  # MACs and ms as printed, rounded
    assert share == pytest.approx(100 * gflops / float(peak.group(1)), abs=1.0)
