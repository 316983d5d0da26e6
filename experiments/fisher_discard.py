"""NAS-PTE's experiment (issue 39, deliver 2): the share of random candidates the Fisher Potential
check discards. The paper drew 1000 random configurations of ResNet-34 (cifar10) and reports about
90% rejected (BACKGROUND.md section 1).

    python experiments/fisher_discard.py                                # 1000 candidates, both draws
    python experiments/fisher_discard.py --candidates 100 --draw paper --workers 2

Draws:
- `paper`: the authors' published generator (pytorch/example.py of
  jack-willturner/nas-as-program-transformation-exploration): every basic block takes, uniformly,
  the plain conv or one of Seq 1-3, the same for both of its convs. Seq 1: S in {1, 2, 4, 8} output
  channel parts, part k grouped by a G_k drawn from {1, 2, 4, 8} (`compositions.split_groups`);
  Seq 2: the first U in {1, 2, 4, 8, 16} output channels dense, the rest grouped by G in
  {1, 2, 3, 4} (`compositions.seq2`; the authors' grouped part also skips the first U input
  channels, nasir's reads them all); Seq 3: the rows in S in {1, 2, 4, 8} bands, each with its own
  weights (`compositions.seq3_bands`).
- `space`: nasir's search space (`nasir.search.space`): each conv keeps its layer or takes a
  uniformly drawn legal choice, with a per-candidate share of changed convs drawn uniformly
  (`SearchSpace.random_pipeline`, as experiments/fisher_vs_accuracy.py draws).

A draw that a pass refuses (a factor that does not divide a channel or row count) is drawn again,
and counted. Every legal candidate is measured once on the search's minibatch (synthetic, seed 0,
batch 16) and judged against the original both ways: nasir's Fisher Potential (each layer's Delta
in units of its own signal, nasir/fisher.py) and BlockSwap's unnormalised sum of Delta. Printed:
the share each discards (candidate below the original), and the ratio quartiles. A run takes about
2.5 s (paper) or 1.4 s (space) per candidate with two workers on a loaded 2-core machine.

Measured (Intel Xeon @ 2.50GHz cascadelake, 2 cores, partly shared), 2026-11-27:

    python experiments/fisher_discard.py --candidates 1000 --draw paper --workers 2
    paper: 1000 legal candidates (5463 illegal draws redrawn), 1267 s
      nasir's Fisher Potential   discards  27.6%   ratio quartiles 0.998 1.013 1.031, max 1.09
      BlockSwap's sum of Delta   discards  98.0%   ratio quartiles 0.527 0.632 0.738, max 1.19

and (AMD EPYC Zen 4, 2 cores shared, load 4-7), 2026-11-26; docs/fisher.md explains the gap:

    python experiments/fisher_discard.py --candidates 200 --workers 2
    paper: 200 legal candidates (1069 illegal draws redrawn), 492 s
      nasir's Fisher Potential   discards  30.5%   ratio quartiles 0.995 1.014 1.029, max 1.08
      BlockSwap's sum of Delta   discards  98.0%   ratio quartiles 0.547 0.660 0.748, max 1.06
    space: 200 legal candidates (0 illegal draws redrawn), 275 s
      nasir's Fisher Potential   discards  88.5%   ratio quartiles 0.854 0.920 0.975, max 1.06
      BlockSwap's sum of Delta   discards  47.5%   ratio quartiles 0.909 1.002 1.582, max 11.46
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from nasir.data import minibatch
from nasir.errors import NasirError
from nasir.fisher import fisher_potential
from nasir.search.sources import load_source
from nasir.search.space import SearchSpace, conv_nests, layer_pattern
from nasir.transforms import compositions as C

BLOCK = re.compile(r"(layer[0-9]+_layer[0-9]+[.][0-9]+)_conv[12]_Conv")


def blocks(model) -> dict[str, str]:
    """Each basic block of a zoo ResNet (nest level) -> the regex of its two 3x3 convs."""
    found: dict[str, list[str]] = {}
    for op in conv_nests(model):
        match = BLOCK.fullmatch(op.layer_name)
        if match:
            found.setdefault(match.group(1), []).append(layer_pattern(op.layer_name))
    return {b: "|".join(names) for b, names in found.items()}


def paper_block(rng: np.random.Generator, layers: str) -> str:
    """One block's pipeline, drawn as the authors' generator draws a block's configuration."""
    kind = rng.choice(["conv", "seq1", "seq2", "seq3"])
    if kind == "seq1":
        s = int(rng.choice([1, 2, 4, 8]))
        groups = [int(g) for g in rng.choice([1, 2, 4, 8], s)]
        if s == 1:
            return C.grouped(layers, groups[0]) if groups[0] != 1 else ""
        return C.split_groups(layers, groups)
    if kind == "seq2":
        u, g = int(rng.choice([1, 2, 4, 8, 16])), int(rng.choice([1, 2, 3, 4]))
        return C.seq2(layers, u=u, g=g)
    if kind == "seq3":
        s = int(rng.choice([1, 2, 4, 8]))
        return C.seq3_bands(layers, parts=s) if s != 1 else ""
    return ""


def paper_draw(rng: np.random.Generator, model_blocks: dict[str, str]) -> str:
    return ",".join(step for step in (paper_block(rng, f"(?:{layers})") for layers in model_blocks.values()) if step)


_state: dict = {}


def _setup(model_name: str, dataset: str, batch: int) -> None:
    _, model = load_source(model_name, dataset, batch)
    shape = model.input_shapes[0]
    x, y = minibatch(None, batch, 0, tuple(shape[1:]), model.output_shapes[0][-1])
    _state.update(model=model, x=x, y=y)


def _measure(pipeline: str) -> tuple[float, float] | str:
    """(nasir's Fisher Potential, BlockSwap's sum of Delta) of the candidate, or why it is illegal."""
    try:
        candidate = _state["model"].transform(pipeline) if pipeline else _state["model"]
    except NasirError as e:
        return str(e).splitlines()[0]
    report = fisher_potential(candidate, _state["x"], _state["y"], threads=1)
    return report.total, float(sum(report.delta.values()))


def run(draw: str, args) -> dict:
    _setup(args.model, args.dataset, args.batch)
    original = _measure("")
    rng = np.random.default_rng(args.seed)
    model = _state["model"]
    if draw == "paper" and not blocks(model):
        raise SystemExit(f"{args.model}: no ResNet basic blocks (layerK_layerK.B_conv1/2) for the authors' draw")
    draw_one = (lambda r: paper_draw(r, blocks(model))) if draw == "paper" else SearchSpace.of(model).random_pipeline
    rows, illegal, start = [], 0, time.perf_counter()
    spawn = multiprocessing.get_context("spawn")  # a forked child of a process that ran torch can hang
    with ProcessPoolExecutor(args.workers, spawn, _setup, (args.model, args.dataset, args.batch)) as pool:
        while len(rows) < args.candidates:
            pipelines = [draw_one(rng) for _ in range(args.candidates - len(rows))]
            for pipeline, result in zip(pipelines, pool.map(_measure, pipelines)):
                if isinstance(result, str):
                    illegal += 1
                    continue
                rows.append({"pipeline": pipeline, "fisher": result[0] / original[0], "delta": result[1] / original[1]})
    return {"draw": draw, "candidates": len(rows), "illegal_redrawn": illegal, "seconds": time.perf_counter() - start,
            "rows": rows}


def summary(result: dict) -> str:
    lines = [f"{result['draw']}: {result['candidates']} legal candidates ({result['illegal_redrawn']} illegal draws "
             f"redrawn), {result['seconds']:.0f} s"]
    for key, name in (("fisher", "nasir's Fisher Potential"), ("delta", "BlockSwap's sum of Delta")):
        ratios = np.array([r[key] for r in result["rows"]])
        q = np.quantile(ratios, [0.25, 0.5, 0.75])
        lines.append(f"  {name:26s} discards {100 * np.mean(ratios < 1):5.1f}%   ratio quartiles "
                     f"{q[0]:.3f} {q[1]:.3f} {q[2]:.3f}, max {ratios.max():.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet34")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--draw", nargs="+", choices=["paper", "space"], default=["paper", "space"])
    parser.add_argument("--batch", type=int, default=16, help="Fisher minibatch (the search's, default 16)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws")
    parser.add_argument("--workers", type=int, default=1, help="processes measuring candidates (one core each)")
    parser.add_argument("--out", type=Path, default=Path("fisher-discard.json"))
    args = parser.parse_args()
    results = []
    for draw in args.draw:
        results.append(run(draw, args))
        print(summary(results[-1]), flush=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
