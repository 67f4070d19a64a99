"""The catalog's cache, coalescing and fail-closed rules, against a scripted upstream."""

from __future__ import annotations

import asyncio
import time

import pytest

from rowgate.catalog.model import RelationKind
from rowgate.catalog.upstream_catalog import CatalogUnavailable, NotCached, UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamSqlError, UpstreamUnavailable
from rowgate.policy.model import TableName

from .fakes import TABLE_ROWS, VIEW_ROWS, FakeUpstream, not_found, query_of, spark_rpc_error, table_rows, unavailable

T1 = TableName("spark_catalog", "db1", "t1")
V2 = TableName("spark_catalog", "db1", "v2")
NOPE = TableName("spark_catalog", "db1", "nope")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spark(request):
    """A tiny catalog: db1.t1 (table), db1.v2 (view), everything else absent."""
    q = query_of(request)
    if q == f"DESCRIBE TABLE EXTENDED {T1.sql()}":
        return TABLE_ROWS
    if q == f"DESCRIBE TABLE EXTENDED {V2.sql()}":
        return VIEW_ROWS
    if q.startswith("DESCRIBE TABLE EXTENDED "):
        return not_found(q.removeprefix("DESCRIBE TABLE EXTENDED "))
    return [("spark_catalog", "default")]


def make(answer=spark, **kw):
    fake = FakeUpstream(answer)
    clock = Clock()
    return fake, clock, UpstreamCatalog(fake, clock=clock, **kw)


def run(coro):
    return asyncio.run(coro)


def test_lookup_table_view_and_absent():
    async def go():
        _, _, cat = make()
        t, v, n = await cat.lookup(T1), await cat.lookup(V2), await cat.lookup(NOPE)
        assert t.kind is RelationKind.TABLE and t.columns == ("id", "name", "dt")
        assert v.kind is RelationKind.VIEW and v.view_sql == "SELECT * FROM db1.v1"
        assert n is None
        assert await cat.exists(T1) and not await cat.exists(NOPE)
        assert await cat.columns(V2) == ("a", "b") and await cat.columns(NOPE) is None
        assert await cat.locations_of([T1, V2, NOPE, T1]) == {T1: "file:/data/warehouse/db1.db/t1"}

    run(go())


def test_questions_run_in_the_internal_session_as_the_service_user():
    async def go():
        fake, _, cat = make(service_user="svc")
        await cat.lookup(T1)
        await cat.run_sql_rows("SELECT 1")
        sessions = {(r.user_context.user_id, r.session_id) for r in fake.requests}
        assert sessions == {("svc", cat.session.session_id)}
        await cat.run_sql_rows(
            "SELECT current_catalog(), current_database()", session=("user:alice", "c0ffee00-0000-4000-8000-000000000000")
        )
        last = fake.requests[-1]
        assert (last.user_context.user_id, last.session_id) == ("user:alice", "c0ffee00-0000-4000-8000-000000000000")

    run(go())


def test_positive_and_negative_answers_are_cached_until_the_ttl():
    async def go():
        fake, clock, cat = make(ttl_seconds=30, stale_grace_seconds=0)
        for _ in range(3):
            await cat.lookup(T1)
            await cat.lookup(NOPE)
        assert len(fake.requests) == 2
        assert cat.peek(T1).kind is RelationKind.TABLE and cat.peek(NOPE) is None
        clock.now += 29.9
        await cat.lookup(T1)
        assert len(fake.requests) == 2
        clock.now += 0.2
        with pytest.raises(NotCached):
            cat.peek(T1)
        await cat.lookup(T1)
        await cat.lookup(NOPE)
        assert len(fake.requests) == 4

    run(go())


def test_an_expired_answer_is_used_while_a_fresh_one_is_fetched_in_the_background():
    """Zero upstream round trips on a busy hot path: after the TTL the old answer serves
    (within the grace) and one background question refreshes it; past TTL + grace the
    asker waits for a new answer."""

    async def go():
        fake, clock, cat = make(ttl_seconds=30, stale_grace_seconds=30)
        await cat.lookup(T1)
        assert len(fake.requests) == 1
        clock.now += 31
        assert cat.peek(T1).kind is RelationKind.TABLE  # stale but usable; refresh scheduled
        assert cat.peek(T1).kind is RelationKind.TABLE
        await asyncio.sleep(0)
        await asyncio.gather(*list(cat._inflight.values()))
        assert len(fake.requests) == 2  # one refresh, however many askers
        clock.now += 29  # fresh again after the refresh
        cat.peek(T1)
        await asyncio.sleep(0)
        assert len(fake.requests) == 2
        clock.now += 100  # past TTL + grace: not used
        with pytest.raises(NotCached):
            cat.peek(T1)

    run(go())


def test_invalidate_one_or_all():
    async def go():
        fake, _, cat = make()
        await cat.lookup_many([T1, V2, NOPE])
        cat.invalidate(T1)
        await cat.lookup_many([T1, V2, NOPE])
        assert len(fake.requests) == 4
        cat.invalidate()
        await cat.lookup_many([T1, V2, NOPE])
        assert len(fake.requests) == 7

    run(go())


def test_concurrent_lookups_share_one_upstream_call():
    async def go():
        fake, _, cat = make()
        fake.gate = asyncio.Event()
        waiting = [asyncio.ensure_future(cat.lookup(T1)) for _ in range(20)]
        await asyncio.sleep(0.01)
        fake.gate.set()
        results = await asyncio.gather(*waiting)
        assert len(fake.requests) == 1
        assert all(r is results[0] for r in results)

    run(go())


def test_one_waiter_cancelled_does_not_cancel_the_others():
    async def go():
        fake, _, cat = make()
        fake.gate = asyncio.Event()
        first, second = asyncio.ensure_future(cat.lookup(T1)), asyncio.ensure_future(cat.lookup(T1))
        await asyncio.sleep(0.01)
        first.cancel()
        fake.gate.set()
        assert (await second).kind is RelationKind.TABLE
        assert first.cancelled() and len(fake.requests) == 1
        assert cat.peek(T1) is not None

    run(go())


def test_invalidate_during_a_lookup_discards_its_possibly_stale_answer():
    async def go():
        fake, _, cat = make()
        fake.gate = asyncio.Event()
        early = asyncio.ensure_future(cat.lookup(T1))
        await asyncio.sleep(0.01)
        cat.invalidate(T1)  # e.g. the proxy just saw DROP TABLE
        fake.gate.set()
        await early
        with pytest.raises(NotCached):
            cat.peek(T1)
        await cat.lookup(T1)
        assert len(fake.requests) == 2

    run(go())


def test_failures_are_shared_but_not_cached():
    async def go():
        failing = [True]

        def answer(request):
            return unavailable() if failing[0] else spark(request)

        fake, _, cat = make(answer)
        fake.gate = asyncio.Event()
        waiting = [asyncio.ensure_future(cat.lookup(T1)) for _ in range(3)]
        await asyncio.sleep(0.01)
        fake.gate.set()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(r, CatalogUnavailable) and r.error_class is None for r in results)
        assert len(fake.requests) == 1
        failing[0] = False
        assert (await cat.lookup(T1)).kind is RelationKind.TABLE

    run(go())


def test_other_spark_errors_fail_closed():
    err = spark_rpc_error("REQUIRES_SINGLE_PART_NAMESPACE", "[REQUIRES_SINGLE_PART_NAMESPACE] ...", {"namespace": "`x`.`y`"})
    _, _, cat = make(lambda r: err)
    with pytest.raises(CatalogUnavailable) as caught:
        run(cat.lookup(TableName("x", "y", "z")))
    assert caught.value.error_class == "REQUIRES_SINGLE_PART_NAMESPACE"
    assert isinstance(caught.value, UpstreamUnavailable)


def test_not_found_about_another_name_is_not_absence():
    """A view whose base table is gone must not be reported as a missing view."""
    _, _, cat = make(lambda r: not_found("`spark_catalog`.`db1`.`dropped`"))
    with pytest.raises(CatalogUnavailable):
        run(cat.lookup(V2))


def test_not_found_without_a_name_is_not_absence():
    err = spark_rpc_error("TABLE_OR_VIEW_NOT_FOUND", "[TABLE_OR_VIEW_NOT_FOUND] gone", {})
    _, _, cat = make(lambda r: err)
    with pytest.raises(CatalogUnavailable):
        run(cat.lookup(NOPE))


def test_schema_not_found_for_the_same_schema_is_absence():
    err = spark_rpc_error("SCHEMA_NOT_FOUND", "[SCHEMA_NOT_FOUND] ...", {"schemaName": "`spark_catalog`.`db1`"})
    _, _, cat = make(lambda r: err)
    assert run(cat.lookup(NOPE)) is None


def test_unparseable_describe_fails_closed():
    _, _, cat = make(lambda r: [("x", "int", None)])
    with pytest.raises(CatalogUnavailable):
        run(cat.lookup(T1))


def test_run_sql_rows_errors():
    err = spark_rpc_error("UNRESOLVED_COLUMN.WITH_SUGGESTION", "[UNRESOLVED_COLUMN.WITH_SUGGESTION] nme", {"objectName": "`nme`"})
    _, _, cat = make(lambda r: err)
    with pytest.raises(UpstreamSqlError) as caught:
        run(cat.run_sql_rows("SELECT * FROM t WHERE (nme = 1) LIMIT 0"))
    assert caught.value.error_class == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    _, _, down = make(lambda r: unavailable())
    with pytest.raises(CatalogUnavailable):
        run(down.run_sql_rows("SELECT 1"))


def test_internal_session_is_renewed_when_the_upstream_closed_it():
    closed: set[str] = set()

    def answer(request):
        if request.session_id in closed:
            return spark_rpc_error("INVALID_HANDLE.SESSION_CLOSED", "[INVALID_HANDLE.SESSION_CLOSED] closed", {}, "HY000")
        return spark(request)

    async def go():
        fake, _, cat = make(answer)
        first = cat.session.session_id
        closed.add(first)
        assert (await cat.lookup(T1)).kind is RelationKind.TABLE
        assert cat.session.session_id != first and len(fake.requests) == 2
        # A caller's session is the caller's: it is never swapped for another.
        closed.add("c0ffee00-0000-4000-8000-000000000000")
        with pytest.raises(UpstreamSqlError) as caught:
            await cat.run_sql_rows("SELECT 1", session=("u", "c0ffee00-0000-4000-8000-000000000000"))
        assert caught.value.error_class == "INVALID_HANDLE.SESSION_CLOSED"

    run(go())


def test_cache_is_bounded():
    def answer(request):
        name = query_of(request).removeprefix("DESCRIBE TABLE EXTENDED ")
        return not_found(name)

    async def go():
        _, _, cat = make(answer, max_entries=10)
        await cat.lookup_many(TableName("spark_catalog", "db", f"t{i}") for i in range(25))
        assert len(cat._cache) <= 10
        assert cat.peek(TableName("spark_catalog", "db", "t24")) is None

    run(go())


def test_close_releases_the_internal_session():
    fake, _, cat = make()
    run(cat.close())
    assert fake.released == [cat.session.session_id]


def test_cached_hit_costs_microseconds():
    def answer(request):
        name = query_of(request).removeprefix("DESCRIBE TABLE EXTENDED ")
        return table_rows("db1", "t1") if name == T1.sql() else not_found(name)

    async def go():
        cat = UpstreamCatalog(FakeUpstream(answer))
        await cat.lookup(T1)
        n = 20_000
        start = time.perf_counter()
        for _ in range(n):
            await cat.lookup(T1)
        per_lookup = (time.perf_counter() - start) / n
        start = time.perf_counter()
        for _ in range(n):
            cat.peek(T1)
        per_peek = (time.perf_counter() - start) / n
        return per_lookup, per_peek

    per_lookup, per_peek = run(go())
    # Typically ~0.3 us; the bound leaves room for a loaded two-core machine.
    assert per_lookup < 20e-6, per_lookup
    assert per_peek < 20e-6, per_peek


def test_an_answer_fetched_while_a_ddl_runs_is_used_but_never_cached():
    """Issue 12 property 3: the answer may be from before or after the DDL upstream."""

    async def go():
        fake, _, cat = make()
        cat.begin_ddl()
        assert (await cat.lookup(T1)).columns  # answered, for this asker only
        with pytest.raises(NotCached):
            cat.peek(T1)
        cat.end_ddl()
        await cat.lookup(T1)
        assert cat.peek(T1) is not None
        assert len(fake.requests) == 2

    run(go())


def test_a_lookup_started_before_a_ddl_and_answered_after_its_end_is_not_cached():
    async def go():
        fake, _, cat = make()
        await cat.lookup(V2)  # cached before the DDL
        assert cat.peek(V2) is not None
        fake.gate = asyncio.Event()
        cat.invalidate()
        early = asyncio.ensure_future(cat.lookup(T1))
        await asyncio.sleep(0.01)
        cat.begin_ddl()  # e.g. CREATE OR REPLACE VIEW starts upstream: the cache is emptied
        with pytest.raises(NotCached):
            cat.peek(V2)
        cat.end_ddl()
        fake.gate.set()
        await early
        with pytest.raises(NotCached):
            cat.peek(T1)

    run(go())
