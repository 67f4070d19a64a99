"""What a row-filtered result carries besides its rows says nothing about hidden rows.

Spark's execution metrics (`df.executionInfo.metrics` after a collect) describe the physical
plan, scans below the policy filter included: their `numOutputRows` counts the rows read
before the filter, and with a pushed caller predicate (`amount > x` skips the row groups
whose statistics say no row qualifies) a binary search over `x` recovered the maximum of a
hidden column. Two tables that differ only in rows the caller may not see must therefore
give the caller exactly the same metrics, whatever predicate the caller pushes
(proxy/rowgate/responses/row_filter_metrics.py).

The SQL a `spark.sql` answer echoes back for later collection is the caller's own, not the
rewrite holding the policy predicates (proxy/rowgate/responses/sql_echo.py).
"""

from __future__ import annotations

import pytest

from tests.conftest import unique
from tests.harness.callers import ADMIN, READER
from tests.harness.worlds import Policy, Table, protected_world, values

pytestmark = pytest.mark.spark

VISIBLE = [(1, "reader", 10), (2, "reader", 20), (3, "reader", 30)]
# Only in the second table; amounts above every visible one, so a pushed `amount > x`
# decides whether their row group is read at all.
HIDDEN = [(100 + i, "other", 500 + i) for i in range(20)]
BOUNDS = (0, 25, 510, 600)


@pytest.fixture(scope="module")
def world(proxy_factory, module_sessions, spark_server):
    proxy = proxy_factory("--identity", "header", "--admin", ADMIN)
    columns, mine = "id INT, owner STRING, amount INT", "owner = 'reader'"
    w = protected_world(
        proxy,
        module_sessions,
        # one INSERT (one file) per batch: the hidden rows have row groups of their own
        Table("visible_only", columns, rows=[values(VISIBLE)]),
        Policy("mine", "visible_only", mine),
        Table("with_hidden", columns, rows=[values(VISIBLE), values(HIDDEN)]),
        Policy("mine", "with_hidden", mine),
        spark_url=spark_server.url,
    )
    yield w.caller(READER), w.table("visible_only"), w.table("with_hidden"), w.admin
    w.close()


def _seen(df) -> tuple[list[int], str | None, list]:
    """(rows, pyspark's text of the metrics tree, every metric value) after a collect."""
    rows = sorted(r.id for r in df.collect())
    info = df.executionInfo
    metrics = info.metrics if info is not None else None
    if metrics is None:
        return rows, None, []
    values = [(m.name, v.name, v.value) for m in metrics._metrics for v in m.metrics]
    return rows, metrics.toText(), values


def _queries(reader, table, bound):
    yield "table", reader.table(table).where(f"amount > {bound}")
    yield "sql", reader.sql(f"SELECT id, amount FROM {table} WHERE amount > {bound}")


@pytest.mark.parametrize("bound", BOUNDS)
def test_hidden_rows_do_not_change_the_metrics_a_caller_sees(world, bound):
    reader, same, more, _ = world
    for (route, df_same), (_, df_more) in zip(_queries(reader, same, bound), _queries(reader, more, bound)):
        rows_same, text_same, values_same = _seen(df_same)
        rows_more, text_more, values_more = _seen(df_more)
        assert rows_same == rows_more == [r[0] for r in VISIBLE if r[2] > bound], route
        assert text_more == text_same, f"{route}: the metrics differ with hidden rows:\n{text_more}\n---\n{text_same}"
        assert values_more == [("RowLevelSecurity", "rowLevelSecurityApplied", 1)], (route, values_more)
        unfiltered = {len(VISIBLE) + len(HIDDEN), len(HIDDEN)}
        assert not unfiltered & {v for _, _, v in values_more}, (route, values_more)


def test_unfiltered_results_keep_sparks_metrics(world):
    """Only filtered results lose Spark's metrics: a plain query keeps them (transparency)."""
    reader, _, _, _ = world
    df = reader.range(5).where("id > 1")
    assert [r.id for r in df.collect()] == [2, 3, 4]
    _, text, values = _seen(df)
    assert text is not None and "RowLevelSecurity" not in text
    assert any(name == "numOutputRows" for _, name, _ in values), values


def test_the_echo_of_a_query_is_the_callers_text_not_the_policy(world):
    reader, _, _, admin = world
    secret = "zz-team-nobody-may-name"
    table = unique("echo")
    admin.sql(f"CREATE TABLE {table} (id INT, owner STRING) USING parquet")
    admin.sql(f"INSERT INTO {table} VALUES (1, 'reader'), (2, '{secret}')")
    admin.sql(
        f"CREATE ROW ACCESS POLICY p ON {table} GRANT TO ('allAuthenticatedUsers') "
        f"FILTER USING (owner = 'reader' OR owner = '{secret}x')"
    )
    query = f"SELECT id FROM {table} WHERE id > :low"
    df = reader.sql(query, args={"low": 0})
    echoed = str(df._plan.to_proto(reader.client))
    assert secret not in echoed and "owner" not in echoed, echoed
    assert "SELECT id FROM" in echoed and ":low" in echoed
    assert [r.id for r in df.collect()] == [1]  # collecting the echo is filtered again
    assert [r.id for r in df.where("id < 5").collect()] == [1]
