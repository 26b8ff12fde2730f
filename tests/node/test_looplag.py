"""The loop-lag ticker on real asyncio loops: a loop that something blocks is seen late by as long
as the block, at the moment the block ends (where a token would have been stamped late), and the
ticker lives exactly as long as the work it watches."""

from __future__ import annotations

import asyncio
import time

import pytest

from orchestrator.core.client_bound import RESOLUTION_MS
from orchestrator.node.looplag import INTERVAL_S, LoopLag

BLOCK_S = 0.06


async def blocked_once(marks: dict[str, float]) -> str:
    """Some free time, then the loop held for ``BLOCK_S`` by a blocking call, then free again."""
    await asyncio.sleep(0.03)
    time.sleep(BLOCK_S)  # the loop's thread held: nothing else on the loop runs
    marks["block_end"] = time.monotonic()
    await asyncio.sleep(0.03)
    return "done"


def test_a_blocked_loop_is_seen_late_by_the_block_where_the_block_ended():
    lag, marks = LoopLag(), {}
    assert asyncio.run(lag.watching(blocked_once(marks))) == "done"
    # the wake-up due during the block came after it: late by the block, less at most one interval
    assert max(lag.late) >= BLOCK_S - INTERVAL_S
    assert lag.at(marks["block_end"]) >= BLOCK_S - INTERVAL_S
    assert lag.woke == sorted(lag.woke) and len(lag.woke) == len(lag.late) >= 3
    assert lag.at(lag.woke[0] - 1.0) is None  # not watched then: unknown


def test_the_ticker_ends_with_the_work_also_when_it_raises():
    lag = LoopLag()

    async def fails() -> None:
        await asyncio.sleep(0.02)
        raise ValueError("boom")

    with pytest.raises(ValueError):
        asyncio.run(lag.watching(fails()))
    seen = len(lag.late)
    assert seen >= 1

    async def after() -> int:
        await asyncio.sleep(0.03)
        return len(asyncio.all_tasks())

    assert asyncio.run(after()) == 1  # the ticker is gone: only this task runs on the new loop
    assert len(lag.late) == seen  # and it took no more samples


def test_the_rule_never_judges_finer_than_the_ticker_can_tell():
    """``core.client_bound`` ignores shortfalls within one interval of the ticker and epoll's 1 ms."""
    assert RESOLUTION_MS >= 1000 * INTERVAL_S + 1.0


def test_every_loop_watched_adds_to_one_record_in_time_order():
    """Level 1 runs each request on a loop of its own: the level's record is every loop's."""
    lag = LoopLag()
    for _ in range(2):
        asyncio.run(lag.watching(asyncio.sleep(0.02)))
    assert lag.woke == sorted(lag.woke) and len(lag.woke) >= 2
