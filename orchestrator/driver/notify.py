"""Told when it ends: a command run once when a ``run`` ends, fails or is stopped.

A study runs for hours with nobody watching; ``--notify CMD`` (or the job's ``notify:``)
names a command that is run exactly once when the run is over, however it ended: its
budget or space done, its ``--timeout``, an error that stopped it, Ctrl-C or a signal. It
gets the run's summary (``ending``) as JSON on stdin and in ``NCCLSWEEP_SUMMARY``, and the
main facts as ``NCCLSWEEP_*`` variables, so it can send them wherever the user reads them
(a chat webhook, mail, a phone)::

    ncclsweep run jobs/demo.yaml --notify 'sh -c "curl -s -d @- https://ntfy.sh/my-topic"'

The command is an argv (``config.job.notify_command``: a string split the way a shell
splits words, quotes kept together, or a list of words), and nothing goes through a shell
unless the user wrote one. A notify command that is missing, fails or runs past ``NOTIFY_TIMEOUT_S`` is a
warning: the run's own outcome and exit code stand.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
from collections.abc import Sequence
from typing import Any

from orchestrator.config.yaml_input import display_path
from orchestrator.core.errors import NcclsweepError
from orchestrator.driver.progress import RunSummary

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_S = 60.0
FINISHED, STOPPED, FAILED = "finished", "stopped", "failed"


def ending(job, summary: RunSummary | None, error: BaseException | None, *, counted: int | None,
           best: dict[str, Any] | None) -> dict[str, Any]:
    """What the notify command is told: how the run ended (``status``: finished, stopped,
    failed; the reason or the error line; the exit code), the study and where its results
    are, and the best config with its figure, its ratio to the baseline and interval, and
    the command that exports it."""
    if error is None and summary is not None:
        status = STOPPED if summary.interrupted else FINISHED
        reason, code = summary.reason, 130 if summary.interrupted else 0
    elif isinstance(error, KeyboardInterrupt):
        status, reason, code = STOPPED, "stopped by signal", 130
    else:
        status, reason = FAILED, f"{error}" if isinstance(error, NcclsweepError) else f"{type(error).__name__}: {error}"
        code = error.exit_code if isinstance(error, NcclsweepError) else 1
    out: dict[str, Any] = {"status": status, "reason": reason, "exit_code": code, "study": job.study,
                           "job": str(job.path), "results": display_path(job.report_dir),
                           "trials_counted": counted, "launched": summary.launched if summary else None,
                           "best": None, "export": None}
    if best:
        plan = best.get("plan")
        out["best"] = {"trial": best["number"], "config": best.get("config") or {}, "value": best["value"],
                       "unit": "tok/s", "vs_baseline": best.get("vs_baseline"), "interval": best.get("interval"),
                       "verdict": best.get("verdict"), **({"plan": plan} if plan else {})}
        out["export"] = (f"ncclsweep export {job.path} --concurrency N --format cmd" if plan
                         else f"ncclsweep export {job.path} --format cmd")
    return out


def environment(said: dict[str, Any]) -> dict[str, str]:
    """The ``NCCLSWEEP_*`` variables of an ``ending``."""
    best = said.get("best") or {}
    env = {"NCCLSWEEP_STATUS": said["status"], "NCCLSWEEP_REASON": said["reason"], "NCCLSWEEP_STUDY": said["study"],
           "NCCLSWEEP_JOB": said["job"], "NCCLSWEEP_RESULTS": said["results"],
           "NCCLSWEEP_SUMMARY": json.dumps(said, default=str)}
    if best:
        env.update(NCCLSWEEP_BEST_TRIAL=str(best["trial"]), NCCLSWEEP_BEST_VALUE=f"{best['value']:.1f}",
                   NCCLSWEEP_BEST_CONFIG=" ".join(f"{k}={v}" for k, v in best["config"].items()),
                   NCCLSWEEP_BEST_VERDICT=str(best.get("verdict") or ""), NCCLSWEEP_EXPORT=said["export"] or "")
    return env


def send(argv: Sequence[str], said: dict[str, Any], timeout_s: float = NOTIFY_TIMEOUT_S) -> bool:
    """Run the notify command once with ``said`` (module docstring); False, with a warning,
    when it could not run, failed or ran too long: never an error of the run."""
    what = shlex.join(argv)
    try:
        done = subprocess.run(list(argv), input=json.dumps(said, indent=2, default=str), text=True,
                              env={**os.environ, **environment(said)}, capture_output=True, timeout=timeout_s,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        log.warning("the notify command %s ran past %gs and was ended", what, timeout_s)
        return False
    except OSError as exc:
        log.warning("the notify command %s could not run: %s", what, exc.strerror or exc)
        return False
    except KeyboardInterrupt:
        log.warning("the notify command %s was interrupted", what)
        return False
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or [""]
        log.warning("the notify command %s exited with code %s%s", what, done.returncode,
                    f": {tail[0][:200]}" if tail[0] else "")
        return False
    return True


def run_notified(driver, argv: Sequence[str] | None) -> RunSummary:
    """``driver.run()``, then ``argv`` told how it ended, exactly once, whatever happened
    (an error or Ctrl-C is raised again after it)."""
    if not argv:
        return driver.run()
    try:
        summary = driver.run()
    except BaseException as exc:
        send(argv, ending(driver.job, None, exc, counted=driver.counted(), best=driver.best_now()))
        raise
    send(argv, ending(driver.job, summary, None, counted=driver.counted(), best=summary.best))
    return summary
