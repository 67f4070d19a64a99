"""The read-ahead relay keeps order and errors, and holds a bounded number of messages."""

from __future__ import annotations

import asyncio

import pytest

from rowgate.transport import read_ahead as ra

BIG = b"x" * ra.READ_AHEAD_FROM_BYTES


class FakeCall:
    """An upstream stream: yields `messages`, then raises `error` if given; counts reads."""

    def __init__(self, messages, error: Exception | None = None):
        self.messages = list(messages)
        self.error = error
        self.read = 0

    async def _gen(self):
        for m in self.messages:
            self.read += 1
            yield m
        if self.error is not None:
            raise self.error

    def __aiter__(self):
        return self._gen()


async def collect(call, stop_after: int | None = None):
    out = []
    gen = ra.read_ahead(call)
    try:
        async for m in gen:
            out.append(m)
            if stop_after is not None and len(out) == stop_after:
                break
    finally:
        await gen.aclose()
    return out


def test_small_results_are_relayed_in_order_without_a_reader_task():
    messages = [b"schema", b"batch", b"metrics", b"complete"]

    async def scenario():
        out, tasks = [], set()
        async for m in ra.read_ahead(FakeCall(messages)):
            out.append(m)
            tasks |= asyncio.all_tasks()
        return out, len(tasks)

    out, tasks = asyncio.run(scenario())
    assert out == messages
    assert tasks == 1  # only the test's own task


def test_large_results_keep_every_message_in_order():
    messages = [b"schema", BIG + b"0"] + [BIG + str(i).encode() for i in range(1, 50)] + [b"complete"]
    assert asyncio.run(collect(FakeCall(messages))) == messages


def test_an_upstream_error_after_read_ahead_started_reaches_the_relay():
    boom = RuntimeError("upstream died")
    call = FakeCall([BIG, BIG, b"tail"], error=boom)

    async def scenario():
        got = []
        with pytest.raises(RuntimeError, match="upstream died"):
            async for m in ra.read_ahead(call):
                got.append(m)
        return got

    assert asyncio.run(scenario()) == [BIG, BIG, b"tail"]


def test_reads_stay_a_bounded_number_of_messages_ahead_of_a_slow_client():
    call = FakeCall([BIG] * 100)

    async def scenario():
        gen = ra.read_ahead(call)
        await gen.__anext__()  # switches to read-ahead
        await gen.__anext__()
        await asyncio.sleep(0.05)  # the client is slow; the reader may run ahead meanwhile
        ahead = call.read - 2
        await gen.aclose()
        await asyncio.sleep(0)
        return ahead, call.read

    ahead, read_after_close = asyncio.run(scenario())
    # the queue holds READ_AHEAD_MESSAGES, the reader one more waiting to be put
    assert 1 <= ahead <= ra.READ_AHEAD_MESSAGES + 1
    assert read_after_close < 10  # closing stopped the reader: the result was not drained
