"""The report's plots (plots.py): the four PNGs drawn from a real study, and (with Chromium
installed) a screenshot of report.html that shows every plot."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil

import matplotlib
import matplotlib.image as mpimg
import pytest
import recorded_study as fx  # a real journal study with every outcome
from written_report import write_demo_report

from orchestrator.core.records import TrialRow
from orchestrator.results.importance import knob_effects
from orchestrator.results.report import plots
from orchestrator.study.evidence import history
from orchestrator.study.storage import storage

matplotlib.use("Agg", force=True)

from conftest import TESTS


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of a real journal study with every outcome (written once for the module)."""
    return write_demo_report(tmp_path_factory.mktemp("report"))



@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium (apt-get install -y chromium)")
def test_html_screenshot_shows_the_plots(report, tmp_path):
    job, _ = report
    spec = importlib.util.spec_from_file_location("check_report_html", TESTS.parent / "docs" / "check_report_html.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    result = check.check_report_html(job.report_dir / "report.html", tmp_path / "shot.png")
    assert result["ok"], result
    assert result["images"] == 4 and result["missing"] == []
    # the check can fail: the same page with one plot hidden is caught
    page = (job.report_dir / "report.html").read_text()
    hidden = tmp_path / "hidden.html"
    hidden.write_text(page.replace('<img alt="Parameter importance"',
                                   '<img style="display:none" alt="Parameter importance"', 1))
    bad = check.check_report_html(hidden, tmp_path / "hidden.png")
    assert not bad["ok"] and bad["missing"] == [2]


def _drawn(path) -> bool:
    """A PNG that decodes to an image with something drawn on it (not an empty canvas)."""
    image = mpimg.imread(path)
    return image.shape[0] > 100 and image.shape[1] > 100 and float(image[..., :3].std()) > 0.01


def test_the_four_plots_are_drawn_from_a_real_study(tmp_path):
    job, _study = fx.build_study(tmp_path)
    rows = history.trial_rows(storage.load_study(job))
    effects, notes = knob_effects(rows)
    (tmp_path / "out").mkdir()  # write_report makes the folder
    paths = plots.write_plots(rows, effects, notes, tmp_path / "out")
    assert [p.name for p in paths] == list(plots.PLOTS) and all(_drawn(p) for p in paths)
    (tmp_path / "empty").mkdir()
    blank = plots.write_plots([], [], [], tmp_path / "empty")  # a study with no trial yet: notes, drawn all the same
    assert all(_drawn(p) for p in blank)


def test_the_timeline_spans_only_launched_trials(tmp_path):
    job, _study = fx.build_study(tmp_path)
    rows = history.trial_rows(storage.load_study(job))
    spans = plots.trial_spans(rows)
    numbers = [s.row.number for s in spans]
    assert 7 not in numbers  # answered from trial 2's measurement: never launched
    assert not {11, 12} & set(numbers)  # still running, waiting: no span yet
    assert numbers == sorted(numbers) and len(numbers) == 10
    assert all(s.end > s.start for s in spans)
    by = {s.row.number: s for s in spans}
    assert by[2].end - by[2].start == 60.0 and by[1].node == "nodeB"
    no_end = dataclasses.replace(rows[2], ended_at=None)  # a record cut before its end: the end from its timings
    (span,) = plots.trial_spans([no_end])
    assert span.end - span.start == rows[2].durations["total_s"]


def test_parallel_trials_on_one_node_take_lanes_and_keep_their_order():
    """Two trials at once on one node: two lanes; a third after both: the first lane again; another
    node's trial its own first lane. The spans come back in the rows' order."""
    def row(n, node, start, end):
        return TrialRow(number=n, state="COMPLETE", node=node, started_at=f"2026-01-01T00:{start:02d}:00+00:00",
                        ended_at=f"2026-01-01T00:{end:02d}:00+00:00")

    spans = plots._lanes(plots.trial_spans([row(0, "a", 0, 10), row(1, "a", 5, 15), row(2, "b", 1, 2),
                                            row(3, "a", 20, 30)]))
    assert [(s.row.number, s.lane) for s in spans] == [(0, 0), (1, 1), (2, 0), (3, 0)]


def test_a_wrong_output_is_drawn_refused_never_at_its_speed(tmp_path):
    """Issue 39: the demo's wrong-output trial was a red X at its 152 tok/s, above the best line."""
    job, _study = fx.build_study(tmp_path)
    rows = history.trial_rows(storage.load_study(job))
    wrong = dataclasses.replace(rows[3], metrics={"decode_tok_s": 152.0, "decode_tok_s_ignored": 152.0})
    assert wrong.state == "FAIL" and wrong.failure_kind == "wrong-output"
    points = plots.history_points([*rows[:3], wrong, *rows[4:]])
    assert points["refused"] == [(3, 0.0)] and all(n != 3 for n, _ in points["FAIL"] + points["COMPLETE"])
    assert (4, 0.0) in points["FAIL"] and (2, 57.0) in points["COMPLETE"]  # a crash at 0; the best at its value
    assert points["never best"] == [(10, 90.0)]  # the garbage config's lucky remeasure: drawn, never best


def test_a_box_needs_enough_points():
    groups = [[1.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0], []]
    assert plots.boxed([1, 2, 3, 4], groups) == [(3, groups[2])]  # quartiles of 1-3 points are no distribution


def test_a_benchmark_that_timed_out_is_drawn_as_benchmark_time(tmp_path):
    job, _study = fx.build_study(tmp_path)
    crash = history.trial_rows(storage.load_study(job))[4]  # failed at start: no benchmark ran
    timed_out = dataclasses.replace(crash, failure_kind="bench-timeout",
                                    durations={"launch_s": 25.0, "teardown_s": 5.0, "total_s": 95.0})
    assert plots._phase_seconds(timed_out)["bench_s"] == 65.0  # an older record without its bench_s
    assert "bench_s" not in plots._phase_seconds(crash)
    kept = dataclasses.replace(timed_out, durations={**timed_out.durations, "bench_s": 60.0})
    assert plots._phase_seconds(kept)["bench_s"] == 60.0  # what the trial recorded itself
