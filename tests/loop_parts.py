"""One run's loop state built from real parts, for the tests of the driver's loop objects: a job
for the tiny reference server, its study opened in a real journal, the ``SearchPolicy`` over it,
an ``InProcessExecutor`` (shut down when the ``with`` ends, ending what it still runs) and stop
signals no one sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import write_job
from orchestrator.config.job import load_job
from orchestrator.driver.in_process import InProcessExecutor
from orchestrator.driver.loop_state import LoopState
from orchestrator.driver.progress import RunSummary
from orchestrator.driver.signals import StopSignals
from orchestrator.driver.time_budget import TimeBudget
from orchestrator.study.search.policy import SearchPolicy
from orchestrator.study.storage.storage import open_study


@contextmanager
def loop_state(tmp_path: Path, *, timeout_s: float | None = None, parallel: int = 1, study: str = "t",
               executor_class: type[InProcessExecutor] = InProcessExecutor,
               **sections) -> Iterator[tuple[object, LoopState]]:
    """(job, LoopState) of a fresh study; ``sections`` override the job's YAML keys."""
    job = load_job(write_job(tmp_path, study=study, ray={"parallel": parallel}, **sections))
    opened = open_study(job)
    policy = SearchPolicy(opened, job.space, job.backend_obj().normalize, baseline=job.baseline_config(),
                          budget=job.budget.trials, run="2024-05-01T22:00:00+00:00")
    executor = executor_class(parallel)
    try:
        yield job, LoopState(opened, policy, executor, StopSignals(lambda line: None), RunSummary("budget reached"),
                             TimeBudget(timeout_s, time.monotonic()), checks=job.correctness.enabled)
    finally:
        executor.shutdown()


def wait_for(executor, n: int = 1, limit_s: float = 180.0) -> list:
    """``n`` results from ``executor.wait`` (a guard against a hang, not a timing assertion)."""
    got: list = []
    deadline = time.monotonic() + limit_s
    while len(got) < n and time.monotonic() < deadline:
        got += executor.wait(0.5)
    return got
