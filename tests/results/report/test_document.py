"""The report's document (document.py): blocks rendered to Markdown and to a self-contained
HTML page (the plots embedded, nothing fetched from elsewhere) that says the same thing."""

from __future__ import annotations

import base64
import re

import pytest
from written_report import write_demo_report

from orchestrator.core.logs import clip
from orchestrator.results.report import document


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
    assert "3.29x the baseline" in page and "<table>" in page


BLOCKS = [
    document.heading(2, "Headline"),
    document.para("**Best: trial 2**, `tp_size=2` <not a tag>"),
    document.warn("SLOWER at concurrency 10"),
    document.items(["start-crash: 1", "a | b"]),
    document.pre("Traceback (most recent call last):\n  <frame>\n"),
    document.table(["trial", "params"], [[2, "NCCL_PROTO=LL | Simple"], [3, "line\nbreak"]]),
    document.image("history.png", "History"),
    document.image("params.png", "Params"),
]


def test_markdown_says_each_block_and_keeps_tables_whole():
    md = document.render_markdown(BLOCKS)
    assert md.splitlines()[:3] == ["## Headline", "", "**Best: trial 2**, `tp_size=2` <not a tag>"]
    assert "> **Warning:** SLOWER at concurrency 10" in md and "- a | b" in md
    assert "```\nTraceback (most recent call last):\n  <frame>\n```" in md
    assert "| 2 | NCCL_PROTO=LL \\| Simple |" in md and "| 3 | line break |" in md  # a cell never splits a row
    assert "![History](history.png)" in md and md.endswith("\n") and not md.endswith("\n\n")


def test_html_escapes_what_it_shows_and_embeds_the_images(tmp_path):
    png = _a_png(tmp_path)
    page = document.render_html(BLOCKS, {"history.png": png}, "ncclsweep report: <demo>")
    assert "<title>ncclsweep report: &lt;demo&gt;</title>" in page
    assert "<p><strong>Best: trial 2</strong>, <code>tp_size=2</code> &lt;not a tag&gt;</p>" in page
    assert '<p class="warn"><strong>Warning:</strong> SLOWER at concurrency 10</p>' in page
    assert "<pre>Traceback (most recent call last):\n  &lt;frame&gt;\n</pre>" in page
    assert "pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere}" in page  # tails wrap
    assert page.count('<div class="plots">') == 1  # consecutive images: one gallery
    (src,) = re.findall(r'<img alt="History" src="data:image/png;base64,([^"]+)" width="(\d+)" height="(\d+)">', page)
    assert base64.b64decode(src[0]) == png and (src[1], src[2]) == ("30", "20")  # shown at its natural size
    assert 'alt="Params"' not in page  # an image that was not written is left out, not a broken link


def test_clip_keeps_one_line_of_bounded_width():
    assert clip("a\n  b\tc") == "a b c"
    assert clip("x" * 500, 20) == "x" * 17 + "..." and len(clip("x" * 500)) == 160
    assert clip(None) == ""


def _a_png(tmp_path) -> bytes:
    import matplotlib  # the report's own plotting library writes a real PNG

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(0.3, 0.2), dpi=100)
    path = tmp_path / "x.png"
    fig.savefig(path)
    plt.close(fig)
    return path.read_bytes()
