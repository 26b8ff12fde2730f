"""Learning from failures at the value level: a parameter value that keeps crashing servers
at start, for a reason their logs attribute to it, or that keeps giving wrong output, is
not proposed again.

A config-caused failure bans that one config; a value that cannot work (``NCCL_ALGO=NVLS``
without NVSwitch, a token NCCL refuses) would still be launched once in every config that
carries it. So, over the study's launched trials (``history`` rows, normalized params):

- a failure *implicates* a value when it happened at start (``start-crash`` or
  ``nccl-invalid``) and its log or reason attributes it to that value: the value itself
  (e.g. ``"LL129"``, ``crash-on-start``) appears as a word in an error line (a line of the
  log's tail that is not the launch command and says error, warn, invalid, unrecognized,
  fault, refused, not supported, exiting, fatal, abort or exception), or, for an
  ``nccl-invalid`` failure (NCCL refused one of its variables), an ``env.NCCL_*`` value
  of the config when the log names none of them;
- a value is *banned* once ``MAX_CONSISTENT_FAILURES`` launches that carried it failed at
  start, at least one of them implicating it, and no launch with it ever got past start-up
  (COMPLETE, PRUNED, or a failure after start). A launch that crashed for another value's
  fault still counts for a value it carried (it did not get past start-up either): a
  value that never started is banned after at most 2 launches, a bystander never (it
  started elsewhere, or no log names it).

Wrong output has no log line to name its cause, so a value is judged by what passed:

- a value is *cleared* once a launch that carried it passed the correctness gate (COMPLETE
  or PRUNED, its output not found wrong);
- a value is banned once two ``wrong-output`` launches of different configs carried it
  and it is the only value never cleared that the two share (then nothing else they have
  in common can be why both were wrong: a bystander that the two happen to share, and
  that has not been cleared yet, is never banned with it; the ban waits for another pair);
- only while the golden reference is sound (``reference.vindicated``: a config other than
  its own passed the gate): against a reference that may itself be wrong, a gate failure
  says nothing about the value (the driver holds such failures until then, and the
  reference's outvote rule judges them). Failures that were not the config's fault
  (blameless, uncounted, against an outvoted reference) never count.

A stall (``hang``: the tree alive and silent for ``timeouts.stall``, e.g. ``NCCL_P2P_LEVEL``
set too high on a PCIe box) has no log line either, so it is judged like wrong output
(``hang_values``): a value is cleared by a launch with it that did not hang (it got past
start-up, or through its benchmark), and banned once two counted ``hang`` launches of
different configs carried it and it is the only value never cleared that they share. A
config's first hang is blameless (re-queued once, like a first timeout) and never counts;
its second is the config's answer, so a value that hangs twice in two configs is banned.

``banned_values(rows)`` -> {(param, value): reason}; ``hit(config, bans)`` says which ban
a (normalized) config carries. The search policy leaves such configs out of what it
proposes (``orchestrator.study.search.feasible``); the driver says so in a progress line, the report
lists them.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.core.golden_check import vindicated
from orchestrator.core.records import AFTER_START_KINDS, START_KINDS, FailureKind, TrialRow

MAX_CONSISTENT_FAILURES = 2
_ERROR_LINE = re.compile(r"error|warn|invalid|unrecogni[sz]ed|fault|refus|not supported|exiting|fatal|abort|"
                         r"exception", re.IGNORECASE)
_HEADER = "# ncclsweep:"  # the launch command the server log starts with: names every value


def _error_text(row: TrialRow) -> str:
    lines = [ln for ln in (row.log_tail or "").splitlines()
             if not ln.startswith(_HEADER) and _ERROR_LINE.search(ln)]
    return "\n".join([row.failure_reason or "", *lines])


def _named(value: Any, text: str) -> bool:
    """``value`` appears as a word in ``text`` (case-insensitive; numbers and bools never:
    a digit or 'true' is in every log)."""
    if not isinstance(value, str) or len(value) < 2 or value.replace(".", "").isdigit():
        return False
    return re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w-])", text, re.IGNORECASE) is not None


def implicated(row: TrialRow) -> list[tuple[str, Any]]:
    """The (param, value) pairs a failed launch's log attributes its start-up failure to."""
    named = named_in_log(row)
    if row.failure_kind == FailureKind.NCCL_INVALID and not any(k.startswith("env.NCCL_") for k, _ in named):
        named += [(k, v) for k, v in (row.params or {}).items() if k.startswith("env.NCCL_")]
    return named


def named_in_log(row: TrialRow) -> list[tuple[str, Any]]:
    """The (param, value) pairs a start-up failure's error lines name as a word: ``implicated``
    without its guess for an ``nccl-invalid`` failure whose log names none."""
    if row.state != "FAIL" or row.failure_kind not in START_KINDS:
        return []
    text = _error_text(row)
    return [(k, v) for k, v in (row.params or {}).items() if _named(v, text)]


def _started(row: TrialRow) -> bool:
    """A launch that got past start-up with its config (so none of its values crashes it)."""
    if row.state in ("COMPLETE", "PRUNED"):
        return True
    if row.state == "FAIL" and row.failure_kind == FailureKind.HANG:  # a stream that stopped: it had started
        return (row.startup_phases or {}).get("ready_s") is not None
    return row.state == "FAIL" and row.failure_kind in AFTER_START_KINDS


def banned_values(rows: list[TrialRow]) -> dict[tuple[str, Any], str]:
    """{(param, value): why} for values that consistently crashed servers at start or gave
    wrong output (``wrong_output_values``)."""
    launched = [r for r in rows if r.counted and r.cached_from is None and not r.skipped]
    carried: dict[tuple[str, Any], list[TrialRow]] = {}  # start failures of launches with the value
    named: set[tuple[str, Any]] = set()  # values some start failure's log attributes it to
    for r in launched:
        if r.state == "FAIL" and r.failure_kind in START_KINDS:
            for k, v in (r.params or {}).items():
                carried.setdefault(_key(k, v), []).append(r)
            named |= {_key(*pair) for pair in implicated(r)}
    ok = {_key(k, v) for r in launched if _started(r) for k, v in (r.params or {}).items()}
    out = {}
    for pair in named - ok:
        rows_ = carried[pair]
        if len(rows_) >= MAX_CONSISTENT_FAILURES:
            first = next(r for r in rows_ if pair in {_key(*p) for p in implicated(r)})
            out[pair] = (f"{len(rows_)} launches with it failed at start, and none got past it ({first.failure_kind}: "
                         f"{(first.failure_reason or '')[:100]}; trials "
                         f"{', '.join(str(r.number) for r in rows_)})")
    for pair, why in wrong_output_values(rows).items():
        out.setdefault(pair, why)
    for pair, why in hang_values(rows).items():
        out.setdefault(pair, why)
    return out


def _passed(row: TrialRow) -> bool:
    """A launch whose output was not found wrong (a COMPLETE or PRUNED trial passed the gate
    or had none to pass)."""
    return row.state in ("COMPLETE", "PRUNED") and (row.correctness or {}).get("ok") is not False


def _gave_wrong_output(row: TrialRow) -> bool:
    """A counted launch whose output the gate refused (never one against an outvoted reference)."""
    corr = row.correctness or {}
    return (row.state == "FAIL" and row.failure_kind == FailureKind.WRONG_OUTPUT and not corr.get("reference")
            and not corr.get("outvoted_reference"))


def wrong_output_values(rows: list[TrialRow]) -> dict[tuple[str, Any], str]:
    """{(param, value): why} for values that gave wrong output (module docstring)."""
    if not vindicated(rows):
        return {}
    launched = [r for r in rows if r.cached_from is None and not r.skipped]
    cleared = {_key(k, v) for r in launched if _passed(r) for k, v in (r.params or {}).items()}
    wrong = [r for r in launched if r.counted and _gave_wrong_output(r)]
    return _shared_suspects(wrong, cleared, "gave wrong output", "passed the correctness gate")


def _hung(row: TrialRow) -> bool:
    return row.state == "FAIL" and row.failure_kind == FailureKind.HANG


def hang_values(rows: list[TrialRow]) -> dict[tuple[str, Any], str]:
    """{(param, value): why} for values that hung servers (module docstring)."""
    launched = [r for r in rows if r.cached_from is None and not r.skipped]
    cleared = {_key(k, v) for r in launched if _started(r) and not _hung(r) for k, v in (r.params or {}).items()}
    hung = [r for r in launched if r.counted and _hung(r)]
    return _shared_suspects(hung, cleared, "hung twice (silent for timeouts.stall)",
                            "got past start-up without hanging")


def _shared_suspects(failed: list[TrialRow], cleared: set[tuple[str, Any]], what: str,
                     other: str) -> dict[tuple[str, Any], str]:
    """Values that two failed launches of different configs carry and that are the only ones
    never cleared the two share (the rule of wrong output and of stalls)."""
    suspects = {r.number: {_key(k, v) for k, v in (r.params or {}).items()} - cleared for r in failed}
    out: dict[tuple[str, Any], str] = {}
    for i, a in enumerate(failed):
        for b in failed[i + 1:]:
            common = suspects[a.number] & suspects[b.number]
            if a.config_key == b.config_key or len(common) != 1:
                continue
            pair = next(iter(common))
            if pair in out:
                continue
            rows_ = [r for r in failed if pair in suspects[r.number]]
            out[pair] = (f"{len(rows_)} launches of different configs with it {what} (trials "
                         f"{', '.join(str(r.number) for r in rows_)}), none with it {other}, and every other "
                         f"value trials {a.number} and {b.number} share did ({a.failure_kind}: "
                         f"{(a.failure_reason or '')[:100]})")
    return out


def _key(name: str, value: Any) -> tuple[str, Any]:
    return name, (value.upper() if isinstance(value, str) and name.startswith("env.NCCL_") else value)


def hit(config: dict[str, Any], bans: dict[tuple[str, Any], str]) -> tuple[str, Any] | None:
    """The banned (param, value) a normalized config carries, if any."""
    if not bans:
        return None
    return next((pair for pair in (_key(k, v) for k, v in config.items()) if pair in bans), None)


def describe(pair: tuple[str, Any]) -> str:
    return f"{pair[0]}={pair[1]}"
