"""Which cheap check predicts accuracy? Proxies ranked against the ground truth of nasir's space
(issue 51, deliver 2).

    python benchmarks/rank_proxies.py                     # reads benchmarks/data/ground_truth.jsonl

Reads the trained candidates of `ground_truth.py` (accuracy: the mean over a candidate's training
seeds) and scores each at the weights its training started from (as the search sees it), on one
seeded minibatch of 32 images of the same task:
- Fisher Potential as nasir's ratio to the original, BlockSwap's raw sum of Delta, and Fisher
  within its MAC band (its rank among the candidates of the same tenth of MACs: BlockSwap ranks
  at one budget);
- grad_norm, snip, synflow, jacob_cov (NASWOT), zico (`nasir.search.proxies`);
- MACs, parameters, and the alphaNAS mixing property (1: as mixing and deep as the original);
- a vote: the mean rank of the three proxies with the highest Kendall tau on the fitting half.
Printed: per proxy, Kendall's tau and Spearman's rho with accuracy over all rows and over the
held-out half (every second row by id; the vote's members are chosen on the other half), the
precision of its top 10% (the share of them among the top 10% by accuracy) and its cost in ms a
candidate. Everything also goes to `--out` as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from fisher_vs_accuracy import hard_mnist, network
from ground_truth import BINS, ROWS
from scipy.stats import kendalltau, spearmanr

from nasir.fisher import fisher_potential
from nasir.search.proxies import PROXIES
from nasir.summary import summarize
from nasir.transforms.properties import properties_at_least


def accuracies(rows: list[dict]) -> dict[str, dict]:
    """Each candidate (the original excepted) with its mean accuracy over its training seeds."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["id"] == "original":
            continue
        c = out.setdefault(r["id"], {k: r[k] for k in ("id", "family", "pipeline", "macs", "params", "latency")})
        c.setdefault("seeds", []).append(r["accuracy"])
    for c in out.values():
        c["accuracy"] = float(np.mean(c["seeds"]))
    return out


def top_precision(score: np.ndarray, accuracy: np.ndarray, share: float = 0.1) -> float:
    """The share of the top `share` by score that is also in the top `share` by accuracy."""
    k = max(1, int(round(share * len(score))))
    return len(set(np.argsort(-score)[:k]) & set(np.argsort(-accuracy)[:k])) / k


def in_band(score: np.ndarray, macs: np.ndarray) -> np.ndarray:
    """Each score's rank (0-1) among the candidates in its MAC bin (`ground_truth.BINS`)."""
    bins = np.clip(np.digitize(macs, BINS) - 1, 0, len(BINS) - 2)
    out = np.zeros(len(score))
    for b in set(bins):
        members = np.flatnonzero(bins == b)
        ranks = np.argsort(np.argsort(score[members]))
        out[members] = ranks / max(1, len(members) - 1)
    return out


def correlations(score: np.ndarray, accuracy: np.ndarray) -> tuple[float, float]:
    if np.ptp(score) == 0:
        return math.nan, math.nan
    return float(kendalltau(score, accuracy).statistic), float(spearmanr(score, accuracy).statistic)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="gt-out")
    p.add_argument("--out", default="gt-out/proxies.json")
    args = p.parse_args()
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    candidates = sorted(accuracies(rows).values(), key=lambda c: c["id"])
    originals = [r["accuracy"] for r in rows if r["id"] == "original"]

    class Args:
        model, dataset, image_size = "resnet18", "cifar10", 16
    _, original = network(Args, Path(args.work))
    data = hard_mnist(100, 4, 0.5, args.seed).fitted(tuple(original.input_shapes[0][1:]))
    pick = np.random.default_rng(args.seed).choice(len(data.train[0]), size=args.batch, replace=False)
    x, y = data.train[0][pick], data.train[1][pick]
    base = fisher_potential(original.at_batch(args.batch), x, y, args.seed)
    scores: dict[str, list[float]] = {name: [] for name in ("fisher", "fisher_raw", *PROXIES, "mixing")}
    cost: dict[str, float] = dict.fromkeys(scores, 0.0)
    for c in candidates:
        model = original.transform(c["pipeline"]) if c["pipeline"] else original
        start = time.perf_counter()
        report = fisher_potential(model.at_batch(args.batch), x, y, args.seed)
        cost["fisher"] += time.perf_counter() - start
        scores["fisher"].append(report.total / base.total)
        scores["fisher_raw"].append(sum(report.delta.values()))
        for name, fn in PROXIES.items():
            start = time.perf_counter()
            scores[name].append(fn(model, x, y))
            cost[name] += time.perf_counter() - start
        start = time.perf_counter()
        scores["mixing"].append(float(properties_at_least(model.module, original.module)[0]))
        cost["mixing"] += time.perf_counter() - start
    accuracy = np.array([c["accuracy"] for c in candidates])
    macs = np.array([c["macs"] for c in candidates])
    table = {name: np.array(v, float) for name, v in scores.items()}
    table["fisher_in_band"] = in_band(table["fisher"], macs)
    table["macs"], table["params"] = macs, np.array([c["params"] for c in candidates])
    held = np.arange(len(candidates)) % 2 == 1
    fit_tau = {name: correlations(s[~held], accuracy[~held])[0] for name, s in table.items()}
    members = sorted((n for n in table if not math.isnan(fit_tau[n])), key=lambda n: -fit_tau[n])[:3]
    table["vote"] = np.mean([np.argsort(np.argsort(table[n])) for n in members], axis=0)
    report = {"candidates": len(candidates), "original_accuracy": originals, "vote_of": members, "rows": {}}
    print(f"{len(candidates)} candidates (original: {np.mean(originals):.2f}% over {len(originals)} seeds, "
          f"spread {np.ptp(originals):.2f}); vote of {', '.join(members)} (chosen on the fitting half)")
    print(f"{'proxy':>15} {'tau':>7} {'rho':>7} {'tau held':>9} {'rho held':>9} {'top10%':>7} {'ms':>8}")
    for name, s in table.items():
        tau, rho = correlations(s, accuracy)
        tau_h, rho_h = correlations(s[held], accuracy[held])
        ms = 1000 * cost.get(name, 0.0) / len(candidates)
        report["rows"][name] = {"tau": tau, "rho": rho, "tau_held": tau_h, "rho_held": rho_h,
                                "top10": top_precision(s, accuracy), "ms": ms}
        print(f"{name:>15} {tau:+7.3f} {rho:+7.3f} {tau_h:+9.3f} {rho_h:+9.3f} {top_precision(s, accuracy):7.2f} "
              f"{ms:8.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
