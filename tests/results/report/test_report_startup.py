"""The report's start-up part (report/startup.py): from real TrialRows with start-up records,
the section says how much of the night went into starting servers, each launch's phases, its
compile cache and where a stalled start was; the stacked bars are a real PNG, also for a study
whose trials recorded no phases."""

from __future__ import annotations

import statistics

import matplotlib.image as mpimg
import pytest

from orchestrator.core.records import COMPLETE, FAIL, FailureKind, TrialRow
from orchestrator.results.report.document import render_markdown
from orchestrator.results.report.startup import plot_startup, start_seconds, started, startup_blocks

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def row(number: int, total_s: float | None, phases: dict, *, state: str = COMPLETE, kind: str | None = None,
        **kw) -> TrialRow:
    return TrialRow(number=number, state=state, failure_kind=kind, counted=True,
                    params={"graph_mode": "full", "env.NCCL_PROTO": "LL"},
                    value=15.0 if state == COMPLETE else None,
                    durations={"total_s": total_s} if total_s is not None else {}, startup_phases=phases, **kw)


def night() -> list[TrialRow]:
    """A cold compile, the same graphs loaded from the cache, a start that stalled in graph
    capture, a crash at NCCL init; and two rows with no launch of their own."""
    cold = {"first_line_s": 2.0, "ready_s": 450.0, "compile_cache": "miss", "last_phase": "graph capture",
            "segments": [["process start", 2.0], ["weights", 63.0], ["torch.compile", 166.0],
                         ["graph capture", 208.0], ["other", 11.0]]}
    warm = {"first_line_s": 2.0, "ready_s": 300.0, "compile_cache": "hit", "last_phase": "graph capture",
            "segments": [["process start", 2.0], ["weights", 63.0], ["torch.compile", 30.0],
                         ["graph capture", 194.0], ["other", 11.0]]}
    stalled = {"first_line_s": 2.0, "ended_s": 900.0, "compile_cache": "hit", "last_phase": "graph capture",
               "stalled_in": "graph capture",
               "segments": [["process start", 2.0], ["weights", 63.0], ["torch.compile", 30.0], ["other", 805.0]]}
    crashed = {"first_line_s": 2.0, "ended_s": 60.0, "last_phase": "NCCL init",
               "segments": [["process start", 2.0], ["NCCL init", 58.0]]}
    return [row(0, 600.0, cold), row(1, 420.0, warm),
            row(2, 910.0, stalled, state=FAIL, kind=FailureKind.HANG),
            row(3, 65.0, crashed, state=FAIL, kind=FailureKind.START_CRASH),
            row(4, 600.0, cold, cached_from=0),  # answered from trial 0: not a launch
            row(5, 500.0, {})]  # recorded before issue 26: no phases


def table_lines(md: str) -> dict[int, str]:
    return {int(line.split("|")[1]): line for line in md.splitlines() if line.startswith("| ") and
            line.split("|")[1].strip().isdigit()}


def test_the_section_says_the_share_of_time_spent_starting_and_the_cache():
    """The night's question: how much went into starting servers, and did the cache help."""
    rows = night()
    mine = started(rows)
    assert [r.number for r in mine] == [0, 1, 2, 3]
    starts = [start_seconds(r) for r in mine]
    totals = [r.durations["total_s"] for r in mine]
    md = render_markdown(startup_blocks(rows))
    assert md.startswith("## Start-up")
    assert (f"Starting servers took {sum(starts) / 60:.1f} min of the {sum(totals) / 60:.1f} min the trials ran "
            f"({100 * sum(starts) / sum(totals):.0f}%) over 4 launches "
            f"(median {statistics.median(starts):.0f}s from spawn to ready or failure)") in md
    assert "torch.compile cache: 2 hit, 1 miss" in md and "partial" not in md
    assert "![Start-up phases per trial](startup.png)" in md


def test_each_launch_shows_its_phases_its_cache_and_where_it_ended():
    rows = night()
    md = render_markdown(startup_blocks(rows))
    lines = table_lines(md)
    assert sorted(lines) == [0, 1, 2, 3]  # the cached answer and the row without phases are no launches here
    assert "torch.compile 166s" in lines[0] and "graph capture 208s" in lines[0] and "| miss |" in lines[0]
    assert "torch.compile 30s" in lines[1] and "| hit |" in lines[1] and "| 300s |" in lines[1]
    assert "FAIL hang" in lines[2] and "| 900s |" in lines[2] and "| graph capture |" in lines[2]
    assert "FAIL start-crash" in lines[3] and "| NCCL init |" in lines[3] and "NCCL init 58s" in lines[3]
    assert "1 launch(es) stalled" in md and "trial 2 in graph capture" in md


def test_a_study_without_start_up_records_says_so():
    md = render_markdown(startup_blocks([row(0, 500.0, {}), row(1, 600.0, {"ready_s": 1.0}, cached_from=0)]))
    assert "No trial recorded its start-up phases" in md and "Starting servers took" not in md


def test_the_share_counts_only_trials_with_both_times():
    """A row whose wall time is missing is left out of the share, which can never pass 100%."""
    rows = [row(0, 600.0, {"ready_s": 450.0}), row(1, None, {"ready_s": 500.0})]
    md = render_markdown(startup_blocks(rows))
    assert "of the 10.0 min the trials ran (75%)" in md
    assert "over 2 launches" in md


def test_a_record_without_ready_or_end_still_renders():
    """A start-up record with phases but neither ready_s nor ended_s (an imported or partial
    record) is listed; the summary has no median to give and says nothing of it."""
    rows = [row(0, 30.0, {"first_line_s": 1.0, "last_phase": "weights", "segments": [["weights", 20.0]]})]
    md = render_markdown(startup_blocks(rows))
    assert "over 0 launches" in md and "median" not in md
    assert "weights 20s" in table_lines(md)[0] and "| weights |" in table_lines(md)[0]


def _png(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    image = mpimg.imread(path)
    assert float(image[..., :3].std()) > 0.01  # something drawn, not a blank canvas
    return image.shape[0], image.shape[1]


def test_the_plot_is_a_png_with_one_bar_per_launch(tmp_path):
    """startup.png: more launches with phases, a taller figure; rows without phases add none."""
    rows = night()
    few = plot_startup(rows[:1], tmp_path / "one.png")
    many = plot_startup(rows + [row(10 + i, 600.0, rows[0].startup_phases) for i in range(20)],
                        tmp_path / "many.png")
    assert few == tmp_path / "one.png" and many == tmp_path / "many.png"
    h_few, _ = _png(few)
    h_many, _ = _png(many)
    assert h_many > h_few
    same = plot_startup(rows[:1] + [row(5, 500.0, {}), row(6, 500.0, {"ready_s": 3.0})], tmp_path / "same.png")
    assert _png(same)[0] == h_few  # no segments: no bar


@pytest.mark.parametrize("rows", [[], [TrialRow(number=0, state=COMPLETE, value=1.0)],
                                  [row(0, 60.0, {"ready_s": 50.0, "last_phase": "start-up"})]],
                         ids=["no trials", "no phases", "phases without segments"])
def test_without_phases_the_plot_is_a_note_not_an_error(tmp_path, rows):
    """A study from before issue 26 (or a backend whose log names nothing) still gets its PNG:
    a note, so the report's image link is never broken."""
    path = plot_startup(rows, tmp_path / "startup.png")
    _png(path)
