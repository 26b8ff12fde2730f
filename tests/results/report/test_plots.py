"""The report's plots (plots.py): the four PNGs drawn from a real study, and (with Chromium
installed) a screenshot of report.html that shows every plot."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
from written_report import write_demo_report

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
