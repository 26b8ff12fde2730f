"""Goodput by request rate on the node: each probe an open-loop load at one rate, the rate search
over them (``core.rate_search``); the measurement's ``rate`` record.

After the warm-up (``node.measure``'s, so a cold server is not judged), each probe sends its
requests on the arrival schedule (``core.arrivals``: the job's seeded gamma draws, or a traffic
file's own timestamps made as fast as the rate) through ``client.run_open_loop``: each request at its
time, whether or not the earlier ones finished. Every request's TTFT, TPOT, inter-token gaps and
end-to-end latency are timed as a level's are; the probe's attainment is the share of its requests
that met every per-request target (``core.attainment``; a failed request, or one not done by the
probe's limit, met none), and it holds where the attainment reaches ``slo.attainment`` and every
percentile target holds over its requests. A probe whose verdict is the measuring client's, not
the server's, is measured again (``LATE_RETRIES`` times at most; of measurements all the client's, the least late kept)
before it is judged; on a busy host that is one of two things:

- the client sent it late (more than half the mean gap behind its schedule): the rate offered was
  lower than asked and its requests bunched (``late_by``);
- the client stamped it late: its event loop (watched by ``node.looplag``) ran late when tokens
  came in, and the probe's verdict flips once each stamp is taken back by how late the loop was
  there (``as_sent``): a 99% attainment over 40 requests is broken by one first token stamped
  160 ms late while the server sent it in time, and the capacity said so would be the client's.

Time: a probe ends by its limit, ``PACE_FACTOR`` x (its schedule's span plus one request's time at
the warm-up's pace): an overloaded server drains a backlog that grows with the rate, and a request
still running at the limit is counted unfinished (not served within any target), so a probe far
above the capacity ends as a broken rate instead of a benchmark timeout. A probe whose every request
failed (a server that stopped answering) fails the benchmark, as a closed-loop level does.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

from orchestrator.core import arrivals, rate_search
from orchestrator.core.attainment import Timing, attainment
from orchestrator.core.client_bound import RESOLUTION_MS
from orchestrator.core.measurement import Latency, RateProbe, rate_text
from orchestrator.core.rate_search import RateAxis
from orchestrator.node import client
from orchestrator.node.client import RequestResult
from orchestrator.node.looplag import LoopLag
from orchestrator.node.measure import STALLED_MARK, Benchmark, Session
from orchestrator.node.spec import PACE_FACTOR, BenchPlan

LATE_SHARE = 0.5  # a request sent later than this share of the mean gap: the client did not keep the rate
LATE_RETRIES = 1  # a probe the client sent or stamped late is measured again this many times at most
RateProgress = Callable[[float, int, int], None]  # (rate, requests done, requests the probe sends)


def offsets(plan: BenchPlan, axis: RateAxis, rate: float) -> list[float]:
    """The send times of a probe at ``rate``: the trace's timestamps made that fast, else the job's draws."""
    return arrivals.at_rate(rate, axis.requests, axis.burstiness, axis.seed, plan.arrival_times)


def timing(req: RequestResult) -> Timing:
    """What the attainment judges of one request."""
    return Timing(ok=req.ok, ttft=req.ttft_s, tpot=req.tpot_s, e2e=req.latency_s)


def probe_record(rate: float, results: list[RequestResult], plan: BenchPlan) -> RateProbe:
    """One probe's record (module docstring) from its requests' results."""
    got = attainment((timing(r) for r in results), plan.slo.per_request if plan.slo else ())
    ok = [r for r in results if r.ok]
    lat = {"ttft": Latency.of(r.ttft_s for r in ok if r.ttft_s is not None),
           "tpot": Latency.of(r.tpot_s for r in ok if r.tpot_s is not None),
           "itl": Latency.of(b - a for r in ok for a, b in zip(r.token_times, r.token_times[1:])),
           "e2e": Latency.of(r.latency_s for r in ok if r.latency_s is not None)}
    ends = [r.t_start + (r.latency_s or 0.0) for r in ok]
    starts = sorted(r.t_start for r in results)
    span = (max(ends) - starts[0]) if ends else 0.0
    sent = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 and starts[-1] > starts[0] else None
    tok_s = sum(r.n_tokens for r in ok) / span if span > 0 else None
    return RateProbe(rate=rate, requests=len(results), good=got.good, held=rate_search.holds(got, lat, plan.slo),
                     tok_s=tok_s, sent_rate=sent, failed=sum(1 for r in results if not r.ok and not r.timed_out),
                     unfinished=sum(1 for r in results if r.timed_out), missed=dict(got.missed), **lat)


def _say(progress: RateProgress, rate: float, done: int, total: int) -> None:
    """Report a probe's progress; a failing reporter never fails the measurement."""
    try:
        progress(rate, done, total)
    except Exception:  # noqa: BLE001 - progress is for the eye only
        pass


def _teller(progress: RateProgress | None, rate: float, total: int) -> Callable[[RequestResult], None] | None:
    """The probe begins (0 of ``total`` told), and what the client calls as each of its requests
    ends: "measuring 15 req/s: 37/100 requests" on the status line."""
    if progress is None:
        return None
    done = 0

    def tell(_: RequestResult) -> None:
        nonlocal done
        done += 1
        _say(progress, rate, done, total)

    _say(progress, rate, 0, total)
    return tell


def _probe(run: Session, axis: RateAxis, rate: float, progress: RateProgress | None = None) -> RateProbe | Benchmark:
    """One rate measured (module docstring): its record, or the failed benchmark. A probe whose
    verdict is the client's (``clients_doing``) is measured again, ``LATE_RETRIES`` times at most;
    where every measurement was the client's, the one it was least late in is kept."""
    plan = run.plan
    when = offsets(plan, axis, rate)
    spoiled: list[tuple[float, list[tuple[float, RequestResult]]]] = []  # (how late the client was, the probe)
    for attempt in range(LATE_RETRIES + 1):
        sent, lag = _send(run, plan, when, rate, progress)
        why = clients_doing(sent, when, lag, rate, plan)
        if why is None:
            spoiled = []
            break
        spoiled.append((why[1], sent))
        again = attempt < LATE_RETRIES
        run.out.warnings.append(f"request rate {rate_text(rate)}: {why[0]} (a busy host?); " + (
            "measured again" if again else f"the client's on all {LATE_RETRIES + 1} measurements: the one it was "
                                           "least late in kept"))
    if spoiled:
        sent = min(spoiled, key=lambda s: s[0])[1]
    results = [req for _, req in sent]
    for req in results:
        if req.ok:
            run.open_loop.add(req)
    bad = [r for r in results if not r.ok and not r.timed_out]
    n = len(when)
    if results and len(bad) == len(results):
        stalled = [r for r in bad if r.stalled]
        marked = f" ({len(stalled)} {STALLED_MARK})" if stalled else ""
        return run.fail(f"request rate {rate_text(rate)}: {len(bad)} of {n} requests failed{marked}: "
                        f"{bad[0].error or '?'}", False, bad[0], stalled=bool(stalled))
    if bad:
        run.out.warnings.append(f"request rate {rate_text(rate)}: {len(bad)} of {n} requests failed (counted against "
                                f"its attainment): {bad[0].error or '?'}")
    return probe_record(rate, results, plan)


def _send(run: Session, plan: BenchPlan, when: list[float], rate: float,
          progress: RateProgress | None) -> tuple[list[tuple[float, RequestResult]], LoopLag]:
    """One probe's requests sent on their schedule ``when``: [(due time, result)], and how late the
    client's loop ran meanwhile."""
    n = len(when)
    prompts = run.prefixes.requests(plan.prompts, n)
    lengths = [plan.tokens_for(i) for i in range(n)]
    per_request = (run.pace.per_token or 0.0) * max(lengths)
    limit = PACE_FACTOR * ((when[-1] if when else 0.0) + per_request) + 1.0
    lag = LoopLag()
    sent, _ = client.run_open_loop(run.base_url, run.model, prompts, lengths, when, deadline_s=limit,
                                   stall_s=plan.stall_s, on_done=_teller(progress, rate, n), lag=lag)
    return sent, lag


def clients_doing(sent: list[tuple[float, RequestResult]], when: list[float], lag: LoopLag, rate: float,
                  plan: BenchPlan) -> tuple[str, float] | None:
    """Why the probe's verdict is the measuring client's, not the server's (module docstring), in
    words, and how late the client was (seconds); None where it is the server's."""
    late = late_by(sent, when)
    if late is not None:
        return (f"the client sent a request {1000 * late[0]:.0f} ms late (median {1000 * late[1]:.1f} ms), more "
                "than half the mean gap between requests: the rate offered was lower than asked and its requests "
                "bunched", late[0])
    results = [req for _, req in sent]
    taken_back = [as_sent(req, lag) for req in results]
    held = probe_record(rate, results, plan).held
    if probe_record(rate, taken_back, plan).held == held:
        return None
    worst = max((lag.at(t) or 0.0 for req in results for t in req.token_times), default=0.0)
    return (f"the measuring client's loop ran up to {1000 * worst:.0f} ms late as tokens came in, and the probe "
            f"{'held' if held else 'broke'} on those late stamps (taken back, it {'breaks' if held else 'holds'})",
            worst)


def _behind(lag: LoopLag, t: float) -> float:
    """How late the client's loop was at monotonic time ``t``, less what its ticker cannot tell
    (``core.client_bound.RESOLUTION_MS``: a lateness within it is not the client's as far as the
    ticker can say); 0 where unknown."""
    return max(0.0, (lag.at(t) or 0.0) - RESOLUTION_MS / 1000.0)


def as_sent(req: RequestResult, lag: LoopLag) -> RequestResult:
    """``req`` with each receive stamp taken back by how late the client's loop was there
    (``_behind``): its latencies as the server sent them, to the ticker's resolution."""
    if not req.token_times:
        return req
    times = [t - _behind(lag, t) for t in req.token_times]
    end = req.t_start + (req.latency_s or 0.0)
    latency = req.latency_s - _behind(lag, end) if req.latency_s is not None else None
    return dataclasses.replace(req, token_times=times, ttft_s=max(0.0, times[0] - req.t_start),
                               latency_s=max(times[-1] - req.t_start, latency) if latency is not None else None)


def late_by(sent: list[tuple[float, RequestResult]], when: list[float]) -> tuple[float, float] | None:
    """(the latest send, the median lateness) in seconds where the client sent a request later than
    ``LATE_SHARE`` of the schedule's mean gap; None where it kept the schedule."""
    n = len(when)
    late = [req.t_start - due for due, req in sent]
    gap = (when[-1] / (n - 1)) if n > 1 and when[-1] > 0 else None
    if gap is None or not late or max(late) <= LATE_SHARE * gap:
        return None
    return max(late), statistics.median(late)


def measure_rates(base_url: str, model: str, plan: BenchPlan, *, deadline: float,
                  metrics_url: str | None = None, progress: RateProgress | None = None) -> Benchmark:
    """The rate search of ``plan.rate`` (``core.rate_search.next_rate``), each rate an open-loop probe,
    after ``node.measure``'s warm-up (``deadline``: its limit); the launch's ``RateResult`` in its
    measurement (``Measurement.rate``); ``progress(rate, done, total)`` as each request of a probe ends.
    Never raises for what the server does."""
    axis = plan.rate
    assert axis is not None
    run = Session(base_url, model, plan, deadline, metrics_url, None, [])
    failed = run.warm_up()
    if failed is not None:
        return failed
    trace_rate = arrivals.own_rate(plan.arrival_times) if plan.arrival_times else None
    probes: list[RateProbe] = []
    nxt = rate_search.next_rate({}, axis)
    while nxt is not None:
        got = _probe(run, axis, nxt, progress)
        if isinstance(got, Benchmark):
            return got
        probes.append(got)
        run.rate = rate_search.result(axis, probes, plan.slo, trace_rate)
        run.rounds_done = len(probes)
        nxt = rate_search.next_rate({p.rate: p.held for p in probes}, axis)
    return run.finish()
