"""The report's document (document.py): blocks rendered to Markdown and to a self-contained
HTML page (the plots embedded, nothing fetched from elsewhere) that says the same thing."""

from __future__ import annotations

import base64
import re

import pytest
from written_report import write_demo_report


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of a real journal study with every outcome (written once for the module)."""
    return write_demo_report(tmp_path_factory.mktemp("report"))



def test_html_is_self_contained(report):
    job, _ = report
    page = (job.report_dir / "report.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == 4
    files = {(job.report_dir / n).read_bytes() for n in ("history.png", "params.png", "importance.png", "timeline.png")}
    assert {base64.b64decode(e) for e in embedded} == files
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere
    assert "2.85x the baseline" in page and "<table>" in page
