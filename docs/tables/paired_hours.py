"""Two searches replayed on the same seeds, compared seed by seed: `simulate --json` in, one
summary out (docs/benchmarks.md, "Hours to the best").

    python -m orchestrator simulate docs/tables/motivating-case-startup.csv \
        --sampler tpe,tpe:cost=off --seeds 200 --budget 40 --json /tmp/hours.json
    python docs/tables/paired_hours.py /tmp/hours.json

For the first two samplers of each table: median (nearest rank, as in the tables) and mean
hours and launches to within the target (a run that never got there counts with its whole budget's hours and budget + 1
launches), the seeds each one won, the medians per block of 20 seeds (how much one 20-seed
table moves), and seeded bootstrap 95% intervals of the ratios of medians and of means.
"""

from __future__ import annotations

import json
import random
import statistics
import sys

from orchestrator.study.simulation.replay import nearest_rank

BLOCK = 20


def median(values: list[float]) -> float:
    """The nearest-rank median, as the simulate tables state it."""
    return nearest_rank(values, 0.5)

RESAMPLES = 4000


def _hours(run: dict) -> float:
    return run["hours_to_target"] if run["hours_to_target"] is not None else run["hours"]


def _launches(run: dict, budget: int) -> int:
    return run["launches_to_target"] if run["launches_to_target"] is not None else budget + 1


def _interval(a: list[float], b: list[float], stat) -> tuple[float, float]:
    rng = random.Random(0)
    n = len(a)
    ratios = []
    for _ in range(RESAMPLES):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(stat([a[i] for i in idx]) / stat([b[i] for i in idx]))
    ratios.sort()
    return ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]


def summary(table: dict) -> str:
    one, two = table["samplers"][:2]
    budget = table["budget"]
    by_seed = {r["seed"]: r for r in two["runs"]}
    pairs = [(r, by_seed[r["seed"]]) for r in one["runs"] if r["seed"] in by_seed]
    ha, hb = [_hours(a) for a, _ in pairs], [_hours(b) for _, b in pairs]
    la, lb = [_launches(a, budget) for a, _ in pairs], [_launches(b, budget) for _, b in pairs]
    a, b = one["spec"], two["spec"]
    lines = [f"{table['table']}: {a} against {b}, {len(pairs)} seeds (the same seeds)",
             f"  hours to within {table['target']:.0%}: median {median(ha):.2f} vs "
             f"{median(hb):.2f}, mean {statistics.fmean(ha):.2f} vs {statistics.fmean(hb):.2f}",
             f"  launches: median {median(la):g} vs {median(lb):g}, "
             f"mean {statistics.fmean(la):.2f} vs {statistics.fmean(lb):.2f}",
             f"  seeds with fewer hours: {a} {sum(x < y - 1e-9 for x, y in zip(ha, hb))}, "
             f"{b} {sum(y < x - 1e-9 for x, y in zip(ha, hb))}; fewer launches: "
             f"{a} {sum(x < y for x, y in zip(la, lb))}, {b} {sum(y < x for x, y in zip(la, lb))}"]
    lo, hi = _interval(ha, hb, median)
    mlo, mhi = _interval(ha, hb, statistics.fmean)
    lines.append(f"  hours {a} / {b}: ratio of medians {median(ha) / median(hb):.2f} "
                 f"(95% {lo:.2f}-{hi:.2f}), of means {statistics.fmean(ha) / statistics.fmean(hb):.2f} "
                 f"(95% {mlo:.2f}-{mhi:.2f})")
    blocks = []
    for start in range(0, len(pairs) - BLOCK + 1, BLOCK):
        x, y = ha[start:start + BLOCK], hb[start:start + BLOCK]
        blocks.append(f"{pairs[start][0]['seed']}-{pairs[start + BLOCK - 1][0]['seed']}: "
                      f"{median(x):.2f} vs {median(y):.2f}")
    if blocks:
        lines.append(f"  median hours per {BLOCK} seeds: " + "; ".join(blocks))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python docs/tables/paired_hours.py SIMULATE.json", file=sys.stderr)
        return 2
    for table in json.loads(open(argv[0]).read()):
        if len(table.get("samplers") or []) >= 2:
            print(summary(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
