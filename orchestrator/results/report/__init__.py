"""The morning-after report: what won, by how much, why, what failed, how far from the ceiling.

``write_report(job)`` reads the study (``history.trial_rows``) and writes into
``job.report_dir``:

    trials.csv      one row per trial (``report.trials_csv``)
    history.png, params.png, importance.png, timeline.png    the plots (``report.plots``)
    pareto.png      a plan only (objective over several levels): the Pareto plot
    latency.png     goodput, or latency targets over several levels: throughput and p99 latency
                    against concurrency for the baseline and the best, the target as a line; a study
                    by request rate: output tok/s, attainment and the targeted latency against
                    req/s for the baseline, the best and each ``trials`` (``report.rate_curve``)
    startup.png     each trial's start-up phases, stacked (``report.startup``)
    report.md       headline, the plan (several levels), top configs, failures by kind, NCCL warnings, ceiling,
                    concurrency comparison (from ``compare.json`` when present), by node
                    (``report.sections``)
    report.html     the same content, self-contained (plots embedded as base64 PNG)

Every file is written whole or not at all (``core.files.write_whole``): a full disk leaves the
previous report as it was and says so in one line. The report is built once as a list of
blocks (``report.document``) and rendered to Markdown and to HTML, so the two always say the
same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.core import files
from orchestrator.core.records import TrialRow
from orchestrator.core.study_dir import StudyDir
from orchestrator.results.export import resolve_backend
from orchestrator.results.importance import knob_effects
from orchestrator.results.report import latency
from orchestrator.results.report.document import render_html, render_markdown
from orchestrator.results.report.plots import write_plots
from orchestrator.results.report.sections import ReportJob, build_blocks
from orchestrator.results.report.startup import STARTUP_PLOT, plot_startup
from orchestrator.results.report.trials_csv import trials_frame
from orchestrator.study.evidence import history
from orchestrator.study.evidence.plan import build_plan
from orchestrator.study.storage import storage

__all__ = ["ReportJob", "write_report"]


def write_report(job: ReportJob, out_dir: str | Path | None = None, *, backend: Any = None,
                 bandwidth_bytes_s: float | None = None, allreduce_latency_s: float | None = None,
                 study: Any = None, rows: list[TrialRow] | None = None, trials: Sequence[int] = ()) -> list[Path]:
    """Write the report files into ``out_dir`` (default ``job.report_dir``); returns their paths.

    ``bandwidth_bytes_s``/``allreduce_latency_s`` override what the job declares or the trials
    measured; ``study``/``rows`` skip loading the study from ``job.storage``; ``trials``: configs the
    user names (``report --trial N``) whose curves a study by request rate shows beside the baseline's
    and the best's.
    """
    report_dir = Path(out_dir if out_dir is not None else job.report_dir)
    if rows is None:  # before any folder is made: no study, no empty report folder
        rows = history.trial_rows(study if study is not None else storage.load_study(job))
    report_dir.mkdir(parents=True, exist_ok=True)
    backend = resolve_backend(job, backend)
    written: list[Path] = []

    csv_path = StudyDir(report_dir).trials_csv
    files.write_whole(csv_path, trials_frame(rows).to_csv(index=False))
    written.append(csv_path)

    objective = getattr(job, "objective", None)
    effects, notes = knob_effects(rows, objective)
    plan = build_plan(rows, objective) if objective is not None and objective.by_level else None
    plots = write_plots(rows, effects, notes, report_dir, plan=plan)
    plots.append(plot_startup(rows, StudyDir(report_dir).plot(STARTUP_PLOT)))
    if latency.wants_plot(objective):  # goodput, or targets over several levels
        plots.append(StudyDir(report_dir).plot(latency.LATENCY_PLOT))
        latency.plot_capacity(rows, job, plots[-1], trials)
    written += plots

    blocks, _summary_dict = build_blocks(job, rows, report_dir, backend, bandwidth_bytes_s, allreduce_latency_s,
                                         importance=(effects, notes), plan=plan, trials=trials)
    md_path = StudyDir(report_dir).report_md
    files.write_whole(md_path, render_markdown(blocks))
    images = {path.name: path.read_bytes() for path in plots}
    html_path = StudyDir(report_dir).report_html
    files.write_whole(html_path, render_html(blocks, images, f"ncclsweep report: {getattr(job, 'study', '')}"))
    written += [md_path, html_path]
    return written
