"""What a run says while it runs: one line per event, a live status line, and the verdict.

Every line goes through ``Progress.say`` (the ``ncclsweep.progress`` logger, which the CLI
sends to stderr and the study's ``driver.log``; a test may pass a stream instead). Trials
are numbered once: ``#N`` is the Optuna trial number everywhere. Launches are counted per
run ("this run's launch 3": strictly increasing, whatever the trials' outcomes), the budget
apart ("budget 2/8 used": the study's counted trials). While trials run, their phases
(``node.phases``) are a status line redrawn in place in a terminal, with the study's time to
go and the time left (``core.logs.status``), and one line per phase change everywhere else
(``core.logs.EVENT``). Every line fits ``logs.LOG_WIDTH``: a config has lines of its own
(``#N config: ...``), a long result or failure reason is shortened at a clause or a word, its
figures kept (``logs.clip``; ``status`` has it whole). A ratio to the
baseline is printed with the words of ``core.verdict``: "faster"/"slower" only beyond the
launch noise (``study.launches``: every figure is the median over a config's launches, every
interval over launches). Relaunches (``study.relaunch``) and the finalists' race
(``study.race``) say what they launch, why, what it costs and what each round decided.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from orchestrator.config.yaml_input import display_path
from orchestrator.core import golden_check, logs, verdict
from orchestrator.core.pace import fmt_s
from orchestrator.core.records import COMPLETE, PRUNED, FailureKind, TrialResult, TrialRow
from orchestrator.node.phases import MEASURING, TrialPhase
from orchestrator.study.evidence import history
from orchestrator.study.evidence.bans import describe
from orchestrator.study.evidence.launches import Evidence, load_note
from orchestrator.study.evidence.plan import Plan, fmt, launches_text, level_value, noise_text
from orchestrator.study.model.cost import LaunchCost
from orchestrator.study.search import race as races
from orchestrator.study.storage import objective as objectives


@dataclass
class RunSummary:
    """How a ``run`` invocation ended."""

    reason: str  # budget reached, space exhausted, timeout, stopped by signal
    launched: int = 0
    relaunched: int = 0  # relaunches and race launches this run (uncounted trials)
    best: dict[str, Any] | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal: the CLI exits 130."""
        return self.reason == "stopped by signal"


def spread(row: TrialRow) -> float | None:
    """Relative spread of a row's median (rel_ci, else cv)."""
    return row.rel_ci if row.rel_ci is not None else row.cv


def vs_baseline_words(best: TrialRow, base: TrialRow | None, evidence: Evidence, level: int | None = 1) -> str | None:
    """The run's verdict on its best config against the baseline at ``level``, over their launches
    (``launches.Evidence``): "beyond noise" only when the interval is off 1.0, "within noise of the
    baseline" when it holds 1.0, "not shown" and why when there is none (the launch noise unknown);
    the baseline's own config is "the baseline itself". None without a baseline. The ratio is the
    interval's own estimate (``verdict.ratio_text``)."""
    if base is None or not base.value or best.value is None:
        return None
    if best.config_key == base.config_key:
        return "the baseline itself"
    iv = evidence.interval(base.config_key, best.config_key, level)
    word = verdict.verdict(iv)
    said = best.measure.oriented(iv)  # the figures' own ratio (a latency's: inverted)
    ratio = verdict.ratio_text(said)
    if word == verdict.NOT_SHOWN:
        return f"{ratio} the baseline, {verdict.NOT_SHOWN}: {verdict.why_unbounded(iv)}"
    beyond = word in (verdict.FASTER, verdict.SLOWER)
    return (f"{ratio} the baseline, " + ("beyond noise" if beyond else "within noise of the baseline")
            + f", {verdict.interval_text(said)}")


class Progress:
    """The run's lines (module docstring). ``trials``: the budget (None: none); ``timeout_s``:
    the wall-clock limit (None: none)."""

    def __init__(self, job, *, trials: int | None, timeout_s: float | None, out: TextIO | None = None):
        self.job = job
        self.trials = trials
        self.timeout_s = timeout_s
        self.out = out  # None: the progress logger
        self.t_start = time.monotonic()
        self.finished = 0  # trials finished in this invocation (for the time-to-go estimate)
        # seconds the next N launches should take by the study's measured launch costs (the driver
        # sets it: ``SearchPolicy.expected_seconds`` over its slots); None: the pace of this run
        self.expected_left: Callable[[int], float | None] | None = None
        self.counted = 0  # the study's counted trials, as the driver last said
        self._announced: set = set()
        self._phases_said: dict[str, int] = {}  # label of a trial in flight -> its phases said

    def say(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)
        else:
            logs.progress.info(line)

    def event(self, line: str) -> None:
        """A line the terminal's status line shows instead (a phase change): a plain line in
        a log, in driver.log and on a stream given to the constructor."""
        if self.out is not None:
            print(line, file=self.out, flush=True)
        else:
            logs.progress.log(logging.INFO, line, extra={logs.EVENT: True})

    def elapsed(self) -> str:
        return fmt_s(time.monotonic() - self.t_start)

    # ---- per trial --------------------------------------------------------------------------
    def started(self, number: int, config: dict, launch: int, counted: int, is_baseline: bool = False) -> None:
        """A launch began: ``launch`` counts this run's launches (this one included),
        ``counted`` the study's counted trials so far."""
        self.counted = counted
        role = ", the baseline" if is_baseline else ""
        budget = f"; budget {counted}/{self.trials} used" if self.trials else ""
        self.say(f"starting #{number} (this run's launch {launch}{role}{budget}) elapsed {self.elapsed()}"
                 + self._remaining(max(0, (self.trials or 0) - counted)))
        for line in config_lines(f"  #{number} config: ", config):
            self.say(line)

    def _remaining(self, left: int, running: Sequence[TrialPhase] = ()) -> str:
        """Time to go and time left: ``left`` launches to finish, the ``running`` ones included
        (``_to_go``); and the wall-clock limit if any."""
        elapsed = time.monotonic() - self.t_start
        parts = []
        to_go = self._to_go(left, running)
        if to_go is not None:
            parts.append(f"~{fmt_s(to_go)} to go")
        if self.timeout_s:
            parts.append(f"{fmt_s(max(0.0, self.timeout_s - elapsed))} of {fmt_s(self.timeout_s)} left")
        return (", " + ", ".join(parts)) if parts else ""

    def _to_go(self, left: int, running: Sequence[TrialPhase]) -> float | None:
        """Seconds until ``left`` launches are done (the ``running`` ones, that far in, among
        them): at the study's measured cost per config (``study.cost``), else at the mean trial
        time of this run so far, else, during a first trial's measurement, at the pace of its
        requests (that trial's length so far and what its level still has to measure, a lower
        bound). None: nothing to go by yet."""
        if not left:
            return None
        now = time.time()
        into = sum(now - p.trial_started for p in running) / len(running) if running else 0.0
        expected = self.expected_left(left) if self.expected_left is not None else None
        if expected is None and self.finished:
            expected = (time.monotonic() - self.t_start) / self.finished * left
        if expected is not None:
            return max(0.0, expected - into)
        paced = [p for p in running if p.name == MEASURING and p.done and p.total]
        if not paced:
            return None
        level_left = max((p.level_s + now - p.since) / p.done * (p.total - p.done)  # type: ignore[operator]
                         for p in paced)
        per_launch = into + level_left
        return level_left + per_launch * max(0, left - len(running)) / max(1, len(running))

    def running(self, phases: Sequence[tuple[str, TrialPhase]]) -> None:
        """The trials in flight as they last reported (label, phase): each phase entered is an
        event line, those a late poll skipped over included (the phase's trail); the status line
        shows them all with the study's time to go."""
        now = time.time()
        shown = []
        for label, phase in phases:
            trail = phase.trail or ((phase.text(), phase.since),)  # no trail: the phase alone
            self._say_entered(label, [[text, at - phase.trial_started] for text, at in trail])
            shown.append(f"{label} {phase.text()} ({fmt_s(now - phase.trial_started)})")
        for gone in set(self._phases_said) - {label for label, _ in phases}:
            del self._phases_said[gone]
        if self.out is not None:
            return
        if not shown:
            logs.status("")
            return
        eta = self._remaining(max(len(phases), (self.trials or 0) - self.counted), [p for _, p in phases])
        logs.status("; ".join(shown) + (f" | {eta[2:]}" if eta else "") + f" | elapsed {self.elapsed()}")

    def trial_over(self, label: str, trail: Sequence[Sequence]) -> None:
        """A trial is back: the phases it entered that no poll showed (its result's
        ``phases``: the check and the teardown of a quick end), then nothing more of it."""
        if label in self._phases_said:
            self._say_entered(label, trail)
            del self._phases_said[label]

    def _say_entered(self, label: str, trail: Sequence[Sequence]) -> None:
        """An event line for each phase of ``trail`` ([text, seconds into the trial]) not said yet."""
        said = self._phases_said.get(label, 0)
        for text, into in trail[said:]:
            self.event(f"  {label} {text} ({fmt_s(max(0.0, into))} into the trial)")
        self._phases_said[label] = max(said, len(trail))

    def idle(self) -> None:
        """Nothing runs (the loop is leaving): no status line."""
        self._phases_said.clear()
        if self.out is None:
            logs.status("")

    def ended(self, number: int, result: TrialResult, best: TrialRow | None, base_value: float | None,
              plan: Plan | None = None) -> None:
        """A trial's final outcome, with the best so far (with a ``plan``: at every level)."""
        if plan is not None and result.outcome in (COMPLETE, PRUNED):
            head, tail = f"  #{number} -> ", f"{self._plan_bests(plan)} (elapsed {self.elapsed()})"
            self.say(head + logs.clip(self._levels_said(result, plan), logs.LOG_WIDTH - len(head) - len(tail)) + tail)
            return
        got = result.measurement
        reached = got.capacity if got is not None else None  # a capacity search's, over load or rate
        obj = objectives.of(getattr(self.job, "objective", None))
        lead = ""  # said whole before a clipped reason (a failure's outcome)
        if result.outcome == COMPLETE and reached is not None:  # goodput: where the SLO stopped holding
            ratio = f" ({result.value / base_value:.2f}x baseline)" if base_value and result.value else ""
            what = (f"{reached.describe(result.value)}{ratio}" if reached.holds is not None
                    else f"{reached.describe()}: infeasible")
        elif result.outcome == COMPLETE:
            worth = obj.headline_worth(result.measurement, result.value, result.config)
            ratio = f" ({obj.ratio(worth, base_value):.2f}x baseline)" if base_value and worth else ""
            what = f"{obj.text(worth)}{ratio}"
        elif result.outcome == PRUNED:
            below = result.metrics.get("pruned_below")
            limit = (f" {obj.measure.worse_sign} threshold {obj.text(below)} "
                     f"({self.job.pruning.min_ratio:g} x the best so far)" if below else "")
            worth = obj.headline_worth(result.measurement, result.value, result.config)
            what = f"pruned after the first repeat: {obj.text(worth)}{limit}"
        else:  # the outcome is said whole; only its reason is shortened to fit
            lead = f"FAIL {result.failure_kind}:"
            ignored = result.metrics.get("decode_tok_s_ignored")
            if result.failure_kind == FailureKind.WRONG_OUTPUT and ignored:
                lead = f"FAIL wrong-output (its {ignored:.1f} tok/s do not count):"
            what = result.failure_reason or ""
        best_s = ""
        if best is not None and best.worth is not None:
            ratio = f" = {obj.ratio(best.worth, base_value):.2f}x baseline" if base_value else ""
            best_s = f" | best #{best.number} {obj.text(best.worth)}{ratio}"
        head, tail = f"  #{number} -> ", f"{best_s} (elapsed {self.elapsed()})"
        room = logs.LOG_WIDTH - len(head) - len(tail)
        if lead:
            said = lead if len(lead) + 4 >= room else f"{lead} {logs.clip(what, room - len(lead) - 1)}"
        else:
            said = logs.clip(what, room)
        self.say(head + said + tail)

    @staticmethod
    def _levels_said(result: TrialResult, plan: Plan) -> str:
        """'1: 433.9 decode tok/s (4.58x baseline), 10: 692.0 total tok/s (0.88x)' of a trial."""
        parts = []
        for i, level in enumerate(plan.levels):
            m = plan.at(level).measure  # the plan's figures are its worths: said in its unit
            got = m.worth(result.measurement.at(level) if result.measurement is not None else None, result.config)
            base = level_value(plan.baseline, level) if plan.baseline is not None else None
            ratio = f" ({m.shown(got) / m.shown(base):.2f}x{' baseline' if i == 0 else ''})" if got and base else ""
            parts.append(f"{level}: {fmt(m.shown(got) if got is not None else None)} {m.unit(level)}{ratio}")
        said = ", ".join(parts)
        if result.outcome == PRUNED:  # its reason says after which round and below what
            return f"pruned: {result.failure_reason}" if result.failure_reason else \
                f"pruned after the first round: {said}"
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

    # ---- relaunches and the race ---------------------------------------------------------------
    def relaunching(self, shown: str, why: str, nth: int) -> None:
        """A relaunch (``study.relaunch``) began."""
        self.say(f"relaunching {why} {shown} (its {_ordinal(nth)} launch: the launch noise every verdict carries) "
                 f"(elapsed {self.elapsed()})")

    def launch_back(self, kind: str, shown: str, result: TrialResult, rows: list[TrialRow],
                    objective: Any) -> None:
        """A relaunch or race launch is back: its figures and the launch noise at each level now."""
        levels = objectives.levels(objective)
        what = "relaunch" if kind == "relaunch" else "race launch"
        if result.outcome != COMPLETE:
            self.say(f"  {what} of {shown} -> FAIL {result.failure_kind}: {result.failure_reason} "
                     f"(elapsed {self.elapsed()})")
            return
        obj = objectives.of(objective)
        values = obj.worths(result.measurement, result.config)
        ev = Evidence(rows)
        got = ", ".join(f"{lv}: {fmt(obj.shown(values.get(lv)))} {obj.unit(lv)}" for lv in levels)
        noise = "; ".join(f"at {lv} {noise_text(ev.noise(lv))}" for lv in levels)
        self.say(f"  {what} of {shown} -> {got}; launch noise {noise} (elapsed {self.elapsed()})")

    def race_planned(self, state: races.RaceState, rows: list[TrialRow], cost: LaunchCost | None) -> None:
        """The race's plan: per contest its finalists, the budget, each finalist's cost per launch."""
        numbers = races.trial_numbers(rows)
        plan = state.plan
        ev = Evidence(rows)
        parts = []
        for c in plan.contests:
            where = "for the mix" if c.is_mix else f"at {c.level}"
            names = [f"#{numbers.get(k, '?')}" for k in c.finalists]
            noise = ev.mix_noise(c.weights) if c.weights else ev.noise(c.level or 1)
            # with the launch noise unknown no config is beyond it, and none is shown within it either
            near = "within launch noise of it" if noise.known else "not shown beyond it (launch noise unknown)"
            if len(names) == 1:
                parts.append(f"{where} {names[0]} (no config within launch noise of it)")
            else:
                extra = f" ({c.left_out} more {'within noise' if noise.known else 'as near'} left out)" \
                    if c.left_out else ""
                parts.append(f"{where} {names[0]} and {', '.join(names[1:])} {near}{extra}")
        costs = []
        for key in state.contenders():
            per = state.launch_seconds(key, cost)
            if per is not None:
                costs.append(f"#{numbers.get(key, '?')} {fmt_s(per)}")
        total = state.expected_seconds(cost)
        said_cost = (f"; a launch costs {', '.join(costs)} (each finalist's own launches)" if costs else "") + (
            f", ~{fmt_s(total)} in all" if total else "")
        left = plan.budget - state.launched
        head = "racing the finalists" if state.launched == 0 else \
            f"continuing the race of the finalists ({state.launched} launch(es) done, round {state.round + 1})"
        self.say(f"{head}: {'; '.join(parts)}; up to {left} launch(es) in interleaved rounds (budget.confirm "
                 f"{plan.budget}), judged at {verdict.confidence_text(plan.confidence)} after each round{said_cost}")

    def racing(self, shown: str, state: races.RaceState, flying: int, expected_s: float | None) -> None:
        """A race launch began."""
        n = state.launched + flying
        togo = f", ~{fmt_s(expected_s)} to go by the measured launch costs" if expected_s else ""
        self.say(f"racing {shown} (race launch {n} of {state.plan.budget}, round {state.round + 1}) "
                 f"(elapsed {self.elapsed()}{togo})")

    def race_round(self, state: races.RaceState, rows: list[TrialRow]) -> None:
        """After a whole round: who left which contest."""
        numbers = races.trial_numbers(rows)
        gone = [f"#{numbers.get(k, '?')} out {'of the mix' if c == races.MIX else f'at {c}'}"
                for c, k, r in state.eliminated if r == state.rounds_done - 1]
        still = [f"{'the mix' if c.is_mix else f'at {c.level}'}: "
                 + ", ".join(f"#{numbers.get(k, '?')}" for k in state.alive.get(c.name, ()))
                 for c in state.undecided()]
        said = "; ".join(gone) if gone else "nobody out yet"
        self.say(f"  race after round {state.rounds_done}: {said}"
                 + (f"; still in contention {' | '.join(still)}" if still else "; every contest decided"))

    def race_over(self, state: races.RaceState, rows: list[TrialRow], objective: Any) -> None:
        """How the race ended, per contest."""
        said = races.said(races.outcomes(rows, objective), races.trial_numbers(rows))
        if said:
            self.say(f"race over: {said}" if state.over() else f"race stopped: {said}")

    # ---- the end ----------------------------------------------------------------------------
    @staticmethod
    def best_summary(best: TrialRow | None, base: TrialRow | None, plan: Plan | None = None,
                     rows: list[TrialRow] | None = None, objective: Any = None,
                     answers: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The run's best as plain data (``RunSummary.best``): its figure over its launches, the
        verdict against the baseline over launches, where a fresh launch should measure, the race;
        with a ``plan`` (several levels), the plan too (``Plan.to_dict``, under ``plan``); for
        goodput, its answer among ``answers``, the sections the objective's kind adds under their keys
        (``GoodputAnswer.section``)."""
        if best is None or best.value is None:
            return None
        rows = list(rows or [r for r in (best, base) if r is not None])
        level = objectives.levels(objective)[0]
        ev = Evidence(rows)
        drift = ev.headline_drift(objective)
        m = best.measure  # the figures are its worths: given as the user reads them
        value = ev.median(best.config_key, level) or best.worth
        base_value = (ev.median(base.config_key, level) or base.worth) if base is not None else None
        iv = (m.oriented(ev.interval(base.config_key, best.config_key, level))
              if base is not None and base_value and best.config_key != base.config_key else None)
        fresh = ev.fresh(best.config_key, level)
        out = {"number": best.number, "value": m.shown(value) if value is not None else None,
               "config": dict(best.params) or None,
               "spread": spread(best), "vs_baseline": iv.ratio if iv is not None else None,
               "interval": {"lo": iv.lo, "hi": iv.hi, "confidence": iv.confidence} if iv and iv.bounded else None,
               "launches": ev.count(best.config_key, level), "fresh": m.shown_range(*fresh) if fresh else None,
               "noise": ev.noise(level).to_dict(), "noise_text": ev.noise(level).text(),
               "verdict": vs_baseline_words(best, base, ev, level),
               "race": races.said(races.outcomes(rows, objective), races.trial_numbers(rows)),
               "load": load_note(rows), "drift": drift.text() or None,
               "baseline": None if base is None or not base_value else
               {"number": base.number, "value": m.shown(base_value), "spread": spread(base),
                "launches": ev.count(base.config_key, level)}}
        if m.name():  # the unit, where it is not the tok/s every summary had
            out["unit"] = m.unit(level)
        if plan is not None:
            out["plan"] = plan.to_dict()
        out.update(answers or {})
        return out

    def final_line(self, summary: RunSummary, counted: int) -> str:
        """How the run ended and how many trials it counted and launched."""
        best = summary.best
        head = f"{summary.reason}: {counted} trials counted, {summary.launched} launched this run"
        if summary.relaunched:
            head += f" (and {summary.relaunched} relaunches and race launches)"
        if not best:
            return head + "; no config may be called best yet"
        if best.get("plan"):
            bests = [f"at {lp['level']} #{lp['best_trial']}" for lp in best["plan"]["per_level"]
                     if lp["best_trial"] is not None]
            return f"{head}; plan: best {', '.join(bests)}"
        return head

    def next_steps(self, summary: RunSummary, rows: list[TrialRow] | None) -> list[str]:
        """The run's last lines: the verdict against the baseline (the best's config on lines
        of its own), then one ``next:`` line per command to run, each naming what it writes."""
        job = self.job.path
        folder, logs_dir = display_path(self.job.report_dir), display_path(self.job.dir.logs)
        best = summary.best
        if summary.interrupted:
            return [f"stopped: `ncclsweep status {job}` shows the study so far (results in {folder})",
                    f"next: `ncclsweep run {job}` continues it"]
        if best is None:
            why = golden_check.disputed(rows) if rows is not None else None
            if why:
                return [f"no config is called best: {why}",
                        f"next: check the baseline's output in the trial logs in {logs_dir} and "
                        f"`ncclsweep status {job}`",
                        f"next: `ncclsweep run {job} --trials N` compares more configs with it"]
            broke = history.infeasible_lines(rows or [])
            if broke:  # measured, but the latency targets leave them nowhere to count
                return [f"no config holds the latency targets (slo) yet: {'; '.join(broke[:3])}",
                        f"next: `ncclsweep status {job}` shows every level's latency"]
            return [f"no config passed yet: see `ncclsweep status {job}` and the trial logs in {logs_dir}"]
        report = f"next: `ncclsweep report {job}` (writes {folder}/report.html)"
        # the race's outcome (with the box's drift where it drifted), launches under unlike load, the drift
        extra = [best[k] for k in ("race", "load") if best.get(k)]
        if best.get("drift") and best["drift"] not in (best.get("race") or ""):
            extra.append(best["drift"])
        if best.get("plan"):
            mix = " (or --mix)" if best["plan"].get("weights") else ""
            return [*plan_lines(best["plan"]), *extra, report, f"next: `ncclsweep compare {job} --plan`",
                    f"next: `ncclsweep export {job} --concurrency N --format cmd`{mix}"]
        if best.get("goodput"):
            return [f"goodput: {best['goodput']['text']}",
                    *config_lines(f"  #{best['number']} config: ", best.get("config") or {}),
                    *extra, report,
                    f"next: `ncclsweep export {job} --format cmd`"]
        base = best.get("baseline")
        figure = (f"{best['value']:.1f} {best.get('unit', 'tok/s')} "
                  f"(median of {launches_text(best.get('launches') or 1)})")
        if base is None:
            said = f"best #{best['number']} {figure} (no baseline measured to compare with)"
        elif base["number"] == best["number"]:
            said = f"the baseline #{base['number']} is the best config found ({figure})"
        else:
            said = f"best #{best['number']} {figure} = {best['verdict']}"
        broke = [line for line in history.infeasible_lines(rows or []) if "(baseline)" in line]
        if broke:  # reported, not a reason to stop
            said += f"; the baseline {broke[0].split(': ', 1)[1]}"
        return [said, *config_lines(f"  #{best['number']} config: ", best.get("config") or {}), *extra, report,
                f"next: `ncclsweep compare {job}`", f"next: `ncclsweep export {job} --format cmd`"]


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def config_lines(head: str, config: dict[str, Any], width: int = logs.LOG_WIDTH) -> list[str]:
    """A config as ``head`` + its ``k=v`` pairs, over as many lines as ``width`` needs, each
    beginning with ``head`` (the trial's number): never cut, never wider (a single pair wider
    than a line is wrapped by the log)."""
    pairs = [f"{k}={v}" for k, v in config.items()] or ["(defaults)"]
    lines, line = [], ""
    for pair in pairs:
        if line and len(head) + len(line) + 1 + len(pair) > width:
            lines.append(head + line)
            line = ""
        line = f"{line} {pair}" if line else pair
    return [*lines, head + line]


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The verdict of a plan (``Plan.to_dict``), a line per level: its best, its number and its
    ratio to the baseline (beyond noise or not, ``core.verdict``); a line for what the best at
    the lowest level loses where another config is best; with weights, one for the mix's best."""
    lines = []
    first = plan["levels"][0]
    losses = []
    for lp in plan["per_level"]:
        if lp["best_trial"] is None:
            lines.append(f"at {lp['level']} none yet")
            continue
        vs = lp["vs_baseline"]
        ratio = f" = {vs['text']} than the baseline" if vs and vs["verdict"] != verdict.SAME_CONFIG else \
            (" (the baseline)" if vs else "")
        n = lp.get("best_launches") or 1
        lines.append(f"at {lp['level']} #{lp['best_trial']} {fmt(lp['best_value'])} {lp['unit']} "
                     f"({launches_text(n)}){ratio}")
        lose = lp["anchor_vs_best"]
        if lose and lose["verdict"] != verdict.SAME_CONFIG:
            losses.append(f"{fmt(lp['anchor_value'])} at {lp['level']} ({lose['text']})")
    if losses and plan.get("anchor_trial") is not None:
        lines.append(f"the best at {first} (#{plan['anchor_trial']}) does " + ", ".join(losses))
    if plan.get("slo_lines"):  # the latency targets: who broke them where, by how much
        lines += [f"slo {plan['slo_text']}: {line}" for line in plan["slo_lines"]]
    mix = plan.get("mix")
    if mix:
        vs = mix.get("vs_baseline")
        lines.append(f"best for the mix #{mix['trial']}" + (f" = {vs['text']} than the baseline"
                                                           if vs and vs["verdict"] != verdict.SAME_CONFIG else
                                                           " (the baseline)" if vs else ""))
    return [f"plan: {line}" for line in lines]


