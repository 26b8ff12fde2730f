"""Goodput by request rate on the node (node/open_loop.py), against a real HTTP server
(tests/fake_openai_server.py with ``--slots``: at most K requests decode at once, the rest queue
first come first served): each probe sends its requests on the schedule whether or not earlier ones
finished, times them as a level's requests are, and judges its attainment; the search's record is
the measurement's ``rate``; a probe past the capacity breaks, a server that stopped answering fails
the benchmark."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from conftest import start_fake_openai
from orchestrator.core.arrivals import schedule
from orchestrator.core.measurement import Measurement
from orchestrator.core.rate_search import RateAxis
from orchestrator.core.slo import RequestSlo, Slo, Targets
from orchestrator.node import client
from orchestrator.node.open_loop import LATE_RETRIES, measure_rates, offsets
from orchestrator.node.spec import BenchPlan

MODEL = "fake"
pytestmark = pytest.mark.timeout(120)
TTFT = Targets(per_request=(RequestSlo("ttft", 0.3),), attainment=0.9)


@pytest.fixture
def server(tmp_path, request):
    """One slot, a request 0.2 s long (10 tokens, 20 ms apart after the first)."""
    sp = start_fake_openai(tmp_path, "--slots", "1", "--token-delay", "0.02", "--ttft-delay", "0.02")
    try:
        yield sp
    finally:
        sp.stop(grace_s=1.0)


def plan(rate: RateAxis, slo: Targets = TTFT, **kw) -> BenchPlan:
    return BenchPlan(**{"prompts": ("one two three", "four five"), "output_tokens": 10, "warmup": 1, "timeout_s": 30,
                        "rate": rate, "slo": slo, **kw})


@contextmanager
def client_stalled(after_s: float, for_s: float) -> Iterator[tuple[list[float], Callable[[float, int, int], None]]]:
    """The client's thread stalls for ``for_s`` seconds ``after_s`` into a probe's first measurement (an
    alarm whose handler sleeps, in the thread that runs the client's event loop, as a busy host's
    scheduler would stall it): (when each measurement began, the progress callback that arms it)."""
    starts: list[float] = []

    def told(rate: float, done: int, total: int) -> None:
        if done == 0:
            starts.append(time.monotonic())
            if len(starts) == 1:  # the first measurement only
                signal.setitimer(signal.ITIMER_REAL, after_s)

    old = signal.signal(signal.SIGALRM, lambda *_: time.sleep(for_s))
    try:
        yield starts, told
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_requests_are_sent_at_their_times_whether_or_not_earlier_ones_finished(server):
    """Five requests 50 ms apart on a server that serves one 0.2 s request at a time: each is sent on
    time (a closed loop would have waited for the last), and queues there: its TTFT grows."""
    when = [0.0, 0.05, 0.1, 0.15, 0.2]
    sent, _ = client.run_open_loop(server.spec.base_url, MODEL, ["a", "b", "c", "d", "e"], [10] * 5, when,
                                   deadline_s=10)
    first = min(req.t_start for _, req in sent)
    assert all(req.ok and req.n_tokens == 10 for _, req in sent)
    assert sorted(round(req.t_start - first, 2) for _, req in sent) == pytest.approx(when, abs=0.04)
    ttfts = sorted(req.ttft_s for _, req in sent)
    assert ttfts[-1] > 0.5 > ttfts[0]  # the last waited for four before it (4 x 0.2 s, less its 0.2 s later start)


def test_a_request_not_done_by_the_deadline_is_a_timeout(server):
    """Three requests at once into one slot of 0.2 s: the second cannot end before 0.4 s whatever the
    box does, so a deadline of 0.38 s leaves the first 0.18 s of delay (at 0.3 s a quiet run of the
    whole suite once ended none)."""
    sent, _ = client.run_open_loop(server.spec.base_url, MODEL, ["a", "b", "c"], [10] * 3, [0.0, 0.0, 0.0],
                                   deadline_s=0.38)
    assert sorted(req.ok for _, req in sent) == [False, False, True]
    assert all(req.timed_out for _, req in sent if not req.ok)


def test_the_rate_search_on_one_slot_finds_under_5_requests_a_second(server):
    """One slot of 0.2 s serves 5 req/s at most; Poisson bursts queue below that. Every probe recorded."""
    axis = RateAxis(max_rate=8, min_rate=2, requests=16, max_probes=4)
    told: list[tuple[float, int, int]] = []
    got = measure_rates(server.spec.base_url, MODEL, plan(axis), deadline=time.monotonic() + 30,
                        progress=lambda *said: told.append(said))
    assert got.ok, got.error
    # each probe's progress, for the status line: its rate and requests done of those it sends, 0 first;
    # a probe the client sent late is measured again (``LATE_RETRIES``) and its progress starts over
    runs: list[list[tuple[float, int, int]]] = []
    for t in told:
        if t[1] == 0:
            runs.append([])
        runs[-1].append(t)
    assert all([d for _, d, _ in run] == list(range(17)) and len({r for r, _, _ in run}) == 1 for run in runs)
    starts = [run[0] for run in runs]
    again = [s for prev, s in zip(starts, starts[1:]) if s == prev]
    assert len(again) <= LATE_RETRIES * len(starts)
    assert [s for i, s in enumerate(starts) if i == 0 or s != starts[i - 1]] == \
        [(p.rate, 0, 16) for p in got.measurement.rate.probes]
    searched = got.measurement.rate
    assert [p.rate for p in searched.probes][:3] == [2, 4, 8] and len(searched.probes) == 4
    assert searched.probes[0].held and not searched.at(8).held  # 8 req/s on a 5 req/s server: the queue grows
    assert searched.holds is not None and 2 <= searched.holds < 5 and searched.breaks > searched.holds
    low = searched.probes[0]
    assert low.requests == 16 and low.good >= 15 and low.tok_s > 0 and low.ttft.n == 16 and low.e2e.p50 >= 0.18
    assert searched.at(8).missed.get("ttft", 0) > 2 and searched.at(8).ttft.p99 > 0.6
    assert got.measurement.value == pytest.approx(searched.capacity.tok_s)  # its figure: tok/s at the capacity
    back = Measurement.from_record(got.measurement.to_record())
    assert back.rate == searched and not back.levels and back.value == got.measurement.value


def test_percentile_targets_judge_a_rate_too(server):
    axis = RateAxis(max_rate=4, min_rate=4, requests=4, max_probes=2)
    slo = Targets(every=(Slo("e2e", 50, 0.1),))  # a request takes 0.2 s: never within 100 ms
    got = measure_rates(server.spec.base_url, MODEL, plan(axis, slo), deadline=time.monotonic() + 30)
    assert got.ok and not got.measurement.rate.probes[0].held and got.measurement.rate.holds is None


def test_a_trace_is_sent_at_its_own_gaps_made_as_fast_as_the_rate():
    times = (100.0, 100.5, 101.0, 103.0)  # its own 1 req/s
    p = plan(RateAxis(max_rate=4), arrival_times=times)
    assert offsets(p, p.rate, 2.0) == pytest.approx([0.0, 0.25, 0.5, 1.5])
    assert offsets(plan(RateAxis(max_rate=4, requests=3, seed=5)), RateAxis(max_rate=4, requests=3, seed=5), 2.0) \
        == schedule(2.0, 3, 1.0, 5)


def test_a_server_that_stopped_answering_fails_the_benchmark(tmp_path):
    sp = start_fake_openai(tmp_path, "--token-delay", "0.001")
    sp.stop(grace_s=1.0)  # gone before the first probe
    axis = RateAxis(max_rate=4, min_rate=4, requests=4, max_probes=2)
    got = measure_rates(sp.spec.base_url, MODEL, plan(axis, warmup=0), deadline=time.monotonic() + 30)
    assert not got.ok and got.error == "request rate 4 req/s: 4 of 4 requests failed: connection refused", got.error


def test_a_probe_the_client_sent_late_is_measured_again_and_the_on_time_one_kept(server):
    """The client's thread stalls for 0.8 s 0.7 s into the first probe (an alarm whose handler sleeps, in
    the thread that runs the client's event loop, as a busy host's scheduler would stall it), so its
    requests due meanwhile go out late and bunched: that probe did not offer 2 req/s. It is measured
    again, the warning says so, and the record kept is the second, sent on time."""
    axis = RateAxis(max_rate=2, min_rate=2, requests=6, max_probes=1)
    with client_stalled(0.7, 0.8) as (starts, told):
        got = measure_rates(server.spec.base_url, MODEL, plan(axis), deadline=time.monotonic() + 60, progress=told)
    assert got.ok, got.error
    assert len(starts) == 2  # the probe at 2 req/s began twice
    late = [w for w in got.warnings if "late" in w]
    assert len(late) == 1 and late[0].startswith("request rate 2 req/s: the client sent a request ") \
        and late[0].endswith("measured again"), got.warnings
    probe = got.measurement.rate.probes[0]
    assert len(got.measurement.rate.probes) == 1 and probe.requests == 6 and probe.held
    assert probe.sent_rate == pytest.approx(2.0, rel=0.1)  # the kept measurement kept the schedule


def test_a_probe_the_client_stamped_late_is_measured_again_and_the_server_judged(tmp_path):
    """Two requests 0.15 s apart into two slots; the server sends each first token 0.35 s after it gets
    the request, well within a 0.5 s TTFT target. 0.25 s into the first probe, after both were sent on
    time, the client's thread stalls for 0.5 s (an alarm whose handler sleeps in the thread that runs
    the client's event loop, as a busy host's scheduler would stall it): both first tokens come in
    meanwhile and are stamped at its end, 0.75 and 0.6 s after their sends, and the probe breaks on the
    client's stamps. Taken back by how late the loop ran, it holds: the verdict is the client's, so the
    probe is measured again, the warning says why, and the record kept is the server's."""
    sp = start_fake_openai(tmp_path, "--slots", "2", "--token-delay", "0.02", "--ttft-delay", "0.35")
    axis = RateAxis(max_rate=1 / 0.15, min_rate=1 / 0.15, requests=2, max_probes=1)
    slo = Targets(per_request=(RequestSlo("ttft", 0.5),), attainment=1.0)
    try:
        with client_stalled(0.25, 0.5) as (starts, told):
            got = measure_rates(sp.spec.base_url, MODEL, plan(axis, slo, arrival_times=(100.0, 100.15)),
                                deadline=time.monotonic() + 60, progress=told)
    finally:
        sp.stop(grace_s=1.0)
    assert got.ok, got.error
    assert len(starts) == 2  # the probe began twice
    again = [w for w in got.warnings if "measuring client" in w]
    assert len(again) == 1 and again[0].startswith("request rate 6.67 req/s: the measuring client's loop ran up to ") \
        and "the probe broke on those late stamps (taken back, it holds)" in again[0] \
        and again[0].endswith("measured again"), got.warnings
    [probe] = got.measurement.rate.probes
    assert probe.requests == 2 and probe.held and probe.ttft.p99 < 0.5, probe
