"""A trial's final outcome, decided in one place, and the one rule for which trials may be ranked.

A trial comes back from its actor with a *raw* result (``trial.run_trial`` says what the
server did; the executor turns a vanished worker into ``node-lost``). ``decide`` turns it
into the *final* outcome the study records, in this order, each step a
``dataclasses.replace`` of the result (no field is ever copied by hand, so ``nccl``,
``warnings``, ``server`` and the log tail survive every step):

1. a second Ctrl-C killed it, or its server ended or stopped answering while the run was
   being stopped (``ended_by_the_stop``: a service manager's SIGTERM reaches every process):
   FAIL ``interrupted``;
2. the log shows the node, not the config, was at fault (port taken, no GPU visible,
   GPUs busy): FAIL ``env-error`` (``trial.py`` already says ``env-error`` when the
   server command could not be executed at all); the server refused a request as longer
   than its sequence limit (``too_long``: vLLM's "maximum context length", SGLang's, llama.cpp's):
   the job's requests against the server's limit, a job error (``Final.job_error``: the driver
   stops the run with that one line, exit 2), never the config's nor the baseline's: FAIL
   ``interrupted``, not counted, not banned;
3. the correctness gate: a COMPLETE trial whose output differs from the golden
   reference becomes FAIL ``wrong-output``;
4. the job's outcome constraints: a COMPLETE trial below ``min_ratio`` x the baseline at
   a constrained concurrency stays COMPLETE but carries ``constraint_violations``; the job's
   latency targets (``slo:``, ``core.slo``): every breach is a warning, and a COMPLETE trial
   that counts nowhere for the objective (``slo.judge``) carries ``slo_violations`` and how far
   over it is (``slo_excess``, what Optuna's constraint is told: ``infeasibility``);
5. what the failure means for the study (``Final``): a failure that is not the config's
   fault (``interrupted``, ``node-lost``, ``env-error``), a timeout while other work took
   half the host's CPUs (``busy_host``) and the *first* timeout of a config are blameless:
   not counted, never the config's cached answer, never banned, told to Optuna as FAIL
   (the sampler ignores it) and re-queued once; a config's third timeout is its own, busy
   host or not (``MAX_BLAMELESS_TIMEOUTS``). Every other failure is the config's: counted,
   cached, banned.

``rankable(rows)`` is the one rule for which trials may be ranked (the driver's best so
far and pruning threshold, ``history.best_rows``, export, report, importance): never a
config that computed wrong results, nor, while the golden reference is disputed
(``golden_check.disputed``), the reference's own config.
docs/architecture.md has the whole table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.core import correctness, golden_check
from orchestrator.core.launch import exit_text
from orchestrator.core.measurement import Measurement
from orchestrator.core.records import (
    COMPLETE,
    FAIL,
    NOT_THE_CONFIGS_FAULT,
    PRUNED,
    TIMEOUT_KINDS,
    WRONG_RESULT_KINDS,
    FailureKind,
    TrialResult,
    TrialRow,
)
from orchestrator.core.slo import Judged

# Early stop ("clearly worse"), chosen with the replay harness (docs/benchmarks.md): a trial
# whose first repeat is below DEFAULT_PRUNE_RATIO x the best median so far stops after that
# repeat and is recorded PRUNED. 0.8 halved the repeats of a study without costing launches
# and never stopped a config within 2% of the best; 0.9 and 0.95 sometimes did on the noisier
# tables, 0.7 spent ~10% more repeats. (The job's ``pruning.min_ratio`` sets it per study.)
DEFAULT_PRUNE_RATIO = 0.8
FIRST_TIMEOUT_NOTE = "first timeout of this config: re-queued once to see whether it reproduces"
BUSY_HOST_NOTE = "a timeout on a busy host says more about its neighbours than about the config: re-queued"
# A config's timeouts are blameless up to here (its first, then those on a busy host); the next
# one is the config's even on a busy host: a config that never finishes would be launched again
# all night on a host that stays busy.
MAX_BLAMELESS_TIMEOUTS = 2

# Lines in a server's log that put the failure on the node, not the config (lower case),
# and what the user should fix. Out-of-memory is not here: a config (batch size, memory
# fraction) can cause it.
ENV_LOG_MARKERS = (
    ("address already in use", "the server's port was taken by another process"),
    ("is already in use", "the server's port was taken by another process"),
    ("eaddrinuse", "the server's port was taken by another process"),
    ("no cuda-capable device is detected", "no GPU is visible on the node"),
    ("no cuda gpus are available", "no GPU is visible on the node"),
    ("cuda_error_no_device", "no GPU is visible on the node"),
    ("cudaerrornodevice", "no GPU is visible on the node"),
    ("busy or unavailable", "the GPUs are busy (another process, or exclusive compute mode)"),
    ("cudaerrordevicesunavailable", "the GPUs are busy (another process, or exclusive compute mode)"),
)
_LOG_KINDS = (FailureKind.START_CRASH, FailureKind.BENCH_ERROR)  # raw kinds whose log may show an environment cause
# How servers refuse a request longer than their sequence limit (lower case), in the failed request's
# error: the job's requests (its traffic, its context, its output length) against the server's limit.
TOO_LONG_MARKERS = (
    "maximum context length",  # vLLM and OpenAI: "This model's maximum context length is 4096 tokens. However, ..."
    "longer than the maximum model length",  # vLLM's engine: "The decoder prompt (length N) is longer than ..."
    "longer than the model's context length",  # SGLang: "The input (N tokens) is longer than the model's context ..."
    "exceeds the available context size",  # llama.cpp's server
)
TOO_LONG_FIX = ("the job's requests, not the config: raise the server's limit (its --max-model-len or "
                "--context-length) or shorten the requests (the traffic's longest, bench.context, "
                "bench.output_tokens); no config is held to it")
# what a stop that reaches the server does to a trial: its server dies (before ready, or while
# measured) or stops answering; never a wrong answer or a setting NCCL refused
STOPPED_SERVER_KINDS = (FailureKind.START_CRASH, FailureKind.BENCH_ERROR, FailureKind.HANG)


@dataclass(frozen=True)
class Final:
    """The final result and what it means for the study."""

    result: TrialResult
    counted: bool  # counts toward the budget and is the config's cached answer
    blameless: bool  # not (yet shown to be) the config's fault: never cached, never banned
    requeue: bool  # put the config back once
    job_error: str | None = None  # the job must change (one line): the driver stops the run with it, exit 2


def early_stop(first: Mapping[Any, float | None], thresholds: Mapping[Any, float | None] | None) -> bool:
    """The one early-stop rule: stop a trial after its first repeat when, at every level that
    has a threshold (``min_ratio`` x the best so far there), its first measurement is below
    it. A config that could still be best at some level is measured in full; no threshold
    (nothing measured yet, pruning off, the baseline) never stops."""
    levels = [level for level, limit in (thresholds or {}).items() if limit is not None]
    if not levels:
        return False
    return all(first.get(level) is not None and first[level] < thresholds[level]  # type: ignore[index,operator]
               for level in levels)


def interrupted(result: TrialResult, reason: str) -> TrialResult:
    """The same result, as FAIL ``interrupted`` with ``reason``."""
    return replace(result, outcome=FAIL, failure_kind=FailureKind.INTERRUPTED, failure_reason=reason)


def ended_by_the_stop(result: TrialResult, stop_signals: int) -> str | None:
    """Why this failure is the run's stop, not the config's (None: it is not): its server
    ended or stopped answering (``STOPPED_SERVER_KINDS``) while the run was being stopped
    (``stop_signals``: the stop signals handled before the result was judged; a trial that
    came back then was running as the stop began). A stop that reaches every process (a
    service manager's) ends the servers too, each as its engine does on SIGTERM: killed by
    it, or a shutdown with a code of its own, its workers first or its front. The text says
    how the server ended where the node saw it (``signals.server_exit_code``). A config that
    crashed on its own just then is measured again by the next run: one launch, against a
    config banned for a stop."""
    if not stop_signals or result.outcome != FAIL or result.failure_kind not in STOPPED_SERVER_KINDS:
        return None
    code = result.signals.server_exit_code
    return f"its server ended ({exit_text(code)})" if code is not None else "its server failed"


def busy_host(result: TrialResult) -> bool:
    """Other work took at least half the host's CPUs while the trial was measured
    (``core.measurement.HostLoad.busy``)."""
    host = result.measurement.host if result.measurement is not None else None
    return host is not None and host.busy


def environment_cause(result: TrialResult) -> str | None:
    """What in the log puts this failure on the node (None: nothing does)."""
    if result.outcome != FAIL or result.failure_kind not in _LOG_KINDS:
        return None
    text = f"{result.failure_reason or ''}\n{result.log_tail or ''}".lower()
    return next((why for marker, why in ENV_LOG_MARKERS if marker in text), None)


def too_long(result: TrialResult) -> str | None:
    """The server's refusal of a request as longer than its sequence limit (``TOO_LONG_MARKERS``),
    as the failure says it; None: not that. Read in the failure reason only (the failed request's
    error), not in the log, where an engine names its limit at start."""
    if result.outcome != FAIL or result.failure_kind != FailureKind.BENCH_ERROR:
        return None
    reason = result.failure_reason or ""
    return reason if any(marker in reason.lower() for marker in TOO_LONG_MARKERS) else None


def gate(result: TrialResult, golden) -> TrialResult:
    """The correctness gate: outputs that differ from the golden reference make the trial
    FAIL ``wrong-output`` (its measured tok/s kept as ``decode_tok_s_ignored``); a pass that
    comes with a warning (a server that disowns its own scores) keeps the warning on the trial."""
    if golden is None or not result.outputs or result.outcome not in (COMPLETE, PRUNED):
        return result
    verdict = correctness.compare(golden, result.outputs)
    if verdict["ok"]:
        warned = [*result.warnings, verdict["warning"]] if verdict.get("warning") else result.warnings
        return replace(result, correctness=verdict, warnings=warned)
    metrics = {**result.metrics, "decode_tok_s_ignored": result.value}
    return replace(result, outcome=FAIL, value=None, failure_kind=FailureKind.WRONG_OUTPUT,
                   failure_reason=verdict["reason"], correctness=verdict, metrics=metrics)


def judge_constraints(result: TrialResult, rules, baseline: Measurement | None) -> TrialResult:
    """The job's outcome constraints ("no worse than 0.9 x baseline at concurrency 64"): a
    config that breaks one stays COMPLETE (it was measured) but is infeasible: the sampler
    learns it, and it is never ranked or exported as best."""
    if not rules or result.outcome != COMPLETE or result.measurement is None or baseline is None:
        return result
    violations = []
    for rule in rules:
        got, ref = result.measurement.value_at(rule.concurrency), baseline.value_at(rule.concurrency)
        if got and ref and got < rule.min_ratio * ref:
            violations.append(f"total {got:.1f} tok/s at concurrency {rule.concurrency} is "
                              f"{got / ref:.2f}x the baseline's {ref:.1f} (the job asks >= {rule.min_ratio:g}x)")
    if not violations:
        return result
    return replace(result, metrics={**result.metrics, "constraint_violations": violations},
                   warnings=[*result.warnings, *(f"infeasible: {v}" for v in violations)])


SLO_PREFIX = "SLO broken at "  # how a breach begins in a trial's warnings


def judge_slo(result: TrialResult, judge: Callable[[Measurement], Judged] | None) -> TrialResult:
    """The job's latency targets (``judge``: ``study.objective.judged`` for the job's objective):
    each level a COMPLETE trial breaks them at is a warning; one that counts nowhere for the
    objective stays COMPLETE (it was measured) but is infeasible (``slo_violations``, and
    ``slo_excess``: how far over), never ranked, and the sampler learns by how much. The
    goodput search breaks them above its capacity point by design: only a config that holds them
    nowhere is said."""
    if judge is None or result.outcome != COMPLETE or result.measurement is None:
        return result
    got = judge(result.measurement)
    goodput = result.measurement.by_capacity
    warned = [] if goodput else [f"{SLO_PREFIX}{level}: " + "; ".join(b.describe() for b in found)
                                 for level, found in got.breaches.items()]
    if not got.infeasible:
        return replace(result, warnings=[*result.warnings, *warned]) if warned else result
    return replace(result, metrics={**result.metrics, "slo_violations": [got.why], "slo_excess": got.excess},
                   warnings=[*result.warnings, *warned, f"infeasible: {got.why}"])


def infeasibility(result: TrialResult) -> float:
    """What Optuna's constraint is told for a measured trial (feasible at 0, infeasible above):
    1.0 for a broken outcome constraint, the relative excess over the nearest latency target for
    a config that counts nowhere (``judge_slo``: 0.56 for 56% over), the larger of the two."""
    value = 1.0 if result.metrics.get("constraint_violations") else 0.0
    if result.metrics.get("slo_violations"):
        value = max(value, float(result.metrics.get("slo_excess") or 0.0), 1e-6)
    return value


def decide(result: TrialResult, *, stop_signals: int = 0, golden=None, rules=(),
           baseline: Measurement | None = None, earlier_timeouts: int = 0,
           slo: Callable[[Measurement], Judged] | None = None) -> Final:
    """The final outcome of a launched trial (steps in the module docstring).

    ``stop_signals``: how many stop signals the run has had (``driver.signals``): one, it is
    being stopped (a server that ends then is not the config's: ``ended_by_the_stop``); two,
    the running trials were killed;
    ``baseline``: the baseline's measurement (the outcome constraints' reference);
    ``earlier_timeouts``: how many earlier launches of the same config timed out (0: a
    timeout now is the first and is not yet the config's fault); ``slo``: the job's latency
    targets as its objective judges a measurement (``judge_slo``)."""
    if stop_signals > 1 and result.outcome == FAIL:
        result = interrupted(result, "killed by the user (second signal)")
    elif what := ended_by_the_stop(result, stop_signals):
        result = interrupted(result, f"{what} while the run was being stopped: the stop reached it too, as a service "
                                     f"manager's reaches every process, not the config ({result.failure_reason})")
    cause = environment_cause(result)
    if cause:
        result = replace(result, failure_kind=FailureKind.ENV_ERROR,
                         failure_reason=f"{cause} ({result.failure_reason})")
    refused = too_long(result)
    if refused is not None:
        why = f"the server refused a request as longer than its limit ({refused})"
        return Final(interrupted(result, f"the run stopped: {why}: {TOO_LONG_FIX}"), counted=False, blameless=True,
                     requeue=False, job_error=f"{why}: {TOO_LONG_FIX}")
    result = gate(result, golden)
    result = judge_constraints(result, rules, baseline)
    result = judge_slo(result, slo)
    if result.outcome != FAIL:
        return Final(result, counted=True, blameless=False, requeue=False)
    if result.failure_kind in NOT_THE_CONFIGS_FAULT:
        return Final(result, counted=False, blameless=True, requeue=True)
    if result.failure_kind in TIMEOUT_KINDS:
        if earlier_timeouts == 0:
            result = replace(result, failure_reason=f"{result.failure_reason} ({FIRST_TIMEOUT_NOTE})")
            return Final(result, counted=False, blameless=True, requeue=True)
        if busy_host(result) and earlier_timeouts < MAX_BLAMELESS_TIMEOUTS:
            result = replace(result, failure_reason=f"{result.failure_reason} ({BUSY_HOST_NOTE})")
            return Final(result, counted=False, blameless=True, requeue=True)
        if busy_host(result):
            result = replace(result, failure_reason=f"{result.failure_reason} ({_last_timeout_note(earlier_timeouts)})")
    return Final(result, counted=True, blameless=False, requeue=False)


def _last_timeout_note(earlier_timeouts: int) -> str:
    return (f"timed out on {earlier_timeouts + 1} launches: the config's, busy host or not, or a config that "
            "never finishes would be launched all night on a host that stays busy")


def reference_failed(result: TrialResult, reason: str) -> Final:
    """The reference trial could not give a usable golden reference: the study stops. The
    failure is blameless (not cached, not banned) so that the next ``run``, after the
    user's fix, measures the same baseline again."""
    if result.outcome != FAIL:
        metrics = {**result.metrics, "decode_tok_s_ignored": result.value}
        result = replace(result, outcome=FAIL, value=None, failure_kind=FailureKind.WRONG_OUTPUT, metrics=metrics,
                         failure_reason=f"unusable as the golden reference: {reason}")
    result = replace(result, correctness={**result.correctness, "ok": False, "reference": True, "reason": reason})
    return Final(result, counted=False, blameless=True, requeue=False)


# ---- which trials may be ranked -------------------------------------------------------------

def failed_correctness(row: TrialRow) -> bool:
    """This row shows its config computes wrong results (a reference that failed its own
    check says nothing about the config: the next run measures it again; nor does a gate
    failure against a reference it outvoted)."""
    corr = row.correctness or {}
    if (corr.get("reference") and not row.counted) or corr.get("outvoted_reference"):
        return False
    return corr.get("ok") is False or corr.get("passed") is False or row.failure_kind in WRONG_RESULT_KINDS


def tainted_keys(rows: Iterable[TrialRow]) -> dict[str, int]:
    """config key -> first trial number that showed the config computes wrong results, or
    put its output in question: while the golden reference is disputed
    (``golden_check.disputed``), the reference's own config too, under the first trial that
    disagreed with it."""
    rows = list(rows)
    out: dict[str, int] = {}
    for r in rows:
        if failed_correctness(r):
            out.setdefault(r.config_key, r.number)
    if golden_check.disputed(rows):
        against = [r.number for r in golden_check.gate_failures(rows)]
        for r in golden_check.references(rows):
            out.setdefault(r.config_key, min(against, default=r.number))
    return out


def rankable(rows: list[TrialRow]) -> list[TrialRow]:
    """The rows that may be ranked (``history`` rows): COMPLETE with a value, launched and
    counted (not a cached duplicate, not a baseline repeat on another node), no outcome
    constraint broken, counting somewhere under the latency targets (``judge_slo``), and of a
    config never found to compute wrong results."""
    tainted = tainted_keys(rows)
    return [r for r in rows
            if r.state == COMPLETE and r.value is not None and r.counted and r.cached_from is None
            and r.config_key not in tainted and not (r.metrics or {}).get("constraint_violations")
            and not (r.metrics or {}).get("slo_violations")]


def env_hint(reason: str | None) -> str:
    """What to fix for an ``env-error`` reason."""
    text = (reason or "").lower()
    if "cannot start" in text or "not found" in text or "no such file" in text:
        return ("the server command (or the interpreter its script names) cannot be executed on that node: install "
                "it there, or fix backend.settings.executable/python and PATH in the job's env:")
    if "port" in text:
        return "free the port (another process holds it), or stop the stray server (`ncclsweep cleanup JOB`)"
    if "gpu" in text:
        return "check `nvidia-smi` on that node: end what holds the GPUs, or fix the node's GPU setup"
    return "fix the node, then run again"
