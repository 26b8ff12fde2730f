"""A measuring client starved of its event loop, for real: every asyncio loop made while
``starved()`` is in force (the client makes one per ``asyncio.run``: a request at level 1, a round
at level N) holds its thread in a blocking ``time.sleep`` for ``block_s``, ``after_s`` after it was
made: right when the request it was made for has gone out and its first tokens come in (a server
with a first token ``--ttft-delay`` 60 ms late sends it inside the block). The client then reads
them late, in a burst, and catches up by the last token: the defect the loop-lag monitor is for,
the tokens stamped as a starved process stamps them (three studies sharing one process on a busy
box measured 230 tok/s as 362)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

AFTER_S = 0.04  # the block begins this long after the loop was made (the request is out by then)
BLOCK_S = 0.10  # and holds the loop this long


class _StarvingPolicy(asyncio.DefaultEventLoopPolicy):
    def __init__(self, after_s: float, block_s: float):
        super().__init__()
        self.after_s, self.block_s = after_s, block_s

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        loop.call_later(self.after_s, time.sleep, self.block_s)  # a callback on the loop that blocks it
        return loop


@contextlib.contextmanager
def starved(after_s: float = AFTER_S, block_s: float = BLOCK_S) -> Iterator[None]:
    """Every loop made meanwhile blocked once (module docstring); the default policy after."""
    asyncio.set_event_loop_policy(_StarvingPolicy(after_s, block_s))
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(None)


@contextlib.contextmanager
def starved_on_cue(after_s: float = AFTER_S, block_s: float = BLOCK_S) -> Iterator[Callable[[], None]]:
    """As ``starved``, from the moment the ``start`` it yields is called (a measurement's progress
    callback calls it as the round it should begin with begins); the default policy after."""
    def start() -> None:
        asyncio.set_event_loop_policy(_StarvingPolicy(after_s, block_s))
    try:
        yield start
    finally:
        asyncio.set_event_loop_policy(None)
