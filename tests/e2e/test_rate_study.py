"""Issue 47 item 2 acceptance, end to end: capacity by request rate, an open loop. A real study (the
real driver, real Optuna journal storage, the correctness gate on) of a real server process
(tests/fake_openai_server.py through the command backend) that decodes at most K = 4 requests at
once (``--slots 4``) and queues the rest first come first served; each request takes 0.4 s in its
slot (its first token 40 ms after it gets one, then 9 more at 40 ms each), so from about 10 req/s
requests wait and their TTFT grows without bound.

The job asks for the highest rate at which 99% of the requests get their first token within 600 ms
(``slo: {ttft: 600ms, attainment: 0.99}``), Poisson arrivals of 100 requests a probe, searched from 7.5
to 15 req/s. The truth is computed from the server's parameters: the same seeded schedule the
probes send (``core.arrivals.schedule``) through a first-come-first-served queue of 4 slots of 0.2 s
each gives every request's wait, and the highest rate at which 99% of them wait at most 560 ms is
found by bisection on that simulation (about 9 req/s: a backlog of 100 requests' bursts). The
study finds it within one refinement step, records every probe (rate, attainment, tok/s,
percentiles), and says it as users deploy by. TTFT grows from queueing alone, which a closed loop of
N streams never shows. (A target several times the box's own hiccups: 50 ms more on every TTFT
moved the truth by 3% at half these times, within the step; on a 100 ms target it moved it by 30%.
CI's busy host sent a probe's requests up to 160 ms late at half these times, and 3 of 100 missed a
300 ms target at 0.8x the capacity: at these times the same hiccups are half as large against the
target and bunch half as many requests.)

A trace with timestamps replays at its own pace: its requests arrive at its own gaps, the rate search
scales them (``max_speed``: 2.0 halves them) and the answer names the trace's pace."""

from __future__ import annotations

import heapq
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest

from conftest import run_in_process, write_job
from logtext import log_lines
from orchestrator import cli
from orchestrator.config.job import load_job
from orchestrator.core.arrivals import schedule
from orchestrator.core.json_schemas import schema
from orchestrator.study.evidence.goodput import goodput_answer
from orchestrator.study.evidence.history import trial_rows
from orchestrator.study.storage.storage import open_study

pytestmark = pytest.mark.slow

FAKE = str(Path(__file__).resolve().parents[1] / "fake_openai_server.py")
SLOTS, FIRST_S, TOKEN_S, TOKENS = 4, 0.04, 0.04, 10  # the stand-in: a request holds a slot 0.04 + 9 x 0.04 s
SERVICE_S = FIRST_S + (TOKENS - 1) * TOKEN_S
TTFT_S, SHARE, REQUESTS = 0.6, 0.99, 100
LOW, HIGH = 7.5, 15  # the rates the search starts from
CHECK = {"check_tokens": 4, "prompts": ["The quick brown fox"], "logprobs": False}


def simulated_attainment(rate: float, times: list[float] | None = None, slow: float = 1.0) -> float:
    """The share of requests whose TTFT is within the target at ``rate``: the probe's own schedule
    through a first-come-first-served queue of ``SLOTS`` slots of ``SERVICE_S`` each (every time, the
    target's too, ``slow`` times as long)."""
    free = [0.0] * SLOTS
    good = 0
    arrivals = times if times is not None else schedule(rate, REQUESTS, 1.0, 0)
    for t in arrivals:
        start = max(t, heapq.heappop(free))
        heapq.heappush(free, start + SERVICE_S * slow)
        good += (start - t) + FIRST_S * slow <= TTFT_S * slow
    return good / len(arrivals)


def true_capacity(attained=simulated_attainment, lo: float = 1.0, hi: float = 40.0) -> float:
    """The highest rate at which the simulation holds the attainment (bisection: the waits grow as the
    same schedule is compressed)."""
    assert attained(lo) >= SHARE > attained(hi)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if attained(mid) >= SHARE else (lo, mid)
    return lo


def queue_job(tmp_path: Path, study: str, goodput: dict, slow: float = 1.0, **bench) -> Path:
    """The study of the stand-in (module docstring); ``slow``: every time of it, the target's too, that many
    times as long."""
    argv = ["{python}", FAKE, "--host", "{host}", "--port", "{port}", "--slots", "{backend.slots}", "--ttft-delay",
            str(FIRST_S * slow), "--token-delay", str(TOKEN_S * slow)]
    return write_job(tmp_path, study=study, space_text="params:\n  backend.slots: {choices: [4]}\n",
                     backend={"kind": "command", "settings": {"argv": argv, "model_name": "fake"}},
                     baseline={"backend.slots": SLOTS}, budget={"trials": 1}, objective={"goodput": goodput},
                     slo={"ttft": f"{int(TTFT_S * slow * 1000)}ms", "attainment": SHARE},
                     bench=bench or {"prompt": "Explain how a ring all-reduce works.", "output_tokens": TOKENS,
                                     "warmup": 1},
                     timeouts={"startup": "30s", "bench": "60s", "teardown": "5s"}, correctness=CHECK)


def run(job_path: Path):
    job = load_job(job_path)
    out = io.StringIO()
    summary = run_in_process(job, out=out)
    assert summary.reason == "space exhausted", out.getvalue()
    (row,) = [r for r in trial_rows(open_study(job, create=False)) if r.counted]
    assert row.state == "COMPLETE" and row.correctness.get("ok"), (row.state, row.failure_reason)
    return job, row, log_lines(out.getvalue())


def test_the_rate_search_finds_the_highest_rate_within_99_percent_attainment(tmp_path, capsys):
    truth = true_capacity()
    job_path = queue_job(tmp_path, "rate", {"max_rate": HIGH, "min_rate": LOW, "requests": REQUESTS})
    job, row, said = run(job_path)
    searched = row.measurement.rate
    probes = {p.rate: p for p in searched.probes}
    assert [p.rate for p in searched.probes][:2] == [LOW, HIGH] and len(probes) <= 8  # the coarse sweep, then bisection
    step = searched.breaks - searched.holds  # the last gap the refinement left
    assert abs(searched.holds - truth) <= step, (searched.holds, searched.breaks, truth, searched.probes)
    assert probes[searched.holds].attainment >= SHARE > probes[searched.breaks].attainment
    for p in searched.probes:  # every probe recorded, the curve kept
        assert p.requests == REQUESTS and p.held == (p.attainment >= SHARE) and p.tok_s > 0
        assert p.ttft.p99 > 0 and p.e2e.p50 >= SERVICE_S - 0.01 and p.missed.get("ttft", 0) == REQUESTS - p.good
    assert probes[HIGH].ttft.p99 > 2 * TTFT_S  # past the capacity the queue grows: TTFT explodes, not the decode
    answer = goodput_answer(trial_rows(open_study(job, create=False)), job.objective)
    assert answer.best.row.number == row.number
    verdict = next(line for line in said if line.startswith("goodput: "))  # the run's answer
    assert verdict.startswith(f"goodput: the baseline #{row.number} is the best: it serves the most within the SLO "
                              f"at {searched.holds:.3g} req/s: "), verdict
    assert f"(attainment {100 * probes[searched.holds].attainment:.1f}%; breaks at {searched.breaks:.3g} req/s" \
        in verdict, verdict

    assert cli.main(["status", str(job_path), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schema("status")).validate(status)
    best = status["goodput"]["best"]
    assert best["search"] == "rate" and best["holds"] == searched.holds and best["unit"] == "req/s"
    assert [p["rate"] for p in best["probes"]] == [p.rate for p in searched.probes]
    assert cli.main(["status", str(job_path)]) == 0
    assert f"goodput under TTFT <= {TTFT_S * 1000:.0f} ms for 99% of requests: the baseline" in capsys.readouterr().out
    assert cli.main(["export", str(job_path), "--format", "json"]) == 0
    prov = json.loads(capsys.readouterr().out)["provenance"]
    assert prov["figure"]["unit"] == "output tok/s within the SLO"  # the capacity's tok/s is output tok/s
    assert prov["goodput"]["holds"] == searched.holds and prov["goodput"]["attainment"] >= SHARE
    said_at_capacity = f"{searched.holds:.3g} req/s: {row.measurement.value:.1f} tok/s (attainment "
    for fmt in ("yaml", "cmd", "env"):  # the deploy artifacts say the capacity in req/s and attainment
        assert cli.main(["export", str(job_path), "--format", fmt]) == 0
        exported = capsys.readouterr().out
        assert said_at_capacity in exported and "stream" not in exported, fmt
    assert f"# curve (req/s: output tok/s, attainment, SLO): {probes[min(probes)].rate:.3g}: " in exported
    assert cli.main(["export", str(job_path), "--format", "benchmark-report"]) == 2  # llm-d's reports are per level
    assert "this study measured request rates" in capsys.readouterr().err

    # while it ran, the status line said each rate probed, not "warming up" throughout
    measuring = [line for line in said if " measuring " in line]
    assert measuring and all(re.search(r"#0 measuring ([0-9.]+) req/s: \d+/100 requests", line) for line in measuring)
    assert {re.search(r"measuring ([0-9.]+) req/s", line)[1] for line in measuring} <= {f"{r:.3g}" for r in probes}

    # the report: the capacity curve against request rate, in req/s and attainment
    assert cli.main(["report", str(job_path)]) == 0
    capsys.readouterr()
    report = (job.report_dir / "report.md").read_text()
    assert "## Capacity within the SLO by request rate" in report
    assert f"Curve of the baseline, best #{row.number} (every rate probed):" in report
    for p in searched.curve():
        assert f"| {p.rate:.3g} | {p.sent_rate:.3g} | {p.tok_s:.1f} | {100 * p.attainment:.1f}% ({p.good} of " \
               f"{p.requests}) |" in report
    assert "Capacity curve: output tok/s, attainment and the targeted latency against request rate" in report
    assert (job.report_dir / "latency.png").stat().st_size > 0
    assert "stream" not in report.lower() and "concurrency" not in report.lower()


def trace(path: Path, gaps: list[float]) -> list[float]:
    """A trace of ``len(gaps) + 1`` requests with timestamps (seconds from 1000), its last line first."""
    times = [1000.0]
    for gap in gaps:
        times.append(times[-1] + gap)
    lines = [json.dumps({"prompt": f"question {i}", "output_tokens": TOKENS, "timestamp": t})
             for i, t in enumerate(times)]
    path.write_text("\n".join(reversed(lines)) + "\n")  # the file's order is not the trace's
    return times


def test_a_trace_with_timestamps_replays_at_its_own_pace_and_faster(tmp_path):
    """A trace of 40 requests at its own 2.7 req/s, in bursts of 4 at once every 1.6 s, into the stand-in
    with every time doubled (a request 0.8 s in its slot, a 1.2 s TTFT target): at its own pace the 4
    slots serve each burst at once; at 2x (``speed`` 2: the gaps halved) a burst comes every 0.8 s, as
    the slots free; at 4x every 0.4 s, and the bursts queue. (Why doubled: each burst waits for the one
    before it, so at one step of the search below the capacity (5%) the last burst's first token has
    only nine bursts' 5% of the gap between them to spare; at the module's times that was 160 ms, and a
    busy 2-core box (2 to 5 busy loops) held one request that much longer in 4 of 13 runs: the step
    below broke and the answer came two steps low. Doubled, it is 320 ms.)"""
    slow = 2.0
    times = trace(tmp_path / "trace.jsonl", ([0.0] * 3 + [0.8 * slow]) * 9 + [0.0] * 3)
    own = (len(times) - 1) / (times[-1] - times[0])

    def attained(rate: float) -> float:
        return simulated_attainment(rate, [(t - times[0]) * own / rate for t in times], slow)

    truth = true_capacity(attained, own, 16 * own)
    job_path = queue_job(tmp_path, "trace", {"max_speed": 8, "min_speed": 1}, slow, traffic="trace.jsonl",
                         traffic_sample=40, warmup=1)
    job, row, said = run(job_path)
    searched = row.measurement.rate
    assert searched.trace_rate == pytest.approx(own) and searched.probes[0].rate == pytest.approx(own)
    assert all(p.requests == len(times) for p in searched.probes)  # the trace's requests, every probe
    assert searched.probes[0].held and searched.probes[0].ttft.p99 < TTFT_S * slow  # its own pace: the slots keep up
    assert abs(searched.holds - truth) <= searched.breaks - searched.holds, (searched.probes, truth)
    verdict = next(line for line in said if line.startswith("goodput: "))
    assert f"{searched.holds:.3g} req/s ({searched.holds / own:.3g}x the trace's pace): " in verdict, verdict
