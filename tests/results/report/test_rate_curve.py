"""The report of a study by request rate (report/rate_curve.py): the capacity curve against req/s of the
baseline, the best and each config the user names, in req/s and attainment (never streams or
concurrency), and the plot's points as drawn: markers at the probed rates only, a line only between
rates the search left nothing between, the targets as lines, the capacity starred."""

from __future__ import annotations

import pytest

from orchestrator.config.job import Objective
from orchestrator.core.errors import BadInput
from orchestrator.core.measurement import Latency, Measurement, RateProbe, RateResult
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.core.slo import RequestSlo, Targets
from orchestrator.results.report import document as doc
from orchestrator.results.report.rate_curve import (
    ATTAINMENT,
    LATENCY,
    THROUGHPUT,
    curves,
    plot_rates,
    rate_blocks,
)
from orchestrator.study.evidence.goodput import goodput_answer

TARGETS = Targets(per_request=(RequestSlo("ttft", 0.3),), attainment=0.99)
OBJECTIVE = Objective(rate=RateAxis(max_rate=30, min_rate=15), slo=TARGETS)


def probe(rate: float, good: int, ttft_p99: float) -> RateProbe:
    return RateProbe(rate, 100, good, good >= 99, tok_s=8 * rate, sent_rate=rate,
                     ttft=Latency(ttft_p99 / 3, ttft_p99 / 2, ttft_p99, 100), missed={"ttft": 100 - good})


def a_row(number: int, slots: int, probes: list[RateProbe], holds: float | None, breaks: float | None,
          **kw) -> TrialRow:
    m = Measurement(levels={}, rate=RateResult(30.0, 15.0, tuple(probes), holds=holds, breaks=breaks,
                                               attainment=0.99, targets=("ttft",)))
    params = {"slots": slots}
    return TrialRow(number=number, state=COMPLETE, params=params, value=m.value, counted=True,
                    config_key=config_key(params), measurement=m, **kw)


# the baseline (4 slots) holds to 17.8 req/s; the best (8 slots) to 26.2; trial 2 (6 slots) to 22.5
BASE = a_row(0, 4, [probe(15, 100, 0.16), probe(30, 23, 1.7), probe(22.5, 51, 0.8), probe(18.75, 94, 0.35),
                    probe(16.875, 100, 0.22), probe(17.8125, 100, 0.25)], 17.8125, 18.75, is_baseline=True)
BEST = a_row(1, 8, [probe(15, 100, 0.05), probe(30, 80, 0.9), probe(22.5, 100, 0.1), probe(26.25, 100, 0.2),
                    probe(28.125, 97, 0.4)], 26.25, 28.125)
OTHER = a_row(2, 6, [probe(15, 100, 0.1), probe(30, 40, 1.2), probe(22.5, 100, 0.28), probe(26.25, 90, 0.5)],
              22.5, 26.25)
ROWS = [BASE, BEST, OTHER]


def test_the_section_says_each_capacity_in_req_s_and_attainment_and_each_named_curve():
    answer = goodput_answer(ROWS, OBJECTIVE)
    text = doc.render_markdown(rate_blocks(ROWS, answer, trials=[2]))
    assert "## Capacity within the SLO by request rate" in text
    assert "from 15 to 30 req/s" in text and "TTFT <= 300 ms for 99% of requests" in text
    assert "**#1 serves the most within the SLO at 26.2 req/s: 210.0 tok/s (attainment 100.0%; breaks at 28.1 " \
           "req/s: attainment 97.0%); the baseline #0 at 17.8 req/s: 142.5 tok/s**" in text
    assert "| 1 | 26.2 | 210.0 | 100.0% | above 26.2 req/s it breaks the SLO (28.1 req/s: attainment 97.0% (97 of " \
           "100), 225.0 tok/s) | slots=8 |" in text
    for who in ("baseline #0", "best #1", "trial 2 #2"):
        assert f"Curve of the {who} (every rate probed):" in text
    assert "| Req/s | Sent (req/s) | Output tok/s | Attainment (good of sent) | TTFT p99 | SLO |" in text
    assert "| 17.8 | 17.8 | 142.5 | 100.0% (100 of 100) | 250 ms | holds (capacity) |" in text
    assert "| 18.8 | 18.8 | 150.0 | 94.0% (94 of 100) | 350 ms | breaks |" in text
    assert "stream" not in text.lower() and "concurrency" not in text.lower()


def test_a_trial_the_study_did_not_measure_by_rate_is_refused():
    with pytest.raises(BadInput, match="trial 7 is not a trial this study measured by request rate"):
        curves(ROWS, goodput_answer(ROWS, OBJECTIVE), trials=[7])


def test_the_baseline_that_is_the_best_is_one_curve_named_both():
    answer = goodput_answer([BASE], OBJECTIVE)
    assert [c.name for c in curves([BASE], answer)] == ["baseline, best (#0)"]


def test_the_plot_marks_probed_rates_only_and_draws_no_line_across_an_unmeasured_gap(tmp_path):
    answer = goodput_answer(ROWS, OBJECTIVE)
    path = tmp_path / "latency.png"
    drawn = plot_rates(curves(ROWS, answer, trials=[2]), TARGETS, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def marks(panel: str, kind: str, who: str) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
        return [(d.x, d.y) for d in drawn if d.panel == panel and d.kind == kind and d.label == who]

    base = "baseline (#0)"
    assert marks(THROUGHPUT, "points", base) == [((15, 16.875, 17.8125, 18.75, 22.5, 30),
                                                  (120, 135, 142.5, 150, 180, 240))]
    assert marks(ATTAINMENT, "points", base) == [((15, 16.875, 17.8125, 18.75, 22.5, 30),
                                                  (100, 100, 100, 94, 51, 23))]
    assert marks(LATENCY, "points", base)[0][1] == pytest.approx((160, 220, 250, 350, 800, 1700))
    # lines only where the bisection left nothing between: 16.9-17.8-18.8 (each gap within 10%), never 15-16.9
    # (the coarse sweep's gap) nor 18.8-22.5-30
    assert marks(THROUGHPUT, "line", base) == [((16.875, 17.8125, 18.75), (135, 142.5, 150))]
    assert marks(THROUGHPUT, "line", "best (#1)") == [((26.25, 28.125, 30), (210, 225, 240))]  # 7% gaps
    assert marks(THROUGHPUT, "line", "trial 2 (#2)") == []
    assert marks(THROUGHPUT, "capacity", base) == [((17.8125,), (142.5,))]
    assert marks(ATTAINMENT, "capacity", "best (#1)") == [((26.25,), (100,))]
    assert marks(THROUGHPUT, "points", "trial 2 (#2)")[0][0] == (15, 22.5, 26.25, 30)
    targets = [(d.panel, d.label, d.y) for d in drawn if d.kind == "target"]
    assert targets == [(ATTAINMENT, "target 99%", (99, 99)), (LATENCY, "target 300 ms", (300, 300))]
