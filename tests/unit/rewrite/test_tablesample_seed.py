"""Seeded samples: `TABLESAMPLE (...) REPEATABLE (n)` reaches Spark as Spark reads it (sqlglot
writes `SEED (n)`, a syntax error to Spark); on a protected table it is refused, because the
sample is taken below the row filter and a known seed would tell hidden rows' positions."""

import pytest

from rowgate.rewrite.sql import RewriteRefused
from tests.unit.rewrite.fakes import rw, shop


def test_repeatable_is_rendered_as_spark_reads_it():
    sql = rw("SELECT count(*) FROM range(10) TABLESAMPLE (50 PERCENT) REPEATABLE (3)", shop()).sql
    assert "REPEATABLE (3)" in sql and "SEED" not in sql, sql


@pytest.mark.parametrize("sample", ["50 PERCENT", "BUCKET 1 OUT OF 4"])
def test_a_seeded_sample_of_a_protected_table_is_refused(sample):
    with pytest.raises(RewriteRefused) as info:
        rw(f"SELECT count(*) FROM orders TABLESAMPLE ({sample}) REPEATABLE (3)", shop())
    assert info.value.code == "PERMISSION_DENIED" and "REPEATABLE" in str(info.value)


def test_an_unseeded_sample_of_a_protected_table_still_runs():
    sql = rw("SELECT count(*) FROM orders TABLESAMPLE (50 PERCENT)", shop()).sql
    assert "TABLESAMPLE (50 PERCENT)" in sql


def test_a_rows_sample_sent_back_below_the_filter_is_not_taken_as_filtered():
    """Review F4: `(n ROWS)` is a LIMIT; left under the filter, the count of allowed rows among
    the first n tells how many are hidden. The proxy's own form puts it above the barrier, so a
    look-alike with the sample on the inner table is wrapped again."""
    ours = rw("SELECT count(*) FROM orders TABLESAMPLE (10 PERCENT)", shop()).sql
    assert rw(ours, shop()).sql == ours  # the proxy's own output is still recognised
    forged = ours.replace("TABLESAMPLE (10 PERCENT)", "TABLESAMPLE (10 ROWS)")
    again = rw(forged, shop()).sql
    assert again != forged and "LIMIT 10) AS `orders`" in again, again


def test_a_seeded_sample_sent_back_below_the_filter_is_refused():
    ours = rw("SELECT count(*) FROM orders TABLESAMPLE (10 PERCENT)", shop()).sql
    forged = ours.replace("TABLESAMPLE (10 PERCENT)", "TABLESAMPLE (10 PERCENT) REPEATABLE (3)")
    with pytest.raises(RewriteRefused) as info:
        rw(forged, shop())
    assert info.value.code == "PERMISSION_DENIED" and "REPEATABLE" in str(info.value)
