"""classify.py: a pure function of the tree with a typed, frozen answer."""

import dataclasses

import pytest
import sqlglot

from rowgate.rewrite.sql.classify import CLONE_SOURCE, CREATE_TABLE, METADATA, WRITE, Classified, classify
from rowgate.rewrite.sql.shape import normalize

STATEMENTS = [
    "SELECT * FROM t",
    "INSERT INTO t TABLE s",
    "INSERT INTO t SELECT * FROM s",
    "INSERT OVERWRITE DIRECTORY '/tmp/x' TABLE s",
    "FROM s INSERT INTO a SELECT * INSERT INTO b SELECT *",
    "UPDATE t SET a = 1",
    "DELETE FROM t WHERE a = 1",
    "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE",
    "CREATE TABLE c AS SELECT * FROM s",
    "CREATE TABLE c LIKE s",
    "CREATE OR REPLACE VIEW v AS SELECT * FROM s",
    "CREATE TEMPORARY VIEW v AS SELECT * FROM s",
    "CREATE FUNCTION f(x INT) RETURNS INT RETURN x + 1",
    "ALTER TABLE t RENAME TO u",
    "ALTER TABLE t SET LOCATION '/data/t'",
    "ALTER VIEW v AS SELECT 1",
    "DROP TABLE t",
    "DROP DATABASE d",
    "DESCRIBE EXTENDED t",
    "CACHE TABLE c AS SELECT * FROM s",
    "REFRESH TABLE t",
    "COMMENT ON TABLE t IS 'x'",
    "USE sales",
    "TRUNCATE TABLE t",
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_classify_does_not_change_the_tree(sql):
    tree = sqlglot.parse_one(sql, read="spark")
    before = repr(tree)
    classify(tree)
    assert repr(tree) == before


def test_the_answer_is_frozen_and_holds_tuples():
    c = classify(sqlglot.parse_one("CREATE TABLE c AS SELECT * FROM s", read="spark"))
    assert isinstance(c.targets, tuple) and isinstance(c.locations, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.kind = "query"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.targets[0].role = WRITE  # type: ignore[misc]
    assert Classified("x", [], locations=["a"]).locations == ("a",)


def test_insert_table_source_is_the_normalize_pass_not_classify():
    tree = sqlglot.parse_one("INSERT INTO t TABLE s", read="spark")
    assert classify(tree).kind == "insert" and tree.expression is None
    normalize(tree)
    assert tree.sql("spark") == "INSERT INTO t SELECT * FROM s"
    assert [(t.node.name, t.role) for t in classify(tree).targets] == [("t", WRITE)]


def test_roles_and_locations():
    c = classify(sqlglot.parse_one("CREATE TABLE c SHALLOW CLONE s", read="spark"))
    assert [(t.node.name, t.role) for t in c.targets] == [("c", CREATE_TABLE), ("s", CLONE_SOURCE)]
    c = classify(sqlglot.parse_one("CREATE TABLE c (a INT) USING parquet LOCATION '/data/c'", read="spark"))
    assert c.locations == ("/data/c",)
    c = classify(sqlglot.parse_one("ALTER TABLE t ADD COLUMN x INT", read="spark"))
    assert [(t.role, t.data) for t in c.targets] == [("alter_table", False)]
    c = classify(sqlglot.parse_one("ALTER TABLE t SET LOCATION '/x'", read="spark"))
    assert [t.data for t in c.targets] == [True] and c.locations == ("/x",)
    c = classify(sqlglot.parse_one("ALTER TABLE t RENAME TO u", read="spark"))
    assert [t.node.name for t in c.targets] == ["t", "u"] and c.targets[1].rename_from.node is c.targets[0].node
    c = classify(sqlglot.parse_one("DESCRIBE t", read="spark"))
    assert [t.role for t in c.targets] == [METADATA]


def test_unknown_statements_are_unknown():
    assert classify(sqlglot.parse_one("GRANT SELECT ON t TO u", read="spark")).kind == "unknown"
