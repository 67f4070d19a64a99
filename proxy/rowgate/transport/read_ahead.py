"""Relaying a large result without waiting for the client between upstream reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable

# A result stream whose messages are this large (Arrow batches) is read ahead of the client.
READ_AHEAD_FROM_BYTES = 64 << 10
READ_AHEAD_MESSAGES = 2
END = object()


async def read_ahead(upstream_call: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
    """The upstream's messages, read while the previous ones are still being written.

    Relaying strictly one message at a time leaves the upstream connection idle while the
    client takes a message, and the upstream idle while its flow-control window is full.
    For large results a reader task keeps up to READ_AHEAD_MESSAGES messages in hand, a
    bound on memory (a few Arrow batches) rather than a buffer of the result. Small results
    (schemas, command answers) keep the plain relay: a task per stream would cost more than
    it saves.
    """
    messages = upstream_call.__aiter__()
    async for message in messages:
        yield message
        if len(message) >= READ_AHEAD_FROM_BYTES:
            break
    else:
        return
    queue: asyncio.Queue = asyncio.Queue(READ_AHEAD_MESSAGES)

    async def fill() -> None:
        try:
            async for message in messages:
                await queue.put(message)
            await queue.put(END)
        except Exception as e:  # noqa: BLE001 - handed to the relaying side, raised there
            await queue.put(e)

    reader = asyncio.get_running_loop().create_task(fill())
    try:
        while True:
            item = await queue.get()
            if item is END:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        reader.cancel()
