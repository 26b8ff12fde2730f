"""Whether a level's figures are the measuring client's rather than the server's: the one rule
(``judge``), and the notice a trial carries when they are (``ClientBound.notice``).

Decode tok/s is (n - 1) / (t_last - t_first) over the client's own receive stamps (as ``vllm
bench serve`` computes it). A client whose event loop is late when a request's first tokens
arrive and has caught up by its last stamps a shorter span than the server took: the figure is
overstated by d / span, d how much later the first token was stamped than the last and span the
span it stamped (the server's was span + d). The node watches its loop (``node.looplag``) and
records, per level, how late it ran (``core.measurement.ClientLag``): over every wake-up (p50,
p99, max) and, what the rule reads, how much shorter than the server's each request's span was
stamped (``span_short_ms``: the median over the level's requests of the loop's lateness at the
first token less at the last).

The rule: the level's figures are client-bound when that shortfall, less the ticker's own
granularity (``RESOLUTION_MS``), is more than ``THRESHOLD`` of the median request's decode span
as stamped (``tpot.p50 x (output tokens p50 - 1)``): ``short / span``, how much the median
request's decode figure is off (overstated; a negative shortfall, a client that fell further
behind as the request went on, understates). Why these:

- the first token against the last, not the loop's p99 over all its wake-ups: the figures are
  medians over requests, and a median moves only when most requests are stamped late at one end
  and not the other. A busy 2-core box preempts the client for 10-30 ms at random moments (at
  load 4-13 on the project's VM: a p99 of 6-15 ms over every wake-up), as likely at a last token
  as at a first, and the median decode figure stays within 0.7% of the server's pace
  (docs/benchmarks.md, "A starved measuring client"); a p99 rule, or one on the first token
  alone, flagged the project's own short requests there (8 tokens at 5 ms: a 35 ms span). A
  client that is late at every request's start and has caught up by its end (the defect: 230
  tok/s measured as 362) shows it in the median request's shortfall, whatever its p99;
- ``RESOLUTION_MS`` 6.0: what the ticker can tell. It wakes every 5 ms (``node.looplag.INTERVAL_S``),
  so a token's lateness is known to within one interval (the wake-up a stall delayed may have been
  due up to an interval before the token came, and a stall up to an interval away is in the same
  window), and it sleeps through epoll, whose timeout Python rounds up to whole milliseconds (an
  idle loop's ticker wakes up to 1 ms late, where a token's bytes wake the loop at once). A
  shortfall within 6 ms is not the client's as far as the ticker can say: at load 20 on the
  project's 2-core VM the suite's 35 ms spans were judged client-bound with a 1 ms floor, their
  figures within 5% of the server's pace. The cost: a real shortfall under 6 ms goes unflagged,
  which is 5% of a 120 ms span; the defect's (a 550 ms span stamped 200 ms short) is far above it;
- ``THRESHOLD`` 5%: "more than a few percent", above the launch noise a verdict already allows
  for (a few percent), so a flag means a distortion that could change a verdict, and well below
  what a starved client does (+32% with its loop blocked 100 ms as each request's first tokens
  came in; +57% in the defect).

A client-bound level is never the config's: it fails nothing and bans nothing (``node.measure``
measures it once more, and keeps the second measurement with the notice where it is still
client-bound). A level recorded before the client watched its loop is unknown: never judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.core.level import streams
from orchestrator.core.measurement import LevelResult

RESOLUTION_MS = 6.0  # what the ticker can tell: its 5 ms interval and epoll's 1 ms (module docstring)
THRESHOLD = 0.05  # the most the median decode figure may be overstated before the level is client-bound
NOTICE = "client notice: "  # how the notice begins in a trial's warnings (the engine's begin "engine notice: ")


def overstatement(short_ms: float, span_ms: float) -> float:
    """How much a decode figure over a stamped span of ``span_ms`` is overstated when the span was
    stamped ``short_ms`` shorter than the server's (less ``RESOLUTION_MS`` either way): ``short /
    span``, a fraction, negative where understated (``inf`` for an empty span)."""
    short = math.copysign(max(0.0, abs(short_ms) - RESOLUTION_MS), short_ms)
    if short == 0:
        return 0.0
    return short / span_ms if span_ms > 0 else math.copysign(math.inf, short)


def decode_span_ms(level: LevelResult) -> float | None:
    """The median request's decode span, first token to last (ms): its TPOT times its tokens after
    the first (None: not recorded)."""
    if level.tpot is None or level.output_length is None or level.output_length.p50 < 2:
        return None
    return 1000 * level.tpot.p50 * (level.output_length.p50 - 1)


@dataclass(frozen=True)
class ClientBound:
    """A client-bound level: how late its client ran (p99 over every wake-up, for the reader; the
    median request's span stamped short, what was judged) and how much its decode figures may be
    overstated (negative: understated)."""

    level: int
    p99_ms: float
    span_short_ms: float
    overstated: float  # a fraction

    def notice(self) -> str:
        """The trial's notice: 'client notice: the measuring client fell behind by 98.5 ms (p99) at 1
        stream: its decode figures may be overstated by up to 41% (...)'."""
        n = streams(self.level)
        off = abs(self.overstated)
        share = f"{100 * off:.0f}%" if math.isfinite(off) else "any amount"
        way = "overstated" if self.overstated > 0 else "understated"
        said = (f"{self.span_short_ms:.1f} ms shorter" if self.span_short_ms > 0
                else f"{-self.span_short_ms:.1f} ms longer")
        return (f"{NOTICE}the measuring client fell behind by {self.p99_ms:.1f} ms (p99) at {n} "
                f"stream{'s' if n != 1 else ''}: its decode figures may be {way} by up to {share} (the median "
                f"request's span was stamped {said} than the server sent it)")


def judge(level: LevelResult) -> ClientBound | None:
    """The level's figures are client-bound (module docstring): how, or None (not client-bound, or
    unknown: no lateness or span recorded)."""
    lag, span = level.client_lag, decode_span_ms(level)
    if lag is None or lag.span_short_ms is None or span is None:
        return None
    over = overstatement(lag.span_short_ms, span)
    if abs(over) <= THRESHOLD:
        return None
    return ClientBound(level.level, lag.p99_ms, lag.span_short_ms, over)
