"""``ncclsweep simulate``: replay tables, or the suite of stand-in boxes, to measure a search.

Two harnesses behind one command: ``study.replay`` counts the search's own launches on a table
(``--compare``, ``--summary``: launches to the optimum and to within a target), and ``study.night``
replays whole nights, the relaunches and the race counted too, and scores the export (``--suite``:
every stand-in box of ``study.suite``; ``--night``: the tables given). The flags, the checks of
their values (one line, exit 2) and what is printed live here; the harnesses take typed arguments.

    ncclsweep simulate docs/tables/motivating-space.csv --sampler model,tpe --compare
    ncclsweep simulate --suite --sampler model,tpe --seeds 20
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from orchestrator.config.job import DEFAULT_CONFIRM, DEFAULT_RELAUNCH
from orchestrator.config.sampler_options import SAMPLER_NAMES
from orchestrator.core import files
from orchestrator.core.errors import BadInput
from orchestrator.core.outcome import DEFAULT_PRUNE_RATIO
from orchestrator.study.simulation import night, suite
from orchestrator.study.simulation.replay import (
    DEFAULT_SAMPLERS,
    Noise,
    format_comparison,
    format_summary,
    format_table,
    run_simulation,
)
from orchestrator.study.simulation.replay_table import Table, load_table, write_table


def add_simulate_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of ``ncclsweep simulate`` / ``python -m orchestrator.study.simulation.simulate``."""
    parser.add_argument("tables", nargs="*", metavar="TABLE.csv",
                        help="replay table(s) (format: orchestrator.study.simulation.replay)")
    parser.add_argument("--suite", nargs="?", const=",".join(suite.NAMES), default=None, metavar="NAMES",
                        help="replay the suite's stand-in boxes (all, or these comma-separated: "
                             f"{', '.join(suite.NAMES)}, random-N) as whole nights: every launch counted")
    parser.add_argument("--suite-seed", type=int, default=0, metavar="N",
                        help="the suite's variant: 0 as written, N every effect size redrawn (default 0)")
    parser.add_argument("--night", action="store_true",
                        help="replay the tables as whole nights too (search, relaunches and the race counted; "
                             "--suite implies it)")
    parser.add_argument("--confirm", type=int, default=DEFAULT_CONFIRM,
                        help=f"a night's race launches (budget.confirm, default {DEFAULT_CONFIRM})")
    parser.add_argument("--relaunch", type=float, default=DEFAULT_RELAUNCH,
                        help=f"a night's share of relaunches (budget.relaunch, default {DEFAULT_RELAUNCH:g})")
    parser.add_argument("--write-suite", metavar="DIR", default=None,
                        help="also write every stand-in of --suite as a replay table in DIR")
    parser.add_argument("--sampler", default=DEFAULT_SAMPLERS,
                        help="comma-separated sampler specs name[:opt=value...], names: "
                             f"{', '.join(SAMPLER_NAMES)}; e.g. tpe,random,tpe:multivariate=false "
                             f"(default: {DEFAULT_SAMPLERS})")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per sampler (default 20)")
    parser.add_argument("--budget", type=int, default=None,
                        help=f"search launches per run (default: the table's size; a night: {night.DEFAULT_BUDGET})")
    parser.add_argument("--target", type=float, default=0.02, help="within this fraction of the best (default 0.02)")
    parser.add_argument("--repeats", type=int, default=3, help="benchmark repeats per launch (default 3)")
    parser.add_argument("--no-prune", dest="prune", action="store_false",
                        help="disable the early stop of clearly worse configs")
    parser.add_argument("--prune-ratio", type=float, default=DEFAULT_PRUNE_RATIO,
                        help=f"early stop when the first repeat is below this x best so far (default "
                             f"{DEFAULT_PRUNE_RATIO})")
    parser.add_argument("--parallel", type=int, default=1, help="trials in flight at once (default 1)")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="do not enqueue the table's baseline row first")
    parser.add_argument("--noise", type=float, default=None, metavar="CV",
                        help="every sample drawn around its row's median with this coefficient of variation "
                             "(0.01 = 1%%), instead of the table's noise column or recorded samples")
    parser.add_argument("--launch-noise", type=float, default=None, metavar="CV",
                        help="every launch's samples multiplied by one draw with this coefficient of variation, "
                             "instead of the table's launch_noise column")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--summary", action="store_true",
                       help="one line per table (median launches per sampler) instead of one block per table")
    shown.add_argument("--compare", action="store_true",
                       help="per table and search: first optimal launch, launches to within the target, runs "
                            "within it by --by-launch, hours")
    parser.add_argument("--by-launch", type=int, default=20, metavar="N",
                        help="--compare counts the runs within the target by launch N (default 20)")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write every run as JSON")
    return parser


def main_simulate(args: argparse.Namespace, out=None) -> int:
    """Run the harness for parsed ``add_simulate_args`` flags; print markdown. Returns 0.

    Bad input (a table, a sampler spec, a flag value) raises ``BadInput`` (exit 2).
    """
    out = out or sys.stdout
    if not 0 < args.target < 1:
        raise BadInput(f"--target must be between 0 and 1 (a fraction, 0.02 = 2%), not {args.target}")
    if args.repeats < 1:
        raise BadInput(f"--repeats must be >= 1, not {args.repeats}")
    for flag, cv in (("--noise", args.noise), ("--launch-noise", args.launch_noise)):
        if cv is not None and not 0 <= cv < 1:
            raise BadInput(f"{flag} must be a coefficient of variation between 0 and 1 (0.01 = 1%), not {cv}")
    noise = Noise(sample_cv=args.noise, launch_cv=args.launch_noise)
    if args.suite is not None or args.night:
        return _nights(args, noise, out)
    if not args.tables:
        raise BadInput("simulate needs a TABLE.csv, or --suite to replay the stand-in boxes")
    results = []
    for path in args.tables:
        try:
            results.append(run_simulation(path, args.sampler, seeds=args.seeds, budget=args.budget,
                                          target=args.target, repeats=args.repeats, use_pruning=args.prune,
                                          prune_ratio=args.prune_ratio, parallel=args.parallel,
                                          use_baseline=args.baseline, noise=noise, progress=sys.stderr))
        except BadInput:
            raise
        except ValueError as exc:  # sampler specs and options, seeds, budget
            raise BadInput(str(exc)) from None
    if args.summary:
        text = format_summary(results)
    elif args.compare:
        text = format_comparison(results, by=args.by_launch)
    else:
        text = format_table(results)
    print(text, file=out, end="")
    if args.json:
        files.write_whole(args.json, json.dumps([r.to_dict() for r in results], indent=1))
    return 0


def _nights(args: argparse.Namespace, noise: Noise, out) -> int:
    """``--suite`` / ``--night``: every table and sampler spec replayed as whole nights (``study.night``)."""
    if args.confirm < 0:
        raise BadInput(f"--confirm must be >= 0, not {args.confirm}")
    if not 0 <= args.relaunch <= 1:
        raise BadInput(f"--relaunch must be a share between 0 and 1, not {args.relaunch}")
    tables: list[Table] = [load_table(p) for p in args.tables]
    if args.suite is not None:
        names = [n.strip() for n in args.suite.split(",") if n.strip()]
        tables += [suite.stand_in(n, args.suite_seed) for n in names]
        if args.write_suite:
            for t in tables[len(args.tables):]:
                write_table(t, Path(args.write_suite) / f"{t.name}.csv")
    plan = [t.name for t in tables if t.by_level]
    if plan:
        raise BadInput(f"a night replays a table of one level; {', '.join(plan)} has several (drop --night)")
    specs = [s for s in args.sampler.split(",") if s.strip()]
    try:
        results = night.run_nights(tables, specs, seeds=args.seeds, budget=args.budget or night.DEFAULT_BUDGET,
                                   confirm=args.confirm, relaunch=args.relaunch, repeats=args.repeats,
                                   prune_ratio=args.prune_ratio if args.prune else None, noise=noise,
                                   progress=sys.stderr)
    except ValueError as exc:  # sampler specs and options
        raise BadInput(str(exc)) from None
    print(night.format_suite(results), file=out)
    if args.json:
        files.write_whole(args.json, json.dumps([night.to_dict(r) for r in results], indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = add_simulate_args(argparse.ArgumentParser(
        prog="python -m orchestrator.study.simulation.simulate",
        description="Replay tables to measure search efficiency."))
    args = parser.parse_args(argv)
    try:
        return main_simulate(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
