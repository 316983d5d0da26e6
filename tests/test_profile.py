"""Profile builds (`compile(model, profile=True)`, `exe.profile`, `nasir profile`).

Oracles: PyTorch for the outputs (timers must not change them), the convolution MAC formula
N*Co*OH*OW*(Ci/G)*KH*KW for the per-call MACs, each layer's class written by hand from its
definition (kernel, stride, groups), and the calls' relative work: a conv with 36 times
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
from nasir.runtime.profile import Profile

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
    assert 0.5 < small.share + large.share <= 1.0 + 1e-9  # with the time outside them, @main's
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


CLASSES = {"dense": "conv 3x3", "strided": "conv 1x1 s2", "grouped": "grouped conv 3x3",
           "depthwise": "depthwise conv 3x3 s2", "pool": "max pool 2x2 s2", "gap": "avg pool 2x2", "fc": "gemm"}
"""Each layer of `every_class` and its class, by hand from the layer's definition."""
CLASS_MACS = {"dense": 32 * 16 * 16 * 16 * 9, "strided": 32 * 8 * 8 * 32, "grouped": 32 * 8 * 8 * 16 * 9,
              "depthwise": 32 * 4 * 4 * 9, "fc": 10 * 32}
"""The conv MAC formula N*Co*OH*OW*(Ci/G)*KH*KW of each, and the gemm's M*N*K."""


def every_class():
    """A conv 3x3, a strided 1x1, a grouped 3x3, a strided depthwise 3x3, a max pool, a global
    average pool and a gemm: one of each layer class."""
    return build([(1, 16, 16, 16)], lambda a, W: [
        d := nn.Conv2DOp.new(a[0], W("w0", rand(32, 16, 3, 3)), None, (1, 1), (1,) * 4).named("dense"),
        s := nn.Conv2DOp.new(d.results[0], W("w1", rand(32, 32, 1, 1)), None, (2, 2)).named("strided"),
        g := nn.Conv2DOp.new(s.results[0], W("w2", rand(32, 16, 3, 3)), None, (1, 1), (1,) * 4, (1, 1),
                             2).named("grouped"),
        dw := nn.Conv2DOp.new(g.results[0], W("w3", rand(32, 1, 3, 3)), None, (2, 2), (1,) * 4, (1, 1),
                              32).named("depthwise"),
        p := nn.MaxPoolOp.new(dw.results[0], (2, 2), (2, 2)).named("pool"),
        gap := nn.GlobalAvgPoolOp.new(p.results[0]).named("gap"),
        flat := nn.ReshapeOp.new(gap.results[0], (1, 32)).named("flat"),
        nn.GemmOp.new(flat.results[0], W("w4", rand(10, 32)), None, trans_b=True).named("fc"),
    ])


@pytest.mark.parametrize("cpu", ["x86-64-v3", "host"])
def test_each_call_names_its_layer_class_and_by_class_sums_them(cpu):
    """A call's class is its layer's (a kernel that computes two layers, a pool fused with its
    producer, joins theirs with '+'); `by_class` sums each class's calls."""
    profile = compile_llvm(every_class().module, profile=True, cpu=cpu).profile(rand(1, 16, 16, 16), repeat=3)
    for row in profile.rows:
        assert row.layer_class == "+".join(CLASSES[layer] for layer in row.layer.split("+")), row
    assert {layer for row in profile.rows for layer in row.layer.split("+")} == set(CLASSES)
    classes = profile.by_class()
    assert [c.layer_class for c in classes] == list(dict.fromkeys(r.layer_class for r in profile.rows))
    for c in classes:
        calls = [r for r in profile.rows if r.layer_class == c.layer_class]
        assert c.layer == f"{c.layer_class} ({len(calls)} call{'s' if len(calls) > 1 else ''})"
        assert c.macs == sum(CLASS_MACS.get(layer, 0) for r in calls for layer in r.layer.split("+"))
        assert c.ms == pytest.approx(sum(r.ms for r in calls)) and c.share == pytest.approx(sum(r.share for r in calls))


@pytest.mark.parametrize("cpu", ["x86-64-v3", "host"])
def test_a_subsampled_strided_conv_keeps_its_layers_class(cpu):
    """ResNet's downsample, a 1x1 stride-2 conv of the block input that a 3x3 stride-2 conv reads
    too: at 8 lanes subsample-strided-1x1 runs it as a copy and a conv at stride 1; both calls
    are still of the layer's class, "conv 1x1 s2", and the class row holds its MACs by the formula."""
    model = build([(1, 16, 16, 16)], lambda a, W: [
        c := nn.Conv2DOp.new(a[0], W("w0", rand(32, 16, 3, 3)), None, (2, 2), (1,) * 4).named("conv"),
        ds := nn.Conv2DOp.new(a[0], W("w1", rand(32, 16, 1, 1)), None, (2, 2)).named("ds"),
        nn.AddOp.new(c.results[0], ds.results[0]).named("add"),
    ])
    exe = compile_llvm(model.module, profile=True, cpu=cpu)
    profile = exe.profile(rand(1, 16, 16, 16), repeat=3)
    calls = {r.layer: r.layer_class for r in profile.rows}
    subsampled = exe.meta["lanes"] == 8  # the pass's width (TRANSPOSE_LANES): AVX2's, or this host's if it has no AVX-512
    assert calls == {**({"ds.subsample": "conv 1x1 s2"} if subsampled else {}), "ds": "conv 1x1 s2",
                     "conv": "conv 3x3 s2"}
    row = next(c for c in profile.by_class() if c.layer_class == "conv 1x1 s2")
    assert row.macs == 32 * 8 * 8 * 16 and row.layer == f"conv 1x1 s2 ({2 if subsampled else 1} call{'s' if subsampled else ''})"


def test_cli_profile_by_class_prints_a_row_per_class(tmp_path, capsys):
    """Two 3x3 convs of the same class are one row: their MACs summed (the conv formula)."""
    model = build([(1, C, H, H)], lambda a, W: [
        c1 := nn.Conv2DOp.new(a[0], W("w1", rand(C, C, 3, 3)), None, (1, 1), (1,) * 4).named("c1"),
        nn.Conv2DOp.new(c1.results[0], W("w2", rand(C, C, 3, 3)), None, (1, 1), (1,) * 4).named("c2"),
    ])
    path = model.to_onnx(tmp_path / "two.onnx")
    with pytest.raises(SystemExit) as done:
        cli.main(["profile", str(path), "--repeat", "3", "--by", "class"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    row = next(line for line in out.splitlines() if "conv 3x3 (2 calls)" in line)
    assert f" {2 * C * H * H * C * 9 / 1e6:.2f} " in row


def test_calls_and_time_outside_them_share_the_latency_by_their_medians():
    """Each call's median ticks and the median of @main's ticks outside the calls, as shares of
    their sum: a run slowed in one call raises neither median, so nothing shows up outside the
    calls that did not run there (as shares of @main's median, 93, 3% of the time would)."""
    calls = [{"layer": "a", "kernel": "ka", "macs": 1}, {"layer": "b", "kernel": "kb", "macs": 2}]
    runs = [[60, 30, 91], [60, 50, 111], [80, 30, 111], [60, 30, 90], [61, 31, 93]]  # outside: 1 1 1 0 1
    profile = Profile.from_ticks(calls, runs, 10.0, 1)
    whole = 60 + 30 + 1
    assert [r.ms for r in profile.rows] == pytest.approx([10.0 * 60 / whole, 10.0 * 30 / whole])
    assert [r.share for r in profile.rows] == pytest.approx([60 / whole, 30 / whole])
    assert profile.outside_ms == pytest.approx(10.0 / whole)
    assert sum(r.ms for r in profile.rows) + profile.outside_ms == pytest.approx(10.0)


def test_counts_in_milliseconds_under_one_share_the_latency_alike():
    """TVM's profile counts in ms: a model of 0.6 ms gives its calls the same shares as ticks would
    (the sum of the medians is not floored at 1)."""
    calls = [{"layer": "a", "kernel": "ka", "macs": 1}, {"layer": "b", "kernel": "kb", "macs": 2}]
    profile = Profile.from_ticks(calls, [[0.2, 0.3, 0.6], [0.2, 0.3, 0.6], [0.2, 0.3, 0.6]], 0.6, 1)
    assert [r.ms for r in profile.rows] == pytest.approx([0.2, 0.3])
    assert profile.outside_ms == pytest.approx(0.1)
