"""Reads of a temp view made over a protected table carry no Spark metrics either.

The view holds the proxy's filtered plan, so reading it shows the rewriter no protected
table; Spark's metrics of that read still describe the scan inside the view, below the
policy filter (proxy/rowgate/pipeline/enforce/session_data_reads.py). Fails when the
SessionDataReads step is taken out of the pipeline.
"""

from __future__ import annotations

import pytest

from tests.conftest import remote_url, unique
from tests.harness.callers import ADMIN, READER

pytestmark = pytest.mark.spark

ONLY_THE_MARK = [("RowLevelSecurity", "rowLevelSecurityApplied", 1)]


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    admin = module_sessions(remote_url(proxy.url, user=ADMIN))
    table, open_table = unique("viewed"), unique("open")
    admin.sql(f"CREATE TABLE {table} (id INT, owner STRING, amount INT) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES (1, 'reader', 10), (2, 'reader', 20)")
    admin.sql(f"INSERT INTO {table} VALUES {', '.join(f'({100 + i}, {chr(39)}other{chr(39)}, {500 + i})' for i in range(20))}")
    admin.sql(f"CREATE ROW ACCESS POLICY mine ON {table} GRANT TO ('allAuthenticatedUsers') FILTER USING (owner = 'reader')")
    admin.sql(f"CREATE TABLE {open_table} (id INT) USING parquet")
    admin.sql(f"INSERT INTO {open_table} VALUES (1), (2)")
    return module_sessions(remote_url(proxy.url, user=READER)), table, open_table


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
