"""What a run says while it runs: one line per event, and the last line's verdict.

Every line goes through ``Progress.say`` (the ``ncclsweep.progress`` logger, which the CLI
sends to stderr and the study's ``driver.log``; a test may pass a stream instead). Trials
are numbered once: ``#N`` is the Optuna trial number everywhere; the budget is counted
apart ("launch 2 of 8"). A ratio to the baseline is printed with the words of
``core.verdict``: "faster"/"slower" only beyond the measured noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from orchestrator.config.yaml_input import display_path
from orchestrator.core import golden_check, logs, verdict
from orchestrator.core.records import COMPLETE, PRUNED, FailureKind, TrialResult, TrialRow
from orchestrator.study import history
from orchestrator.study import objective as objectives
from orchestrator.study.bans import describe
from orchestrator.study.goodput import GoodputAnswer, tok
from orchestrator.study.plan import Plan, fmt, level_value


@dataclass
class RunSummary:
    """How a ``run`` invocation ended."""

    reason: str  # budget reached, space exhausted, timeout, stopped by signal
    launched: int = 0
    best: dict[str, Any] | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal: the CLI exits 130."""
        return self.reason == "stopped by signal"


def fmt_s(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def spread(row: TrialRow) -> float | None:
    """Relative spread of a row's median (rel_ci, else cv)."""
    return row.rel_ci if row.rel_ci is not None else row.cv


def vs_baseline_words(best: TrialRow, base: TrialRow | None) -> str | None:
    """The run's verdict on its best trial against the baseline trial: the ratio is "beyond
    noise" only when the two trials' decode samples put its interval off 1.0 (``verdict``,
    unpaired: repeats within one launch each), else "within noise of the baseline"; the
    baseline's own config is "the baseline itself". None without a baseline. The ratio is of
    the medians, named beside the geometric means' where the interval excludes it
    (``verdict.median_ratio_text``)."""
    if base is None or not base.value or best.value is None:
        return None
    if best.config_key == base.config_key:
        return "the baseline itself"
    iv = verdict.ratio_interval(_samples(base), _samples(best))
    beyond = verdict.verdict(iv) in (verdict.FASTER, verdict.SLOWER)
    ratio = verdict.median_ratio_text(iv, best.value / base.value)
    return (f"{ratio} the baseline, " + ("beyond noise" if beyond else "within noise of the baseline")
            + f", {verdict.interval_text(iv)}")


def _samples(row: TrialRow) -> list[float]:
    return history.decode_samples(row)


class Progress:
    """The run's lines (module docstring). ``trials``: the budget (None: none); ``timeout_s``
    and ``timeout_source``: the wall-clock limit and what set it."""

    def __init__(self, job, *, trials: int | None, timeout_s: float | None, timeout_source: str,
                 out: TextIO | None = None):
        self.job = job
        self.trials = trials
        self.timeout_s = timeout_s
        self.timeout_source = timeout_source
        self.out = out  # None: the progress logger
        self.t_start = time.monotonic()
        self.finished = 0  # trials finished in this invocation (for the time-to-go estimate)
        # seconds the next N launches should take by the study's measured launch costs (the driver
        # sets it: ``SearchPolicy.expected_seconds`` over its slots); None: the pace of this run
        self.expected_left: Callable[[int], float | None] | None = None
        self._announced: set = set()

    def say(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)
        else:
            logs.progress.info(line)

    def elapsed(self) -> str:
        return fmt_s(time.monotonic() - self.t_start)

    # ---- per trial --------------------------------------------------------------------------
    def started(self, number: int, config: dict, used: int, is_baseline: bool = False) -> None:
        """A launch began (``used``: launches counted so far, this one included)."""
        total = f" of {self.trials}" if self.trials else ""
        role = ", the baseline" if is_baseline else ""
        params = " ".join(f"{k}={v}" for k, v in config.items())
        self.say(f"starting #{number} (launch {used}{total}{role}): {params or '(defaults)'} "
                 f"(elapsed {self.elapsed()}{self._remaining(used)})")

    def _remaining(self, used: int) -> str:
        """Time left: the launches left at the study's measured cost per config (``study.cost``),
        else x the mean trial time of this run so far; and the wall-clock budget if any."""
        elapsed = time.monotonic() - self.t_start
        parts = []
        left = max(0, self.trials - used + 1) if self.trials else 0
        expected = self.expected_left(left) if left and self.expected_left is not None else None
        if expected is not None:
            parts.append(f"~{fmt_s(expected)} to go by the measured launch costs")
        elif self.trials and self.finished:
            per_trial = elapsed / self.finished
            parts.append(f"~{fmt_s(per_trial * left)} to go at this pace")
        if self.timeout_s:
            parts.append(f"{fmt_s(max(0.0, self.timeout_s - elapsed))} left of {self.timeout_source}")
        return (", " + ", ".join(parts)) if parts else ""

    def ended(self, number: int, result: TrialResult, best: TrialRow | None, base_value: float | None,
              plan: Plan | None = None) -> None:
        """A trial's final outcome, with the best so far (with a ``plan``: at every level)."""
        if plan is not None and result.outcome in (COMPLETE, PRUNED):
            self.say(f"  #{number} -> {self._levels_said(result, plan)}{self._plan_bests(plan)} "
                     f"(elapsed {self.elapsed()})")
            return
        reached = result.measurement.goodput if result.measurement is not None else None
        if result.outcome == COMPLETE and reached is not None:  # goodput: where the SLO stopped holding
            ratio = f" ({result.value / base_value:.2f}x baseline)" if base_value and result.value else ""
            what = (f"{reached.describe()} at {result.value:.1f} total tok/s{ratio}" if reached.holds is not None
                    else f"{reached.describe()}: infeasible")
        elif result.outcome == COMPLETE:
            ratio = f" ({result.value / base_value:.2f}x baseline)" if base_value and result.value else ""
            what = f"{result.value:.1f} tok/s{ratio}"
        elif result.outcome == PRUNED:
            below = result.metrics.get("pruned_below")
            limit = (f" < threshold {below:.1f} tok/s ({self.job.pruning.min_ratio:g} x the best so far)"
                     if below else "")
            what = f"pruned after the first repeat: {result.value:.1f} tok/s{limit}"
        else:
            what = f"FAIL {result.failure_kind}: {result.failure_reason}"
            ignored = result.metrics.get("decode_tok_s_ignored")
            if result.failure_kind == FailureKind.WRONG_OUTPUT and ignored:
                what = f"FAIL wrong-output (its {ignored:.1f} tok/s do not count): {result.failure_reason}"
        best_s = ""
        if best is not None and best.value is not None:
            ratio = f" = {best.value / base_value:.2f}x baseline" if base_value else ""
            best_s = f" | best #{best.number} {best.value:.1f} tok/s{ratio}"
        self.say(f"  #{number} -> {what}{best_s} (elapsed {self.elapsed()})")

    @staticmethod
    def _levels_said(result: TrialResult, plan: Plan) -> str:
        """'1: 433.9 decode tok/s (4.58x baseline), 10: 692.0 total tok/s (0.88x)' of a trial."""
        values = objectives.level_values(result)
        parts = []
        for i, level in enumerate(plan.levels):
            got = values.get(level)
            base = level_value(plan.baseline, level) if plan.baseline is not None else None
            ratio = f" ({got / base:.2f}x{' baseline' if i == 0 else ''})" if got and base else ""
            parts.append(f"{level}: {fmt(got)} {objectives.unit(level)}{ratio}")
        said = ", ".join(parts)
        if result.outcome == PRUNED:
            return f"pruned after the first round: {result.failure_reason or said}"
        return said

    @staticmethod
    def _plan_bests(plan: Plan) -> str:
        bests = [f"at {lp.level} #{lp.best.number}" for lp in plan.per_level if lp.best is not None]
        return f" | best {', '.join(bests)}" if bests else ""

    def bans(self, bans: dict) -> None:
        """Say, once, each parameter value the study stops proposing (``study.bans``)."""
        for pair, why in bans.items():
            if pair not in self._announced:
                self._announced.add(pair)
                self.say(f"  not proposing {describe(pair)} any more: {why}")

    # ---- the end ----------------------------------------------------------------------------
    @staticmethod
    def best_summary(best: TrialRow | None, base: TrialRow | None, plan: Plan | None = None,
                     goodput: GoodputAnswer | None = None) -> dict[str, Any] | None:
        """The run's best as plain data (``RunSummary.best``); with a ``plan`` (several
        levels), the plan too (``Plan.to_dict``, under ``plan``); for goodput, the answer
        (``GoodputAnswer.to_dict``, under ``goodput``)."""
        if best is None or best.value is None:
            return None
        base_value = base.value if base is not None else None
        out = {"number": best.number, "value": best.value, "config": dict(best.params) or None,
               "spread": spread(best), "vs_baseline": (best.value / base_value) if base_value else None,
               "verdict": vs_baseline_words(best, base),
               "baseline": None if base is None or not base_value else
               {"number": base.number, "value": base_value, "spread": spread(base)}}
        if plan is not None:
            out["plan"] = plan.to_dict()
        if goodput is not None:
            out["goodput"] = goodput.to_dict()
        return out

    def final_line(self, summary: RunSummary, counted: int) -> str:
        best = summary.best
        head = f"{summary.reason}: {counted} trials counted, {summary.launched} launched this run"
        if not best:
            return head + "; no config may be called best yet"
        if best.get("plan"):
            bests = [f"at {lp['level']} #{lp['best_trial']}" for lp in best["plan"]["per_level"]
                     if lp["best_trial"] is not None]
            return f"{head}; plan: best {', '.join(bests)}"
        if best.get("goodput") and best["goodput"]["best"]:
            top = best["goodput"]["best"]
            return (f"{head}; best #{top['trial']}: {tok(top['value'])} tok/s at {top['holds']} streams within the "
                    "SLO")
        params = " ".join(f"{k}={v}" for k, v in (best["config"] or {}).items())
        return f"{head}; best #{best['number']}: {best['value']:.1f} tok/s with {params or '(defaults)'}"

    def next_steps(self, summary: RunSummary, rows: list[TrialRow] | None) -> str:
        """The last line: the verdict against the baseline, where the results are, what to run next."""
        job = self.job.path
        folder, logs_dir = display_path(self.job.report_dir), display_path(self.job.dir.logs)
        best = summary.best
        if summary.interrupted:
            return (f"stopped: `ncclsweep run {job}` continues the study; `ncclsweep status {job}` shows it "
                    f"so far (results in {folder})")
        if best is None:
            why = golden_check.disputed(rows) if rows is not None else None
            if why:
                return (f"no config is called best: {why}; check the baseline's output in the trial logs in "
                        f"{logs_dir} and `ncclsweep status {job}`; `ncclsweep run {job} --trials N` "
                        "compares more configs with it")
            broke = history.infeasible_lines(rows or [])
            if broke:  # measured, but the latency targets leave them nowhere to count
                return (f"no config holds the latency targets (slo) yet: {'; '.join(broke[:3])}; see `ncclsweep "
                        f"status {job}`")
            return f"no config passed yet: see `ncclsweep status {job}` and the trial logs in {logs_dir}"
        if best.get("plan"):
            return (f"{plan_said(best['plan'])} | next: `ncclsweep report {job}` (writes {folder}/report.html), "
                    f"`ncclsweep compare {job} --plan`, `ncclsweep export {job} --concurrency N --format env`"
                    + (" (or --mix)" if best["plan"].get("weights") else ""))
        if best.get("goodput"):
            return (f"goodput: {best['goodput']['text']} | next: `ncclsweep report {job}` (writes "
                    f"{folder}/report.html), `ncclsweep export {job} --format env`")
        base = best.get("baseline")
        if base is None:
            said = f"best #{best['number']} {best['value']:.1f} tok/s (no baseline measured to compare with)"
        elif base["number"] == best["number"]:
            said = f"the baseline #{base['number']} is the best config found ({best['value']:.1f} tok/s)"
        else:
            said = f"best #{best['number']} {best['value']:.1f} tok/s = {best['verdict']}"
        broke = [line for line in history.infeasible_lines(rows or []) if "(baseline)" in line]
        if broke:  # reported, not a reason to stop
            said += f"; the baseline {broke[0].split(': ', 1)[1]}"
        return (f"{said} | next: `ncclsweep report {job}` (writes {folder}/report.html), "
                f"`ncclsweep compare {job}`, `ncclsweep export {job} --format env`")


def plan_said(plan: dict[str, Any]) -> str:
    """The last line's verdict of a plan (``Plan.to_dict``): per level the best, its number and
    its ratio to the baseline (beyond noise or not, ``core.verdict``), and what the best at the
    lowest level loses where another config is best; with weights, the best for the mix."""
    parts = []
    first = plan["levels"][0]
    losses = []
    for lp in plan["per_level"]:
        if lp["best_trial"] is None:
            parts.append(f"at {lp['level']} none yet")
            continue
        vs = lp["vs_baseline"]
        ratio = f" = {vs['text']} than the baseline" if vs and vs["verdict"] != "same config" else \
            (" (the baseline)" if vs else "")
        parts.append(f"at {lp['level']} #{lp['best_trial']} {fmt(lp['best_value'])} {lp['unit']}{ratio}")
        lose = lp["anchor_vs_best"]
        if lose and lose["verdict"] != "same config":
            losses.append(f"{fmt(lp['anchor_value'])} at {lp['level']} ({lose['text']})")
    said = "plan: " + "; ".join(parts)
    if losses and plan.get("anchor_trial") is not None:
        said += f"; the best at {first} (#{plan['anchor_trial']}) does " + ", ".join(losses)
    if plan.get("slo_lines"):  # the latency targets: who broke them where, by how much
        said += f"; slo {plan['slo_text']}: " + "; ".join(plan["slo_lines"])
    mix = plan.get("mix")
    if mix:
        vs = mix.get("vs_baseline")
        said += f"; best for the mix #{mix['trial']}" + (f" = {vs['text']} than the baseline" if vs else "")
    return said
