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
