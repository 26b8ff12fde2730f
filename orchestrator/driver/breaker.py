"""The circuit breaker: the run stops when failures say the node, not the configs, needs fixing.

Every decided launch of the search passes through ``Breaker.check``: a write into the study's
folder that failed stops the run with that failure; GPUs unusable after a teardown stop it at
once; ``ENV_BREAKER`` environment failures in a row stop it (no config is banned for them);
``max_consecutive_failures`` counted failures in a row stop it (0: never). Each stop is a
``CircuitOpen`` with the one line that says what to look at; ``ncclsweep run`` resumes.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.core import outcome
from orchestrator.core.errors import CircuitOpen
from orchestrator.core.records import COMPLETE, FAIL, PRUNED, FailureKind

# Environment failures in a row that stop the study: the node, not the configs, needs fixing.
ENV_BREAKER = 2


class Breaker:
    """The run's failure counters (module docstring). ``limit``: the job's
    ``max_consecutive_failures``; ``logs`` and ``job_path`` are named in the stop line."""

    def __init__(self, limit: int, logs: Path, job_path):
        self.limit = limit
        self.logs = logs
        self.job_path = job_path
        self.consecutive_failures = 0
        self.consecutive_env_failures = 0

    def check(self, final: outcome.Final) -> None:
        """Count ``final``'s outcome; raise (``StorageWriteError``, ``CircuitOpen``) when the run must stop."""
        result = final.result
        stop = result.signals.write_error
        if stop is not None:  # the trial could not write into the study's folder
            raise stop
        if result.signals.gpus_usable is False:
            raise CircuitOpen("stopping: the GPUs were not usable after a teardown "
                              f"({'; '.join(result.warnings[-1:])}); check nvidia-smi for stuck processes "
                              "and the kernel log (dmesg) for Xid errors, then `ncclsweep run` resumes")
        if result.outcome == FAIL and result.failure_kind == FailureKind.ENV_ERROR:
            self.consecutive_env_failures += 1
            if self.consecutive_env_failures >= ENV_BREAKER:
                raise CircuitOpen(
                    f"stopping after {self.consecutive_env_failures} trials in a row failed for a reason outside "
                    f"their configs (env-error: {result.failure_reason}); {outcome.env_hint(result.failure_reason)}; "
                    "no config was banned for it, and `ncclsweep run` re-queues them")
            return
        self.consecutive_env_failures = 0
        if result.outcome == FAIL and final.counted:
            self.consecutive_failures += 1
        elif result.outcome in (COMPLETE, PRUNED):
            self.consecutive_failures = 0
        if self.limit and self.consecutive_failures >= self.limit:
            raise CircuitOpen(
                f"stopping after {self.consecutive_failures} consecutive failed trials (last: "
                f"{result.failure_kind}: {result.failure_reason}); look at the trial logs in {self.logs} "
                f"and `ncclsweep status {self.job_path}`; the study resumes with `ncclsweep run`")
