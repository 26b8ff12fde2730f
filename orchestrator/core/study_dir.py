"""The study's folder, named once: where every file of a study lives.

A study's folder (``reports/<study>/`` next to the job file, or the job's ``output_dir`` /
``report_dir``) holds what the driver writes while it runs and what the morning-after
commands write from it. Every module finds a path through ``StudyDir`` (a frozen value made
from the folder), never by spelling a file name itself, so the layout is this one table:

    study.journal       Optuna's journal storage (the default ``storage:``)
    driver.lock         one driver per study (``driver.lock``)
    driver.log          the run's progress and warnings
    servers/            one record per live server (pid, start time, port): what cleanup ends
    logs/               one log per trial server (trial-NNNN.log)
    bench-logs/         the servers ``ncclsweep bench`` launched
    compare-logs/       the servers ``ncclsweep compare`` launched
    compare.json        the last ``compare``'s rounds
    compare-plan.json   the last ``compare --plan``'s rounds (the plan's configs at every level)
    prescreen.json      the all-reduce pre-screen's latencies (its size sweep, crossovers)
    prescreen-sweep.csv the sweep's table: one line per setting and message size
    report.md, report.html, trials.csv, *.png      ``ncclsweep report``

and, while they are written, ``.<name>.*.tmp`` (``core.files``), ``study.journal.lock`` and
``study.journal.incomplete-*`` (``study.journal``). ``foreign_entries`` names what else a folder
holds: a new study is not started among someone else's files.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

_NAMES = ("study.journal", "driver.lock", "driver.log", "servers", "logs", "bench-logs", "compare-logs",
          "compare.json", "compare-plan.json", "prescreen.json", "report.md", "report.html", "trials.csv")
_PATTERNS = ("*.png", ".*.tmp", "study.journal.*")
_WRITTEN_BY_A_RUN = ("study.journal", "driver.log", "logs", "servers")  # a study was here


def trial_log_name(number: int) -> str:
    """The file name of trial ``number``'s server log."""
    return f"trial-{number:04d}.log"


@dataclass(frozen=True)
class StudyDir:
    """The files of the study whose folder is ``root`` (module docstring)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def journal(self) -> Path:
        return self.root / "study.journal"

    @property
    def lock(self) -> Path:
        return self.root / "driver.lock"

    @property
    def driver_log(self) -> Path:
        return self.root / "driver.log"

    @property
    def servers(self) -> Path:
        """The server registry folder (``node.server.ServerRegistry``)."""
        return self.root / "servers"

    @property
    def logs(self) -> Path:
        """The trial servers' logs."""
        return self.root / "logs"

    @property
    def bench_logs(self) -> Path:
        return self.root / "bench-logs"

    @property
    def compare_logs(self) -> Path:
        return self.root / "compare-logs"

    @property
    def compare(self) -> Path:
        return self.root / "compare.json"

    @property
    def compare_plan(self) -> Path:
        return self.root / "compare-plan.json"

    @property
    def prescreen(self) -> Path:
        return self.root / "prescreen.json"

    @property
    def prescreen_sweep(self) -> Path:
        return self.root / "prescreen-sweep.csv"

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def trials_csv(self) -> Path:
        return self.root / "trials.csv"

    def plot(self, name: str) -> Path:
        """A report figure (``history.png``, ...)."""
        return self.root / name

    def foreign_entries(self, storage_file: Path | None = None) -> list[str]:
        """The folder's entries that are not a study's (the layout above, and ``storage_file``
        with what its database keeps beside it), sorted; [] when the folder does not exist yet or
        already holds a study (a study's folder is its own, whatever was put beside it later)."""
        try:
            names = sorted(os.listdir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return []
        stored = Path(storage_file).name if storage_file is not None and Path(storage_file).parent == self.root \
            else None
        if any(name in names for name in _WRITTEN_BY_A_RUN) or (stored and stored in names):
            return []
        return [name for name in names if name not in _NAMES and not any(fnmatch.fnmatch(name, p) for p in _PATTERNS)
                and not (stored and name.startswith(stored))]
