"""The report's latency sections (report/latency.py): latency per level of the configs the
report names with what the targets said, the goodput answer and its plot, the traffic and the
lengths measured; the plot drawn for goodput and for a plan with targets, nothing for neither."""

from __future__ import annotations

import datetime
from dataclasses import replace
from types import SimpleNamespace

import pytest

from orchestrator.config.job import Objective
from orchestrator.core.errors import BadInput
from orchestrator.core.measurement import (
    GRAPHS,
    Distribution,
    GoodputResult,
    Latency,
    Lengths,
    LevelResult,
    Measurement,
    RegimeMark,
)
from orchestrator.core.price import Cost, Pricing
from orchestrator.core.records import COMPLETE, TrialRow, config_key
from orchestrator.core.slo import Slo, Targets
from orchestrator.results.report import document as doc
from orchestrator.results.report.latency import (
    _named,
    goodput_blocks,
    goodput_headline,
    latency_blocks,
    plot_latency,
    segments,
    traffic_blocks,
    wants_plot,
)
from orchestrator.study.evidence.launches import HEADLINE, Evidence
from orchestrator.study.evidence.plan import build_plan

TARGETS = Targets(every=(Slo.named("tpot_p99", 0.020),))


def lat(p99: float) -> Latency:
    return Latency(p50=p99 / 2, p90=0.9 * p99, p99=p99, n=12)


def a_row(number: int, params: dict, curve: dict[int, tuple[float, float]], *, goodput: GoodputResult | None = None,
          lengths: Lengths | None = None, metrics: dict | None = None, hits: float | None = None,
          whole_run: float | None = None, **kw) -> TrialRow:
    """A trial measured at each level of ``curve`` (tok/s, TPOT p99 s); ``whole_run``: the whole run's
    tok/s as a share of the steady state's at N > 1."""
    levels = {c: LevelResult(c, samples=(v, v), ttft=lat(0.05), tpot=lat(t), itl=lat(t), e2e=lat(0.5),
                             prefix_cache_hit_rate=hits,
                             whole_run_tok_s=v * whole_run if whole_run and c > 1 else None)
              for c, (v, t) in curve.items()}
    m = Measurement(levels=levels, goodput=goodput, lengths=lengths)
    return TrialRow(number=number, state=COMPLETE, params=params, value=m.value, counted=True,
                    config_key=config_key(params), measurement=m, metrics=metrics or {}, **kw)


def text(blocks) -> str:
    return doc.render_markdown(blocks)


def test_latency_per_level_with_what_the_targets_said():
    rows = [a_row(0, {"m": "a"}, {1: (400.0, 0.0025), 32: (2600.0, 0.0312)}, is_baseline=True),
            a_row(1, {"m": "b"}, {1: (200.0, 0.005), 32: (2400.0, 0.012)})]
    objective = Objective(concurrency=(1, 32), slo=TARGETS)
    md = text(latency_blocks(rows, objective, build_plan(rows, objective)))
    assert "## Latency per level" in md and "latency targets: TPOT p99 <= 20 ms" in md
    assert "| baseline, best, best at 1 (trial 0) | 32 | 25.0/45.0/50.0 | 15.6/28.1/31.2 |" in md
    assert "TPOT p99 31.2 ms at 32, over the 20 ms target by 56%" in md and "| holds |" in md
    assert "best at 32 (trial 1)" in md
    plain = text(latency_blocks(rows, Objective(concurrency=(1, 32)), None))
    assert "| SLO |" not in plain and "| 15.6/28.1/31.2 |" in plain  # latency per level for every study
    counted = [a_row(0, {"m": "a"}, {64: (900.0, 0.01)}, is_baseline=True, hits=0.0)]  # the server counted its cache
    assert "| 64 | 25.0/45.0/50.0 (prefix-cache hits 0%) | 5.0/9.0/10.0 |" in text(
        latency_blocks(counted, Objective(concurrency=(64,)), None))
    assert "whole run" not in plain  # recorded before the whole run's tok/s was: no column
    whole = text(latency_blocks([a_row(0, {"m": "a"}, {1: (40.0, 0.025), 64: (900.0, 0.01)}, is_baseline=True,
                                       whole_run=0.8)], Objective(concurrency=(1, 64)), None))
    assert "| 64 | 25.0/45.0/50.0 | 5.0/9.0/10.0 | 5.0/9.0/10.0 | 250.0/450.0/500.0 | 900.0 (720.0) |" in whole
    assert "| 40.0 |" in whole and "as `vllm bench serve` counts it" in whole  # level 1: decode tok/s alone


def test_a_baseline_that_counts_nowhere_is_reported_not_a_stop():
    rows = [a_row(0, {"m": "a"}, {8: (100.0, 0.05)}, is_baseline=True,
                  metrics={"slo_violations": ["breaks the SLO: TPOT p99 50 ms at 8"], "slo_excess": 1.5}),
            a_row(1, {"m": "b"}, {8: (90.0, 0.01)})]
    md = text(latency_blocks(rows, Objective(concurrency=(8,), slo=TARGETS), None))
    assert "count nowhere under the latency targets" in md and "#0 (baseline): breaks the SLO" in md


def test_goodput_section_and_its_plot(tmp_path):
    """A study recorded by the bisection (no per-probe verdicts) reads as it was answered."""
    base = a_row(0, {"m": "lane"}, {1: (700.0, 0.0014), 64: (876.0, 0.078), 16: (858.8, 0.0194), 17: (862.0, 0.021)},
                 goodput=GoodputResult(64, (1, 64, 16, 17), 16, 17), is_baseline=True)
    best = a_row(1, {"m": "batch"}, {1: (198.0, 0.005), 64: (4641.0, 0.0145)}, goodput=GoodputResult(64, (1, 64), 64))
    objective = Objective(goodput=64, slo=TARGETS)
    md = text(goodput_blocks([base, best], SimpleNamespace(objective=objective)))
    assert "## Capacity within the SLO" in md
    assert "**#1 holds the SLO up to 64 stream(s) at 4641 tok/s (all 64 tried); the baseline #0 up to 16 at 858.8 " \
           "tok/s**" in md
    assert "| 0 (baseline) | 16 | 858.8 | - | TPOT p99 19.4 ms | breaks at 17 | TPOT p99 21 ms at 17" in md
    assert wants_plot(objective) and wants_plot(Objective(concurrency=(1, 32), slo=TARGETS))
    assert not wants_plot(Objective(concurrency=(1, 32))) and not wants_plot(Objective(slo=TARGETS))
    path = tmp_path / "latency.png"
    plot_latency([base, best], objective, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert goodput_blocks([base, best], SimpleNamespace(objective=Objective())) == []


def test_the_concurrency_plot_draws_each_trial_the_user_names_and_refuses_one_not_measured(tmp_path):
    """``report --trial N``: the named trial's curve beside the baseline's and the best's; a number the
    study did not measure is one line naming those it did."""
    base = a_row(0, {"m": "lane"}, {1: (700.0, 0.0014), 16: (858.8, 0.0194)}, is_baseline=True)
    best = a_row(1, {"m": "batch"}, {1: (900.0, 0.005), 16: (4641.0, 0.0145)})
    other = a_row(2, {"m": "mid"}, {1: (400.0, 0.003), 16: (2000.0, 0.017)})
    objective = Objective(concurrency=(1, 16), slo=TARGETS)
    assert [(label, row.number) for label, row, _ in _named([base, best, other], [2])] == [
        ("baseline", 0), ("best", 1), ("trial 2", 2)]
    plot_latency([base, best, other], objective, tmp_path / "latency.png", trials=[2])
    assert (tmp_path / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(BadInput, match=r"trial 9 is not a measured trial of this study \(trials with a measurement: "
                                       r"0, 1, 2\)"):
        _named([base, best, other], [9])


def test_the_capacity_section_names_the_cliff_its_curve_and_its_price(tmp_path):
    """Issue 47: graphs captured up to 64, eager above: the capacity point is 64, not 128 where the
    SLO also held; each curve lists every measured load; with the job's cost, $/Mtok and tok/s per GPU."""
    marks = (RegimeMark(64, GRAPHS, "capture_sizes"),)
    curve = {1: (190.0, 0.005), 4: (700.0, 0.0052), 16: (2600.0, 0.0055), 64: (19037.0, 0.0029),
             65: (7923.0, 0.0075), 128: (12743.0, 0.0099)}
    probes = (1, 4, 16, 64, 65, 128)
    best = a_row(2, {"m": "graphs"}, curve, whole_run=0.8,
                 goodput=GoodputResult(128, probes, 64, None, held=(True,) * 6, marks=marks, targets=("tpot_p99",)))
    base = a_row(0, {"m": "eager"}, {1: (91.0, 0.0143), 4: (300.0, 0.025)}, is_baseline=True,
                 goodput=GoodputResult(128, (1, 4), 1, 4, held=(True, False), targets=("tpot_p99",)))
    job = SimpleNamespace(objective=Objective(goodput=128, slo=TARGETS),
                          pricing=lambda: Pricing(Cost(gpu_hour=2.5), 8, lambda config: 1))
    md = text(goodput_blocks([base, best], job))
    assert ("**#2 serves the most within the SLO at 64 streams: 19037 tok/s (TPOT p99 2.9 ms), $0.0365 per million "
            "output tokens at $2.5 a GPU-hour, 19037 tok/s per GPU (1 GPU); above 64 its graphs end (65: 7923 "
            "tok/s); it holds the SLO up to 128; the baseline #0 at 1 stream: 91.0 tok/s ($7.63/Mtok)**") in md
    assert "| 2 | 64 | 19037 | 15230 | TPOT p99 2.9 ms | above 64 its graphs end (65: 7923 tok/s) | - | $0.0365/Mtok" \
           " | 19037 |" in md
    assert "Curve of the best #2" in md and "| 65 | 7923 | 6338 | 7.5 ms | holds |" in md
    assert "| 4 | 300.0 | - | 25.0 ms | breaks |" in md  # the baseline's curve, its crossing
    assert "whole run" in md and "`vllm bench serve`" in md
    path = tmp_path / "latency.png"
    plot_latency([base, best], job.objective, path)
    assert path.stat().st_size > 10_000


def test_the_curve_is_drawn_only_between_neighbours_with_nothing_unseen_between():
    """No line across a gap the launch did not measure: 1 to 128 streams through points never measured."""
    pts = [(1, 190.0), (4, 700.0), (16, 2600.0), (64, 19037.0), (65, 7923.0), (128, 12743.0)]
    assert segments(pts) == [[(64, 19037.0), (65, 7923.0)]]
    assert segments([(1, 1.0), (2, 2.0), (3, 3.0), (10, 9.0)]) == [[(1, 1.0), (2, 2.0), (3, 3.0)]]
    assert segments([(1, 1.0), (128, 2.0)]) == []


def test_the_traffic_and_the_lengths_measured():
    lengths = Lengths(input=Distribution.of([5, 50, 500]), output=Distribution.of([2, 40, 96]), mismatched=0)
    rows = [a_row(0, {"m": "a"}, {1: (400.0, 0.0025)}, lengths=lengths, is_baseline=True)]
    job = SimpleNamespace(bench=SimpleNamespace(traffic="t.jsonl", prompts_from="t.jsonl: 3 of 3 requests"))
    md = text(traffic_blocks(job, rows))
    assert "## Traffic" in md and "t.jsonl: 3 of 3 requests" in md
    assert "| baseline, best (trial 0) | output tokens | 2 | 40 | 85 | 95 | 96 | 46.0 | 3 |" in md
    assert traffic_blocks(SimpleNamespace(bench=SimpleNamespace(traffic=None)), rows) == []


def test_a_goodput_studys_headline_says_the_box_drifted():
    """Found after issue 48 was merged: the run's last lines, ``status`` and the other headline said the
    box drifted (item 5: a drift that makes a figure unrepeatable is in the answer); a goodput study's
    headline did not. A box 2% slower every minute, the baseline relaunched early and the best late: the
    headline says so, by the same rule as the others (the drift of the figure the answer is read at)."""
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    def at(n: int, params: dict, speed: float, minute: float, **kw) -> TrialRow:
        v = speed * 0.98 ** minute * (1.005 if n % 2 else 0.995)
        return replace(a_row(n, params, {1: (v / 20, 0.005), 64: (v, 0.010)}, goodput=GoodputResult(64, (1, 64), 64),
                             ended_at=(t0 + datetime.timedelta(minutes=minute)).isoformat(), **kw),
                       counted=minute in (0, 10), launch_role=None if minute in (0, 10) else "relaunch")

    rows = [at(i, {"m": "eager"}, 1000.0, 2 * i, is_baseline=i == 0) for i in range(5)]
    rows += [at(5 + i, {"m": "graphs"}, 1600.0, 10 + 2 * i) for i in range(4)]
    objective = Objective(goodput=64, slo=TARGETS)
    drift = Evidence(rows).drift(HEADLINE)  # the drift of the goodput figure, the answer's
    assert drift.drifted and drift.text().startswith("the box drifted: launches of one config measured 2.0% slower")
    md = text(goodput_headline(rows, SimpleNamespace(objective=objective)))
    assert md.startswith("## Headline") and drift.text() in md
    quiet = [replace(r, ended_at=t0.isoformat()) for r in rows]  # every launch at one time: nothing to say
    assert "drifted" not in text(goodput_headline(quiet, SimpleNamespace(objective=objective)))


def test_a_goodput_studys_headline_is_its_answer_not_a_figure_at_one_stream():
    """Found on a real vLLM: the headline of a goodput study named the best's decode tok/s at one
    stream "8.82x the baseline", a figure the study did not rank by; the answer is the headline."""
    base = a_row(0, {"m": "eager"}, {1: (91.0, 0.0143)}, goodput=GoodputResult(128, (1,), None, 1), is_baseline=True)
    best = a_row(1, {"m": "graphs"}, {1: (802.0, 0.0019), 128: (18755.0, 0.0094)},
                 goodput=GoodputResult(128, (1, 128), 128))
    md = text(goodput_headline([base, best], SimpleNamespace(objective=Objective(goodput=128, slo=TARGETS))))
    assert md.startswith("## Headline")
    assert "**#1 holds the SLO up to 128 stream(s) at 18755 tok/s (all 128 tried); the baseline #0 breaks the SLO " \
           "at 1 stream(s) already" in md
    assert "802" not in md and "x the baseline" not in md and "Best config: `m=graphs`" in md
