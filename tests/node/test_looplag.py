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


def test_a_stamp_in_a_gap_a_stall_left_between_wake_ups_is_judged_not_unknown():
    """A busy host stalls the loop's thread between two of its own turns: a stamp taken at the start
    of the watch (before the first wake-up) and one taken right before a stall longer than two
    intervals have no wake-up within one interval of them, yet were watched; each is judged by the
    wake-up the stall delayed."""
    lag, marks = LoopLag(), {}

    async def stalls() -> None:
        marks["first"] = time.monotonic()  # before the ticker's first wake-up
        time.sleep(4 * INTERVAL_S)  # the thread held from the start
        await asyncio.sleep(0.02)
        marks["before"] = time.monotonic()
        time.sleep(BLOCK_S)  # held again right after a stamp
        await asyncio.sleep(0.02)

    asyncio.run(lag.watching(stalls()))
    assert lag.at(marks["first"]) >= 3 * INTERVAL_S
    assert lag.at(marks["before"]) >= BLOCK_S - INTERVAL_S  # judged by the delayed wake-up: never overlooked
    (start, end, _), = lag.watched
    assert lag.at(start - 1.0) is None and lag.at(end + 1.0) is None  # outside the watch: unknown


def test_the_end_of_a_watch_judges_a_last_stamp_with_no_wake_up_after_it():
    """The work ends right after a stall: no wake-up came after its last stamp, and the pending
    wake-up's lateness at the end is what that stamp is judged by."""
    lag, marks = LoopLag(), {}

    async def ends_stalled() -> None:
        await asyncio.sleep(0.02)
        time.sleep(BLOCK_S)
        marks["last"] = time.monotonic()

    asyncio.run(lag.watching(ends_stalled()))
    assert lag.at(marks["last"]) >= BLOCK_S - 2 * INTERVAL_S
