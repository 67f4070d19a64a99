"""DESCRIBE TABLE EXTENDED parsing, on the rows Spark 4.1.4 really returns."""

from __future__ import annotations

import pytest

from rowgate.catalog.describe import DescribeError, parse_describe, split_multipart
from rowgate.catalog.model import RelationKind
from rowgate.policy.model import TableName

from .fakes import TABLE_ROWS, VIEW_ROWS

T1 = TableName("spark_catalog", "db1", "t1")
V2 = TableName("spark_catalog", "db1", "v2")


def test_partitioned_table_lists_each_column_once_and_its_location():
    info = parse_describe(T1, TABLE_ROWS)
    assert info.kind is RelationKind.TABLE
    assert info.columns == ("id", "name", "dt")
    assert info.location == "file:/data/warehouse/db1.db/t1"
    assert info.view_sql is None and info.view_catalog is None
    assert info.properties["Provider"] == "parquet"


def test_view_keeps_declared_columns_text_and_creation_scope():
    info = parse_describe(V2, VIEW_ROWS)
    assert info.kind is RelationKind.VIEW
    assert info.columns == ("a", "b")
    assert info.view_sql == "SELECT * FROM db1.v1"
    assert (info.view_catalog, info.view_schema) == ("spark_catalog", "default")
    assert info.location is None


def test_columns_named_like_section_rows_are_still_columns():
    rows = [("#c", "string", "hash"), ("Type", "int", None), ("# Detailed Table Information", "string", None)] + TABLE_ROWS[6:]
    info = parse_describe(T1, rows)
    assert info.columns == ("#c", "Type", "# Detailed Table Information")
    assert info.properties["Type"] == "MANAGED"


def test_multiline_view_text_and_quoted_namespace():
    rows = [r for r in VIEW_ROWS]
    rows[12] = ("View Text", "SELECT `a b`,\n  x FROM t", "")
    rows[15] = ("View Catalog and Namespace", "`my.cat`.`odd``db`", "")
    info = parse_describe(V2, rows)
    assert info.view_sql == "SELECT `a b`,\n  x FROM t"
    assert (info.view_catalog, info.view_schema) == ("my.cat", "odd`db")


def test_spark2_view_falls_back_to_default_database():
    rows = [r for r in VIEW_ROWS if r[0] != "View Catalog and Namespace"] + [("View Default Database", "Sales", "")]
    info = parse_describe(V2, rows)
    assert (info.view_catalog, info.view_schema) == ("spark_catalog", "sales")


@pytest.mark.parametrize(
    "change",
    [
        lambda rows: [r if r[0] != "Type" else ("Type", "MATERIALIZED_VIEW", "") for r in rows],  # unknown type
        lambda rows: [r for r in rows if r[0] != "Type"],  # no type at all
        lambda rows: [r if r[0] != "Table" else ("Table", "other", "") for r in rows],  # someone else's rows
        lambda rows: [r for r in rows if r[0] != "View Catalog and Namespace"],  # view without a scope
        lambda rows: [r if r[0] != "View Catalog and Namespace" else (r[0], "cat.ns1.ns2", "") for r in rows],
        lambda rows: [r for r in rows if r[0] not in ("View Text", "View Original Text")],
        lambda rows: rows[:3],  # no details section
        lambda rows: rows[2:],  # no columns
    ],
)
def test_anything_uncertain_is_an_error_not_a_guess(change):
    with pytest.raises(DescribeError):
        parse_describe(V2, change(list(VIEW_ROWS)))


@pytest.mark.parametrize(
    "text, parts",
    [
        ("spark_catalog.default", ["spark_catalog", "default"]),
        ("`spark_catalog`.`db1`.`nope`", ["spark_catalog", "db1", "nope"]),
        ("`a.b`.c", ["a.b", "c"]),
        ("`x``y`", ["x`y"]),
        ("``.a", ["", "a"]),
    ],
)
def test_split_multipart(text, parts):
    assert split_multipart(text) == parts


@pytest.mark.parametrize("text", ["", "a..b", "a.", "`a", "`a`b", "a`b`"])
def test_split_multipart_rejects_malformed(text):
    with pytest.raises(DescribeError):
        split_multipart(text)
