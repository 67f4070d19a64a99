"""Which literals a plan's shape leaves out (proxy/rowgate/rewrite/plan/literal_shape.py).

Two texts share a second-opinion verdict only when their shapes are equal; every literal
that can change what Spark resolves or reads must keep its value in the shape.
"""

from __future__ import annotations

import pytest
from pyspark.sql.connect.proto import relations_pb2

from rowgate.rewrite.plan.literal_shape import abstract_relation, sql_shape


def never(_value: str) -> bool:
    return False


def same_shape(a: str, b: str) -> bool:
    sa, sb = sql_shape(a, never), sql_shape(b, never)
    return sa is not None and sa == sb


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("SELECT * FROM t WHERE day = '2024-01-01'", "SELECT * FROM t WHERE day = '2024-02-03'"),
        ("SELECT * FROM t WHERE a IN (1, 2) AND b BETWEEN 3 AND 4", "SELECT * FROM t WHERE a IN (5, 6) AND b BETWEEN 7 AND 8"),
        (
            "SELECT * FROM t JOIN u ON u.k = 't' WHERE x > 1 LIMIT 10 OFFSET 2",
            "SELECT * FROM t JOIN u ON u.k = 'v' WHERE x > 9 LIMIT 20 OFFSET 3",
        ),
        ("SELECT a, count(*) FROM t GROUP BY a HAVING a <> 'x'", "SELECT a, count(*) FROM t GROUP BY a HAVING a <> 'y'"),
    ],
)
def test_values_compared_with_columns_or_counting_rows_share_a_shape(a, b):
    assert same_shape(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("SELECT * FROM IDENTIFIER('t1') WHERE a = 1", "SELECT * FROM IDENTIFIER('t2') WHERE a = 1"),
        ("SELECT a, b FROM t WHERE a = 1 GROUP BY 1", "SELECT a, b FROM t WHERE a = 1 GROUP BY 2"),
        ("SELECT a, b FROM t WHERE a = 1 ORDER BY 1", "SELECT a, b FROM t WHERE a = 1 ORDER BY 2"),
        ("SELECT * FROM range(3) WHERE id = 1", "SELECT * FROM range(4) WHERE id = 1"),
        (
            "SELECT reflect('java.util.UUID', 'randomUUID') FROM t WHERE a = 1",
            "SELECT reflect('java.lang.System', 'getenv') FROM t WHERE a = 1",
        ),
        ("SELECT * FROM t TABLESAMPLE (10 PERCENT) WHERE a = 1", "SELECT * FROM t TABLESAMPLE (20 PERCENT) WHERE a = 1"),
        ("SELECT * FROM t VERSION AS OF 1 WHERE a = 1", "SELECT * FROM t VERSION AS OF 2 WHERE a = 1"),
        (
            "SELECT * FROM t WHERE _metadata.file_name = 'a' AND a = 1",
            "SELECT * FROM t WHERE _metadata.file_name = 'b' AND a = 1",
        ),
        ("SELECT 'a' AS x FROM t WHERE a = 1", "SELECT 'b' AS x FROM t WHERE a = 1"),
        ("SELECT * FROM t WHERE upper(a) = 'A'", "SELECT * FROM t WHERE upper(a) = 'B'"),
        ("SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a = 3000000000"),  # int vs bigint
        ("SELECT * FROM t WHERE a = 1.5", "SELECT * FROM t WHERE a = 1.25"),  # decimal(2,1) vs (3,2)
        ("SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a = '1'"),
        ("SELECT * FROM t WHERE a = DATE '2024-01-01'", "SELECT * FROM t WHERE a = DATE '2024-01-02'"),
        ("SELECT * FROM t WHERE a = X'01'", "SELECT * FROM t WHERE a = X'02'"),
        ("SELECT * FROM t WHERE a = 1 LIMIT 5L", "SELECT * FROM t WHERE a = 1 LIMIT 6L"),
    ],
)
def test_literals_that_may_change_resolution_or_type_keep_their_value(a, b):
    assert not same_shape(a, b)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM t WHERE a = 'x' -- 'c'",
        "SELECT * FROM t /*+ REPARTITION(3) */ WHERE a = 'x'",
        "SELECT * FROM t WHERE a = 'x\\'' OR b = 'y'",
        'SELECT * FROM t WHERE a = "x"',
        "SELECT * FROM t WHERE a = 'x'; SELECT 1",
        "SELECT * FROM t WHERE a = '\u00e9'",
        "EXECUTE IMMEDIATE 'SELECT * FROM t WHERE a = 1'",
    ],
)
def test_texts_whose_lexing_could_be_disputed_have_no_shape(text):
    assert sql_shape(text, never) is None


def test_kept_values_stay_in_the_shape():
    text = "SELECT * FROM t WHERE region = 'eu' AND day = '2024-01-01'"
    shape = sql_shape(text, lambda v: v == "eu")
    assert shape is not None and "'eu'" in shape and "2024" not in shape


def test_a_dataframe_filter_keeps_the_literal_type_not_its_value():
    def plan(value, kind="string"):
        rel = relations_pb2.Relation()
        cond = rel.filter.condition.unresolved_function
        cond.function_name = "=="
        cond.arguments.add().unresolved_attribute.unparsed_identifier = "day"
        setattr(cond.arguments.add().literal, kind, value)
        rel.filter.input.read.named_table.unparsed_identifier = "t"
        assert abstract_relation(rel, never) == 1
        return rel.SerializeToString(deterministic=True)

    assert plan("2024-01-01") == plan("2024-02-02")
    assert plan(1, "integer") != plan(1, "long")
    assert plan(1, "integer") != plan("1")
