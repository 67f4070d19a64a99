"""Reads of a temp view made over a protected table carry no Spark metrics either.

The view holds the proxy's filtered plan, so reading it shows the rewriter no protected
table; Spark's metrics of that read still describe the scan inside the view, below the
policy filter (proxy/rowgate/pipeline/enforce/session_data_reads.py). Fails when the
SessionDataReads step is taken out of the pipeline.
"""

from __future__ import annotations

import pytest

from tests.conftest import unique
from tests.harness.callers import ADMIN, READER
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark

ONLY_THE_MARK = [("RowLevelSecurity", "rowLevelSecurityApplied", 1)]


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    others = [(100 + i, "other", 500 + i) for i in range(20)]
    w = protected_world(
        proxy,
        module_sessions,
        Table(
            "viewed", "id INT, owner STRING, amount INT", rows=[values([(1, "reader", 10), (2, "reader", 20)]), values(others)]
        ),
        Policy("mine", "viewed", "owner = 'reader'"),
        Table("open", "id INT", rows=[values([(1,), (2,)])]),
        spark_url=spark_server.url,
    )
    yield w.caller(READER), w.table("viewed"), w.table("open")
    w.close()


def metrics_of(df) -> tuple[list[int], list]:
    rows = sorted(r.id for r in df.collect())
    info = df.executionInfo
    values = [(m.name, v.name, v.value) for m in info.metrics._metrics for v in m.metrics] if info and info.metrics else []
    return rows, values


@pytest.mark.parametrize("route", ["table", "sql", "sql-predicate"])
def test_a_temp_view_of_a_protected_table_relays_no_spark_metrics(world, route):
    reader, table, _ = world
    view = unique("v")
    reader.table(table).createOrReplaceTempView(view)
    df = {
        "table": lambda: reader.table(view),
        "sql": lambda: reader.sql(f"SELECT * FROM {view}"),
        "sql-predicate": lambda: reader.sql(f"SELECT id FROM {view} WHERE amount > 15"),
    }[route]()
    rows, values = metrics_of(df)
    assert rows == ([2] if route == "sql-predicate" else [1, 2])
    assert values == ONLY_THE_MARK, values


def test_a_temp_view_of_an_open_table_keeps_sparks_metrics(world):
    reader, _, open_table = world
    view = unique("v")
    reader.table(open_table).createOrReplaceTempView(view)
    rows, values = metrics_of(reader.table(view))
    assert rows == [1, 2] and any(name == "numOutputRows" for _, name, _ in values), values
