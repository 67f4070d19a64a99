"""Orders the requests of one session around the statements that change its state.

The proxy resolves names with what it remembers of a session (current catalog and
database, temp views) and of the catalog (view texts). Spark runs the requests of one
session concurrently, so without an order a `SELECT * FROM v` resolved while a
`USE db`, `DROP VIEW v` or `CREATE OR REPLACE VIEW v ...` of the same session is running
could be checked against one state and analysed by Spark under the other.

Every plan request is a *reader* from the moment it reads the session's state until Spark
has analysed it (its first upstream response, or its end). A statement that changes the
state is a *writer* from before it runs upstream until Spark answered it. A writer waits
for the readers that came before it; readers that come while a writer waits or runs wait
for it, and then resolve with the state Spark confirmed. `version` counts the writes, so a
writer whose own check was made under a state another writer changed meanwhile can tell.
Waits are bounded: a request that would wait longer is refused, never let through.

A reader whose request turns out to change state that the proxy does not remember (a
setting, a function, the catalog: proxy/rowgate/pipeline/session/epoch.py) `upgrade`s its
ticket to the writer's hold, so no writer runs between its check and its run; such a write
does not move `version` (nothing the proxy remembers changed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rowgate.pipeline.core import StateHold


class GateTimeout(Exception):
    """The session's state stayed busy longer than a request may wait."""


class ReadTicket:
    """One reader's hold on the state; `release` is idempotent (first response or end)."""

    def __init__(self, gate: StateGate, version: int):
        self.gate = gate
        self.version = version  # the gate's version the reader saw
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.gate._leave_read()


class StateGate:
    def __init__(self) -> None:
        self.readers = 0
        self.writing = False
        self.writers_waiting = 0
        self.version = 0
        self.upgrading = False
        self._waiters: list[asyncio.Future] = []

    async def enter_read(self, timeout: float) -> ReadTicket:
        await self._wait(lambda: not self.writing and not self.writers_waiting, timeout)
        self.readers += 1
        return ReadTicket(self, self.version)

    async def enter_write(self, timeout: float) -> None:
        self.writers_waiting += 1
        try:
            await self._wait(lambda: not self.writing and self.readers == 0, timeout)
        finally:
            self.writers_waiting -= 1
            self._wake()  # a writer that gave up no longer holds new readers back
        self.writing = True

    async def upgrade(self, ticket: StateHold, timeout: float) -> bool:
        """Turns `ticket` (held) into the writer's hold, no other writer in between; False
        (nothing changed) when another upgrade is under way: release and `enter_write` then."""
        if ticket.released or ticket.gate is not self or self.upgrading:
            return False
        self.upgrading = True
        self.writers_waiting += 1  # new readers wait from now on
        try:
            await self._wait(lambda: self.readers == 1, timeout)  # every other reader left
        finally:
            self.writers_waiting -= 1
            self.upgrading = False
            self._wake()
        ticket.released = True
        self.readers -= 1
        self.writing = True
        return True

    def leave_write(self, changed: bool = True) -> None:
        """`changed`: the write changed what the proxy remembers (moves `version`)."""
        self.writing = False
        if changed:
            self.version += 1
        self._wake()

    def _leave_read(self) -> None:
        self.readers -= 1
        self._wake()

    async def _wait(self, ready: Callable[[], bool], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not ready():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise GateTimeout()
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                pass
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
