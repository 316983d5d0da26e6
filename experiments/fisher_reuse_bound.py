"""How much could Fisher Potential save by reusing the original's activations in the layers a
candidate leaves unchanged? (issue 41, deliver 3: why it was not built)

    python experiments/fisher_reuse_bound.py RUN/results.jsonl [...]     # a search's candidates
    python experiments/fisher_reuse_bound.py --draws 500                   # SearchSpace.random_pipeline

Fisher Potential needs every measured layer's activation gradient, and a transformed layer
changes the backward pass of every layer before it, so only the forward pass up to the first
transformed layer is the original's. Printed: over the candidates (those of the result files that
got a Fisher evaluation, or `--draws` random pipelines of the model's search space), the share of
the original's MACs computed before the first transformed layer (layers in program order,
`nasir.summary`). A forward pass is about a third of a forward and backward, so a third of that
share bounds the saving.

Measured (Intel Xeon @ 2.50GHz cascadelake), 2026-11-27, ResNet-34 cifar10:
the 120 Fisher-checked candidates of three evolution runs (experiments/search_reproduce.py):
median 0.000 (the stem only), mean 0.010, max 0.197; 500 random draws: median 0.000, mean 0.081.
So at most 0.3% (evolution) to 2.7% (random) of Fisher's time.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

import numpy as np

from nasir import zoo
from nasir.search.space import SearchSpace
from nasir.summary import summarize

LAYERS = re.compile(r'layers="([^"]*)"')


def prefix_share(rows, total: int, pipeline: str) -> float:
    """The share of `total` MACs in `rows` (program order) before the first layer a pass of
    `pipeline` names."""
    patterns = [re.compile(p) for p in LAYERS.findall(pipeline)]
    first = next((i for i, r in enumerate(rows) if any(p.fullmatch(r.name) for p in patterns)), len(rows))
    return sum(r.macs for r in rows[:first]) / total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="*", help="results.jsonl files of searches of the model")
    p.add_argument("--model", default="resnet34")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--draws", type=int, default=0, help="random pipelines of the search space to add")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    model = zoo.load(args.model, args.dataset).transform("convert-nn-to-nest")
    summary = summarize(model)
    pipelines = [c["pipeline"] for path in args.results for c in map(json.loads, open(path))
                 if c.get("score") is not None]
    space, rng = SearchSpace.of(model), np.random.default_rng(args.seed)
    pipelines += [space.random_pipeline(rng) for _ in range(args.draws)]
    if not pipelines:
        raise SystemExit("no candidates: give results.jsonl files or --draws N")
    shares = [prefix_share(summary.rows, summary.total_macs, pipeline) for pipeline in pipelines]
    print(f"{len(shares)} candidates: MAC share before the first transformed layer median "
          f"{statistics.median(shares):.3f}, mean {statistics.mean(shares):.3f}, max {max(shares):.3f}; "
          f"bound on the saving of Fisher's time about {statistics.mean(shares) / 3:.1%}")


if __name__ == "__main__":
    main()
