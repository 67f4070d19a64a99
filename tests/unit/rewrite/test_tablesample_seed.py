"""`TABLESAMPLE (...) REPEATABLE (n)` reaches Spark as Spark reads it (sqlglot writes `SEED (n)`,
a syntax error to Spark), on protected tables and others alike."""

from tests.unit.rewrite.fakes import rw, shop


def test_repeatable_is_rendered_as_spark_reads_it():
    for query in (
        "SELECT count(*) FROM orders TABLESAMPLE (50 PERCENT) REPEATABLE (3)",
        "SELECT count(*) FROM range(10) TABLESAMPLE (50 PERCENT) REPEATABLE (3)",
    ):
        sql = rw(query, shop()).sql
        assert "REPEATABLE (3)" in sql and "SEED" not in sql, sql
