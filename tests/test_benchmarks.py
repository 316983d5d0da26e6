"""The benchmark suite in a tiny configuration: JSON structure and derived numbers recomputed here.

Timings are never asserted (the machine is shared); only that every number the suite derives
(ratios, GFLOP/s, realisation) is the formula applied to the raw times and MACs it recorded, that
the MACs match an independent count, and that the PNG is written.
"""

import itertools
import json
import math

import numpy as np
import pytest

from nasir.measure import benchmark, variants


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """The suite's files; its --tune writes the user's tuning database, here a cache of its own (one
    schedule timed a conv, the cost model's: the columns and their formulas are what is checked
    here; a tuning that finds and checks faster schedules is test_tuning's, a second schedule a conv
    took 40 s more)."""
    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NASIR_CACHE_DIR", str(tmp_path_factory.mktemp("bench-cache")))
        benchmark.main(["--models", "resnet18", "--datasets", "cifar10", "--threads", "1", "2", "--repeat", "3",
                        "--variant-model", "resnet18", "--variant-datasets", "cifar10",
                        "--variants", "base", "group4", "--tune", "--tune-trials", "1", "--cpu", "x86-64-v3",
                        "--out", str(out)])
    return out, json.loads((out / "bench.json").read_text())


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9)


def rounds_ratio(numerators, denominators, scale=1.0):
    """The median and the quartiles of the round by round ratios over `scale`, by numpy."""
    r = np.asarray(numerators) / np.asarray(denominators) / scale
    return float(np.median(r)), [float(np.percentile(r, 25)), float(np.percentile(r, 75))]


def close_ratio(value, iqr, expected):
    return close(value, expected[0]) and close(iqr[0], expected[1][0]) and close(iqr[1], expected[1][1])


def test_writes_json_and_png(result):
    out, data = result
    assert set(data) >= {"config", "peak", "models", "variants"}
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data["peak"]["peak_gflops"] > 1.0
    assert data["peak"]["peak_gflops"] >= data["peak"]["median_gflops"]


def test_avx2_code_is_measured_against_the_avx2_peak_and_ort_against_the_machines(result):
    """--cpu x86-64-v3: nasir's code and its peak at 8 lanes on any x86 machine; ORT's % of the
    peak of the machine's own width (LLVM's host features, read here independently)."""
    import llvmlite.binding as llvm

    _, data = result
    assert (data["config"]["cpu"], data["peak"]["cpu"], data["peak"]["vector_width"]) == ("x86-64-v3", "x86-64-v3", 8)
    host = 16 if "+avx512f" in llvm.get_host_cpu_features().flatten().split(",") else 8
    assert data["ort_peak"]["vector_width"] == host
    for row in data["models"]:
        assert close(row["ort_pct_peak"], 100 * row["ort_gflops"] / (data["ort_peak"]["peak_gflops"] * row["threads"]))


def test_model_rows(result):
    _, data = result
    assert [(r["model"], r["dataset"], r["threads"]) for r in data["models"]] == [("resnet18", "cifar10", 1),
                                                                                  ("resnet18", "cifar10", 2)]
    peak = data["peak"]["peak_gflops"]
    for row in data["models"]:
        # ResNet-18 on CIFAR-10 (3x3 stem, no max-pool): 555,422,720 MACs (nasir.summary's docstring,
        # the classic count for this network); the fc layer is part of it.
        assert row["macs"] == 555_422_720
        for backend in ("nasir", "ort", "torch"):
            assert len(row[f"{backend}_rounds_ms"]) == 3 and row[f"{backend}_ms"] > 0
            assert close(row[f"{backend}_ms"], float(np.median(row[f"{backend}_rounds_ms"])))
            assert close(row[f"{backend}_gflops"], 2 * row["macs"] / (row[f"{backend}_ms"] / 1e3) / 1e9)
        # nasir/ORT: the median of the rounds' ratios, each round's two samples taken back to back
        assert close_ratio(row["nasir_over_ort"], row["nasir_over_ort_iqr"],
                           rounds_ratio(row["nasir_rounds_ms"], row["ort_rounds_ms"]))
        assert close(row["nasir_pct_peak"], 100 * row["nasir_gflops"] / (peak * row["threads"]))
        assert row["max_abs_err_vs_ort"] < 1e-3
        # --tune: the tuned code timed beside the cost model's, after tuning that took time
        assert row["nasir_tuned_ms"] > 0 and row["tune_s"] > 0 and row["tuned_gain_alone"] > 0
        assert close_ratio(row["nasir_tuned_over_ort"], row["nasir_tuned_over_ort_iqr"],
                           rounds_ratio(row["nasir_tuned_rounds_ms"], row["ort_rounds_ms"]))


def test_variant_realisation_is_the_formula(result):
    """At each thread count of --threads, each variant against the base timed at that count."""
    _, data = result
    assert [(r["variant"], r["threads"]) for r in data["variants"]] == [("base", 1), ("group4", 1),
                                                                       ("base", 2), ("group4", 2)]
    for threads in (1, 2):
        rows = {r["variant"]: r for r in data["variants"] if r["threads"] == threads}
        base, g4 = rows["base"], rows["group4"]
        assert g4["pipeline"] == 'convert-nn-to-nest,group{factor=4 layers="layer[0-9]_.*_conv[12]_Conv"}'
        # group{factor=4} divides the MACs of the 16 block convs by 4. By hand: layer1 4 * 64*64*9*32*32,
        # layers 2-4 each (Ci*2Co + 3 * 2Co*2Co) * 9 * (H/2)^2 = 132,120,576: 547,356,672 in the blocks;
        # the rest (stem 1,769,472, downsample 1x1s 3 * 2,097,152, fc 5,120) keeps its 8,066,048.
        blocks = 4 * 64 * 64 * 9 * 32 * 32 + 3 * 132_120_576
        assert base["macs"] - blocks == 8_066_048
        assert g4["macs"] == 8_066_048 + blocks // 4
        assert close(g4["mac_ratio"], base["macs"] / g4["macs"])
        # the median of the rounds' speedups (base over variant, timed in the same round) over the MAC ratio
        for backend in ("nasir", "ort"):
            assert close_ratio(g4[f"{backend}_realisation"], g4[f"{backend}_realisation_iqr"],
                               rounds_ratio(base[f"{backend}_rounds_ms"], g4[f"{backend}_rounds_ms"],
                                            base["macs"] / g4["macs"]))
        assert close(base["nasir_realisation"], 1.0) and base["nasir_realisation_iqr"] == [1.0, 1.0]
        for r in (base, g4):
            assert r["max_abs_err_vs_ort"] < 1e-3 and r["nasir_ms"] > 0 and r["ort_ms"] > 0


def test_each_candidate_starts_after_idle():
    """A candidate's calls start `settle_s` after the previous candidate's last call (the idle that
    lets another runtime's spinning worker threads stop), and every fn is timed `repeat` times,
    each after untimed calls of its own (`WARM_MS` of them: many of a fn this quick)."""
    import time

    calls: list[tuple[str, float, float]] = []

    def fn(name):
        def call():
            start = time.perf_counter()
            calls.append((name, start, time.perf_counter()))
        return call

    ms = benchmark.median_ms({"a": fn("a"), "b": fn("b")}, repeat=3, warmup=0, settle_s=0.02)
    runs = [list(group) for _, group in itertools.groupby(name for name, _, _ in calls)]
    assert set(ms) == {"a", "b"} and [run[0] for run in runs] == ["a", "b"] * 3
    assert all(len(run) >= 2 for run in runs), "each timed call after an untimed one at least"
    for prev, cur in zip(calls, calls[1:]):
        if prev[0] != cur[0]:
            assert cur[1] - prev[2] >= 0.02


KEPT_MACS = {"fold-kh": 1 / 3, "fold-kw": 1 / 3, "shift-oh": 1, "split-co2": 1, "unshare-oh2": 1,
             "bottleneck-ci2": 1 / 2, "bottleneck-oh2": 1 / 2}
"""Fraction of each chosen layer's MACs a variant of `MORE_VARIANTS` keeps: a folded 3x3 window keeps
one of its three rows or columns; shift, index-split and unshare move or cut the same work; a
bottleneck of 2 halves the input channels or output rows a conv computes with."""


@pytest.mark.parametrize("model_name, dataset", [("resnet18", "cifar10"), ("resnet34", "imagenet")])
def test_more_variants_apply_to_the_variant_models(model_name, dataset):
    """Every opt-in variant is legal on both variant models at its dataset's sizes (unshare and
    bottleneck of oh skip layer4, whose 7 rows do not halve on imagenet), and its MACs are the
    base's less the share it removes from the layers its pipeline names."""
    import re

    import nasir.zoo as zoo

    assert set(KEPT_MACS) == set(variants.MORE_VARIANTS)
    assert set(variants.VARIANTS) <= set(variants.ALL_VARIANTS)
    base = zoo.load(model_name, dataset)
    summary = base.summary()
    for name, pipeline in variants.MORE_VARIANTS.items():
        pattern = re.compile(re.search(r'layers="([^"]+)"', pipeline).group(1))
        chosen = sum(r.macs for r in summary.rows if pattern.fullmatch(r.name))
        assert chosen > 0, name
        expected = summary.total_macs - chosen * (1 - KEPT_MACS[name])
        assert base.transform(pipeline).summary().total_macs == pytest.approx(expected, rel=1e-12), name


def test_variants_none_skips_the_realisation_table(monkeypatch):
    """`--variants none` (as its help says) and the flag alone both run no variant; `none` beside a
    variant is refused."""
    ran = []
    monkeypatch.setattr(benchmark, "run",
                        lambda jobs, threads, repeat, model, datasets, names, *a, **k: ran.append(names))
    benchmark.main(["--models", "resnet18", "--variants", "none"])
    benchmark.main(["--models", "resnet18", "--variants"])
    assert ran == [[], []]
    with pytest.raises(SystemExit):
        benchmark.main(["--variants", "none", "base"])


def test_ort_held_to_avx2_is_measured_against_the_8_lane_peak(tmp_path):
    """`--ort-isa avx2` (a process of its own: this one may hold the installed onnxruntime): ORT
    runs the copy held to AVX2 (`ort_kernels`), its % of peak counts against the 8-lane peak, and
    nasir's AVX2 code matches it."""
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "nasir.measure.benchmark", "--models", "resnet18", "--datasets", "cifar10",
                    "--threads", "1", "--repeat", "1", "--variants", "none", "--no-plot", "--cpu", "x86-64-v3",
                    "--ort-isa", "avx2", "--out", str(out)], check=True, capture_output=True,
                   env={**os.environ, "NASIR_CACHE_DIR": str(tmp_path / "cache")})
    data = json.loads((out / "bench.json").read_text())
    assert data["config"]["ort_isa"] == "avx2"
    assert (data["ort_peak"]["cpu"], data["ort_peak"]["vector_width"]) == ("x86-64-v3", 8)
    [row] = data["models"]
    assert close(row["ort_pct_peak"], 100 * row["ort_gflops"] / data["ort_peak"]["peak_gflops"])
    assert row["max_abs_err_vs_ort"] < 1e-4
    assert list((tmp_path / "cache").glob("onnxruntime-avx2-*/onnxruntime"))
