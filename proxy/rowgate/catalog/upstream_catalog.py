"""What a fully qualified name is upstream, asked in the proxy's own Spark session and cached.

The questions run in an internal session (a fixed session id, `user_id` = the service user)
so that no caller's temp views, current database or session configuration can change the
answer, and so that the proxy never executes anything in a caller's session unless a caller
asked for it (`run_sql_rows(..., session=...)`).

Enforcement fails closed: "does not exist" is only ever concluded from Spark saying so about
this very name; every other failure raises `CatalogUnavailable`. Answers are cached for a
TTL, absent names too, because the rewriter asks about every name of every statement and a
round trip per name would dominate latency; concurrent askers of one name share one upstream
call. A DDL statement seen by the proxy brackets its run upstream with `begin_ddl` and
`end_ddl`: no answer fetched while it runs is cached (it may be from before or after it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from pyspark.sql.connect.proto import base_pb2

from rowgate.catalog.describe import DescribeError, parse_describe, split_multipart
from rowgate.catalog.model import RelationInfo
from rowgate.catalog.upstream_sql import SessionRef, UpstreamSqlError, UpstreamUnavailable, sql_rows
from rowgate.observability.metrics import CATALOG_QUERIES, CATALOG_WAITS
from rowgate.policy.model import TableName
from rowgate.upstream.channel import Upstream

log = logging.getLogger("rowgate.catalog")

# Spark's words for "no such relation" (and, in catalogs with deeper namespaces, no such schema).
ABSENT_TABLE = {"TABLE_OR_VIEW_NOT_FOUND": "relationName"}
ABSENT_SCHEMA = {"SCHEMA_NOT_FOUND": "schemaName"}
# The upstream forgot the internal session (idle timeout, release): start a new one.
SESSION_GONE = ("INVALID_HANDLE.SESSION_CLOSED", "INVALID_HANDLE.SESSION_NOT_FOUND")


class CatalogUnavailable(UpstreamUnavailable):
    """No trustworthy answer; `error_class` is Spark's when Spark refused the question."""

    def __init__(self, message: str, error_class: str | None = None):
        super().__init__(message)
        self.error_class = error_class


class NotCached(KeyError):
    """`peek` found no fresh answer: the caller must `await lookup(...)` first."""


class UpstreamCatalog:
    def __init__(
        self,
        upstream: Upstream,
        *,
        ttl_seconds: float = 30.0,
        stale_grace_seconds: float | None = None,
        service_user: str = "rowgate-internal",
        session_id: str | None = None,
        timeout_seconds: float = 30.0,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.upstream = upstream
        self.ttl = ttl_seconds
        # After the TTL an answer is still used for this long while a fresh one is fetched
        # in the background, so a busy hot path never waits for the upstream; an answer
        # older than TTL + grace is not used at all (the next asker waits for a new one).
        self.stale_grace = ttl_seconds if stale_grace_seconds is None else stale_grace_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self.timeout = timeout_seconds
        self.max_entries = max_entries
        self.clock = clock
        self.session = SessionRef(service_user, session_id or str(uuid.uuid4()))
        self._cache: dict[TableName, tuple[float, RelationInfo | None]] = {}
        self._inflight: dict[TableName, asyncio.Future] = {}
        self.upstream_calls = 0
        # DDL statements running upstream now, and a counter bumped at each start and end:
        # an answer fetched while a DDL ran, or across its start or end, is never cached.
        self.ddl_in_flight = 0
        self.generation = 0

    # -- answers -------------------------------------------------------------------------
    async def lookup(self, name: TableName) -> RelationInfo | None:
        self._loop = asyncio.get_running_loop()
        entry = self._usable(name)
        if entry is not None:
            return entry[1]
        return await self._miss(name)

    def peek(self, name: TableName) -> RelationInfo | None:
        """The cached answer without awaiting, for synchronous code such as the rewriter
        (any thread); raises `NotCached` when there is none the proxy may use."""
        entry = self._usable(name)
        if entry is None:
            raise NotCached(name)
        return entry[1]

    def _usable(self, name: TableName) -> tuple[float, RelationInfo | None] | None:
        entry = self._cache.get(name)
        if entry is None:
            return None
        now = self.clock()
        if now < entry[0]:
            return entry
        if now < entry[0] + self.stale_grace and self._loop is not None:
            self._loop.call_soon_threadsafe(self._start, name)
            return entry
        return None

    async def lookup_many(self, names: Iterable[TableName]) -> dict[TableName, RelationInfo | None]:
        unique = list(dict.fromkeys(names))
        found = await asyncio.gather(*(self.lookup(n) for n in unique))
        return dict(zip(unique, found))

    async def exists(self, name: TableName) -> bool:
        return await self.lookup(name) is not None

    async def columns(self, name: TableName) -> tuple[str, ...] | None:
        info = await self.lookup(name)
        return None if info is None else info.columns

    async def locations_of(self, names: Iterable[TableName]) -> dict[TableName, str]:
        """Storage locations of those names that are tables with a known location."""
        found = await self.lookup_many(names)
        return {n: info.location for n, info in found.items() if info is not None and info.location}

    def begin_ddl(self) -> None:
        """A statement that may change catalog answers starts upstream (any name: a view's
        text, a dropped database, ...): forget everything, cache nothing until it ended."""
        self.ddl_in_flight += 1
        self.invalidate()

    def end_ddl(self) -> None:
        """Spark answered the statement (or the outcome is unknown): answers from before are gone."""
        self.ddl_in_flight -= 1
        self.invalidate()

    def invalidate(self, name: TableName | None = None) -> None:
        """Forget one name (or all); a lookup already under way will not store its answer."""
        self.generation += 1
        if name is None:
            self._cache.clear()
            self._inflight.clear()
        else:
            self._cache.pop(name, None)
            self._inflight.pop(name, None)

    # -- SQL -----------------------------------------------------------------------------
    async def run_sql_rows(self, sql: str, *, session: tuple[str, str] | None = None) -> list[tuple]:
        """Rows of one statement, in the internal session or in a caller's (user_id, session_id).

        Raises `UpstreamSqlError` when Spark rejects the statement, `CatalogUnavailable` when
        there is no answer at all.
        """
        if session is not None:
            CATALOG_WAITS.inc()  # a caller's session position: asked while the request waits
            return await self._sql(sql, SessionRef(*session), rotate=False)
        return await self._sql(sql, self.session, rotate=True)

    async def close(self) -> None:
        """Release the internal session upstream (best effort: it times out anyway)."""
        request = base_pb2.ReleaseSessionRequest(
            session_id=self.session.session_id,
            user_context=base_pb2.UserContext(user_id=self.session.user_id, user_name=self.session.user_id),
        )
        try:
            await self.upstream.call("ReleaseSession", request, timeout=5.0)
        except Exception as e:  # noqa: BLE001 - shutting down; nothing to do about it
            log.debug("releasing the catalog session failed: %s", e)

    # -- internals -----------------------------------------------------------------------
    async def _miss(self, name: TableName) -> RelationInfo | None:
        CATALOG_WAITS.inc()
        # shield: one asker giving up must not cancel the answer the others wait for.
        return await asyncio.shield(self._start(name))

    def _start(self, name: TableName) -> asyncio.Future:
        """The upstream question for `name` under way, started if there is none (loop thread)."""
        task = self._inflight.get(name)
        if task is None:
            task = asyncio.ensure_future(self._describe(name))
            self._inflight[name] = task
            generation = self.generation

            def settle(t: asyncio.Future, n: TableName = name, g: int = generation) -> None:
                self._settle(n, t, g)

            task.add_done_callback(settle)
        return task

    def _settle(self, name: TableName, task: asyncio.Future, generation: int | None = None) -> None:
        stale = self.ddl_in_flight > 0 or (generation is not None and generation != self.generation)
        if self._inflight.get(name) is not task or stale:  # a DDL meanwhile: the answer may be stale
            if self._inflight.get(name) is task:
                del self._inflight[name]
            if not task.cancelled():
                task.exception()  # retrieved, so an unawaited failure is not logged as lost
            return
        del self._inflight[name]
        if task.cancelled() or task.exception() is not None:
            return
        if len(self._cache) >= self.max_entries:
            self._evict()
        self._cache[name] = (self.clock() + self.ttl, task.result())

    def _evict(self) -> None:
        now = self.clock()
        for key in [k for k, (expires, _) in self._cache.items() if expires <= now]:
            del self._cache[key]
        while len(self._cache) >= self.max_entries:
            del self._cache[next(iter(self._cache))]

    async def _describe(self, name: TableName) -> RelationInfo | None:
        try:
            rows = await self._sql(f"DESCRIBE TABLE EXTENDED {name.sql()}", self.session, rotate=True)
        except UpstreamSqlError as e:
            if _says_absent(name, e):
                return None
            raise CatalogUnavailable(f"cannot describe {name}: {e.message}", e.error_class) from None
        try:
            return parse_describe(name, rows)
        except DescribeError as e:
            raise CatalogUnavailable(str(e)) from None

    async def _sql(self, sql: str, session: SessionRef, *, rotate: bool) -> list[tuple]:
        self.upstream_calls += 1
        CATALOG_QUERIES.inc()  # the benchmark checks it stays flat on a warm hot path
        try:
            return await sql_rows(self.upstream, sql, session, timeout=self.timeout)
        except UpstreamSqlError as e:
            if not (rotate and e.error_class in SESSION_GONE):
                raise
        except UpstreamUnavailable as e:
            raise CatalogUnavailable(str(e)) from None
        # The upstream dropped the internal session; it never comes back under the same id.
        if self.session is session:
            self.session = SessionRef.fresh(session.user_id)
            log.info("catalog session renewed after the upstream closed it")
        return await self._sql(sql, self.session, rotate=False)


def _says_absent(name: TableName, error: UpstreamSqlError) -> bool:
    """Spark said that this very name (or its schema) does not exist.

    The name in the error must match: describing a view must not pass for "absent" because
    something the view reads is missing.
    """
    if error.error_class in ABSENT_TABLE:
        wanted = [name.catalog, name.schema, name.table]
        said = error.parameters.get(ABSENT_TABLE[error.error_class])
    elif error.error_class in ABSENT_SCHEMA:
        wanted = [name.catalog, name.schema]
        said = error.parameters.get(ABSENT_SCHEMA[error.error_class])
    else:
        return False
    if not said:
        return False
    try:
        parts = [p.lower() for p in split_multipart(said)]
    except DescribeError:
        return False
    return parts == wanted
