"""Filters whose text Spark could read as something else must still filter.

Spark parses `SELECT * FROM t WHERE (flag)` as the table alias `WHERE` with the column
alias list `(flag)`: no filter at all. A policy whose filter is a bare boolean column is
the natural way to write "public rows only", so it must be placed unambiguously.
"""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import execute_sql, remote_url, unique
from tests.harness.callers import ADMIN

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def flagged(proxy_factory, tmp_path_factory):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    return proxy


@pytest.mark.parametrize("columns", ["flag BOOLEAN", "flag BOOLEAN, note STRING"])
def test_a_bare_boolean_column_filter_hides_false_rows(flagged, sessions, columns):
    admin = sessions(remote_url(flagged.url, user=ADMIN))
    table = unique("flags")
    admin.sql(f"CREATE TABLE {table} ({columns}) USING parquet")
    values = "(true), (false)" if "," not in columns else "(true, 'shown'), (false, 'hidden')"
    admin.sql(f"INSERT INTO {table} VALUES {values}")
    admin.sql(f"CREATE ROW ACCESS POLICY public ON {table} GRANT TO ('allAuthenticatedUsers') FILTER USING (flag)")
    admin.sql(f"CREATE ROW ACCESS POLICY everything ON {table} GRANT TO ('{ADMIN}') FILTER USING (TRUE)")

    reader = sessions(remote_url(flagged.url, user="user:reader@example.com"))
    assert [r.flag for r in reader.sql(f"SELECT * FROM {table}").collect()] == [True]
    assert [r.flag for r in reader.table(table).collect()] == [True]
    assert reader.sql(f"SELECT count(*) AS n FROM {table}").first().n == 1
    assert sorted(r.flag for r in admin.table(table).collect()) == [False, True]


def _trailer_of(proxy, user: str, query: str) -> str | None:
    with grpc.insecure_channel(proxy.target) as channel:
        call = execute_sql(channel, query, user=user)
        for _ in call:
            pass
        return dict(call.trailing_metadata()).get("x-rowgate-row-filter-applied")


def test_every_result_says_whether_rows_were_filtered(flagged, sessions):
    admin = sessions(remote_url(flagged.url, user=ADMIN))
    table = unique("signal")
    admin.sql(f"CREATE TABLE {table} (flag BOOLEAN) USING parquet")
    admin.sql(f"CREATE ROW ACCESS POLICY public ON {table} FILTER USING (flag)")
    assert _trailer_of(flagged, "user:reader@example.com", f"SELECT * FROM {table}") == "true"
    assert _trailer_of(flagged, "user:reader@example.com", "SELECT 1") == "false"


def _row_level_security(df) -> list:
    metrics = df.executionInfo.metrics if df.executionInfo is not None else None
    if metrics is None:
        return []
    metrics.toText()  # pyspark's own view of the tree must still work
    found = [m for m in metrics._metrics if m.name == "RowLevelSecurity"]
    return [v.value for m in found for v in m.metrics if v.name == "rowLevelSecurityApplied"]


@pytest.mark.parametrize("route", ["sql", "table"])
def test_filtered_results_carry_the_row_filter_metric(flagged, sessions, route):
    """What a pyspark program can see (it never sees trailers): df.executionInfo.metrics."""
    admin = sessions(remote_url(flagged.url, user=ADMIN))
    table = unique("metric")
    admin.sql(f"CREATE TABLE {table} (flag BOOLEAN) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES (true), (false)")
    admin.sql(f"CREATE ROW ACCESS POLICY public ON {table} FILTER USING (flag)")
    reader = sessions(remote_url(flagged.url, user="user:reader@example.com"))
    df = reader.sql(f"SELECT * FROM {table}") if route == "sql" else reader.table(table)
    assert [r.flag for r in df.collect()] == [True]
    assert _row_level_security(df) == [1]
    plain = reader.range(3)
    plain.collect()
    assert _row_level_security(plain) == []
