"""`python -m nasir.fuzz`: draw random CNN graphs with fresh seeds for as long as asked and check
each against ONNX Runtime (`nasir.fuzz.differential`); `make fuzz MINUTES=30` runs it.

    python -m nasir.fuzz --minutes 30 --out fuzz-out
    [  1.0 min] 52 cases (0.87/s): 49 agree, 3 refused, 0 mismatches
    ...
    then: cases per lowering choice and per transition, refusals by reason

Every mismatch is saved as OUT/mismatch-SEED.onnx, with the one command that reproduces it
(`nasir check ... --checked`) printed and appended to OUT/mismatches.txt; `--seed S --cases 1`
draws the same graph again. Exit status 1 when any case mismatched.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx

from nasir.fuzz.choices import transition_name
from nasir.fuzz.differential import check_case, reproduction
from nasir.fuzz.graphs import SeededDraw, random_case
from nasir.lowering.target import host_target, resolve_target

WIDTHS = ("x86-64-v3", "x86-64-v4")
"""AVX2 and AVX-512 code: the fuzzer runs what it compiles, so by default the ones this host runs."""


def host_cpus() -> str:
    """The CPUs of `WIDTHS` whose code runs here (both on an AVX-512 machine, AVX2 on an AVX2 one)."""
    return ",".join(cpu for cpu in WIDTHS if resolve_target(cpu).lanes <= host_target().lanes)


def coverage_table(title: str, counts: Counter) -> str:
    """`title`, then one line per key: its count of cases, most first."""
    return "\n".join([title] + [f"  {n:6d}  {key}" for key, n in counts.most_common()])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nasir.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long to draw cases (default 30)")
    p.add_argument("--cases", type=int, default=0, help="stop after this many cases (default: no limit)")
    p.add_argument("--seed", type=int, default=None, help="the first seed (default: from the clock)")
    p.add_argument("--cpus", default=host_cpus(),
                   help=f"CPUs the cases are compiled for (default: those of {', '.join(WIDTHS)} this machine runs)")
    p.add_argument("--out", default="fuzz-out", help="folder of the mismatches (default fuzz-out)")
    p.add_argument("--every", type=float, default=60.0, help="seconds between progress lines (default 60)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seed = int(time.time()) if args.seed is None else args.seed
    cpus = args.cpus.split(",")
    host = host_target()
    for cpu in cpus:
        lanes = resolve_target(cpu).lanes
        if lanes > host.lanes:
            p.error(f"{cpu}'s code ({lanes}-lane vectors) cannot run on this CPU ({host.cpu}, {host.lanes} lanes), "
                    "and the fuzzer runs what it compiles: leave --cpus out")
    statuses, choices, transitions, refusals = Counter(), Counter(), Counter(), Counter()
    start = last = time.monotonic()
    print(f"fuzzing from seed {seed} for {args.minutes:g} min, CPUs {', '.join(cpus)}; mismatches in {out}/",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="nasir-fuzz-") as tmp:
        while time.monotonic() - start < args.minutes * 60 and not (args.cases and statuses.total() >= args.cases):
            case = random_case(SeededDraw(seed), cpus)
            outcome = check_case(case, Path(tmp) / "case.onnx")
            statuses[outcome.status] += 1
            if outcome.choices is not None:
                choices.update(outcome.choices.labels())
                transitions.update(transition_name(t) for t in outcome.choices.transitions)
            if outcome.status == "refused":
                refusals[outcome.detail.split(":")[0] + ": " + outcome.detail.split(": ", 1)[-1][:100]] += 1
            if outcome.status == "mismatch":
                path = out / f"mismatch-{seed}.onnx"
                onnx.save(case.model, str(path))
                line = f"{reproduction(path, case)}  # seed {seed}: {outcome.detail}"
                with open(out / "mismatches.txt", "a") as f:
                    f.write(line + "\n")
                print(f"MISMATCH {line}", flush=True)
            seed += 1
            now = time.monotonic()
            if now - last >= args.every:
                last = now
                print(progress_line(statuses, now - start), flush=True)
    print(progress_line(statuses, time.monotonic() - start))
    print(coverage_table("cases per lowering choice:", choices))
    print(coverage_table("cases per transition (producer, layout, consumer):", transitions))
    if refusals:
        print(coverage_table("refusals by reason:", refusals))
    print(f"next seed: {seed}")
    return 1 if statuses["mismatch"] else 0


def progress_line(statuses: Counter, seconds: float) -> str:
    n = statuses.total()
    return (f"[{seconds / 60:5.1f} min] {n} cases ({n / max(seconds, 1e-9):.2f}/s): {statuses['agree']} agree, "
            f"{statuses['refused']} refused, {statuses['mismatch']} mismatches")


if __name__ == "__main__":
    sys.exit(main())
