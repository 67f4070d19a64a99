"""One caller cannot stall others: each caller's checks run in that caller's own lane.

The proxy's expensive work per request is its own: parsing and rewriting SQL (sqlglot, in a
worker thread, seconds for a text of a few hundred KiB) and Spark's second opinion (one or
more `AnalyzePlan` round trips for a text seen for the first time). Run in a pool every
caller shares (`asyncio.to_thread`'s default executor has `cpu_count + 4` threads), six
huge statements from one caller occupied every worker, and every other caller's `SELECT 1`
waited behind them (issue #21, item 9).

Here a caller's checks enter that caller's lane: at most `width` of them are under way at a
time, the rest wait in order behind *that caller's own* work, and the worker threads come
from an executor of the lanes (`threads` of them), so one caller never holds more than
`width` threads. A lane is keyed by the caller's principal; callers without a credential
share the anonymous caller's lane, and where identities cost nothing to make up (the
header identity on an untrusted network, refused by configuration) lanes give no isolation.

What still is shared, stated in the README: the interpreter's lock (a long parse slows other
callers' checks by its share of the CPU, it does not stop them), the upstream Spark, and
the memory of remembered rewrites and verdicts (a flood of first-seen texts evicts other
callers' entries, so they pay their checks again). The work one request may ask for is
bounded by the SQL text it carries (`--max-sql-kib`, rewrite/sql/text_budget.py) and by
Spark's own nesting limit for plans (transport/protobuf_limits.py, rewrite/plan/nesting.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_WIDTH = 2  # checks of one caller under way at once: a dashboard's parallel queries
DEFAULT_THREADS = 32  # workers for all lanes together: `width` per busy caller


class CallerLanes:
    """Per-caller admission for the proxy's checks, and the worker threads they run on."""

    def __init__(self, width: int = DEFAULT_WIDTH, threads: int = DEFAULT_THREADS):
        if width < 1 or threads < width:
            raise ValueError("a lane needs width >= 1 and at least `width` threads")
        self.width = width
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rowgate-check")
        self._lanes: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}  # requests holding or waiting for each lane
        self.waiting = 0  # checks queued behind their caller's own work now (metrics)
        self.running = 0  # checks holding a place in a lane now (metrics)

    @contextlib.asynccontextmanager
    async def lane(self, principal: str) -> AsyncIterator[None]:
        """Hold one place in `principal`'s lane; waits behind that caller's own checks only."""
        semaphore = self._lanes.get(principal)
        if semaphore is None:
            semaphore = self._lanes[principal] = asyncio.Semaphore(self.width)
        self._users[principal] = self._users.get(principal, 0) + 1
        try:
            self.waiting += 1
            try:
                await semaphore.acquire()
            finally:
                self.waiting -= 1
            self.running += 1
            try:
                yield
            finally:
                self.running -= 1
                semaphore.release()
        finally:
            self._users[principal] -= 1
            if not self._users[principal]:  # nobody holds or waits: forget the lane
                del self._users[principal]
                del self._lanes[principal]

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` on a worker of the lanes (call it inside `lane`), keeping the context."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await loop.run_in_executor(self._executor, call)

    def lanes_open(self) -> int:
        return len(self._lanes)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
