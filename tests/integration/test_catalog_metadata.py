"""The upstream catalog against a real Spark Connect server: what DESCRIBE really says.

One small server for the module (512 MB driver): the machine is shared, so the tests set up
their relations once and keep every question short.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from rowgate.catalog.model import RelationKind
from rowgate.catalog.upstream_catalog import CatalogUnavailable, UpstreamCatalog
from rowgate.catalog.upstream_sql import UpstreamSqlError
from rowgate.embedded.spark import EmbeddedSparkConnect, free_port
from rowgate.policy.model import TableName
from rowgate.upstream.channel import Upstream
from rowgate.upstream.url import parse_upstream_url

pytestmark = pytest.mark.spark

DB = "catdb"
SETUP = ("rowgate-test-setup", str(uuid.uuid4()))  # a session standing in for a user's


def tn(table: str, db: str = DB) -> TableName:
    return TableName("spark_catalog", db, table)


class CountingUpstream(Upstream):
    """Counts ExecutePlan calls at the channel boundary, where a cache miss would show."""

    executes = 0

    def raw(self, name: str):
        if name == "ExecutePlan":
            self.executes += 1
        return super().raw(name)


def with_catalog(url: str, body: Callable[[UpstreamCatalog, CountingUpstream], Awaitable], **kw):
    """Runs `body` in a fresh event loop, with the channel opened inside that loop."""

    async def go():
        upstream = CountingUpstream(parse_upstream_url(url), max_message_bytes=64 << 20)
        upstream.open()
        try:
            return await body(UpstreamCatalog(upstream, **{"timeout_seconds": 60, **kw}), upstream)
        finally:
            await upstream.close()

    return asyncio.run(go())


def setup_sql(url: str, *statements: str) -> None:
    async def body(cat, _):
        for sql in statements:
            await cat.run_sql_rows(sql, session=SETUP)

    with_catalog(url, body)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    data = tmp_path_factory.mktemp("catalog-spark")
    server = EmbeddedSparkConnect(data_dir=data, driver_memory="512m").start()
    ext = data / "ext_loc"
    try:
        setup_sql(
            server.url,
            f"CREATE DATABASE {DB}",
            f"USE {DB}",  # views below record catdb as the schema their text resolves in
            "CREATE TABLE t (id INT, region STRING, dt STRING) USING parquet PARTITIONED BY (dt)",
            "CREATE VIEW v AS SELECT id, region FROM t WHERE id > 0",
            "CREATE VIEW vv (ident COMMENT 'renamed', region) AS SELECT * FROM v",
            f"CREATE TABLE ext (x INT) USING parquet LOCATION '{ext}'",
            "CREATE TABLE gone (x INT) USING parquet",
            "CREATE VIEW dangling AS SELECT x FROM gone",
            "DROP TABLE gone",
            "CREATE TEMP VIEW tv AS SELECT 1 AS one",  # lives in the setup session only
        )
        yield server.url, ext
    finally:
        server.stop()


def test_table(spark):
    url, _ = spark
    info = with_catalog(url, lambda cat, _: cat.lookup(tn("T")))
    assert info.kind is RelationKind.TABLE
    assert info.name == tn("t")
    assert info.columns == ("id", "region", "dt")  # the partition section does not repeat dt
    assert info.location.startswith("file:") and info.location.endswith(f"/warehouse/{DB}.db/t")
    assert info.view_sql is None
    assert info.properties["Type"] == "MANAGED" and info.properties["Provider"] == "parquet"


def test_views_and_view_of_view(spark):
    url, _ = spark

    async def body(cat, _):
        return await cat.lookup(tn("v")), await cat.lookup(tn("vv"))

    v, vv = with_catalog(url, body)
    assert v.kind is RelationKind.VIEW
    assert v.columns == ("id", "region")
    assert v.view_sql == "SELECT id, region FROM t WHERE id > 0"
    assert (v.view_catalog, v.view_schema) == ("spark_catalog", DB)
    assert v.location is None
    assert vv.kind is RelationKind.VIEW
    assert vv.columns == ("ident", "region")
    assert vv.view_sql == "SELECT * FROM v"
    assert (vv.view_catalog, vv.view_schema) == ("spark_catalog", DB)


def test_external_table_and_locations_of(spark):
    url, ext = spark

    async def body(cat, _):
        info = await cat.lookup(tn("ext"))
        locations = await cat.locations_of([tn("ext"), tn("t"), tn("v"), tn("nope")])
        return info, locations

    info, locations = with_catalog(url, body)
    assert info.kind is RelationKind.TABLE and info.properties["Type"] == "EXTERNAL"
    assert info.location == f"file:{ext}"
    assert set(locations) == {tn("ext"), tn("t")} and locations[tn("ext")] == f"file:{ext}"


def test_absent_names_and_what_is_not_absence(spark):
    url, _ = spark

    async def body(cat, _):
        absent = [
            await cat.lookup(tn("nope")),
            await cat.lookup(tn("x", db="no_such_db")),
            await cat.lookup(tn("tv", db="default")),  # a caller's temp view is not the catalog's
            await cat.lookup(tn("tv")),
        ]
        dangling = await cat.lookup(tn("dangling"))  # its table is gone, the view is not
        with pytest.raises(CatalogUnavailable) as caught:
            await cat.lookup(TableName("no_such_catalog", "db", "t"))
        return absent, dangling, caught.value

    absent, dangling, unknown_catalog = with_catalog(url, body)
    assert absent == [None, None, None, None]
    assert dangling.kind is RelationKind.VIEW and dangling.view_sql == "SELECT x FROM gone"
    assert unknown_catalog.error_class == "REQUIRES_SINGLE_PART_NAMESPACE"


def test_cache_hits_skip_the_upstream_and_invalidate_forgets(spark):
    url, _ = spark
    setup_sql(url, f"CREATE TABLE {DB}.short_lived (x INT) USING parquet")

    async def body(cat, upstream):
        name = tn("short_lived")
        first = await cat.lookup(name)
        calls = upstream.executes
        for _ in range(50):
            assert await cat.lookup(name) is first
        assert await cat.lookup(tn("nope")) is None
        assert await cat.lookup(tn("nope")) is None
        assert upstream.executes == calls + 1  # only the first "nope"
        await cat.run_sql_rows(f"DROP TABLE {name.sql()}", session=SETUP)
        still = await cat.lookup(name)  # cached: the proxy did not see the DROP
        cat.invalidate(name)
        after = await cat.lookup(name)
        return first, still, after

    first, still, after = with_catalog(url, body)
    assert first.kind is RelationKind.TABLE and still is first and after is None


def test_ttl_expiry(spark):
    url, _ = spark
    now = [0.0]

    async def body(cat, upstream):
        await cat.lookup(tn("t"))
        start = upstream.executes
        now[0] += 9.0
        await cat.lookup(tn("t"))
        hit = upstream.executes - start
        now[0] += 2.0
        await cat.lookup(tn("t"))  # expired: the old answer serves, one refresh goes out
        await asyncio.sleep(0)
        await asyncio.gather(*list(cat._inflight.values()))
        refreshed = upstream.executes - start
        now[0] += 9.5  # 20.5: past the first answer's TTL + grace (20), within the refreshed one's TTL (21)
        await cat.lookup(tn("t"))
        return hit, refreshed, upstream.executes - start

    hit, refreshed, after = with_catalog(url, body, ttl_seconds=10, clock=lambda: now[0])
    assert (hit, refreshed, after) == (0, 1, 1)


def test_concurrent_lookups_coalesce(spark):
    url, _ = spark

    async def body(cat, upstream):
        start = upstream.executes
        results = await asyncio.gather(*(cat.lookup(tn("v")) for _ in range(10)), *(cat.lookup(tn("nope")) for _ in range(5)))
        return results, upstream.executes - start

    results, calls = with_catalog(url, body)
    assert calls == 2
    assert all(r is results[0] for r in results[:10]) and results[10:] == [None] * 5


def test_run_sql_rows(spark):
    url, _ = spark
    caller = ("user:alice@example.com", str(uuid.uuid4()))

    async def body(cat, _):
        empty = await cat.run_sql_rows(f"SELECT * FROM {tn('t').sql()} WHERE (region = 'EU') LIMIT 0")
        await cat.run_sql_rows(f"USE {DB}", session=caller)
        theirs = await cat.run_sql_rows("SELECT current_catalog(), current_database()", session=caller)
        ours = await cat.run_sql_rows("SELECT current_catalog(), current_database()")
        errors = []
        for sql in (
            f"SELECT * FROM {tn('t').sql()} WHERE (regoin = 'EU') LIMIT 0",
            f"SELECT * FROM {tn('t').sql()} WHERE (region = ) LIMIT 0",
            "SELECT * FROM no_such_table",
        ):
            with pytest.raises(UpstreamSqlError) as caught:
                await cat.run_sql_rows(sql)
            errors.append(caught.value)
        return empty, theirs, ours, errors

    empty, theirs, ours, errors = with_catalog(url, body)
    assert empty == []
    assert theirs == [("spark_catalog", DB)]
    assert ours == [("spark_catalog", "default")]  # the caller's USE did not leak into ours
    assert [e.error_class for e in errors] == [
        "UNRESOLVED_COLUMN.WITH_SUGGESTION",
        "PARSE_SYNTAX_ERROR",
        "TABLE_OR_VIEW_NOT_FOUND",
    ]
    assert errors[0].sql_state == "42703" and "regoin" in errors[0].parameters["objectName"]
    assert "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in errors[0].message


def test_internal_session_survives_being_released(spark):
    url, _ = spark

    async def body(cat, _):
        first = cat.session.session_id
        await cat.lookup(tn("t"))
        await cat.close()  # the server now answers INVALID_HANDLE.SESSION_CLOSED for this id
        cat.invalidate()
        info = await cat.lookup(tn("t"))
        return first, cat.session.session_id, info

    first, now, info = with_catalog(url, body)
    assert now != first and info.kind is RelationKind.TABLE


def test_upstream_down_is_unavailable_never_absent():
    url = f"sc://127.0.0.1:{free_port()}"

    async def body(cat, _):
        with pytest.raises(CatalogUnavailable) as lookup_error:
            await cat.lookup(tn("t"))
        with pytest.raises(CatalogUnavailable):
            await cat.run_sql_rows("SELECT 1")
        with pytest.raises(CatalogUnavailable):
            await cat.lookup(tn("t"))  # a failure is not cached as an answer either
        return lookup_error.value

    err = with_catalog(url, body, timeout_seconds=5)
    assert err.error_class is None
