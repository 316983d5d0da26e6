"""Which cheap check predicts accuracy? Proxies ranked against the ground truth of nasir's space
(issue 51, deliver 2).

    python experiments/rank_proxies.py                     # reads experiments/data/ground_truth.jsonl
    python experiments/rank_proxies.py --column distilled  # ... ground_truth_distilled.jsonl

Reads the trained candidates of `ground_truth.py`, column `trained` (accuracy: the mean over a
candidate's training seeds from scratch) or `distilled` (after the short distillation from the
trained original), and scores each at the weights its training started from (as the search sees
it: fresh for `trained`, inherited from the trained original for `distilled`), on one seeded
minibatch of 32 images of the same task:
- Fisher Potential as nasir's ratio to the original, BlockSwap's raw sum of Delta, and Fisher
  within its MAC band (its rank among the candidates of the same tenth of MACs: BlockSwap ranks
  at one budget);
- grad_norm, snip, synflow, jacob_cov (NASWOT), zico (`nasir.search.proxies`);
- MACs, parameters, and the alphaNAS mixing property (1: as mixing and deep as the original);
- `distilled` only: `inherited`, the accuracy before any fine-tuning (the test split evaluated,
  batch norms recalibrated: `ground_truth.inherited_accuracy`);
- a vote: the mean rank of the three proxies with the highest Kendall tau on the fitting half.
Printed: per proxy, Kendall's tau and Spearman's rho with accuracy over all rows and over the
held-out half (every second row by id; the vote's members are chosen on the other half), the
precision of its top 10% (the share of them among the top 10% by accuracy) and its cost in ms a
candidate.

Then the rules a search could keep candidates by (deliver 3): "within one point" is an accuracy of
at least the original's minus 1 (the mean of its seeds for `trained`, the teacher's for
`distilled`). Each score is taken relative to the original's (`relative`: a ratio, a difference
for the log-scale jacob_cov and zico), and a rule keeps a candidate whose relative score is at
least a floor, alone or with a MAC floor; each floor is fitted on the fitting half (the best F1 of
"kept" against "within one point") and the rule's precision and recall are reported on the
held-out half; once among every candidate, once among those faster than the original (`FASTER`:
a check that keeps only networks as slow as the original answers nothing). Everything also goes to
`--out` as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from fisher_vs_accuracy import hard_mnist, network
from ground_truth import BINS, DISTILLED, ROWS, inherited_accuracy, read_rows, teacher_of
from scipy.stats import kendalltau, spearmanr

from nasir.fisher import fisher_potential
from nasir.lowering.passes import with_init
from nasir.search.capacity import RULES, relative
from nasir.search.finetune import finetune_batch
from nasir.search.proxies import PROXIES
from nasir.transforms.analysis.properties import properties_at_least


def accuracies(rows: list[dict], column: str = "accuracy") -> dict[str, dict]:
    """Each candidate (the original excepted) with its mean `column` over its training seeds."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["id"] == "original":
            continue
        c = out.setdefault(r["id"], {k: r.get(k) for k in ("id", "family", "pipeline", "macs", "params", "latency")})
        c.setdefault("seeds", []).append(r[column])
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


FASTER = 0.95
"""A search's check matters among the candidates it would return: the rules are also fitted and
judged among those timed below this share of the original's latency (`rules_faster`)."""
def correlations(score: np.ndarray, accuracy: np.ndarray) -> tuple[float, float]:
    if np.ptp(score) == 0:
        return math.nan, math.nan
    return float(kendalltau(score, accuracy).statistic), float(spearmanr(score, accuracy).statistic)


def precision_recall(kept: np.ndarray, good: np.ndarray) -> tuple[float, float]:
    """(precision, recall) of keeping `kept` where `good` are the ones worth keeping (precision
    nan when nothing is kept, recall nan when nothing is good)."""
    hits = int((kept & good).sum())
    return (hits / kept.sum() if kept.any() else math.nan), (hits / good.sum() if good.any() else math.nan)


def f1(kept: np.ndarray, good: np.ndarray) -> float:
    hits = int((kept & good).sum())
    return 2 * hits / (kept.sum() + good.sum()) if kept.any() or good.any() else 0.0


def fit_floor(score: np.ndarray, good: np.ndarray, macs: np.ndarray | None = None) -> tuple[float, float, float]:
    """(floor, MAC floor, F1): the floors (each among the scores seen, the MAC floor 0 without
    `macs`) whose rule "score >= floor and MACs >= MAC floor" has the best F1 on these rows;
    ties go to the lowest floors (the rule that keeps most)."""
    best = (-math.inf, 0.0, -1.0)
    for m in sorted(set(macs)) if macs is not None else [0.0]:
        for t in sorted(set(score)):
            got = f1((score >= t) & ((macs >= m) if macs is not None else True), good)
            if got > best[2]:
                best = (float(t), float(m), got)
    return best


def rules(table: dict[str, np.ndarray], macs: np.ndarray, good: np.ndarray, held: np.ndarray) -> dict[str, dict]:
    """Each score as a rule alone and with a MAC floor, fitted on ~`held` and judged on `held`
    (`floor`, `precision`, `recall`, `f1`), and both ways round, pooled (`pooled_*`: each half
    judged by the floors fitted on the other, the counts added: with a few good candidates a half,
    one half alone is noise)."""
    out = {}
    for name, score in table.items():
        for with_macs in (False, True):
            if name == "macs" and with_macs:
                continue
            kept = {}
            for judged in (held, ~held):
                floor, mac_floor, fit = fit_floor(score[~judged], good[~judged], macs[~judged] if with_macs else None)
                kept[judged is held] = ((score >= floor) & (macs >= mac_floor), floor, mac_floor, fit)
            (mine, floor, mac_floor, fit), (other, *_) = kept[True], kept[False]
            pooled = np.where(held, mine, other)
            precision, recall = precision_recall(mine[held], good[held])
            pooled_precision, pooled_recall = precision_recall(pooled, good)
            out[f"{name} + MACs" if with_macs else name] = {
                "floor": floor, "mac_floor": mac_floor, "fit_f1": fit, "precision": precision, "recall": recall,
                "f1": f1(mine[held], good[held]), "kept": int(mine[held].sum()), "pooled_precision": pooled_precision,
                "pooled_recall": pooled_recall, "pooled_f1": f1(pooled, good)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--column", choices=("trained", "distilled"), default="trained")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="gt-out", help="ground_truth.py's checkpoints (the trained original)")
    p.add_argument("--out", default=None, help="the report as JSON (default: WORK/proxies-COLUMN.json)")
    p.add_argument("--scores", default=None, metavar="REPORT",
                   help="take the scores and their costs from an earlier report of the same column instead of measuring "
                        "them (minutes) again: for the rules only")
    args = p.parse_args()
    work = Path(args.work)
    rows = read_rows(ROWS)
    originals = [r["accuracy"] for r in rows if r["id"] == "original"]

    class Args:
        model, dataset, image_size = "resnet18", "cifar10", 16
    _, original = network(Args, work)
    data = hard_mnist(100, 4, 0.5, args.seed).fitted(tuple(original.input_shapes[0][1:]))
    if args.column == "distilled":
        teacher, bar = teacher_of(original, data, work, None)
        candidates = sorted(accuracies(read_rows(DISTILLED), "distilled").values(), key=lambda c: c["id"])
        latency = {r["id"]: r["latency"] for r in rows}  # timed once, with the trained column
        for c in candidates:
            c["latency"] = latency[c["id"]]
        start_of = lambda c: teacher.transform(with_init(c["pipeline"], "inherit"))  # noqa: E731
        reference = teacher
    else:
        bar = float(np.mean(originals))
        candidates = sorted(accuracies(rows).values(), key=lambda c: c["id"])
        start_of = lambda c: original.transform(c["pipeline"]) if c["pipeline"] else original  # noqa: E731
        reference = original
    pick = np.random.default_rng(args.seed).choice(len(data.train[0]), size=args.batch, replace=False)
    x, y = data.train[0][pick], data.train[1][pick]
    names = ("fisher", "fisher_raw", *PROXIES, "mixing") + (("inherited",) if args.column == "distilled" else ())
    scores: dict[str, list[float]] = {name: [] for name in names}
    cost: dict[str, float] = dict.fromkeys(scores, 0.0)

    def score(model) -> dict[str, float]:
        got = {}
        start = time.perf_counter()
        report = fisher_potential(model.at_batch(args.batch), x, y, args.seed)
        cost["fisher"] += time.perf_counter() - start
        got["fisher"], got["fisher_raw"] = report.total, sum(report.delta.values())
        for name, fn in PROXIES.items():
            start = time.perf_counter()
            got[name] = fn(model, x, y)
            cost[name] += time.perf_counter() - start
        start = time.perf_counter()
        got["mixing"] = float(properties_at_least(model.module, reference.module)[0])
        cost["mixing"] += time.perf_counter() - start
        if "inherited" in scores:
            start = time.perf_counter()
            got["inherited"] = inherited_accuracy(model, data, finetune_batch(len(data.train[1])))  # as the rows
            cost["inherited"] += time.perf_counter() - start
        return got

    ids = [c["id"] for c in candidates]
    if args.scores:
        raw = json.loads(Path(args.scores).read_text())["raw"]
        if raw["ids"] != ids:
            raise SystemExit(f"{args.scores} scored other candidates than the rows hold now: measure them again")
        base, scores, cost = raw["base"], raw["scores"], raw["cost"]
    else:
        base = score(reference)
        cost = dict.fromkeys(scores, 0.0)
        for c in candidates:
            for name, value in score(start_of(c)).items():
                scores[name].append(value)
    accuracy = np.array([c["accuracy"] for c in candidates])
    macs = np.array([c["macs"] for c in candidates])
    table = {name: np.array(v, float) for name, v in scores.items()}
    table["fisher"] = table["fisher"] / base["fisher"]  # nasir's ratio
    for name in (*PROXIES, "inherited"):
        if name in table:
            table[name] = relative(name, table[name], base[name])
    table["fisher_in_band"] = in_band(table["fisher"], macs)
    table["macs"], table["params"] = macs, np.array([c["params"] for c in candidates])
    held = np.arange(len(candidates)) % 2 == 1
    fit_tau = {name: correlations(s[~held], accuracy[~held])[0] for name, s in table.items()}
    members = sorted((n for n in table if not math.isnan(fit_tau[n])), key=lambda n: -fit_tau[n])[:3]
    table["vote"] = np.mean([np.argsort(np.argsort(table[n])) for n in members], axis=0) / max(1, len(candidates) - 1)
    good = accuracy >= bar - 1
    report = {"column": args.column, "candidates": len(candidates), "original_accuracy": originals,
              "within_one_point_of": bar, "within": int(good.sum()), "vote_of": members, "rows": {},
              "raw": {"ids": ids, "base": base, "scores": scores, "cost": cost}}
    print(f"column {args.column}: {len(candidates)} candidates, {int(good.sum())} within one point of {bar:.2f}% "
          f"(original: {np.mean(originals):.2f}% over {len(originals)} seeds from scratch, spread "
          f"{np.ptp(originals):.2f}); vote of {', '.join(members)} (chosen on the fitting half)")
    print(f"{'proxy':>15} {'tau':>7} {'rho':>7} {'tau held':>9} {'rho held':>9} {'top10%':>7} {'ms':>8}")
    for name, s in table.items():
        tau, rho = correlations(s, accuracy)
        tau_h, rho_h = correlations(s[held], accuracy[held])
        ms = 1000 * cost.get(name, 0.0) / len(candidates)
        report["rows"][name] = {"tau": tau, "rho": rho, "tau_held": tau_h, "rho_held": rho_h,
                                "top10": top_precision(s, accuracy), "ms": ms}
        print(f"{name:>15} {tau:+7.3f} {rho:+7.3f} {tau_h:+9.3f} {rho_h:+9.3f} {top_precision(s, accuracy):7.2f} "
              f"{ms:8.1f}")
    latency = np.array([c["latency"] for c in candidates])
    faster = latency < FASTER
    for key, among, what in (("rules", np.ones(len(candidates), bool), "every candidate"),
                             ("rules_faster", faster, f"the candidates timed faster than {FASTER:g} of the original")):
        report[key] = rules({n: s[among] for n, s in table.items()}, macs[among], good[among], held[among])
        print(f"\nrules for 'within one point' among {what} (floors fitted on the fitting half; held-out half: "
              f"{int(good[among & held].sum())} of {int((among & held).sum())} within)")
        print(f"{'rule':>22} {'floor':>8} {'MAC floor':>9} {'kept':>5} {'precision':>9} {'recall':>7} {'F1':>5} "
              f"{'pooled P':>9} {'R':>5} {'F1':>5}")
        for name, r in sorted(report[key].items(), key=lambda kv: (-kv[1]["pooled_f1"], -kv[1]["f1"])):
            print(f"{name:>22} {r['floor']:8.3f} {r['mac_floor']:9.2f} {r['kept']:5d} {r['precision']:9.2f} "
                  f"{r['recall']:7.2f} {r['f1']:5.2f} {r['pooled_precision']:9.2f} {r['pooled_recall']:5.2f} "
                  f"{r['pooled_f1']:5.2f}")
    print("\nthe search's rules as shipped (nasir.search.capacity.RULES), judged on the held-out half / on every row")
    print(f"{'rule':>10} {'among':>8} {'kept':>5} {'precision':>9} {'recall':>7} {'F1':>5} {'all P':>6} {'R':>5} {'F1':>5}")
    report["shipped"] = {}
    for name, rule in RULES.items():
        kept = (table[rule.score] >= rule.floor if rule.score else np.ones(len(candidates), bool)) & (macs >= rule.mac_floor)
        for among, what in ((np.ones(len(candidates), bool), "every"), (faster, "faster")):
            part = among & held
            precision, recall = precision_recall(kept[part], good[part])
            all_precision, all_recall = precision_recall(kept[among], good[among])
            report["shipped"][f"{name} {what}"] = {"precision": precision, "recall": recall, "f1": f1(kept[part], good[part]),
                                                  "all_precision": all_precision, "all_recall": all_recall}
            print(f"{name:>10} {what:>8} {int(kept[part].sum()):5d} {precision:9.2f} {recall:7.2f} "
                  f"{f1(kept[part], good[part]):5.2f} {all_precision:6.2f} {all_recall:5.2f} {f1(kept[among], good[among]):5.2f}")
    out = Path(args.out) if args.out else work / f"proxies-{args.column}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
