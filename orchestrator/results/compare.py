"""``ncclsweep compare``: does the winner hold at higher concurrency?

Relaunches the baseline and the best config in rounds, and measures total output tok/s at
each concurrency in every launch. Each round launches every config once, in alternating
order (baseline, best | best, baseline | ...), so the drift of the machine over a round
falls on both sides and a lucky single launch cannot carry the result. The ratio best /
baseline at each concurrency comes with a confidence interval from the per-round ratios
(``verdict.py``): "faster" or "slower" only when that interval lies off 1.0, otherwise
"within noise" with the interval, and with no interval (one round) "not shown". Baseline and
best being the same config (the baseline was never beaten) is never a verdict: the interval
then measures the noise between launches of one config.

While it runs it says, after every launch, what that launch measured at each level and the
time to go (``core.pace``), and after every round the running verdict at each level; in a
terminal a status line shows the launch in progress (its start-up phases, then what it
measures).

``compare.json`` is rewritten after every launch (temp file + rename, so it is always a
whole JSON document): a compare that is interrupted or crashes keeps every finished launch,
and ``complete`` says whether all rounds ran. The report renders it.

Every launch is evidence: each launch that measured every level of the study's objective is also
recorded in the study, an uncounted trial of its config (``launch_role`` "compare",
``record_launch``), so the study's figures (medians over launches), its launch noise and every
verdict the last line, ``status``, ``report`` and ``export`` print include it; compare closes with
the study's verdict over every launch (``study_lines``). Compare's own intervals are paired by
round: each round relaunches every config, so they are over launches already.

``also`` adds other trials' configs to every round (``"ties"``: the runners-up within the
noise of the best): configs that single-request decode cannot rank may still differ under
load, e.g. by how many requests they batch. Each is shown against the best, with the same
rule.

``run_compare_plan`` (``compare --plan``) relaunches a plan's configs (``study.plan``: the
best at each level of the objective, the mix's) with the baseline in the same interleaved
rounds, each launch measured at every level the way a trial is (``node.measure``: level 1
is single-request decode tok/s, not total tok/s), into ``compare-plan.json``; at each level
where the plan picks another config than the best at the lowest level, the paired interval
says whether it wins there beyond noise.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.core import logs, verdict
from orchestrator.core.errors import BadInput, RuntimeFailure
from orchestrator.core.golden_check import disputed
from orchestrator.core.level import key as level_key
from orchestrator.core.level import parse as parse_level
from orchestrator.core.measurement import LATENCY_KINDS, QUANTILES, Latency, LevelResult, cache_text
from orchestrator.core.pace import Pace
from orchestrator.core.records import COMPLETE, TrialResult, TrialRow
from orchestrator.core.slo import breaches
from orchestrator.node.hostload import HostSampler
from orchestrator.node.measure import Benchmark, measure
from orchestrator.node.phases import LAUNCHING, WARMING_UP, PhaseReporter, TrialPhase
from orchestrator.node.server import ServerError
from orchestrator.node.spec import BenchPlan, TrialSpec
from orchestrator.node.trial import prepare_server
from orchestrator.results import compare_file
from orchestrator.results.compare_file import BASELINE, BEST, CompareFile, Config, Failed, Judged, Launch
from orchestrator.study.evidence.history import TOP_N, baseline_row, best_rows, ties_with_best, trial_rows
from orchestrator.study.evidence.launches import COMPARE, Evidence
from orchestrator.study.evidence.plan import build_plan
from orchestrator.study.storage import objective as objectives
from orchestrator.study.storage.storage import ATTR_LAUNCH_ROLE, add_uncounted_trial, open_study

if TYPE_CHECKING:
    from orchestrator.config.job import Job

# Rounds of interleaved launches. A t-interval from n rounds has half-width
# t(0.975, n-1) * sd / sqrt(n): 9.0 sd at 2 rounds (no verdict possible), 2.5 at 3, 1.6 at 4,
# 1.24 at 5, 1.05 at 6. Five is where another round stops paying for itself (docs/benchmarks.md).
DEFAULT_ROUNDS = 5


class Said:
    """What a compare says while it runs (module docstring): a line per launch and per round
    through ``say``, and the launch in progress on the terminal's status line."""

    def __init__(self, say, launches: int, head: str, rounds: int = 1):
        self.say = say
        self.pace = Pace(launches, "launch")
        self.head = head  # "compare" or "compare --plan"
        self.rounds = rounds  # the rounds each launch measures a level (the status line's counts)
        self.now = ""  # "round 2/5: best (trial #4)"

    def launching(self, now: str) -> PhaseReporter:
        """A launch begins; its phases (the server's start-up, then the measurement) go to the
        status line."""
        self.now = now
        return PhaseReporter(0, self._show, rounds=self.rounds)

    def _show(self, phase: TrialPhase) -> None:
        logs.status(f"{self.head} {self.now} {phase.text()} | launch {self.pace.done + 1} of {self.pace.total}, "
                    f"{self.pace.said()}")

    def measured(self, figures: str) -> None:
        """The launch is done: what it measured, and the time to go."""
        self.pace.step_done()
        logs.status("")
        self.say(f"{self.head} {self.now}: {figures} ({self.pace.said()})")

    def round_done(self, r: int, rounds: int, lines: list[str]) -> None:
        """Round ``r`` (0-based) is complete: the verdict so far, a line per level."""
        self.say(f"{self.head} after round {r + 1}/{rounds}, so far:")
        for line in lines:
            self.say(f"  {line}")


@dataclass(frozen=True)
class Measured:
    """What one launch measured at each level (``LevelResult``), the levels that failed and why,
    or why the whole launch failed (``error``)."""

    levels: dict[str, LevelResult]
    failed: dict[str, Failed]
    error: str | None = None

    def launch(self, round_no: int, label: str, trial: int, seconds: float) -> Launch:
        return Launch(round_no, label, trial, seconds, self.levels, self.failed, self.error)


@contextmanager
def launched(job: Job, config: dict, label: str, log_name: str, report: PhaseReporter | None = None) -> Iterator[Any]:
    """A server of ``config`` started and healthy for one measurement (its launch spec and the
    server's process group), stopped after it; a start that fails is one RuntimeFailure naming the
    config and its log. ``report`` hears the start-up phases its log names."""
    folder = job.dir
    log_path = folder.compare_logs / log_name
    proc, launch, _ = prepare_server(job.backend_obj(), config, "127.0.0.1", dict(job.env), log_path,
                                     str(folder.servers), on_output=report.server_output if report else None)
    if report is not None:
        report.phase(LAUNCHING)
    try:
        record = proc.start()
        started = time.monotonic()
        try:
            proc.wait_ready(job.timeouts.startup_s)
            proc.wait_serving(job.timeouts.startup_s - (time.monotonic() - started))
        except ServerError as exc:
            raise RuntimeFailure(f"compare: the {label} config did not start ({exc}); log: {log_path}") from None
        yield launch, record.pgid
    finally:
        proc.stop(job.timeouts.teardown_s)


def measure_launch(job: Job, row: TrialRow, label: str, log_name: str, bench: BenchPlan,
                   report: PhaseReporter | None = None) -> Measured:
    """One launch of ``row``'s config, measured as a trial measures it (``node.measure``: level 1
    decode tok/s over the prompts, level N total tok/s of N sustained streams), recorded in the
    study (``record_launch``): each level's record, or the level that failed (``compare``) and why.
    Each step is told to ``report`` (the status line)."""
    started = time.time()
    with launched(job, row.params, label, log_name, report) as (launch, pgid):
        if report is not None:
            report.phase(WARMING_UP)
        host = HostSampler(pgid)
        got = measure(launch.base_url, launch.model_name, bench, deadline=time.monotonic() + bench.timeout_s,
                      metrics_url=launch.metrics_url, progress=report.measuring if report else None)
        got = dataclasses.replace(got, measurement=dataclasses.replace(got.measurement, host=host.finish()))
    record_launch(job, row, got, started)
    levels = {str(lv): rec for lv, rec in got.measurement.levels.items()}
    if got.ok:
        return Measured(levels, {})
    failed = str(got.failed_level or min(bench.levels))
    levels.pop(failed, None)
    return Measured(levels, {failed: Failed(1, (got.error or "the benchmark failed",))},
                    got.error or "the benchmark failed")


def measure_levels(job: Job, row: TrialRow, levels: list[int], label: str, round_no: int,
                   report: PhaseReporter | None = None) -> Measured:
    """One ``compare`` launch: ``levels``, one round each (``measure_launch``)."""
    bench = replace(TrialSpec.from_job(job, 0, row.params).bench, levels=tuple(sorted(levels)), constraint_levels=(),
                    repeats=1, max_repeats=None, target_rel_ci=None, warmup=max(1, job.bench.warmup), goodput=None)
    return dataclasses.replace(measure_launch(job, row, label, f"{label}-{round_no}.log", bench, report), error=None)


def record_launch(job: Job, row: TrialRow, got: Benchmark, started: float) -> int | None:
    """A compare launch into the study as evidence (module docstring): an uncounted trial of the
    config, when it measured every level of the objective (what Optuna is told of it); its number,
    or None when not recorded (a failed benchmark, a level of the objective not measured)."""
    if not got.ok or got.measurement is None:
        return None
    first = objectives.levels(job.objective)[0]
    result = TrialResult(outcome=COMPLETE, config=dict(row.params),
                         value=got.measurement.value_at(first) or got.measurement.value, measurement=got.measurement,
                         started_at=started, ended_at=time.time(), timing={"total_s": time.time() - started})
    if not objectives.has_values(job.objective, result):
        return None
    study = open_study(job)
    return add_uncounted_trial(study, result, dict(row.params), row.config_key, job.space.distributions(),
                               {ATTR_LAUNCH_ROLE: COMPARE}, values=objectives.told_values(job.objective, result))


def study_lines(job: Job) -> list[str]:
    """The study's verdict over every launch after compare's (the best against the baseline at each
    level of the objective), as its last line, ``report`` and ``export`` now say it."""
    rows = trial_rows(open_study(job, create=False))
    plan = build_plan(rows, job.objective)
    out = []
    for lp in plan.per_level:
        if lp.best is None or lp.vs_baseline is None:
            continue
        where = f" at {lp.level}" if plan.levels != (1,) else ""
        out.append(f"The study's verdict{where} over every launch (compare's included): best #{lp.best.number} "
                   f"{lp.best_value:.1f} {lp.unit} (median of {lp.best_launches}) = "
                   f"{lp.vs_baseline.than('the baseline')}.")
        fresh = plan.evidence.compared(plan.baseline.config_key, lp.best.config_key, lp.level) \
            if plan.evidence is not None and plan.baseline is not None and not lp.vs_baseline.same_config else None
        if fresh is not None and lp.vs_baseline.beyond_noise and verdict.verdict(fresh) == verdict.WITHIN_NOISE:
            out.append(f"On compare's fresh launches alone{where} it is within noise: {verdict.describe(fresh)}; the "
                       "machine may have changed since the study: the best is not shown to beat the baseline now.")
    return out


def run_compare(job: Job, levels: list[int] | None = None, rounds: int | None = None, say=print,
                also: list[int] | str | None = None) -> str:
    """The baseline and the best (and the ``also`` trials) relaunched in interleaved rounds
    (``compare_rounds``): the table, then the study's verdict over every launch (``study_lines``)."""
    return "\n".join([format_compare(compare_rounds(job, levels, rounds, say, also)), *study_lines(job)])


def _no_baseline_or_best(rows: list[TrialRow], what: str) -> RuntimeFailure:
    """Why there is nothing to compare: the golden reference in question, else ``what`` is missing."""
    why = disputed(rows)
    if why:
        return RuntimeFailure(f"nothing to compare: {why}; no config is best while the golden reference is in "
                              "question")
    return RuntimeFailure(what)


def refuse_by_rate(job: Job, what: str = "compare") -> None:
    """A study by request rate (``objective.goodput.max_rate``) is refused in one line, before anything
    is read or launched: compare's figure is total tok/s at a concurrency (a closed loop), and such a
    study ranks by the capacity an open loop finds, so its verdict would answer another question; a
    config's capacity by rate is re-measured by ``bench`` (every probe and the capacity, docs/guide.md)."""
    if not objectives.of(job.objective).open_loop:
        return
    raise BadInput(f"{what} measures total tok/s at concurrencies (a closed loop), not the capacity by request rate "
                   f"this study ranks by; re-measure a config's capacity by rate with `ncclsweep export {job.path} "
                   f"--format yaml -o best.yaml` and `ncclsweep bench {job.path} --config best.yaml` (every rate "
                   f"probed, the capacity); `ncclsweep report {job.path}` draws each config's curve against "
                   "request rate",
                   file=str(job.path), key="objective.goodput.max_rate")


def compare_rounds(job: Job, levels: list[int] | None = None, rounds: int | None = None, say=print,
                   also: list[int] | str | None = None) -> CompareFile:
    """Measure the rounds; the whole record, as ``compare.json`` holds it (rewritten after every
    launch). A study by request rate is refused (``refuse_by_rate``)."""
    refuse_by_rate(job)
    rows = trial_rows(open_study(job, create=False))
    base = baseline_row(rows)
    ranked = best_rows(rows, 1)
    best = ranked[0] if ranked else None
    if base is None or best is None:
        raise _no_baseline_or_best(rows, "compare needs a completed baseline and a completed best trial; run the "
                                         "study first")
    others = _also_rows(rows, best, base, also)
    levels = levels or list(job.bench.concurrency)
    rounds = max(1, DEFAULT_ROUNDS if rounds is None else rounds)
    configs = [(BASELINE, base), (BEST, best)] + [(f"trial-{r.number}", r) for r in others]
    record = CompareFile(
        concurrency=tuple(levels), rounds_planned=rounds, baseline_trial=base.number, best_trial=best.number,
        same_config=base.config_key == best.config_key,
        configs=tuple(Config(label, row.number, row.params if i >= 2 else {})  # the file names the others' params
                      for i, (label, row) in enumerate(configs)),
        slo=job.slo, rules=tuple((int(rule.concurrency), float(rule.min_ratio))
                                 for rule in getattr(job, "constraints", ()) or ()))

    def measured(label: str, row: TrialRow, r: int, report: PhaseReporter) -> Measured:
        return measure_levels(job, row, levels, label, r, report)

    def so_far(now: CompareFile) -> list[str]:
        return [f"at {c}: best vs the baseline {v.text}" for c, v in now.level_verdicts().items()]

    return _rounds(record, configs, measured, Said(say, rounds * len(configs), "compare"), job.dir.compare, so_far)


def _rounds(record: CompareFile, configs: list[tuple[str, TrialRow]], measured, said: Said, out: Path,
            so_far) -> CompareFile:
    """Launch every config once per round, in alternating order (baseline, best | best, baseline |
    ...), the file rewritten after every launch; an interruption (Ctrl-C included) records why the
    rounds stopped, then is raised."""
    rounds = record.rounds_planned or 1
    try:
        for r in range(rounds):
            for label, row in (configs if r % 2 == 0 else configs[::-1]):
                t0 = time.monotonic()
                got = measured(label, row, r, said.launching(f"round {r + 1}/{rounds}: {label} (trial #{row.number})"))
                record = record.launched(got.launch(r, label, row.number, time.monotonic() - t0),
                                         _failures(record, label, r, got))
                compare_file.write(out, record)
                said.measured(got.launch(r, label, row.number, 0.0).figures())
            said.round_done(r, rounds, so_far(record))
        record = dataclasses.replace(record, complete=True)
    except BaseException as exc:  # Ctrl-C included: record why the rounds stopped, then re-raise
        logs.status("")
        compare_file.write(out, dataclasses.replace(record, stopped=f"{type(exc).__name__}: {exc}".rstrip(": ")))
        raise
    compare_file.write(out, record)
    return record


def _failures(record: CompareFile, label: str, r: int, got: Measured) -> tuple[str, ...]:
    """The lines a failed launch adds to the file's ``failures``."""
    if record.plan:
        return (f"{label} round {r}: {got.error}",) if got.error else ()
    return tuple(f"{label} round {r} c={level}: {f.failures} failed requests ({list(f.errors[:1])})"
                 for level, f in got.failed.items())


def _also_rows(rows: list[TrialRow], best: TrialRow, base: TrialRow,
               also: list[int] | str | None) -> list[TrialRow]:
    """The rows of the ``also`` trials (numbers, or "ties"), each config once, never baseline/best.

    A number the user gives must add a config: one that is the baseline's, the best's or one
    given before in ``--also`` is refused (it would be measured in no extra column)."""
    if not also:
        return []
    every_round = {base.config_key: ("the baseline", base.number), best.config_key: ("the best", best.number)}
    picked: list[TrialRow] = []
    if isinstance(also, str):  # "ties" (parse_also gives no other string)
        picked = [r for r in ties_with_best(best_rows(rows, TOP_N), Evidence(rows), _level(rows))
                  if r.config_key not in every_round]
    else:
        ranked = {r.number: r for r in best_rows(rows, len(rows))}
        by_key = {r.config_key: r for r in ranked.values()}
        others = ", ".join(str(k) for k in sorted(ranked) if ranked[k].config_key not in every_round) or "none"
        given: dict[str, int] = {}
        for n in also:
            row = next((r for r in rows if r.number == n), None)
            if row is None or row.config_key not in by_key:
                raise BadInput(f"--also: trial {n} is not a measured, ranked trial of this study; "
                               f"ranked trials: {', '.join(str(k) for k in sorted(ranked))}")
            if row.config_key in every_round:
                who, number = every_round[row.config_key]
                what = f"is {who}" if number == n else f"has the config of {who} (trial {number})"
                raise BadInput(f"--also: trial {n} {what}, which every round measures already; --also takes "
                               f"other ranked trials: {others}")
            if row.config_key in given:
                twice = "is given twice" if given[row.config_key] == n else \
                    f"has the config of trial {given[row.config_key]}, given before"
                raise BadInput(f"--also: trial {n} {twice} in --also; give each config once")
            given[row.config_key] = n
            picked.append(by_key[row.config_key])
    out: list[TrialRow] = []
    for r in picked:
        if r.config_key not in {o.config_key for o in out}:
            out.append(r)
    return out


def _level(rows: list[TrialRow]) -> int:
    """The level a job of one level is judged at: its trials' headline."""
    head = next((r.headline for r in rows if r.headline is not None), None)
    return head.level if head is not None else 1


# ---- the table ---------------------------------------------------------------------------------------
def closing_lines(record: CompareFile, verdicts: dict[str, Judged]) -> list[tuple[str, str]]:
    """("warn"|"p", sentence): what the rounds establish, in the words both the command and the
    report print. A loss is only claimed beyond noise."""
    by: dict[str, list[str]] = {}
    for c, v in verdicts.items():
        by.setdefault(v.verdict, []).append(f"{c} ({v.short})" if v.verdict == verdict.SLOWER else c)
    n = record.rounds_done
    lines: list[tuple[str, str]] = []
    if record.same_config:
        lines.append(("p", f"Baseline and best are the same config (trial #{record.best_trial}): no verdict; "
                           f"the intervals show how much launches of one config differ over {n} round(s)."))
        return lines
    if by.get(verdict.SLOWER):
        lines.append(("warn", "the best config is SLOWER than the baseline beyond noise at concurrency "
                              + ", ".join(by[verdict.SLOWER])
                              + ". Deploy it only where requests run at the concurrencies where it wins."))
    if by.get(verdict.FASTER):
        lines.append(("p", "The best config is faster than the baseline beyond noise at concurrency "
                           + ", ".join(by[verdict.FASTER]) + "."))
    if by.get(verdict.NOT_SHOWN):
        lines.append(("p", f"Not shown at concurrency {', '.join(by[verdict.NOT_SHOWN])}: {n} round(s) give no "
                           "interval there (it needs 2 rounds that measured both; more `--rounds`)."))
    if by.get(verdict.WITHIN_NOISE):
        lines.append(("p", f"Within noise at concurrency {', '.join(by[verdict.WITHIN_NOISE])}: {n} round(s) "
                           "cannot tell the two apart there (more `--rounds` narrow the interval)."))
    return lines


def format_compare(record: CompareFile) -> str:
    others = record.others
    extra = [f"trial {o.trial}" for o in others]
    verdicts = record.level_verdicts()
    conf = next((v.interval.confidence for v in verdicts.values()), verdict.DEFAULT_CONFIDENCE)
    lines = [f"Baseline (trial #{record.baseline_trial}) vs best (trial #{record.best_trial})"
             + (" and " + ", ".join(extra) if extra else "")
             + f", total output tok/s (median of {record.rounds_done} interleaved round(s)); Improvement: "
             f"best/baseline measured side by side in each round (geometric mean) with its {100 * conf:g}% "
             "confidence interval",
             "", "| Concurrency | baseline | best | Improvement |" + "".join(f" {e} |" for e in extra),
             "|---|---|---|---|" + "---|" * len(extra)]
    for c in record.concurrency:
        cells = "".join(f" {vs_best(record.median(o.label, c), record.vs_best(o.label)[str(c)])} |" for o in others)
        lines.append(f"| {c} | {_fmt(record.median(BASELINE, c))} | {_fmt(record.median(BEST, c))} | "
                     f"{verdicts[str(c)].text} |{cells}")
    lines.append("")
    for _kind, text in closing_lines(record, verdicts):
        lines.append(text[0].upper() + text[1:])
    if others:
        lines.append("Other trials: tok/s and their ratio to the best at the same concurrency, same rule.")
    for v in record.constraints():
        shown = "not measured" if v.interval.ratio is None else f"{v.interval.ratio:.2f}x ({v.text})"
        lines.append(f"Constraint: best >= {v.min_ratio}x baseline at concurrency {v.concurrency}: "
                     f"{v.state} ({shown}).")
    return "\n".join(lines + _tail(record, "Failed requests"))


def _tail(record: CompareFile, failed: str) -> list[str]:
    """The table's last lines: the latencies, the failures, how far an interrupted compare got."""
    lines = []
    latency = latency_lines(record)
    if latency:
        lines += [""] + latency
    for f in record.failures:
        lines.append(f"{failed}: {f}")
    if record.complete is False:
        lines.append(f"Stopped after {record.rounds_done} of {record.rounds_planned} rounds"
                     + (f" ({record.stopped})" if record.stopped else "") + ".")
    return lines


def median_record(records: list[LevelResult], level: int) -> LevelResult:
    """One level's latency percentiles, and the share its prefix cache answered, as the median over
    the launches' (what compare judges)."""
    kinds: dict[str, Latency] = {}
    for kind in LATENCY_KINDS:
        got = [lat for r in records if (lat := r.latency(kind)) is not None]
        if got:
            p50, p90, p99 = (statistics.median(x.at(q) for x in got) for q in QUANTILES)
            kinds[kind] = Latency(p50=p50, p90=p90, p99=p99, n=sum(x.n for x in got))
    hits = [r.prefix_cache_hit_rate for r in records if r.prefix_cache_hit_rate is not None]
    return LevelResult(level, **kinds,  # type: ignore[arg-type]
                       prefix_cache_hit_rate=statistics.median(hits) if hits else None)


def latency_lines(record: CompareFile) -> list[str]:
    """Per concurrency, each config's TTFT and TPOT p99 (median over the launches, ms) and, with
    the job's latency targets (``slo``), what each broke there (``core.slo`` on those medians)."""
    targets = record.slo
    rows, measured = [], False
    for c in record.concurrency:
        cells = []
        for label in record.labels:
            got = median_record(record.level_records(label, c), parse_level(c))
            if got.ttft is None and got.tpot is None:
                cells.append("-")
                continue
            measured = True
            cached = f" ({cache_text(got)})" if got.ttft is not None and cache_text(got) else ""
            cell = f"{_ms(got.ttft.p99 if got.ttft else None)}{cached} / {_ms(got.tpot.p99 if got.tpot else None)}"
            if targets:
                broke = breaches(got, targets.at(parse_level(c)))
                cell += (" (breaks " + "; ".join(f"{b.slo.label} {_ms(b.measured_s)} ms" for b in broke) + ")"
                         if broke else " (holds the SLO)")
            cells.append(cell)
        rows.append(f"| {c} | " + " | ".join(cells) + " |")
    if not measured:
        return []
    head = "p99 latency, TTFT / TPOT in ms (median over the launches)" + (
        f"; latency targets: {targets.describe()}" if targets else "")
    return [head, "", "| Concurrency | " + " | ".join(record.labels) + " |", "|---|" + "---|" * len(record.labels)] \
        + rows


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def vs_best(value: float | None, judged: Judged | None = None) -> str:
    """'3590.0 tok/s; vs best 1.14x faster (95% CI 1.05-1.24x)': another trial against the best."""
    if not value:
        return "failed"
    return f"{value:.1f} tok/s" + (f"; vs best {judged.text}" if judged is not None and judged.text else "")


def _fmt(v: float | None) -> str:
    return f"{v:.1f} tok/s" if v else "failed"


# ---- compare --plan: the plan's configs at every level ------------------------------------------
def measure_plan_launch(job: Job, row: TrialRow, label: str, round_no: int,
                        report: PhaseReporter | None = None) -> Measured:
    """One ``compare --plan`` launch: every level of the objective, the job's rounds, as a trial
    (``measure_launch``)."""
    bench = replace(TrialSpec.from_job(job, 0, row.params).bench, goodput=None)  # the plan's levels, not a bisection
    got = measure_launch(job, row, label, f"plan-{label}-{round_no}.log", bench, report)
    return got if got.error is None else Measured({}, {}, got.error)  # a failed launch: none of its levels


def run_compare_plan(job: Job, rounds: int | None = None, say=print) -> str:
    """``compare_plan_rounds``' table (``format_compare_plan``), then the study's verdict over every
    launch (``study_lines``)."""
    return "\n".join([format_compare_plan(compare_plan_rounds(job, rounds, say)), *study_lines(job)])


def compare_plan_rounds(job: Job, rounds: int | None = None, say=print) -> CompareFile:
    """Relaunch the baseline and the plan's configs (the best at each level of the objective,
    the mix's best) in interleaved rounds, each launch measured at every level as a trial is;
    ``compare-plan.json`` is rewritten after every launch (as ``compare.json``). Returns its
    record. A job of one level has no plan: BadInput, before anything is read or launched."""
    refuse_by_rate(job, "compare --plan")
    if not job.objective.by_level:
        levels = ", ".join(map(str, job.objective.concurrency))
        raise BadInput(f"compare --plan compares the best configs of several levels, and this job's objective has "
                       f"one (objective.concurrency: {levels}); use `ncclsweep compare {job.path} --concurrency "
                       f"1,2,10` for the baseline against the best at several concurrencies",
                       file=str(job.path), key="objective.concurrency")
    rows = trial_rows(open_study(job, create=False))
    plan = build_plan(rows, job.objective)
    base = plan.baseline
    if base is None or not plan.found:
        raise _no_baseline_or_best(rows, "compare --plan needs a completed baseline and a plan; run the study first")
    others = [r for r in plan.configs if r.config_key != base.config_key]
    if not others:
        raise RuntimeFailure(f"the baseline (trial {base.number}) is the plan's config at every level: nothing to "
                             "compare it with")
    rounds = max(1, DEFAULT_ROUNDS if rounds is None else rounds)
    configs = [(BASELINE, base)] + [(f"trial-{r.number}", r) for r in others]
    record = CompareFile(
        concurrency=tuple(level_key(lv) for lv in plan.levels), rounds_planned=rounds, plan=True,
        baseline_trial=base.number, anchor_trial=plan.anchor.number if plan.anchor else None,
        configs=tuple(Config(label, row.number, row.params, tuple(plan.roles(row))) for label, row in configs),
        slo=job.slo)

    def measured(label: str, row: TrialRow, r: int, report: PhaseReporter) -> Measured:
        return measure_plan_launch(job, row, label, r, report)

    said = Said(say, rounds * len(configs), "compare --plan", rounds=job.bench.repeats)
    return _rounds(record, configs, measured, said, job.dir.compare_plan, _plan_round_lines)


def _plan_round_lines(record: CompareFile) -> list[str]:
    """Each plan config against the baseline at each level, so far."""
    return [f"at {lv}: {c.label} vs the baseline {record.judged(BASELINE, c.label, lv).text}"
            for c in record.configs if c.label != BASELINE for lv in record.concurrency]


def plan_closing_lines(record: CompareFile) -> list[str]:
    """What the relaunched rounds establish about the plan: at each level where the plan picks
    another config than the best at the lowest level, whether it beats that one beyond noise."""
    anchor = record.anchor()
    if anchor is None:
        return []
    lines = []
    for lv in record.concurrency:
        picked = next((c for c in record.configs if f"best at {lv}" in c.roles), None)
        if picked is None or picked is anchor:
            continue
        said = record.judged(anchor.label, picked.label, lv, same=picked.label == anchor.label).text
        lines.append(f"At concurrency {lv} the plan's config (trial #{picked.trial}) against the best at "
                     f"{record.concurrency[0]} (trial #{anchor.trial}): {said}.")
    return lines


def plan_table_rows(record: CompareFile) -> list[list[str]]:
    """The relaunched plan's rows, one per level: the level, then per config (the baseline and
    each plan config, as ``Config.column`` heads them) its median and its ratio to the baseline."""
    rows = []
    for lv in record.concurrency:
        cells = [str(lv)]
        for c in record.configs:
            med = record.median(c.label, lv)
            cells.append("failed" if not med else f"{med:.1f}" + ("" if c.label == BASELINE else
                                                                   f"; {record.judged(BASELINE, c.label, lv).text}"))
        rows.append(cells)
    return rows


def format_compare_plan(record: CompareFile) -> str:
    """The ``compare --plan`` table: levels as rows, the baseline and each plan config as columns."""
    head = ["Concurrency"] + [c.column() for c in record.configs]
    lines = [f"The plan's configs relaunched in {record.rounds_done} interleaved round(s), each launch "
             "measured as a trial is (1: decode tok/s per request; N: total tok/s of N streams); the median of the "
             "rounds, and the ratio to the baseline measured side by side in each round (geometric mean) with its "
             "95% confidence interval", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in plan_table_rows(record):
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += plan_closing_lines(record)
    return "\n".join(lines + _tail(record, "Failed"))
