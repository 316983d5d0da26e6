"""Per-layer evidence of operator synthesis (issue 55, deliver 4), as NAS-PTE's Fig. 6: for each
distinct conv of a model, the fastest synthesised operator against the fastest fixed transform
of the search's menu on the same layer, at equal MACs or fewer and mixing at least as strong.

    python experiments/synth_layers.py                        # ResNet-34 cifar10, flops 0.5, depth 3
    python experiments/synth_layers.py --dataset imagenet --out experiments/data/synth-layers.json
    python experiments/synth_layers.py --bottom-up             # operators grown from the output, depth 5

Each layer runs alone (`standalone`, the search's kernel timings, 1 thread, llvm for this CPU).
Fixed transforms: the menu's choices that stay one nest on a lone layer (group 2-16, depthwise,
fold-kh, fold-kw; a channel bottleneck changes the layer's output and needs its neighbours).
Synthesised: `synthesize(flops=...)`, or with `--bottom-up` `synthesize_bottom_up`. S rivals fixed
transform F when MACs(S) is within `EQUAL_MACS` of MACs(F) (MACs as compiled, `computed_macs`: an
expanded window is summed once) and its mixing strength(S) >= strength(F) (alphaNAS's levels
summed); for each F the first `--time` rivals in synthesis's ranking are timed. A row per layer and
F with a rival: F, the fastest of its rivals, time(F) / time(S); then per F the median over the
layers.

Measured (AMD EPYC Zen 3, znver3, 2 cores, 1 thread, 2026-11-29, fresh kernel caches, after
53cd300: kernels timed as compiled, an expanded window summed first; before it an `expand`ed
operator was timed unsummed, up to 2.4x slow, and this table read 0.36-1.63x), ResNet-34
cifar10, flops 0.5, 11 distinct convs. Synthesised over fixed, median over the layers (range):

| against   | top-down, depth 3 (66 pairs)  | bottom-up, depth 5 (25 pairs) |
|-----------|-------------------------------|-------------------------------|
| group2    | 0.76x (0.08-1.30), 10 layers  | no rival                      |
| group4    | 0.85x (0.50-1.11), 10         | no rival                      |
| group8    | 1.03x (0.62-1.32), 10         | 0.99x (0.67-1.34), 7          |
| group16   | 0.97x (0.51-1.65), 10         | 0.93x, 1                      |
| depthwise | 1.42x (0.77-2.22), 10         | 1.04x (0.66-2.05), 7          |
| fold-kh   | 1.14x (0.90-1.29), 8          | 1.16x (0.98-1.52), 5          |
| fold-kw   | 1.30x (1.00-1.71), 8          | 1.23x (1.19-1.40), 5          |

Data: experiments/data/synth-layers-znver3.json (top-down) and synth-layers-bottom-up-znver3.json.
Half the pairs go to synthesis (top-down 33 of 66, bottom-up 15 of 25). Its winners are the conv's
own mixing at a third of its MACs: a window whose rows (or columns) share one weight, summed once
(`expand kh`; bottom-up `broadcast 1; unfold-sum 1 3; unfold 2 3; reduce c`), against a fold;
against depthwise, on the layers that double the channels, a depthwise conv with 2 outputs per input
channel (`split co 2, tie ci to co_o`, with a shift, a dilation or an expanded window). Where it
loses, its operator is one the llvm schedules serve badly: channels grouped by parity (split co and
ci, tie the inner parts: group2 up to a permutation of the channels; 0.08x on layer4.0.conv1, 512
channels on 4 x 4 at stride 2). Bottom-up at depth 5 reaches no grouped operator (7 steps: split,
broadcast, share, reduce, merge and two windows), so it has no rival for group2 and group4.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import nasir
from nasir.measure.kernels import KernelTimes, default_kernel_cache, standalone
from nasir.search.bottom_up import synthesizer
from nasir.search.synthesis import (NEST, Operator, distinct_convs, fixed_keys, layer_nest, strength, structure_key,
                                    weight_count)
from nasir.transforms.presum import computed_macs

FIXED = {f"group{g}": f"group{{factor={g} layers={NEST}}}" for g in (2, 4, 8, 16)}
FIXED.update({"depthwise": f"depthwise{{layers={NEST}}}", "fold-kh": f"fold{{dim=kh layers={NEST}}}",
              "fold-kw": f"fold{{dim=kw layers={NEST}}}"})


def fixed_operators(alone: nasir.Model, cap: float) -> dict[str, Operator]:
    """The menu's transforms of the lone layer within `cap` MACs (not timed yet)."""
    out = {}
    for name, pipeline in FIXED.items():
        try:
            made = alone.transform(pipeline)
        except nasir.NasirError:
            continue
        op = layer_nest(made)
        macs = computed_macs(op)
        if macs <= cap:
            out[name] = Operator((pipeline,), made, macs, weight_count(made, op))
    return out


EQUAL_MACS = (0.75, 1.05)
"""The MACs of a synthesised operator that stands against a fixed transform's, as fractions of
those: a rival with far fewer MACs would win on MACs alone; 5% over lets a window summed first
(`expand`: a third of the MACs and the input's sums) stand against a fold (a third)."""


def rivals(s: Operator, f: Operator) -> bool:
    """Whether synthesised `s` may stand against fixed `f`: about the same MACs, mixing as strong."""
    lo, hi = EQUAL_MACS
    return lo * f.macs <= s.macs <= hi * f.macs and strength(s.mixing) >= strength(f.mixing)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet34")
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--flops", type=float, default=0.5)
    p.add_argument("--depth", type=int, help="steps at most (default 3; 5 with --bottom-up)")
    p.add_argument("--bottom-up", action="store_true", help="operators grown from the output's coordinates")
    p.add_argument("--time", type=int, default=4, help="synthesised operators timed per fixed transform they may rival")
    p.add_argument("--out", type=Path, help="write the rows as JSON")
    args = p.parse_args(argv)
    model = nasir.zoo.load(args.model, dataset=args.dataset).transform("convert-nn-to-nest")
    times = KernelTimes(default_kernel_cache(), None, 1)
    rows = []
    for op in distinct_convs(model):
        alone = standalone(model, op, planes=False)
        walk, depth = synthesizer(args.bottom_up, args.depth)
        found = walk(alone, NEST, flops=args.flops, depth=depth)
        fixed = fixed_operators(alone, args.flops * found.original.macs)
        # for each fixed transform, the first --time operators of synthesis's ranking that may rival
        # it, none of them an operator the menu makes (split co and ci by 2, tie: group2 again)
        menu = fixed_keys(alone)
        novel = [s for s in found.operators if structure_key(s.op) not in menu]
        timed = list({id(s): s for f in fixed.values()
                      for s in [s for s in novel if rivals(s, f)][:args.time]}.values())
        for o in [found.original, *fixed.values(), *timed]:
            o.ms = times.nest_ms(o.model, o.op)
        for name, f in sorted(fixed.items(), key=lambda kv: kv[1].ms):
            rival = min((s for s in timed if rivals(s, f)), key=lambda o: o.ms, default=None)
            if rival is None:
                print(f"{op.layer_name:44s} {name:9s} no synthesised rival", flush=True)
                continue
            row = dict(layer=op.layer_name, shape=[e for _, e in op.domain.dims], layer_ms=found.original.ms,
                       fixed=name, fixed_macs=f.macs / found.original.macs, fixed_ms=f.ms, fixed_mixing=f.mixing,
                       synth=rival.pipeline.replace(f" layers={NEST}", ""), synth_macs=rival.macs / found.original.macs,
                       synth_ms=rival.ms, synth_mixing=rival.mixing, gain=f.ms / rival.ms, formula=rival.formula,
                       operators=len(found.operators), redundancy=found.redundancy)
            rows.append(row)
            print(f"{op.layer_name:44s} {name:9s} {row['fixed_macs']:.2f}x {f.ms:.3f} ms {f.mixing} | {row['synth']} "
                  f"{row['synth_macs']:.2f}x {rival.ms:.3f} ms {rival.mixing} | {row['gain']:.2f}x", flush=True)
    for name in FIXED:
        gains = sorted(r["gain"] for r in rows if r["fixed"] == name)
        if gains:
            print(f"against {name}: {len(gains)} layers, synthesised over fixed median {gains[len(gains) // 2]:.2f}x "
                  f"({gains[0]:.2f}-{gains[-1]:.2f}x)")
    print(platform.processor() or platform.machine())
    if args.out:
        args.out.write_text(json.dumps({"config": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
